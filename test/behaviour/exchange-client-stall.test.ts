// A caller that stops reading and never hangs up is cut off after clientStallMs: it cannot
// hold its exchange permit (or the provider's stream) forever.

import t from 'tap'
import { once } from 'node:events'
import { request } from 'undici'
import type { SimEndEvent } from '../../src/sim/index.ts'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { socketBufferBytes } from '../helpers/platform.ts'

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 1, limits: { clientStallMs: 700 } }) })
t.teardown(() => rig.close())

t.test('a stuck client is cut off, its permit and the upstream released', async (t) => {
  const end = once(rig.sim.events, 'end') as Promise<[SimEndEvent]>
  const res = await request(rig.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    // More events than the kernel can buffer on the connection, so the stall reaches sluice.
    body: JSON.stringify(chatBody(`big\n#sim tokens=${Math.max(24_000, Math.ceil((socketBufferBytes(1) + 8 * 2 ** 20) / 1000))} bytes=1000`, { stream: true })),
    highWaterMark: 16 * 1024,
  })
  res.body.pause()
  const closed = new Promise<string>((resolve) => {
    res.body.once('error', (e: Error & { code?: string }) => resolve(e.code ?? e.message))
    res.body.once('end', () => resolve('end'))
  })
  const t0 = performance.now()
  const [e] = await end
  const ms = performance.now() - t0
  t.equal(e.outcome, 'client-closed', 'the provider\'s stream was cancelled')
  t.ok(ms >= 600, `not before the stall limit (${ms.toFixed(0)} ms)`)
  t.ok(ms < 10_000, 'but soon after it')
  res.body.resume()
  t.not(await closed, 'end', 'the client never sees a complete-looking stream')
  t.same(await waitIdle(rig.gw), {}, 'permit and bytes released')
  const m = await rig.gw.metrics()
  t.equal(m.get('sluice_refusals_total{code="client_stalled"}'), 1)
  t.equal(m.get('sluice_admissions_total'), m.get('sluice_releases_total'))
})
