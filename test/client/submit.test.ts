// Non-blocking prompts: submit() keeps its reservation after the 202 and follows the exchange
// on the session's event stream until turn_complete, turn_error, the caller's abort or the
// loss of the stream — releasing exactly once on each. Against a real HTTP server speaking
// the session contract (session-server.ts); end-to-end against the gateway in e2e-*.test.ts.
import t from 'tap'
import { PendingPromptLimitError, SluiceClient, SluiceRequestError, SluiceStreamError, SluiceTurnError, type SessionEvent, type SluiceSession } from '../../src/client/index.ts'
import { startSessionServer, type Script, type SessionServer } from './session-server.ts'
import { sleep, until } from './server.ts'

const KEY = 'sk-client-submit'
let gw: SessionServer
t.before(async () => { gw = await startSessionServer({ key: KEY, ring: 20 }) })
t.teardown(() => gw.close())

let n = 0
function fresh (opts: { limit?: number | null, retries?: number } = {}): { client: SluiceClient, s: SluiceSession } {
  const client = new SluiceClient({ baseURL: gw.url, apiKey: KEY, maxPendingPromptsPerSession: opts.limit === undefined ? null : opts.limit, eventStreamRetries: opts.retries ?? 3 })
  return { client, s: client.session(`submit-${++n}`) }
}
const body = (script: Script = {}): object => ({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], script })

t.test('turn_complete settles the result and releases; one shared event stream, closed when idle', async (t) => {
  const { s } = fresh({ limit: 3 })
  const subs = gw.subscribers()
  const [a, b, c] = await Promise.all([s.submit('chat', body({ end: 'never' })), s.submit('responses', body({ end: 'never', progress: 3 })), s.submit('messages', body({ end: 'never' }))])
  t.equal(s.pending, 3, 'accepted exchanges keep their reservation')
  t.equal(gw.subscribers(), subs + 1, 'one event stream for all of them')
  await t.rejects(s.submit('chat', body()), PendingPromptLimitError, 'the limit counts accepted exchanges')
  gw.finish(a.exchangeId, { route: 'chat' })
  t.same(await a.result, { exchangeId: a.exchangeId, status: 200, body: { route: 'chat' } })
  t.match(a.lastEventId, /^\d+$/, 'the 202\'s lastEventId is passed on')
  gw.finish(b.exchangeId)
  t.match(await b.result, { exchangeId: b.exchangeId, status: 200 })
  t.equal(s.pending, 1)
  t.equal(gw.subscribers(), subs + 1, 'still watching the third')
  gw.finish(c.exchangeId)
  t.same(await c.result, { exchangeId: c.exchangeId, status: 200, body: { finished: true } })
  t.equal(s.pending, 0)
  await until(() => gw.subscribers() === subs, 'the idle watch closed its stream')
  t.pass('the stream closed')
  // and a new submit opens a new one
  const d = await s.submit('chat', body({ after: 20 }))
  t.match(await d.result, { status: 200 })
  t.equal(s.pending, 0)
})

t.test('turn_error rejects with SluiceTurnError and releases', async (t) => {
  const { s } = fresh()
  const sub = await s.submit('chat', body({ end: 'error', after: 20 }))
  const err = await sub.result.catch((e: unknown) => e)
  t.ok(err instanceof SluiceTurnError)
  t.match(err, { code: 'provider_unavailable', exchangeId: sub.exchangeId, body: { exchangeId: sub.exchangeId, code: 'provider_unavailable', retryAfterSeconds: 1 } })
  t.equal(s.pending, 0)
})

t.test('a terminal event that arrives before the 202 is not missed', async (t) => {
  const { s } = fresh()
  const sub = await s.submit('chat', body({ early: true, after: 50 }))
  t.match(await sub.result, { exchangeId: sub.exchangeId, status: 200 })
  const errored = await s.submit('chat', body({ early: true, end: 'error', after: 50 }))
  await t.rejects(errored.result, SluiceTurnError)
  t.equal(s.pending, 0)
})

t.test('the caller aborts an accepted exchange: cancel sent, released at once, rejected; the later turn_error is ignored', async (t) => {
  const { s } = fresh()
  const sentinel = await s.submit('chat', body({ end: 'never' }))
  const ac = new AbortController()
  const sub = await s.submit('chat', body({ end: 'never' }), { signal: ac.signal })
  t.equal(s.pending, 2)
  ac.abort()
  t.equal(s.pending, 1, 'released at the abort itself')
  await t.rejects(sub.result, { name: 'AbortError' })
  await until(() => gw.cancels.includes(sub.exchangeId), 'the cancel reached the server')
  await until(() => gw.log(s.id).some((e) => e.type === 'turn_error' && (e.data as { exchangeId: string }).exchangeId === sub.exchangeId), 'the server ended it')
  await sleep(30)
  t.equal(s.pending, 1, 'exchange_cancelled on the stream released nothing more')
  gw.finish(sentinel.exchangeId)
  await sentinel.result
  t.equal(s.pending, 0)
})

