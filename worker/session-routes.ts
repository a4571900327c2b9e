// Non-blocking mode (DESIGN.md "Sessions", seed 002):
//
//   POST /v1/sessions/:id/exchanges              { route, body } -> 202 { exchangeId, sessionId }
//   GET  /v1/sessions/:id/events                 SSE: turn_started, turn_progress, turn_complete,
//                                                turn_error, replay_gap; Last-Event-ID replay
//   POST /v1/sessions/:id/exchanges/:eid/cancel  -> 200 { exchangeId, cancelled }
//
// Acceptance is the lane check, synchronous and before the body is read: the session id is
// in the path. Then the envelope is read (bytes reserved) and prepared under the parse
// permit, and only then is 202 written — so a malformed body is still an honest 4xx, and an
// accepted exchange has everything it needs. It then runs in the background through the very
// same runExchange as a blocking one, writing into a CollectingSink instead of an HTTP
// response; its progress and result are appended to the shared event ring (src/events/), so
// the events stream may be served by any worker. The lane entry is released when the
// exchange settles, exactly once, whatever the outcome.

import { randomUUID } from 'node:crypto'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyInstance } from 'fastify'
import { SluiceError, abortCause, catalogue, type ErrorCode } from '../src/errors.ts'
import { EventRing } from '../src/events/ring.ts'
import { eventText } from '../src/events/text.ts'
import { Lanes, type Key64 } from '../src/ledger/lanes.ts'
import type { PrepareOk } from '../src/json/prepare.ts'
import { readBody } from './body.ts'
import { closeIfUnread, sendJson } from './reply.ts'
import { RG_EVENT_STREAMS } from '../src/ledger/layout.ts'
import { prepare, runExchange, runIdentity, type ExchangeDeps, type ExchangeRecord, type Route } from './exchange.ts'
import { Holdings } from './holdings.ts'
import { checkSessionId, type LaneTicket } from './sessions.ts'
import { CollectingSink, sinkResult, type SinkResult } from './sink.ts'
import type { TurnTicket } from './turns.ts'

export interface SessionDeps extends ExchangeDeps {
  ring: EventRing
  /** Background exchanges and open event streams, for drain. */
  background: Background
}

/** Exchanges in flight (blocking ones until their actual release, non-blocking ones until
 *  their result is published) and open event streams: a drain waits for the first, then
 *  ends the second. */
export class Background {
  readonly exchanges = new Set<Promise<unknown>>()
  readonly streams = new Set<() => void>()
  /** Aborts of the exchanges in flight, for the drain deadline (cutAll). */
  readonly aborts = new Set<(err: SluiceError) => void>()

  /**
   * The drain deadline is near: every exchange still in flight ends now with `err`, so a
   * caller that already has bytes gets the signed failure tail (not a bare socket close when
   * the primary stops the worker), and one still waiting gets the JSON refusal.
   */
  cutAll (err: SluiceError): number {
    const n = this.aborts.size
    for (const abort of [...this.aborts]) abort(err)
    return n
  }

  track (p: Promise<unknown>): void {
    this.exchanges.add(p)
    void p.finally(() => this.exchanges.delete(p))
  }

  /**
   * Waits for every background exchange (their results still reach the open event streams),
   * then ends every event stream. New ones are refused meanwhile (the ledger is draining).
   */
  async close (): Promise<void> {
    while (this.exchanges.size > 0) await Promise.allSettled([...this.exchanges])
    for (const end of this.streams) end()
  }
}

/** Sends `{ code, error, ...details }` with the catalogue status (counted as a refusal). */
export function refuse (deps: ExchangeDeps, res: ServerResponse, err: SluiceError, unread: IncomingMessage | null): void {
  deps.ledger.countRefusal(err.code)
  if (res.headersSent || res.destroyed) { if (!res.destroyed) res.destroy(); return }
  sendJson(res, err.status, err.toBody(), { ...err.headers(), ...closeIfUnread(unread) })
}

