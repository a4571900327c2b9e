// 200 concurrent long streams against the default limits: never more than 32 active and 128
// queued, the rest refused at once and honestly, and every queued stream completes, granted
// in FIFO order. The order is read at the provider, so the queue drains through one permit:
// stream 0 ends first and 1-31 outlast the drain, so each queued stream is granted only once
// the one before it has finished at the provider. (With grants in a burst, the order in which
// the provider sees requests is not the grant order: after its grant an exchange reads its
// body, parses it and may open a provider connection. Measured: one stream overtaken by five
// under load. The gate's FIFO under concurrent grants is tested in test/unit/ledger/.)

import t from 'tap'
import { Agent, request } from 'undici'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { until, waitIdle } from '../helpers/gateway.ts'

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 1 }) })
t.teardown(() => rig.close())

t.test('200 streams: 32 active, 128 queued FIFO, 40 refused at once, all queued complete', async (t) => {
  const agent = new Agent({ connections: 400, pipelining: 1 })
  t.teardown(() => agent.close())
  const go = (i: number) => request(rig.url + '/v1/chat/completions', {
    dispatcher: agent,
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-test-seq': String(i) },
    // The first 32 are long (they hold every permit while the queue fills), the rest short.
    // Stream 0 ends first (5 s); 1-31 end (15 s) after the queue has drained through its permit.
    body: JSON.stringify(chatBody(`stream ${i}\n#sim ${i === 0 ? 'tokens=200 interval=25' : i < 32 ? 'tokens=600 interval=25' : 'tokens=4 interval=5'}`, { stream: true })),
  }).then(async (res) => ({ i, status: res.statusCode, body: await res.body.text(), at: performance.now() }))

  // Observe the upstream: concurrency and arrival order.
  let upstreamActive = 0
  let upstreamPeak = 0
  const arrival: number[] = []
  const seqOfRequest = new Map<number, number>()
  const ended: number[] = []
  rig.sim.events.on('request', (e) => {
    upstreamActive++
    upstreamPeak = Math.max(upstreamPeak, upstreamActive)
    arrival.push(Number(e.headers['x-test-seq']))
    seqOfRequest.set(e.id, Number(e.headers['x-test-seq']))
  })
  rig.sim.events.on('end', (e) => { upstreamActive--; ended.push(seqOfRequest.get(e.id) ?? -1) })
  // Every queued stream ended at the provider before the first of streams 1-31 did.
  const drainedFirst = (): boolean => {
    const firstLong = ended.findIndex((i) => i >= 1 && i < 32)
    return firstLong >= 0 && ended.slice(0, firstLong).filter((i) => i >= 32).length === 128
  }
  let peakActive = 0
  let peakQueued = 0
  let sampling = true
  const sampler = (async () => {
    while (sampling) {
      const m = await rig.gw.metrics()
      peakActive = Math.max(peakActive, m.get('sluice_exchanges_active')!)
      peakQueued = Math.max(peakQueued, m.get('sluice_exchanges_queued')!)
      await new Promise((r) => setTimeout(r, 10))
    }
  })()

  const all: Array<Promise<{ i: number; status: number; body: string; at: number }>> = []
  for (let i = 0; i < 32; i++) all.push(go(i))
  await until(async () => (await rig.gw.metrics()).get('sluice_exchanges_active') === 32, '32 active', 10_000)
  // Queue 128, one at a time, so their arrival order is known.
  for (let i = 32; i < 160; i++) {
    all.push(go(i))
    await until(async () => (await rig.gw.metrics()).get('sluice_exchanges_queued') === i - 31, `queued ${i - 31}`, 10_000)
  }
  // 40 more: the queue is full.
  const refusedAt = performance.now()
  for (let i = 160; i < 200; i++) all.push(go(i))
  const results = await Promise.all(all)
  sampling = false
  await sampler

  const refused = results.filter((r) => r.status !== 200)
  t.equal(refused.length, 40, '40 refused')
  for (const r of refused) {
    t.ok(r.i >= 160, `refused ${r.i} was one of the last 40`)
    const j = JSON.parse(r.body)
    t.equal(r.status, 503)
    t.equal(j.code, 'capacity_exhausted')
    t.ok(r.at - refusedAt < 2000, 'refused at once, not after a wait')
  }
  const ok = results.filter((r) => r.status === 200)
  t.equal(ok.length, 160, '160 streams completed')
  for (const r of ok) t.match(r.body, /data: \[DONE\]\n\n$/, `stream ${r.i} complete`)
  t.ok(peakActive <= 32, `never more than 32 active (peak ${peakActive})`)
  t.ok(peakQueued <= 128, `never more than 128 queued (peak ${peakQueued})`)
  t.equal(peakQueued, 128, 'the queue was used to its limit')
  t.ok(upstreamPeak <= 32, `the provider never saw more than 32 at once (peak ${upstreamPeak})`)

  // FIFO: the queued streams reached the provider in the order they queued, each after the
  // one before it had finished there (the drain went through one permit, as planned).
  t.ok(drainedFirst(), 'the queue drained before any of streams 1-31 ended')
  const queuedOrder = arrival.filter((i) => i >= 32)
  t.equal(queuedOrder.length, 128)
  t.same(queuedOrder, Array.from({ length: 128 }, (_, k) => 32 + k), 'granted in FIFO order')
  t.same(await waitIdle(rig.gw), {}, 'idle after the wave')
  const m = await rig.gw.metrics()
  t.equal(m.get('sluice_admissions_total'), 160)
  t.equal(m.get('sluice_releases_total'), 160)
  t.equal(m.get('sluice_refusals_total{code="capacity_exhausted"}'), 40)
})