t.test('cancel() of an accepted exchange ends it with exchange_cancelled', async (t) => {
  const { s } = fresh()
  const sub = await s.submit('chat', body({ end: 'never' }))
  t.equal(await s.cancel(sub.exchangeId), true)
  const err = await sub.result.catch((e: unknown) => e)
  t.match(err, { name: 'SluiceTurnError', code: 'exchange_cancelled' })
  t.equal(await s.cancel(sub.exchangeId), false, 'a finished exchange is not cancelled again')
  t.equal(s.pending, 0)
})

t.test('the caller aborts while the POST is in flight: rejected and released at once; if accepted later, cancelled', async (t) => {
  const { s } = fresh()
  const ac = new AbortController()
  const p = s.submit('chat', body({ acceptDelay: 150, end: 'never' }), { signal: ac.signal })
  const posted = await gw.srv.next(`/v1/sessions/${s.id}/exchanges`)
  t.equal(s.pending, 1)
  ac.abort()
  await t.rejects(p, { name: 'AbortError' })
  t.equal(s.pending, 0)
  t.ok(posted)
  await until(() => gw.cancels.length > 0 && gw.log(s.id).some((e) => e.type === 'turn_error'), 'the late 202 was cancelled')
  t.match(gw.log(s.id).at(-1), { type: 'turn_error', data: { code: 'exchange_cancelled' } })
})

t.test('an already-aborted signal sends nothing', async (t) => {
  const { s } = fresh()
  const before = gw.srv.requests.length
  const ac = new AbortController()
  ac.abort()
  await t.rejects(s.submit('chat', body(), { signal: ac.signal }), { name: 'AbortError' })
  t.equal(s.pending, 0)
  t.equal(gw.srv.requests.length, before)
})

t.test('a server refusal releases and throws SluiceRequestError; no exchange is watched', async (t) => {
  const { s } = fresh()
  const err = await s.submit('chat', body({ refuse: true })).catch((e: unknown) => e)
  t.ok(err instanceof SluiceRequestError)
  t.match(err, { code: 'prompt_queue_full', status: 503, retryAfterSeconds: 5, body: { sessionId: s.id, limit: 1, pendingCount: 1 } })
  t.equal(s.pending, 0)
  await until(() => gw.subscribers() === 0, 'no stream left open')
})

t.test('an event stream that cannot open fails the submit before it POSTs', async (t) => {
  const { s } = fresh()
  gw.refuseEvents = 401
  const before = gw.srv.count(`/v1/sessions/${s.id}/exchanges`)
  try {
    const err = await s.submit('chat', body()).catch((e: unknown) => e)
    t.match(err, { name: 'SluiceRequestError', status: 401, code: 'events_refused' })
  } finally {
    gw.refuseEvents = null
  }
  t.equal(gw.srv.count(`/v1/sessions/${s.id}/exchanges`), before, 'no exchange was posted')
  t.equal(s.pending, 0)
  const ok = await s.submit('chat', body({ after: 10 }))
  t.match(await ok.result, { status: 200 }, 'the next submit opens a new stream')
})

for (const how of ['end', 'destroy'] as const) {
  t.test(`the stream is lost (${how}): resumed with Last-Event-ID, the missed terminal event replayed`, async (t) => {
    const { s } = fresh()
    const sub = await s.submit('chat', body({ end: 'never' }))
    await until(() => gw.subscribers() === 1, 'subscribed')
    gw.refuseEvents = 503
    gw.dropSubscribers(how)
    await until(() => gw.subscribers() === 0, 'dropped')
    gw.finish(sub.exchangeId, { while: 'away' })
    const retry = gw.srv.next(`/v1/sessions/${s.id}/events`)
    await retry
    gw.refuseEvents = null
    const resumed = await gw.srv.next(`/v1/sessions/${s.id}/events`)
    const started = gw.log(s.id).find((e) => e.type === 'turn_started')!
    t.equal(resumed.headers['last-event-id'], String(started.seq), 'resumed after the last event seen')
    t.same(await sub.result, { exchangeId: sub.exchangeId, status: 200, body: { while: 'away' } })
    t.equal(s.pending, 0)
  })
}

t.test('the stream is lost and cannot be resumed: every outstanding result rejects, every reservation released', async (t) => {
  const { s } = fresh({ retries: 1 })
  const a = await s.submit('chat', body({ end: 'never' }))
  const b = await s.submit('chat', body({ end: 'never' }))
  gw.refuseEvents = 503
  try {
    gw.dropSubscribers('end')
    const errs = await Promise.all([a.result.catch((e: unknown) => e), b.result.catch((e: unknown) => e)])
    for (const [i, e] of errs.entries()) {
      t.ok(e instanceof SluiceStreamError)
      t.match(e, { code: 'event_stream_failed', exchangeId: [a, b][i].exchangeId, message: /1 reconnects/ }, 'the last reconnect failed')
      t.match((e as Error).cause, { name: 'SluiceRequestError', status: 503 }, 'the failed reconnect is the cause')
    }
  } finally {
    gw.refuseEvents = null
  }
  t.equal(s.pending, 0)
  const c = await s.submit('chat', body({ after: 10 }))
  t.match(await c.result, { status: 200 }, 'a later submit works')
})