/**
 * The exchange log line of a non-blocking or JSON-RPC request refused before it was accepted
 * (no exchange ran, so runExchange wrote none): same fields, exchangeId null.
 */
export function logRefused (deps: ExchangeDeps, req: IncomingMessage, mode: 'events' | 'rpc', err: SluiceError, started: number, known: { keyName?: string | null; sessionId?: string | null; route?: string | null } = {}): void {
  deps.log({
    exchangeId: null,
    runId: runIdentity(req),
    route: known.route ?? null,
    keyName: known.keyName ?? null,
    sessionId: known.sessionId ?? null,
    mode,
    code: err.code,
    status: err.status,
    totalMs: performance.now() - started,
    bytesIn: 0,
    bytesOut: 0,
    frames: 0,
    queueMs: 0,
    ttfbMs: null,
    usage: null,
    evidence: false,
  })
}


/**
 * Reads an envelope body (bytes reserved in `holdings`) and prepares it in the parser pool
 * under the parse permit. The returned body's bytes stay reserved in `holdings`.
 *
 * An envelope holds no exchange permit yet, so its parse first takes a slot of the shared
 * envelope-parse allowance (src/ledger/envelopes.ts), returned once the parse settled: with
 * the allowance full it is refused at once with parse_capacity_exhausted (503, Retry-After),
 * before anything is accepted, and the parse queue keeps its places for the exchanges that
 * hold a permit.
 */
export async function readEnvelope (deps: ExchangeDeps, req: IncomingMessage, holdings: Holdings, kind: 'exchange' | 'rpc', signal: AbortSignal): Promise<PrepareOk> {
  const body = await readBody(req, holdings, deps.config.limits, signal)
  if (!deps.ledger.envelopes.tryTake()) {
    throw new SluiceError('parse_capacity_exhausted', { gate: 'parse', reason: 'envelopes', limit: deps.ledger.envelopes.max })
  }
  try {
    // The envelope is gone after this; the exchange body (re-serialised) stays reserved.
    return await prepare(deps, holdings, 'chat', body, signal, kind)
  } finally {
    deps.ledger.envelopes.give()
  }
}

export class SessionEvents {
  private readonly ring: EventRing
  constructor (ring: EventRing) { this.ring = ring }

  /** Appends one event; false when it is larger than the ring accepts. */
  publish (session: Key64, type: string, data: unknown): boolean {
    return this.ring.append(session, eventText(type, typeof data === 'string' ? data : JSON.stringify(data))) !== 0
  }
}

export function registerSessionRoutes (fastify: FastifyInstance, deps: SessionDeps): void {
  const events = new SessionEvents(deps.ring)

  void fastify.register(async (scope) => {
    scope.removeAllContentTypeParsers()
    scope.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined))

    scope.post<{ Params: { id: string } }>('/v1/sessions/:id/exchanges', (request, reply) => {
      reply.hijack()
      return acceptExchange(deps, events, request.params.id, request.raw, reply.raw)
    })

    scope.post<{ Params: { id: string; eid: string } }>('/v1/sessions/:id/exchanges/:eid/cancel', (request, reply) => {
      reply.hijack()
      const res = reply.raw
      try {
        const key = deps.auth.authenticate(request.headers)
        const sessionId = checkSessionId(request.params.id, 'path')
        const exchangeId = request.params.eid
        if (exchangeId.length === 0 || exchangeId.length > 128) throw new SluiceError('invalid_request', { field: 'path', reason: 'an exchange id is 1 to 128 characters' })
        const n = deps.sessions.cancel(key.name, sessionId, exchangeId)
        sendJson(res, 200, { exchangeId, sessionId, cancelled: n > 0 })
      } catch (err) {
        refuse(deps, res, SluiceError.from(err), request.raw)
      }
    })
  })

  fastify.get<{ Params: { id: string }; Querystring: { lastEventId?: string } }>('/v1/sessions/:id/events', (request, reply) => {
    reply.hijack()
    return streamEvents(deps, request.params.id, request.query.lastEventId, request.raw, reply.raw)
  })
}

