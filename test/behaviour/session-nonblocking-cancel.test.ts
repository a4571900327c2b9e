// Cancelling a non-blocking exchange: queued behind its session's running exchange, it ends
// with turn_error exchange_cancelled and never reaches the provider; running, it ends the same
// way, the upstream request is closed, and the session's next exchange runs. The cancel flag
// lives in the shared ledger, so any worker can take the cancel request.

import t from 'tap'
import type { Client } from 'undici'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { clientOnRow, until, waitIdle } from '../helpers/gateway.ts'
import { cancelExchange, dataOf, dropConnections, endsExchange, openEvents, postJson, submit, type SseEvent } from '../helpers/sse.ts'

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 2 }) })
// Client connections first: see dropConnections.
t.teardown(async () => { await dropConnections(); await rig.close() })

const TAG = 'x-test-tag'

function reached (tag: string): boolean {
  return rig.requests.some((r) => r.headers[TAG] === tag)
}

async function metric (name: string): Promise<number> {
  return (await rig.gw.metrics()).get(name) ?? NaN
}

t.test('a queued exchange, cancelled: turn_error exchange_cancelled, never reaches the provider', async (t) => {
  const session = 'cancel-queued'
  const es = await openEvents(rig.url, session, { key: KEY })
  const slow = await submit(rig.url, KEY, session, 'chat', chatBody('ahead\n#sim tokens=40 interval=25', { stream: true }), { headers: { [TAG]: 'ahead' } })
  const queued = await submit(rig.url, KEY, session, 'chat', chatBody('behind'), { headers: { [TAG]: 'behind' } })
  t.equal(slow.status, 202)
  t.equal(queued.status, 202)
  const qid = queued.json.exchangeId as string
  await until(async () => await metric('sluice_session_queued') === 1, 'the second exchange queued behind the first')

  const wrongSession = await cancelExchange(rig.url, KEY, 'another-session', qid)
  t.same(wrongSession.json, { exchangeId: qid, sessionId: 'another-session', cancelled: false }, 'the id in another session cancels nothing')
  const c = await cancelExchange(rig.url, KEY, session, qid)
  t.equal(c.status, 200)
  t.same(c.json, { exchangeId: qid, sessionId: session, cancelled: true })

  const seen: SseEvent[] = []
  const ended = new Set<string>()
  while (ended.size < 2) {
    const e = await es.next()
    seen.push(e)
    if (endsExchange(qid)(e) || endsExchange(slow.json.exchangeId as string)(e)) ended.add(dataOf(e).exchangeId as string)
  }
  es.close()
  const mine = seen.filter((e) => dataOf(e).exchangeId === qid)
  t.same(mine.map((e) => e.event), ['turn_error'], 'the cancelled exchange never started; one turn_error')
  t.match(dataOf(mine[0]), { exchangeId: qid, code: 'exchange_cancelled', status: 499, error: String })
  const ahead = seen.filter((e) => dataOf(e).exchangeId === slow.json.exchangeId)
  t.equal(ahead[ahead.length - 1].event, 'turn_complete', 'the exchange ahead completes undisturbed')
  t.same(await waitIdle(rig.gw), {}, 'idle')
  t.ok(reached('ahead'), 'the exchange ahead reached the provider')
  t.notOk(reached('behind'), 'the cancelled exchange never did')

  const again = await cancelExchange(rig.url, KEY, session, qid)
  t.same(again.json, { exchangeId: qid, sessionId: session, cancelled: false }, 'cancelling it again: false')
  const done = await cancelExchange(rig.url, KEY, session, slow.json.exchangeId as string)
  t.equal(done.json.cancelled, false, 'a finished exchange: false')
  const unknown = await cancelExchange(rig.url, KEY, session, 'no-such-exchange')
  t.same({ status: unknown.status, json: unknown.json }, { status: 200, json: { exchangeId: 'no-such-exchange', sessionId: session, cancelled: false } }, 'an unknown exchange: false')
  const anon = await cancelExchange(rig.url, 'sk-not-a-key', session, qid)
  t.equal(anon.status, 401)
  t.equal(anon.json.code, 'unauthorized')
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('a running exchange, cancelled from the other worker: turn_error, upstream closed, the session goes on', async (t) => {
  const c1 = await clientOnRow(rig.gw.port, 1)
  const c2 = await clientOnRow(rig.gw.port, 2)
  t.teardown(async () => { await Promise.all([c1, c2].map((c: Client) => c.destroy().catch(() => {}))) })
  const session = 'cancel-running'
  const s = await submit(rig.url, KEY, session, 'chat', chatBody('long\n#sim tokens=400 interval=20', { stream: true }), { client: c1, headers: { [TAG]: 'running' } })
  t.equal(s.status, 202)
  const eid = s.json.exchangeId as string
  const es = await openEvents(rig.url, session, { key: KEY, lastEventId: s.json.lastEventId as number })
  let progress = 0
  while (progress < 3) if ((await es.next()).event === 'turn_progress') progress++

  const c = await cancelExchange(rig.url, KEY, session, eid, c2)
  t.same(c.json, { exchangeId: eid, sessionId: session, cancelled: true }, 'cancelled on row 2')
  const rest = await es.until(endsExchange(eid))
  const last = rest[rest.length - 1]
  t.equal(last.event, 'turn_error', 'ends in turn_error')
  t.match(dataOf(last), { exchangeId: eid, code: 'exchange_cancelled', status: 499, partial: true })
  t.ok(rest.slice(0, -1).every((e) => e.event === 'turn_progress'), 'progress until the cancel, nothing else')

  const req = rig.requests.find((r) => r.headers[TAG] === 'running')
  t.ok(req, 'the exchange reached the provider')
  await until(() => rig.ends.some((e) => e.id === req!.id), 'the upstream request ended')
  const end = rig.ends.find((e) => e.id === req!.id)!
  t.equal(end.outcome, 'client-closed', 'the provider saw the gateway close the request')
  t.ok(end.eventsSent < 400, 'long before the stream\'s end')

  const next = await submit(rig.url, KEY, session, 'chat', chatBody('next in the session'), { client: c1 })
  t.equal(next.status, 202)
  const after = await es.until(endsExchange(next.json.exchangeId as string))
  es.close()
  t.same(after.map((e) => e.event), ['turn_started', 'turn_complete'], 'the session\'s next exchange runs')
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('cancel while waiting for the first byte; a blocking exchange of the session is queued behind and runs', async (t) => {
  const session = 'cancel-ttft'
  const s = await submit(rig.url, KEY, session, 'chat', chatBody('slow first byte\n#sim ttft=20000'), { headers: { [TAG]: 'ttft' } })
  const es = await openEvents(rig.url, session, { key: KEY, lastEventId: s.json.lastEventId as number })
  t.equal((await es.next()).event, 'turn_started')
  await until(() => reached('ttft'), 'the request reached the provider')
  // A blocking call in the same session waits in its lane behind the non-blocking one.
  const blockingCall = postJson(rig.url, '/v1/chat/completions', chatBody('blocking, behind'), { authorization: `Bearer ${KEY}`, 'x-session-id': session })
  await until(async () => await metric('sluice_session_queued') === 1, 'the blocking call queued in the session')
  t.equal((await cancelExchange(rig.url, KEY, session, s.json.exchangeId as string)).json.cancelled, true)
  const err = (await es.until(endsExchange(s.json.exchangeId as string))).pop()!
  es.close()
  t.match(dataOf(err), { code: 'exchange_cancelled', status: 499 })
  const res = await blockingCall
  t.equal(res.status, 200, 'the blocking call behind it then runs')
  t.same(await waitIdle(rig.gw), {}, 'idle')
})