t.test('the stream ends before any event id: resumed from the 202\'s lastEventId', async (t) => {
  const { s } = fresh()
  gw.emit(s.id, 'turn_progress', { exchangeId: 'before-our-time', event: null, data: 'x' })
  const a = await s.submit('chat', body({ end: 'never', silent: true }))
  const accepted = gw.log(s.id).at(-1)!.seq
  gw.dropSubscribers('end')
  const resumed = await gw.srv.next(`/v1/sessions/${s.id}/events`)
  t.equal(resumed.headers['last-event-id'], String(accepted), 'the 202 said every event of the exchange comes after it')
  gw.finish(a.exchangeId)
  t.match(await a.result, { exchangeId: a.exchangeId, status: 200 })
  t.equal(s.pending, 0)
})

t.test('the stream ends before any event id, and no 202 gave one: nothing to resume from', async (t) => {
  const { s } = fresh()
  const a = await s.submit('chat', body({ end: 'never', silent: true, noLastEventId: true }))
  gw.dropSubscribers('end')
  const e = await a.result.catch((e: unknown) => e)
  t.match(e, { name: 'SluiceStreamError', code: 'event_stream_ended', message: /before any event id/ })
  t.equal(s.pending, 0)
})

t.test('replay_gap: the outstanding exchanges whose events were evicted are released and rejected; later ones go on', async (t) => {
  const { s } = fresh({ retries: 8 })
  const a = await s.submit('chat', body({ end: 'never' }))
  gw.refuseEvents = 503
  gw.dropSubscribers('destroy')
  await until(() => gw.subscribers() === 0, 'dropped')
  for (let i = 0; i < 30; i++) gw.emit(s.id, 'turn_progress', { exchangeId: 'other', event: null, data: String(i) }) // overflows the ring of 20
  // Accepted while the watch is reconnecting: its 202 lastEventId is after the evicted events.
  const b = await s.submit('chat', body({ end: 'never' }))
  t.equal(s.pending, 2)
  gw.refuseEvents = null
  const e = await a.result.catch((e: unknown) => e)
  t.match(e, { name: 'SluiceStreamError', code: 'event_replay_gap', exchangeId: a.exchangeId })
  t.equal(s.pending, 1, 'the later exchange is still followed')
  gw.finish(b.exchangeId)
  t.match(await b.result, { exchangeId: b.exchangeId, status: 200 })
  t.equal(s.pending, 0)
})

t.test('events(): typed events, comments skipped, resume with lastEventId, break closes the stream', async (t) => {
  const { s } = fresh()
  const ac = new AbortController()
  const seen: SessionEvent[] = []
  const reading = (async () => {
    for await (const e of s.events({ signal: ac.signal })) {
      seen.push(e)
      if (e.type === 'turn_complete') break
    }
  })()
  await until(() => gw.subscribers() === 1, 'subscribed')
  const sub = await s.submit('chat', body({ progress: 2, after: 10 }))
  await reading
  t.same(seen.map((e) => e.type), ['turn_started', 'turn_progress', 'turn_progress', 'turn_complete'])
  t.match(seen[1], { type: 'turn_progress', exchangeId: sub.exchangeId, event: null, data: '{"i":0}' })
  t.match(seen[3], { type: 'turn_complete', exchangeId: sub.exchangeId, status: 200 })
  t.ok(seen.every((e) => typeof e.id === 'string' && /^\d+$/.test(e.id)), 'ids are the decimal sequence')
  await sub.result
  await until(() => gw.subscribers() === 0, 'break closed the stream')

  const again: string[] = []
  for await (const e of s.events({ lastEventId: seen[1].id! })) {
    again.push(e.type)
    if (e.type === 'turn_complete') break
  }
  t.same(again, ['turn_progress', 'turn_complete'], 'resumed after the given id')
  t.equal(gw.srv.requests.filter((r) => r.path.endsWith('/events')).at(-1)!.headers['last-event-id'], seen[1].id)

  gw.emit(s.id, 'something_new', { x: 1 })
  const unknown: SessionEvent[] = []
  for await (const e of s.events({ lastEventId: seen[3].id! })) {
    unknown.push(e)
    break
  }
  t.match(unknown[0], { type: 'unknown', event: 'something_new', data: { x: 1 } }, 'a type this SDK does not know is passed on')

  gw.refuseEvents = 401
  try {
    await t.rejects((async () => { for await (const _ of s.events()) break })(), SluiceRequestError)
  } finally {
    gw.refuseEvents = null
  }
})
