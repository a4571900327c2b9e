// Non-blocking mode through the real gateway: POST /v1/sessions/:id/exchanges answers 202 at
// once, and the exchange's progress and result arrive as session events (GET .../events),
// served by any worker. What the events carry is exactly what a blocking call with the same
// body returns (the simulated provider is deterministic). Refusals are immediate, in the one
// `{ code, error, ...details }` shape, and count nothing; a session's events are visible only
// to its own gateway key.

import t, { type Test } from 'tap'
import type { Client } from 'undici'
import { sha256Hex } from '../../src/config/load.ts'
import { KEY, chatBody, messagesBody, responsesBody, startRig, type Rig } from '../helpers/exchange.ts'
import { clientOnRow, until, waitIdle } from '../helpers/gateway.ts'
import {
  blocking, cancelExchange, dataOf, dropConnections, endsExchange, openEvents, parseSseText, postJson, rpc, submit, type SseEvent,
} from '../helpers/sse.ts'

const OTHER = 'sk-another-gateway-key-9876543210'

let rig: Rig
t.before(async () => {
  rig = await startRig({
    workers: 2,
    keys: [
      { name: 'test', sha256: sha256Hex(KEY), models: ['*'] },
      { name: 'other', sha256: sha256Hex(OTHER), models: ['*'] },
    ],
  })
})
// Client connections first: see dropConnections.
t.teardown(async () => { await dropConnections(); await rig.close() })

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

/** Ids present, numeric and strictly increasing. */
function idsIncrease (t: Test, events: SseEvent[], after: number, what: string): void {
  let last = after
  for (const e of events) {
    const id = Number(e.id)
    if (e.id === null || !Number.isInteger(id) || id <= last) {
      t.fail(`${what}: event ids strictly increasing after ${after}`, { ids: events.map((x) => x.id) })
      return
    }
    last = id
  }
  t.pass(`${what}: event ids strictly increasing after ${after}`)
}

async function metric (name: string): Promise<number> {
  return (await rig.gw.metrics()).get(name) ?? NaN
}

/** Submits, subscribes from the returned lastEventId, and reads the exchange to its end. */
async function runNonBlocking (sessionId: string, route: string, body: unknown, key = KEY) {
  const accepted = await submit(rig.url, key, sessionId, route, body)
  if (accepted.status !== 202) throw new Error(`not accepted: ${accepted.status} ${accepted.text}`)
  const es = await openEvents(rig.url, sessionId, { key, lastEventId: accepted.json.lastEventId as number })
  try {
    const events = await es.until(endsExchange(accepted.json.exchangeId as string))
    return { accepted, events }
  } finally {
    es.close()
  }
}

const HAPPY: Array<[string, Record<string, unknown>]> = [
  ['chat', chatBody('happy chat')],
  ['chat', chatBody('happy chat, streamed', { stream: true })],
  ['responses', responsesBody('happy responses')],
  ['responses', responsesBody('happy responses, streamed\n#sim tokens=5', { stream: true })],
  ['messages', messagesBody('happy messages')],
  ['messages', messagesBody('happy messages, streamed\n#sim tokens=5', { stream: true })],
  ['count_tokens', messagesBody('how many tokens is this')],
]

