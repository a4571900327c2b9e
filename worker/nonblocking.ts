// Non-blocking mode (DESIGN.md "Sessions", seed 002):
//
//   POST /v1/sessions/:id/exchanges              { route, body } -> 202 { exchangeId, sessionId, lastEventId }
//   POST /v1/sessions/:id/exchanges/:eid/cancel  -> 200 { exchangeId, sessionId, cancelled }
//   (the events themselves: worker/event-stream.ts)
//
// Acceptance (worker/accept.ts) is synchronous and before the body is read: the session id is
// in the path. Then the envelope is read (bytes reserved in the exchange's scope) and
// prepared under the parse permit, and only then is 202 written — so a malformed body is
// still an honest 4xx, and an accepted exchange has everything it needs. It then runs in the
// background through the very same runExchange as a blocking one, writing into a
// CollectingSink instead of an HTTP response; its progress and result are appended to the
// shared event ring (src/events/), so the events stream may be served by any worker. The
// lane entry is released when the exchange settles, exactly once, whatever the outcome.

import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyInstance } from 'fastify'
import { SluiceError, abortCause } from '../src/errors.ts'
import { Lanes, type Key64 } from '../src/ledger/lanes.ts'
import type { Route } from '../src/protocols/routes.ts'
import { accept } from './accept.ts'
import { newRecord, runIdentity, type ExchangeDeps, type ExchangeRecord } from './deps.ts'
import { SessionEvents } from './event-stream.ts'
import { readEnvelope, refusedAtTheDoor, runExchange } from './exchange.ts'
import { cancelInLane } from './lane-ticket.ts'
import { refuse, sendJson } from './reply.ts'
import { checkSessionId } from './session-id.ts'
import { ExchangeScope } from './scope.ts'
import { CollectingSink, sinkResult, withRawMember } from './sink.ts'

export function registerNonBlocking (fastify: FastifyInstance, deps: ExchangeDeps, events: SessionEvents): void {
  void fastify.register(async (scope) => {
    scope.removeAllContentTypeParsers()
    scope.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined))

    scope.post<{ Params: { id: string } }>('/v1/sessions/:id/exchanges', (request, reply) => {
      reply.hijack()
      return submit(deps, events, request.params.id, request.raw, reply.raw)
    })

    scope.post<{ Params: { id: string; eid: string } }>('/v1/sessions/:id/exchanges/:eid/cancel', (request, reply) => {
      reply.hijack()
      const res = reply.raw
      try {
        const key = deps.auth.authenticate(request.headers, request.raw.socket)
        const sessionId = checkSessionId(request.params.id, 'path')
        const exchangeId = request.params.eid
        if (exchangeId.length === 0 || exchangeId.length > 128) throw new SluiceError('invalid_request', { field: 'path', reason: 'an exchange id is 1 to 128 characters' })
        const n = cancelInLane(deps.ledger, key.name, sessionId, exchangeId)
        sendJson(res, 200, { exchangeId, sessionId, cancelled: n > 0 })
      } catch (err) {
        refuse(deps.ledger, res, SluiceError.from(err), { unread: request.raw })
      }
    })
  })
}

async function submit (deps: ExchangeDeps, events: SessionEvents, rawId: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const started = performance.now()
  const known: { keyName?: string | null; sessionId?: string | null } = {}
  const ac = new AbortController()
  const onClose = (): void => { if (!res.writableFinished) ac.abort() }
  res.once('close', onClose)
  let scope: ExchangeScope | null = null
  let handedOff = false
  try {
    const accepted = accept(deps, req, { mode: 'events', sessionId: () => checkSessionId(rawId, 'path'), signal: ac.signal, known })
    scope = accepted.scope
    const { exchangeId } = accepted
    const sessionId = accepted.sessionId as string
    const prepared = await readEnvelope(deps, req, scope, 'exchange', ac.signal)
    const route = prepared.envelope?.route as Route
    const sessionKey = Lanes.key(accepted.key.name, sessionId)
    const sink = new CollectingSink({
      cap: Math.min(deps.config.limits.maxOutputBytes, deps.ring.maxPayload - 1024),
      bytes: scope,
      frameBytes: deps.config.limits.sseFrameBytes,
      onFrame: (event, data) => {
        if (!events.publish(sessionKey, 'turn_progress', { exchangeId, event, data })) {
          events.publish(sessionKey, 'turn_progress', { exchangeId, event, data: null, dropped: 'larger than the event ring accepts' })
        }
      },
    })
    const run = runExchange(deps, accepted, route, req, sink as unknown as ServerResponse, {
      prepared,
      onStarted: () => { events.publish(sessionKey, 'turn_started', { exchangeId, route, model: prepared.requestedModel }) },
      // The result is published while the exchange still holds everything (its sink's bytes
      // included), then the sink's bytes go back through the scope.
      deliver: (rec) => { publishResult(events, sessionKey, sink, rec); sink.dispose() },
    })
    handedOff = true
    // Events of this exchange all come after this id: subscribe with it as Last-Event-ID.
    const lastEventId = deps.ring.nextSeq - 1
    deps.background.track(run)
    res.off('close', onClose)
    sendJson(res, 202, { exchangeId, sessionId, lastEventId })
  } catch (err) {
    const se = ac.signal.aborted ? abortCause(ac.signal) : SluiceError.from(err)
    if (handedOff) throw err // runExchange settles everything itself: this would be a bug
    // The slot is returned before the caller can see the refusal (a retry must not meet it).
    scope?.discard()
    res.off('close', onClose)
    const rec = newRecord({ exchangeId: null, runId: runIdentity(req), route: null, mode: 'events', keyName: known.keyName ?? null, sessionId: known.sessionId ?? null })
    refusedAtTheDoor(deps, req, res, rec, se, started)
  } finally {
    if (!handedOff) res.off('close', onClose)
  }
}

/** The exchange settled: one turn_complete or turn_error carries its result. */
function publishResult (events: SessionEvents, session: Key64, sink: CollectingSink, rec: ExchangeRecord): void {
  const exchangeId = rec.exchangeId
  const turnError = (err: SluiceError): void => {
    events.publish(session, 'turn_error', { ...err.toBody(), exchangeId, status: err.status })
  }
  const r = sinkResult(sink, rec, { partial: rec.partial, frames: rec.frames })
  if (!r.ok) { turnError(r.error); return }
  const text = sink.isEventStream
    ? JSON.stringify({ exchangeId, status: r.status, body: null, usage: rec.usage, frames: rec.frames })
    : withRawMember({ exchangeId, status: r.status, usage: rec.usage }, 'body', r.raw)
  if (!events.publish(session, 'turn_complete', text)) turnError(new SluiceError('output_too_large', { bytes: sink.bytes }))
}
