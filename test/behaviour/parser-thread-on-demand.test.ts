// The parser pool on demand (limits.parserIdleMs, on by default): an idle HTTP worker carries
// no parser thread (its RSS is the idle-memory target's). An exchange that will need one
// starts it in the background (ParserPool.warm) so the parse or the JSON answer finds it up: a
// body declared at or above inWorkerParseBytes (or of unknown length) as the exchange starts, a
// non-streaming request once its body is parsed. A small streaming exchange (parsed in the
// worker) starts none. A thread is retired after parserIdleMs without a task. Seen through the
// worker's pool counts (/_test/parser). Every exchange leaves the ledger idle.

import t from 'tap'
import { Readable } from 'node:stream'
import { request } from 'undici'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { loadConfig } from '../../src/config/load.ts'

interface PoolStats { loaded: boolean, threadsAlive: number, threadsRetired: number, threadsLost: number, completed: number, failed: number }

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

async function post (body: string, chunked = false): Promise<{ status: number, text: string }> {
  const res = await request(rig.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    // chunked: the body as a stream, so no content-length is declared
    body: chunked ? Readable.from([body]) : body,
  })
  return { status: res.statusCode, text: await res.body.text() }
}

t.test('on by default', async (t) => {
  const { config } = loadConfig({ env: {} })
  t.ok(config.limits.parserIdleMs > 0, `limits.parserIdleMs defaults to ${config.limits.parserIdleMs}`)
})

t.test('no parser thread at idle; small streams start none; a JSON answer starts one; retired when idle; a large body after works', async (t) => {
  t.match(await stats(), { threadsAlive: 0 }, 'an idle worker carries no parser thread')
  // piscina itself is loaded once the worker listens (ParserPool.load), not during its start.
  await until('piscina loaded after listening', (s) => s.loaded)

  // Small streaming exchanges: parsed in the worker, nothing for the pool, no thread started.
  for (let i = 0; i < 3; i++) {
    const small = await post(JSON.stringify(chatBody('small\n#sim tokens=3', { stream: true })))
    t.equal(small.status, 200, small.text.slice(0, 200))
  }
  t.same(await waitIdle(rig.gw), {})
  await new Promise((r) => setTimeout(r, 200))
  t.match(await stats(), { threadsAlive: 0, threadsRetired: 0, completed: 0 }, 'small streams: no parser thread was started')

  // A small non-streaming request: its JSON answer is read in the pool, which is warmed once
  // the body is parsed, before the provider answers.
  const first = await post(JSON.stringify(chatBody('first json\n#sim tokens=3', { stream: false })))
  t.equal(first.status, 200, first.text.slice(0, 200))
  const warmed = await stats()
  t.match(warmed, { threadsAlive: 1, completed: 1 }, 'one thread, which read the answer')
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
  t.equal(after.completed, 3, 'the answers and the large body ran in the pool')
  t.equal(after.threadsAlive, 1, 'on one thread')
  t.same(await waitIdle(rig.gw), {})

  // From a cold pool again: a large body of unknown length (chunked) is parsed there too.
  await until('the second retirement', (s) => s.threadsAlive === 0 && s.threadsRetired === 2)
  const chunked = await post(JSON.stringify({ ...chatBody('chunked\n#sim tokens=3', { stream: true }), metadata: { pad: 'q'.repeat(40 * 1024) } }), true)
  t.equal(chunked.status, 200, chunked.text.slice(0, 200))
  t.match(await stats(), { threadsAlive: 1, completed: 4 }, 'a chunked large body: parsed in a fresh thread')
  t.same(await waitIdle(rig.gw), {})
})

t.test('which requests start the parser thread at once: a body declared at or above inWorkerParseBytes, or of unknown length', async (t) => {
  const { bodyMayNeedThePool } = await import('../../worker/exchange.ts')
  const { config } = loadConfig({ env: {} })
  const limits = { ...config.limits, inWorkerParseBytes: 16 * 1024 }
  const req = (headers: Record<string, string>) => ({ headers }) as unknown as Parameters<typeof bodyMayNeedThePool>[0]
  t.equal(bodyMayNeedThePool(req({ 'content-length': '100' }), limits), false, 'small, declared')
  t.equal(bodyMayNeedThePool(req({ 'content-length': String(16 * 1024 - 1) }), limits), false, 'just below')
  t.equal(bodyMayNeedThePool(req({ 'content-length': String(16 * 1024) }), limits), true, 'at the threshold')
  t.equal(bodyMayNeedThePool(req({}), limits), true, 'no content-length (chunked)')
  t.equal(bodyMayNeedThePool(req({ 'content-length': 'x' }), limits), true, 'unreadable length')
})