t.test('happy paths: the events carry exactly what the blocking call returns', async (t) => {
  for (const [route, body] of HAPPY) {
    const what = `${route}${body.stream === true ? ' stream' : ''}`
    const session = `happy-${what}`
    const { accepted, events } = await runNonBlocking(session, route, body)
    const eid = accepted.json.exchangeId as string
    t.equal(accepted.status, 202, `${what}: 202`)
    t.same(Object.keys(accepted.json).sort(), ['exchangeId', 'lastEventId', 'sessionId'], `${what}: 202 body fields`)
    t.match(eid, UUID, `${what}: exchangeId`)
    t.equal(accepted.json.sessionId, session, `${what}: sessionId`)
    t.equal(typeof accepted.json.lastEventId, 'number', `${what}: lastEventId`)
    idsIncrease(t, events, accepted.json.lastEventId as number, what)
    t.ok(events.every((e) => dataOf(e).exchangeId === eid), `${what}: every event names the exchange`)

    const first = events[0]
    t.equal(first.event, 'turn_started', `${what}: turn_started first`)
    t.match(dataOf(first), { exchangeId: eid, route }, `${what}: turn_started data`)
    const last = events[events.length - 1]
    t.equal(last.event, 'turn_complete', `${what}: turn_complete last (${last.data.slice(0, 200)})`)
    const done = dataOf(last)
    t.equal(done.status, 200, `${what}: status`)

    const direct = await blocking(rig.url, KEY, route, body)
    t.equal(direct.status, 200, `${what}: the blocking call succeeds`)
    const progress = events.slice(1, -1)
    t.ok(progress.every((e) => e.event === 'turn_progress'), `${what}: only turn_progress between`)
    if (body.stream === true) {
      t.equal(done.body, null, `${what}: no body on a streamed turn_complete`)
      const frames = parseSseText(direct.text).map((f) => ({ event: f.event, data: f.data }))
      const got = progress.map((e) => { const d = dataOf(e); return { event: d.event, data: d.data } })
      t.ok(frames.length > 2, `${what}: the blocking stream has frames`)
      t.strictSame(got, frames, `${what}: turn_progress data, in order, are the blocking stream's frames`)
    } else {
      t.equal(progress.length, 0, `${what}: no progress for a JSON answer`)
      t.strictSame(done.body, JSON.parse(direct.text), `${what}: turn_complete body is the blocking JSON`)
      if (route !== 'count_tokens') t.ok(done.usage !== null && typeof done.usage === 'object', `${what}: usage`)
    }
  }
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('a subscriber without Last-Event-ID starts after the newest event', async (t) => {
  const session = 'no-history'
  await runNonBlocking(session, 'chat', chatBody('before the subscriber'))
  const es = await openEvents(rig.url, session, { key: KEY })
  t.equal(es.status, 200)
  t.match(String(es.headers['content-type']), /^text\/event-stream/)
  const s = await submit(rig.url, KEY, session, 'chat', chatBody('after the subscriber'))
  const events = await es.until(endsExchange(s.json.exchangeId as string))
  es.close()
  t.equal(events[0].event, 'turn_started', 'the first event is the new exchange\'s')
  t.ok(events.every((e) => dataOf(e).exchangeId === s.json.exchangeId), 'nothing from before the subscription')
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('events of an exchange submitted on one worker are served by the other', async (t) => {
  const c1 = await clientOnRow(rig.gw.port, 1)
  const c2 = await clientOnRow(rig.gw.port, 2)
  const c2b = await clientOnRow(rig.gw.port, 2)
  t.teardown(async () => { await Promise.all([c1, c2, c2b].map((c: Client) => c.destroy().catch(() => {}))) })
  const session = 'across-workers'
  const body = chatBody('across workers\n#sim tokens=12 interval=5', { stream: true })

  // Live: subscribed on row 2 before the submit on row 1.
  const live = await openEvents(rig.url, session, { key: KEY, client: c2 })
  const s = await submit(rig.url, KEY, session, 'chat', body, { client: c1 })
  t.equal(s.status, 202)
  const eid = s.json.exchangeId as string
  const events = await live.until(endsExchange(eid))
  live.close()
  const direct = await blocking(rig.url, KEY, 'chat', body)
  const frames = parseSseText(direct.text).map((f) => f.data)
  t.equal(events[0].event, 'turn_started')
  t.equal(events[events.length - 1].event, 'turn_complete')
  t.strictSame(events.slice(1, -1).map((e) => dataOf(e).data), frames, 'every frame arrived on the other worker')

  // Replayed: a non-stream exchange submitted on row 1, subscribed on row 2 afterwards.
  const s2 = await submit(rig.url, KEY, session, 'chat', chatBody('replayed across workers'), { client: c1 })
  const later = await openEvents(rig.url, session, { key: KEY, client: c2b, lastEventId: s2.json.lastEventId as number })
  const ev2 = await later.until(endsExchange(s2.json.exchangeId as string))
  later.close()
  t.same(ev2.map((e) => e.event), ['turn_started', 'turn_complete'])
  t.strictSame(dataOf(ev2[1]).body, JSON.parse((await blocking(rig.url, KEY, 'chat', chatBody('replayed across workers'))).text))
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('a provider failure ends the exchange with turn_error and the provider\'s code; the session goes on', async (t) => {
  const session = 'faults'
  for (const fault of ['status-503', 'status-429', 'reset-before-first-byte']) {
    const body = chatBody(`#sim fault=${fault}`)
    const { events } = await runNonBlocking(session, 'chat', body)
    const direct = await blocking(rig.url, KEY, 'chat', body)
    t.same(events.map((e) => e.event), ['turn_started', 'turn_error'], `${fault}: started, then error`)
    const err = dataOf(events[1])
    t.equal(err.code, direct.json.code, `${fault}: the blocking call's code (${String(direct.json.code)})`)
    t.equal(err.status, direct.status, `${fault}: the blocking call's status`)
    t.match(err.code, /^provider_/, `${fault}: a provider code`)
    t.equal(typeof err.error, 'string', `${fault}: human message`)
    t.type(err.signature, 'string', `${fault}: signed, like the blocking refusal`)
  }
  // Mid-stream: the frames that arrived, then the error.
  const { events } = await runNonBlocking(session, 'chat', chatBody('#sim tokens=10 fault=cut-mid-stream', { stream: true }))
  const last = events[events.length - 1]
  t.equal(last.event, 'turn_error', 'a cut stream ends in turn_error')
  t.match(dataOf(last), { code: 'provider_unavailable', status: 502, partial: true })
  t.ok(events.slice(1, -1).length > 0 && events.slice(1, -1).every((e) => e.event === 'turn_progress'), 'progress before the cut')
  // The failure did not poison the session's FIFO.
  const after = await runNonBlocking(session, 'chat', chatBody('after the faults'))
  t.equal(after.events[after.events.length - 1].event, 'turn_complete', 'the next exchange runs')
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

const BAD_ENVELOPES: Array<[string, string | unknown, string, string | null]> = [
  ['bad JSON', '{"route":"chat","body":', 'invalid_json', null],
  ['not UTF-8', Buffer.from([0x7b, 0xff, 0xfe, 0x7d]).toString('latin1'), 'invalid_json', null],
  ['an array', [{ route: 'chat' }], 'invalid_request', 'body'],
  ['no route', { body: chatBody('x') }, 'invalid_request', 'route'],
  ['unknown route', { route: 'embeddings', body: chatBody('x') }, 'invalid_request', 'route'],
  ['body a string', { route: 'chat', body: 'hello' }, 'invalid_request', 'body'],
  ['body an array', { route: 'chat', body: [chatBody('x')] }, 'invalid_request', 'body'],
  ['body without a model', { route: 'chat', body: { messages: [] } }, 'invalid_request', null],
]

t.test('an invalid envelope is refused at once with 400, nothing counted', async (t) => {
  const session = 'bad-envelopes'
  for (const [what, envelope, code, field] of BAD_ENVELOPES) {
    const sent = rig.requests.length
    const appended = await metric('sluice_session_events_total{outcome="appended"}')
    const r = await postJson(rig.url, `/v1/sessions/${session}/exchanges`, envelope, { authorization: `Bearer ${KEY}` })
    t.equal(r.status, 400, `${what}: 400 (${r.text.slice(0, 160)})`)
    t.equal(r.json.code, code, `${what}: code`)
    t.equal(typeof r.json.error, 'string', `${what}: human message`)
    if (field !== null) t.equal(r.json.field, field, `${what}: names the field`)
    t.notOk('exchangeId' in r.json, `${what}: no exchange id is issued`)
    t.notOk(r.headers['retry-after'], `${what}: no Retry-After`)
    t.equal(await metric('sluice_session_events_total{outcome="appended"}'), appended, `${what}: no session event`)
    t.equal(rig.requests.length, sent, `${what}: nothing reached the provider`)
    // The lane entry taken by the synchronous acceptance check is released just after the
    // refusal is written (worker/session-routes.ts acceptExchange: refuse() in catch, then
    // lane.release() in finally), so a scrape can race it: poll, briefly.
    await until(async () => await metric('sluice_session_pending') === 0, `${what}: nothing pending in the session`, 2000)
  }
  // Still the whole pending allowance for the session: five slow ones are accepted.
  const es = await openEvents(rig.url, session, { key: KEY })
  for (let i = 0; i < 5; i++) {
    const r = await submit(rig.url, KEY, session, 'chat', chatBody(`valid ${i}\n#sim ttft=20000`))
    t.equal(r.status, 202, `valid exchange ${i + 1} of 5 accepted`)
  }
  t.equal((await rig.gw.metrics()).get('sluice_session_pending'), 5, 'five pending')
  const c = await rpc(rig.url, KEY, 'session/cancel', { sessionId: session })
  t.equal((c.json.result as Record<string, unknown>).cancelled, 5)
  let ended = 0
  while (ended < 5) if ((await es.next()).event === 'turn_error') ended++
  es.close()
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('a full session: 503 prompt_queue_full with Retry-After 5 and the seed-002 shape', async (t) => {
  const session = 'full'
  const ids: string[] = []
  for (let i = 0; i < 5; i++) {
    const r = await submit(rig.url, KEY, session, 'chat', chatBody(`slow ${i}\n#sim ttft=20000`))
    t.equal(r.status, 202, `pending ${i + 1} accepted`)
    ids.push(r.json.exchangeId as string)
  }
  const es = await openEvents(rig.url, session, { key: KEY, lastEventId: 0 })
  const sent = rig.requests.length
  const refused = await submit(rig.url, KEY, session, 'chat', chatBody('one too many'))
  t.equal(refused.status, 503)
  t.equal(refused.headers['retry-after'], '5')
  t.strictSame({ ...refused.json, error: typeof refused.json.error }, { code: 'prompt_queue_full', error: 'string', sessionId: session, limit: 5, pendingCount: 5 }, 'exactly { code, error, sessionId, limit, pendingCount }')
  t.equal(rig.requests.length, sent, 'the refused exchange never reached the provider')
  t.equal((await rig.gw.metrics()).get('sluice_session_pending'), 5, 'the refusal counted nothing')
  // Another session of the same key is not affected.
  const other = await runNonBlocking('not-full', 'chat', chatBody('another session'))
  t.equal(other.events[other.events.length - 1].event, 'turn_complete', 'another session runs')

  // Cancel the whole session (JSON-RPC session/cancel without an exchange id): all five end.
  const c = await rpc(rig.url, KEY, 'session/cancel', { sessionId: session }, 'cancel-all')
  t.same(c.json, { jsonrpc: '2.0', id: 'cancel-all', result: { sessionId: session, cancelled: 5 } })
  const errors = new Map<string, Record<string, unknown>>()
  while (errors.size < 5) {
    const e = await es.next()
    if (e.event === 'turn_error') errors.set(dataOf(e).exchangeId as string, dataOf(e))
  }
  es.close()
  t.same([...errors.keys()].sort(), [...ids].sort(), 'each of the five ended')
  for (const err of errors.values()) t.match(err, { code: 'exchange_cancelled', status: 499 })
  t.equal((await submit(rig.url, KEY, session, 'chat', chatBody('room again'))).status, 202, 'room again')
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('sessions of different gateway keys are separate, even with the same id', async (t) => {
  const session = 'same-id'
  const mine = await openEvents(rig.url, session, { key: KEY })
  const theirs = await openEvents(rig.url, session, { key: OTHER })
  const a = await submit(rig.url, KEY, session, 'chat', chatBody('mine\n#sim ttft=300'))
  const b = await submit(rig.url, OTHER, session, 'chat', chatBody('theirs'))
  t.equal(a.status, 202)
  t.equal(b.status, 202, 'not queued behind the other key\'s exchange')
  const ea = a.json.exchangeId as string
  const eb = b.json.exchangeId as string
  t.equal((await cancelExchange(rig.url, OTHER, session, ea)).json.cancelled, false, 'another key cannot cancel it')

  const seenB = await theirs.until(endsExchange(eb))
  const seenA = await mine.until(endsExchange(ea))
  mine.close()
  theirs.close()
  t.ok(seenA.every((e) => dataOf(e).exchangeId === ea), 'the first key sees only its exchange')
  t.ok(seenB.every((e) => dataOf(e).exchangeId === eb), 'the second key sees only its exchange')
  t.equal(seenA[seenA.length - 1].event, 'turn_complete')
  t.equal(seenB[seenB.length - 1].event, 'turn_complete')

  // Replay from the very start of the ring: still only its own.
  const replay = await openEvents(rig.url, session, { key: OTHER, lastEventId: 0 })
  const all = await replay.until(endsExchange(eb))
  replay.close()
  t.notOk(all.some((e) => e.data.includes(ea)), 'a replay never shows another key\'s events')

  const anon = await openEvents(rig.url, session, {} as { key: string })
  t.equal(anon.status, 401, 'no key, no events')
  t.equal((await anon.json()).code, 'unauthorized')
  t.same(await waitIdle(rig.gw), {}, 'idle')
})