async function acceptExchange (deps: SessionDeps, events: SessionEvents, rawId: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const started = performance.now()
  const known: { keyName?: string; sessionId?: string } = {}
  const ac = new AbortController()
  const onClose = (): void => { if (!res.writableFinished) ac.abort() }
  res.once('close', onClose)
  let lane: LaneTicket | null = null
  let holdings: Holdings | null = null
  let turn: TurnTicket | null = null
  let handedOff = false
  try {
    const key = deps.auth.authenticate(req.headers)
    known.keyName = key.name
    const sessionId = checkSessionId(rawId, 'path')
    known.sessionId = sessionId
    if (deps.ledger.draining) throw new SluiceError('shutting_down')
    deps.admission.checkHeap()
    const exchangeId = randomUUID()
    // The acceptance check, synchronous, before anything is read or answered.
    if (ac.signal.aborted) throw abortCause(ac.signal)
    lane = deps.sessions.enter(key.name, sessionId, exchangeId, true)
    holdings = new Holdings(deps.ledger, ['processing', 'upstream', 'http'])
    const prepared = await readEnvelope(deps, req, holdings, 'exchange', ac.signal)
    const route = prepared.envelope?.route as Route
    turn = deps.turns.take(key, runIdentity(req))
    const sessionKey = Lanes.key(key.name, sessionId)
    const got: { r: SinkResult | null } = { r: null }
    const sink = new CollectingSink({
      cap: Math.min(deps.config.limits.maxOutputBytes, deps.ring.maxPayload - 1024),
      storage: deps.ledger.storage,
      frameBytes: deps.config.limits.sseFrameBytes,
      onFrame: (event, data) => {
        if (!events.publish(sessionKey, 'turn_progress', { exchangeId, event, data })) {
          events.publish(sessionKey, 'turn_progress', { exchangeId, event, data: null, dropped: 'larger than the event ring accepts' })
        }
      },
    })
    const run = runExchange(deps, route, req, sink as unknown as ServerResponse, {
      exchangeId,
      mode: 'events',
      key,
      sessionId,
      lane,
      turn,
      holdings,
      prepared,
      onStarted: () => { events.publish(sessionKey, 'turn_started', { exchangeId, route, model: prepared.requestedModel }) },
      // The result is read while the exchange holds its permit (Accepted.onRelayed).
      onRelayed: async (rec, signal) => { got.r = await sinkResult(sink, rec, deps.ledger.parse, { partial: rec.partial, frames: rec.frames }, signal) },
    })
    handedOff = true
    // Events of this exchange all come after this id: subscribe with it as Last-Event-ID.
    const lastEventId = deps.ring.nextSeq - 1
    deps.background.track(run.then((rec) => finishEvents(deps, events, sessionKey, sink, rec, got.r)).finally(() => sink.dispose()))
    res.off('close', onClose)
    sendJson(res, 202, { exchangeId, sessionId, lastEventId })
  } catch (err) {
    // The slot is returned before the caller can see the refusal (a retry must not meet it).
    lane?.release()
    const se = ac.signal.aborted ? abortCause(ac.signal) : SluiceError.from(err)
    refuse(deps, res, se, req)
    logRefused(deps, req, 'events', se, started, known)
  } finally {
    if (!handedOff) {
      res.off('close', onClose)
      turn?.giveBack()
      lane?.release()
      if (holdings) { holdings.settle('processing'); holdings.settle('upstream'); holdings.settle('http') }
    }
  }
}

/** The exchange settled: one turn_complete or turn_error carries its result (`read` when it
 *  was read while the exchange held its permit; else it failed first and needs no parse). */
async function finishEvents (deps: ExchangeDeps, events: SessionEvents, session: Key64, sink: CollectingSink, rec: ExchangeRecord, read: SinkResult | null): Promise<void> {
  const exchangeId = rec.exchangeId
  const turnError = (err: SluiceError): void => {
    events.publish(session, 'turn_error', { ...err.toBody(), exchangeId, status: err.status })
  }
  const r = read ?? await sinkResult(sink, rec, deps.ledger.parse, { partial: rec.partial, frames: rec.frames })
  if (!r.ok) { turnError(r.error); return }
  const done = sink.isEventStream
    ? { exchangeId, status: r.status, body: null, usage: rec.usage, frames: rec.frames }
    : { exchangeId, status: r.status, body: r.body, usage: rec.usage }
  if (!events.publish(session, 'turn_complete', done)) turnError(new SluiceError('output_too_large', { bytes: sink.bytes }))
}

