// A caller that hangs up cancels the upstream at once, wherever the exchange is: queued
// (it never reaches the provider), waiting for the first byte, or mid-stream. Nothing leaks.

import t from 'tap'
import { once } from 'node:events'
import { request } from 'undici'
import type { SimEndEvent, SimRequestEvent } from '../../src/sim/index.ts'
import { KEY, chatBody, messagesBody, responsesBody, startRig, type Rig } from '../helpers/exchange.ts'
import { until, waitIdle } from '../helpers/gateway.ts'

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 1, limits: { maxActiveExchanges: 1, maxQueuedExchanges: 4 } }) })
t.teardown(() => rig.close())

function start (path: string, body: unknown, signal: AbortSignal) {
  return request(rig.url + path, { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(body), signal })
}

function nextRequest (): Promise<SimRequestEvent> {
  return once(rig.sim.events, 'request').then(([e]) => e as SimRequestEvent)
}
function endOf (id: number): Promise<SimEndEvent> {
  return new Promise((resolve) => {
    const done = rig.ends.find((e) => e.id === id)
    if (done) { resolve(done); return }
    const on = (e: SimEndEvent): void => { if (e.id === id) { rig.sim.events.off('end', on); resolve(e) } }
    rig.sim.events.on('end', on)
  })
}

const ROUTES = [
  ['/v1/chat/completions', (d: string) => chatBody(`x\n${d}`, { stream: true })],
  ['/v1/responses', (d: string) => responsesBody(`x\n${d}`, { stream: true })],
  ['/v1/messages', (d: string) => messagesBody(`x\n${d}`, { stream: true })],
] as const

for (const [path, mk] of ROUTES) {
  t.test(`${path}: abort while queued leaves the queue and never reaches the provider`, async (t) => {
    const holder = new AbortController()
    const seen = nextRequest()
    const running = await start(path, mk('#sim tokens=200 interval=20'), holder.signal)
    const first = await seen
    running.body.on('error', () => {})
    const waiter = new AbortController()
    const queued = start(path, mk('#sim tokens=2'), waiter.signal).catch((e: Error) => e)
    await until(async () => (await rig.gw.metrics()).get('sluice_exchanges_queued') === 1, 'queued')
    const before = rig.requests.length
    waiter.abort()
    t.ok((await queued) instanceof Error, 'the queued caller gave up')
    await until(async () => (await rig.gw.metrics()).get('sluice_exchanges_queued') === 0, 'left the queue')
    t.equal(rig.requests.length, before, 'the queued exchange never reached the provider')
    t.equal((await rig.gw.metrics()).get('sluice_exchanges_active'), 1, 'the active exchange is untouched')

    // Mid-stream: read some bytes, hang up, the provider sees the close.
    await new Promise<void>((resolve) => running.body.once('data', () => resolve()))
    const t0 = performance.now()
    holder.abort()
    const end = await endOf(first.id)
    const ms = performance.now() - t0
    t.equal(end.outcome, 'client-closed', 'the provider saw the caller leave')
    t.ok(end.eventsSent < 200, `stopped after ${end.eventsSent} of 200 events`)
    t.ok(ms < 1000, `upstream closed ${ms.toFixed(1)} ms after the caller (the stream had ~4 s left)`)
    t.same(await waitIdle(rig.gw), {}, 'idle')
  })

  t.test(`${path}: abort while waiting for the first byte closes the upstream`, async (t) => {
    const ac = new AbortController()
    const seen = nextRequest()
    const p = start(path, mk('#sim ttft=5000 tokens=2'), ac.signal).catch((e: Error) => e)
    const req = await seen
    await new Promise((r) => setTimeout(r, 50))
    const t0 = performance.now()
    ac.abort()
    await p
    const end = await endOf(req.id)
    const ms = performance.now() - t0
    t.equal(end.outcome, 'client-closed')
    t.equal(end.eventsSent, 0)
    t.ok(ms < 1000, `upstream closed ${ms.toFixed(1)} ms after the caller (first byte was 5 s away)`)
    t.same(await waitIdle(rig.gw), {}, 'idle')
    const m = await rig.gw.metrics()
    t.equal(m.get('sluice_admissions_total'), m.get('sluice_releases_total'), 'every admission released once')
  })
}
