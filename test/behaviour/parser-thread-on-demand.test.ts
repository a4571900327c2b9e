// The parser pool on demand (limits.parserIdleMs, on by default): an idle HTTP worker carries
// no parser thread (its RSS is the idle-memory target's), the first exchange after an idle
// spell starts one in the background (ParserPool.warm) so the parse or the JSON answer that
// follows finds it up, and it is retired after parserIdleMs without a task. Seen through the
// worker's pool counts (/_test/parser). Every exchange leaves the ledger idle.

import t from 'tap'
import { request } from 'undici'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { loadConfig } from '../../src/config/load.ts'

interface PoolStats { threadsAlive: number, threadsRetired: number, threadsLost: number, completed: number, failed: number }

let rig: Rig
t.before(async () => {
  rig = await startRig({ workers: 1, limits: { parserIdleMs: 500, inWorkerParseBytes: 16 * 1024 } })
})
t.teardown(() => rig.close())

async function stats (): Promise<PoolStats> {
  const res = await request(rig.url + '/_test/parser')
  return await res.body.json() as PoolStats
}

async function until (what: string, ok: (s: PoolStats) => boolean): Promise<PoolStats> {
  for (let i = 0; i < 300; i++) {
    const s = await stats()
    if (ok(s)) return s
    await new Promise((r) => setTimeout(r, 20))
  }
  throw new Error(`timed out waiting for ${what}: ${JSON.stringify(await stats())}`)
}

async function post (body: string): Promise<{ status: number, text: string }> {
  const res = await request(rig.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body,
  })
  return { status: res.statusCode, text: await res.body.text() }
}

t.test('on by default', async (t) => {
  const { config } = loadConfig({ env: {} })
  t.ok(config.limits.parserIdleMs > 0, `limits.parserIdleMs defaults to ${config.limits.parserIdleMs}`)
})

t.test('no parser thread at idle; the first exchange starts one; retired when idle; a large body after works', async (t) => {
  t.match(await stats(), { threadsAlive: 0 }, 'an idle worker carries no parser thread')

  // A small streaming exchange: parsed in the worker, no pool task, but the pool is warmed.
  const small = await post(JSON.stringify(chatBody('small\n#sim tokens=3', { stream: true })))
  t.equal(small.status, 200, small.text.slice(0, 200))
  const warmed = await until('the warmed thread', (s) => s.threadsAlive === 1)
  t.equal(warmed.completed + warmed.failed, 0, 'the warm-up is no pool call')
  t.same(await waitIdle(rig.gw), {})

  const retired = await until('retirement', (s) => s.threadsAlive === 0)
  t.equal(retired.threadsRetired, 1, 'retired after parserIdleMs, counted as retired')
  t.equal(retired.threadsLost, 0, 'not lost')

  // A JSON answer is read in the pool: it works from a cold pool, and a large body too.
  const json = await post(JSON.stringify(chatBody('json\n#sim tokens=3', { stream: false })))
  t.equal(json.status, 200, json.text.slice(0, 200))
  t.match(JSON.parse(json.text), { object: 'chat.completion' })
  const large = await post(JSON.stringify({ ...chatBody('large\n#sim tokens=3', { stream: true }), metadata: { pad: 'p'.repeat(40 * 1024) } }))
  t.equal(large.status, 200, large.text.slice(0, 200))
  const after = await stats()
  t.equal(after.completed, 2, 'the answer and the large body ran in the pool')
  t.equal(after.threadsAlive, 1, 'on one thread')
  t.same(await waitIdle(rig.gw), {})
})