const HEARTBEAT_MS = 15_000
const NEWLINE = Buffer.from('\n')

async function streamEvents (deps: SessionDeps, rawId: string, queryLast: string | undefined, req: IncomingMessage, res: ServerResponse): Promise<void> {
  let session: Key64
  let cursor = -1
  try {
    const key = deps.auth.authenticate(req.headers)
    const sessionId = checkSessionId(rawId, 'path')
    session = Lanes.key(key.name, sessionId)
    const header = req.headers['last-event-id']
    const last = typeof header === 'string' && header.length > 0 ? header : queryLast
    if (last !== undefined && last !== '') {
      if (!/^\d{1,15}$/.test(last)) throw new SluiceError('invalid_request', { field: 'Last-Event-ID', reason: 'must be an event id (a decimal integer)' })
      cursor = Number(last)
    }
  } catch (err) {
    refuse(deps, res, SluiceError.from(err), null)
    return
  }
  const ring = deps.ring
  // Without Last-Event-ID a subscriber starts after the newest event: history is for replay.
  if (cursor < 0) cursor = ring.nextSeq - 1
  // Where the event after `cursor` is in the ring (RingRead.at): a read resumes there.
  let at = -1
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', 'x-accel-buffering': 'no' })
  // HEAD (fastify's automatic sibling of this GET): the same checks and headers, no stream.
  if (req.method === 'HEAD') { res.end(); return }
  res.write(': sluice session events\n\n')
  let open = true
  let wake: (() => void) | null = null
  const ended = new AbortController()
  const end = (): void => { open = false; ended.abort(); wake?.() }
  res.once('close', end)
  deps.background.streams.add(end)
  deps.ledger.gauge(RG_EVENT_STREAMS, 1)
  try {
    // One last read after the end is requested: a drain ends streams only once every
    // background exchange has settled, and its final event must still go out.
    for (let last = false; !last;) {
      last = !open || res.destroyed
      const token = ring.sessionToken(session)
      const r = ring.read(session, cursor, undefined, at)
      if (r.gap) res.write(Buffer.concat([eventText('replay_gap', JSON.stringify({ after: cursor, oldest: r.oldest })), NEWLINE]))
      let bytes = 0
      for (const e of r.events) bytes += e.payload.length
      // The copies out of the ring are held until the socket takes them: reserved bytes.
      if (bytes > 0 && !deps.ledger.storage.tryReserve(bytes)) {
        res.write(Buffer.concat([eventText('stream_error', JSON.stringify({ code: 'storage_budget_exhausted', error: catalogue.storage_budget_exhausted.message, lastEventId: cursor })), NEWLINE]))
        break
      }
      let ok = true
      for (const e of r.events) ok = res.write(Buffer.concat([Buffer.from(`id: ${e.seq}\n`), e.payload, NEWLINE])) && ok
      cursor = r.cursor
      at = r.at
      if (!ok && open) await new Promise<void>((resolve) => { wake = resolve; res.once('drain', resolve) })
      if (bytes > 0) deps.ledger.storage.release(bytes)
      if (r.more) { last = false; continue }
      if (last || !open) continue
      // Sleep until an append to this session, the heartbeat, or the end.
      await ring.sessionChanged(session, token, HEARTBEAT_MS, ended.signal)
      wake = null
      if (open && ring.sessionToken(session) === token) res.write(': ping\n\n')
    }
  } finally {
    deps.ledger.gauge(RG_EVENT_STREAMS, -1)
    deps.background.streams.delete(end)
    res.off('close', end)
    if (!res.destroyed) res.end()
  }
}
