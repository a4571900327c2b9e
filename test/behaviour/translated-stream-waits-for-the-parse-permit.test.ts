// A translated stream whose chunks find the parse permit taken (by another exchange, in any
// worker): the relay (worker/relay-translated.ts) usually translates a chunk synchronously,
// under a permit it takes at once; when the permit is taken it pauses the provider body, waits
// for it, translates, and goes on. Here the permit is held from outside (the /_test/hold-parse
// hook, in whichever worker takes it) again and again while the streams run; the official SDK
// stream helpers must get the same answers as when nothing waits, the waits must show in
// sluice_permit_waits_total{gate="parse"}, and everything is back at idle after.

import t from 'tap'
import { request } from 'undici'
import { startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { firstTurn, PAIRS, viaSdk } from './translation-helpers.ts'

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 2 }) })
t.teardown(() => rig?.close())

const parseWaits = async (): Promise<number> => (await rig.gw.metrics()).get('sluice_permit_waits_total{gate="parse"}') ?? NaN

for (const pair of PAIRS) {
  t.test(`${pair.name}: streamed while the parse permit is held again and again`, async (t) => {
    const body = firstTurn(pair, `permit ${pair.name}\n#sim tokens=40 interval=4`)
    const calm = await viaSdk(rig, pair.route, body, true)
    const before = await parseWaits()
    let holding = true
    const holds = (async () => {
      let n = 0
      while (holding) {
        const r = await request(`${rig.url}/_test/hold-parse?ms=15`)
        await r.body.text()
        n++
        await new Promise((resolve) => setTimeout(resolve, 5))
      }
      return n
    })()
    const busy = await Promise.all([1, 2, 3].map(() => viaSdk(rig, pair.route, body, true)))
    holding = false
    const n = await holds
    for (const [i, a] of busy.entries()) {
      t.equal(a.text, calm.text, `stream ${i}: the same text as without waits`)
      t.equal(a.stop, calm.stop, `stream ${i}: the same stop`)
      t.same(a.usage, calm.usage, `stream ${i}: the same usage`)
    }
    const waits = (await parseWaits()) - before
    t.ok(waits > n, `exchanges waited for the permit ${waits} times (${n} holds, each also counted when it had to wait)`)
    t.same(await waitIdle(rig.gw), {}, 'every permit, byte and translation buffer back at idle')
  })
}
