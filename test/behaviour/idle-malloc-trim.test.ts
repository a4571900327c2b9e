// Idle memory goes back to the kernel: when an HTTP worker's parser thread retires, and when a
// worker's idle collection has run (src/idle-gc.ts), the worker tells the primary, which runs
// one malloc_trim for the process (src/malloc-trim.ts). Seen in the primary's debug log (with
// why) and in /metrics; the ledger is idle throughout.

import t from 'tap'
import { request } from 'undici'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { HAS_GLIBC as glibc } from '../helpers/platform.ts'


let rig: Rig
t.before(async () => {
  rig = await startRig({ workers: 1, limits: { parserIdleMs: 400, inWorkerParseBytes: 16 * 1024, workerIdleCollectMs: 1000 }, telemetry: { logLevel: 'debug' } })
})
t.teardown(() => rig.close())

interface Trimmed { msg: string, reasons: string[], rssBeforeMb: number, rssAfterMb: number, ms: number }
const trims = (): Trimmed[] => rig.gw.logs.flatMap((l) => { try { const j = JSON.parse(l); return j.msg === 'malloc trimmed' ? [j] : [] } catch { return [] } })

async function until<T> (what: string, get: () => T | undefined, ms: number): Promise<T> {
  const deadline = Date.now() + ms
  for (;;) {
    const v = get()
    if (v !== undefined) return v
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

t.test('a retired parser thread and an idle collection each end in one trim', { skip: glibc ? false : 'needs glibc' }, async (t) => {
  const res = await request(rig.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify(chatBody('trim\n#sim tokens=3', { stream: false })),
  })
  t.equal(res.statusCode, 200)
  t.match(JSON.parse(await res.body.text()), { object: 'chat.completion' }, 'a JSON answer, read in the parser thread')
  t.same(await waitIdle(rig.gw), {}, 'the ledger is idle')

  const retired = await until('a trim after the parser thread retired', () => trims().find((r) => r.reasons.some((x) => /^worker \d+: parser-retired$/.test(x))), 10_000)
  t.ok(retired.rssBeforeMb > 0 && retired.rssAfterMb > 0 && retired.ms >= 0, `RSS ${retired.rssBeforeMb} -> ${retired.rssAfterMb} MB in ${retired.ms} ms`)
  const collected = await until('a trim after the worker\'s idle collection', () => trims().find((r) => r.reasons.some((x) => /^worker \d+: idle-collection$/.test(x))), 20_000)
  t.ok(collected, 'the worker\'s idle collection asked for one too')

  const metrics = await rig.gw.metrics()
  const n = metrics.get('sluice_malloc_trims_total')!
  // Two reasons, one or two trims: reasons that come within the trimmer's delay of each other
  // share one (the parser retires after 400 ms, the idle collection follows ~1 s later).
  const shared = collected.reasons.some((x) => /^worker \d+: parser-retired$/.test(x))
  t.ok(n >= (shared ? 1 : 2), `sluice_malloc_trims_total ${n} (each trim logged: ${trims().length}; both reasons in one: ${shared})`)
  t.equal(n, trims().length, 'one log line per trim')
  t.ok(metrics.get('sluice_malloc_trim_released_bytes_total')! >= 0, `released ${metrics.get('sluice_malloc_trim_released_bytes_total')} bytes in all`)
  t.same(await waitIdle(rig.gw), {}, 'still idle')
})
