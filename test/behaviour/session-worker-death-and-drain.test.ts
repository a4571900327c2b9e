// A worker that dies with session-lane entries, and a drain with event streams open: the primary reclaims them once, the session's
// queue moves on (a request queued on another worker runs), and every non-blocking exchange
// the dead worker ran or queued gets its end reported on the session's event stream
// (turn_error worker_lost), so a subscriber never waits forever. Everything returns to idle.

import t from 'tap'
import type { Client } from 'undici'
import { chatBody, KEY, startRig } from '../helpers/exchange.ts'
import { clientOnRow, until, waitIdle } from '../helpers/gateway.ts'
import { SseParser } from '../helpers/sse.ts'

const auth = { authorization: `Bearer ${KEY}` }

async function post (c: Client, path: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; json: Record<string, unknown> }> {
  const r = await c.request({ method: 'POST', path, headers: { ...auth, 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })
  const text = await r.body.text()
  return { status: r.statusCode, json: text ? JSON.parse(text) as Record<string, unknown> : {} }
}

/** Collects `event`/`data` pairs of an SSE stream until `done` says so (or it ends). */
async function collect (c: Client, path: string, headers: Record<string, string>, done: (events: Array<{ event: string; data: Record<string, unknown> }>) => boolean): Promise<Array<{ event: string; data: Record<string, unknown> }>> {
  const r = await c.request({ method: 'GET', path, headers: { ...auth, ...headers } })
  const parser = new SseParser()
  const events: Array<{ event: string; data: Record<string, unknown> }> = []
  for await (const chunk of r.body) {
    parser.push((chunk as Buffer).toString('utf8'))
    for (const e of parser.take()) if (e.event) events.push({ event: e.event, data: JSON.parse(e.data) as Record<string, unknown> })
    if (done(events)) break
  }
  r.body.destroy()
  return events
}

t.test('non-blocking exchanges of a dead worker end with turn_error worker_lost', async (t) => {
  const rig = await startRig({ workers: 2, limits: { maxPendingPromptsPerSession: 0 } })
  t.teardown(() => rig.close())
  const one = await clientOnRow(rig.gw.port, 1)
  const two = await clientOnRow(rig.gw.port, 2)
  t.teardown(async () => { await one.close().catch(() => {}); await two.close().catch(() => {}) })

  const a = await post(one, '/v1/sessions/dying/exchanges', { route: 'chat', body: chatBody('slow\n#sim ttft=20000') })
  t.equal(a.status, 202)
  const b = await post(one, '/v1/sessions/dying/exchanges', { route: 'chat', body: chatBody('queued behind it') })
  t.equal(b.status, 202)
  await until(() => rig.requests.length === 1, 'the first exchange reached the provider')
  const ids = [a.json.exchangeId, b.json.exchangeId]
  const stream = collect(two, '/v1/sessions/dying/events', { 'last-event-id': String(a.json.lastEventId) },
    (evs) => ids.every((id) => evs.some((e) => e.event === 'turn_error' && e.data.exchangeId === id)))
  const exit = await one.request({ method: 'GET', path: '/_test/exit' })
  await exit.body.text()
  const evs = await stream
  const errors = evs.filter((e) => e.event === 'turn_error')
  t.same(errors.map((e) => [e.data.exchangeId, e.data.code, e.data.phase]), [[ids[0], 'worker_lost', 'running'], [ids[1], 'worker_lost', 'queued']])
  t.ok(evs.some((e) => e.event === 'turn_started' && e.data.exchangeId === ids[0]), 'the first had started')
  t.equal(rig.requests.length, 1, 'the queued one never reached the provider')
  t.same(await waitIdle(rig.gw), {}, 'lanes, permits and bytes back at idle')
})

t.test('a request queued on another worker runs once the dead worker\'s active one is reclaimed', async (t) => {
  const rig = await startRig({ workers: 2 })
  t.teardown(() => rig.close())
  const one = await clientOnRow(rig.gw.port, 1)
  const two = await clientOnRow(rig.gw.port, 2)
  t.teardown(async () => { await one.close().catch(() => {}); await two.close().catch(() => {}) })
  const headers = { 'x-session-id': 'shared' }
  const first = post(one, '/v1/chat/completions', chatBody('first\n#sim ttft=20000'), headers).catch((err: unknown) => ({ status: -1, json: { error: String(err) } }))
  await until(() => rig.requests.length === 1, 'the first reached the provider')
  const second = post(two, '/v1/chat/completions', chatBody('second'), headers)
  // The second waits in the lane (on worker 2) behind the first (on worker 1).
  await new Promise((r) => setTimeout(r, 200))
  t.equal(rig.requests.length, 1, 'the second waits behind its session')
  const killer = await clientOnRow(rig.gw.port, 1)
  await (await killer.request({ method: 'GET', path: '/_test/exit' })).body.text()
  await killer.close().catch(() => {})
  const r2 = await second
  t.equal(r2.status, 200, 'the second ran after the reclaim')
  t.equal(rig.requests.length, 2)
  const r1 = await first
  t.not(r1.status, 200, 'the first died with its worker')
  t.same(await waitIdle(rig.gw), {}, 'back at idle')
})

t.test('drain: a background exchange finishes and its result reaches the open event stream before it ends', async (t) => {
  const rig = await startRig({})
  t.teardown(() => rig.sim.close())
  const c = await clientOnRow(rig.gw.port, 1)
  const sub = await clientOnRow(rig.gw.port, 1)
  t.teardown(async () => { await c.close().catch(() => {}); await sub.close().catch(() => {}) })
  const a = await post(c, '/v1/sessions/draining/exchanges', { route: 'chat', body: chatBody('finish me\n#sim ttft=500') })
  t.equal(a.status, 202)
  const stream = collect(sub, '/v1/sessions/draining/events', { 'last-event-id': String(a.json.lastEventId) }, () => false)
  await until(() => rig.requests.length === 1, 'the exchange reached the provider')
  rig.gw.proc.kill('SIGTERM')
  const evs = await stream
  t.same(evs.map((e) => e.event), ['turn_started', 'turn_complete'], 'the result arrived, then the stream ended')
  t.equal(evs[1].data.exchangeId, a.json.exchangeId)
  t.equal(await rig.gw.exited, 0, 'a clean exit')
})
