// An HTTP worker collects its heap once it has been quiet for limits.workerIdleCollectMs, not in
// every short pause between exchanges (src/idle-gc.ts: a full collection with no exchange alive
// costs the next burst). Exchanges far apart in time, each a tiny share of the worker's time,
// still hold the collection off: the worker counts them. Seen in the primary's debug log (the
// malloc trim each worker collection asks for, with its reason); the ledger is idle throughout.

import t from 'tap'
import { request } from 'undici'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { HAS_GLIBC as glibc } from '../helpers/platform.ts'

const QUIET_MS = 1500

let rig: Rig
t.before(async () => {
  rig = await startRig({ workers: 1, limits: { workerIdleCollectMs: QUIET_MS }, telemetry: { logLevel: 'debug' } })
})
t.teardown(() => rig.close())

/** When (Date.now()) each of the worker's idle collections asked for its trim. */
const collections = (): number[] => rig.gw.logs.flatMap((l) => {
  try {
    const j = JSON.parse(l)
    return j.msg === 'malloc trimmed' && j.reasons.some((r: string) => /^worker \d+: idle-collection$/.test(r)) ? [Date.parse(j.time)] : []
  } catch { return [] }
})

async function exchange (): Promise<void> {
  const res = await request(rig.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify(chatBody('quiet\n#sim tokens=2', { stream: true })),
  })
  if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`)
  await res.body.text()
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

t.test('short pauses between exchanges: no collection; quiet for the whole period: one', { skip: glibc ? false : 'needs glibc (the trim that shows the collection)' }, async (t) => {
  const start = Date.now()
  // Pauses of 400 ms for ~3 quiet periods: each is idle by utilisation, none is quiet long enough.
  let n = 0
  while (Date.now() - start < 3 * QUIET_MS + 1000) {
    await exchange()
    n++
    await sleep(400)
  }
  const lastAt = Date.now()
  t.same(await waitIdle(rig.gw), {}, 'the ledger is idle')
  t.same(collections().filter((at) => at >= start), [], `no collection between ${n} exchanges 400 ms apart`)

  const deadline = Date.now() + 15_000
  while (collections().filter((at) => at >= start).length === 0 && Date.now() < deadline) await sleep(100)
  const after = collections().filter((at) => at >= start)
  t.equal(after.length, 1, 'one collection once the worker was quiet')
  t.ok(after[0] - lastAt >= QUIET_MS - 50, `not before the quiet period: ${after[0] - lastAt} ms after the last exchange`)
  await sleep(3 * QUIET_MS)
  t.equal(collections().filter((at) => at >= start).length, 1, 'and not again while it stays quiet')
  t.same(await waitIdle(rig.gw), {}, 'still idle')
})
