// One model exchange, start to release (DESIGN.md "The exchange lifecycle"):
//
//   headers -> auth -> turn pin -> session lane (one active per session, FIFO, pending cap)
//   -> exchange permit (FIFO queue, body unread)
//   -> body (bytes reserved, capped) -> parse permit: bounded JSON + preparation (piscina)
//   -> model pin, provider, protocol -> upstream (undici) -> relay (backpressure, inspection,
//   signed failure tail) -> release when processing, upstream and HTTP have all settled.
//
// Each step is in one place; release is owned by the exchange's Holdings. A failure before
// the first downstream byte is a JSON refusal with its catalogue code; after it, a signed
// failure tail in the client protocol's own error event, then a clean end. Nothing is ever
// retried or replayed.

import type { ConversationStore } from '../src/state/store.ts'
import { randomUUID } from 'node:crypto'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Dispatcher } from 'undici'
import type { Config } from '../src/config/schema.ts'
import { abortCause, SluiceError, type ErrorCode } from '../src/errors.ts'
import type { Ledger } from '../src/ledger/ledger.ts'
import { Router, type RouteProtocol } from '../src/routing.ts'
import type { ParserPool } from '../src/json/pool.ts'
import type { Admission } from './admission.ts'
import type { Authenticator } from './auth.ts'
import { readBody } from './body.ts'
import { closeIfUnread, sendJson } from './reply.ts'
import type { Holdings } from './holdings.ts'
import { failureRecord, headerExcerpt, relayBuffered, relayStream, type Outcome, type Signer } from './relay.ts'
import type { TurnPins, TurnTicket } from './turns.ts'
import { sessionIdOf, type LaneTicket, type SessionLanes } from './sessions.ts'
import type { KeyConfig } from '../src/config/schema.ts'
import type { PrepareOk } from '../src/json/prepare.ts'
import { NO_TRACE, type ExchangeTrace, type Tracing } from '../src/telemetry/tracing.ts'
import { HIST_FIRST_BYTE, HIST_QUEUE_WAIT, HIST_TOTAL, RG_STREAMS } from '../src/ledger/layout.ts'
import { transportError, type Upstreams } from './upstream.ts'
import { providerErrorFromResponse, providerSluiceError } from '../src/protocols/index.ts'

export type Route = 'chat' | 'responses' | 'messages' | 'count_tokens'

export const ROUTE_PROTOCOL: Record<Route, RouteProtocol> = {
  chat: 'openai-chat',
  responses: 'openai-responses',
  messages: 'anthropic',
  count_tokens: 'anthropic',
}

export const ROUTE_PATH: Record<Route, string> = {
  chat: '/v1/chat/completions',
  responses: '/v1/responses',
  messages: '/v1/messages',
  count_tokens: '/v1/messages/count_tokens',
}

export interface ExchangeDeps {
  config: Config
  ledger: Ledger
  admission: Admission
  auth: Authenticator
  router: Router
  upstreams: Upstreams
  parser: ParserPool
  turns: TurnPins
  sessions: SessionLanes
  /** The conversation-state store shared by all workers (src/state/store.ts); null when off.
   *  Used by translated Responses routes to expand previous_response_id (issue 13). */
  continuations?: ConversationStore | null
  /** Run traces, when the OTEL_* variables configure an exporter. */
  tracing: Tracing | null
  /** Every exchange in flight is tracked: a drain waits for their actual release (and their
   *  log line and trace) before the tracer and the pools are shut. */
  background: { track (p: Promise<unknown>): void; readonly aborts: Set<(err: SluiceError) => void> }
  signer: Signer
  log: (fields: Record<string, unknown>) => void
}

/** The per-exchange record: one log line at the end, attributes for traces later. */
export interface ExchangeRecord {
  exchangeId: string
  runId: string | null
  route: Route
  keyName: string | null
  sessionId: string | null
  /** 'blocking' (the HTTP response carries the result) or 'events' (non-blocking / RPC). */
  mode: 'blocking' | 'events' | 'rpc'
  /** Waited behind an earlier exchange of the same session. */
  laneQueued: boolean
  laneMs: number
  model: string | null
  provider: string | null
  stream: boolean
  code: ErrorCode | 'ok'
  status: number
  queued: boolean
  queueMs: number
  ttfbMs: number | null
  totalMs: number
  bytesIn: number
  bytesOut: number
  frames: number
  usage: Record<string, number> | null
  partial: boolean
  evidence: boolean
  /** The trace id, when this exchange is traced. */
  traceId: string | null
  /** Start -> the actual release of every permit, lane slot and byte (null: nothing was held). */
  releaseMs: number | null
}

/** How long the exchange's log line waits for the actual release before it is written anyway. */
const RELEASE_LOG_WAIT_MS = 30_000

export function runIdentity (req: IncomingMessage): string | null {
  const run = req.headers['x-sluice-run-id']
  if (typeof run === 'string' && run.length > 0 && run.length <= 256) return run
  const tp = req.headers.traceparent
  if (typeof tp === 'string') {
    const m = /^[\da-f]{2}-([\da-f]{32})-[\da-f]{16}-[\da-f]{2}$/.exec(tp.trim())
    if (m) return m[1]
  }
  return null
}

/**
 * An exchange accepted before runExchange starts (non-blocking mode, JSON-RPC): already
 * authenticated, counted in its session lane, its body read (bytes reserved in `holdings`)
 * and prepared. runExchange then owns every one of these and releases them exactly once.
 */
export interface Accepted {
  exchangeId: string
  mode: 'events' | 'rpc'
  key: KeyConfig
  sessionId: string | null
  lane: LaneTicket | null
  turn: TurnTicket
  holdings: Holdings
  prepared: PrepareOk
  /** Called once the exchange holds its lane turn and an exchange permit. */
  onStarted?: () => void
  /** Aborts the exchange (the JSON-RPC caller went away); its reason is reported. */
  signal?: AbortSignal
}

export async function runExchange (deps: ExchangeDeps, route: Route, req: IncomingMessage, res: ServerResponse, accepted?: Accepted): Promise<ExchangeRecord> {
  const started = performance.now()
  const rec: ExchangeRecord = {
    exchangeId: accepted?.exchangeId ?? randomUUID(),
    runId: runIdentity(req),
    route,
    keyName: null,
    sessionId: accepted?.sessionId ?? null,
    mode: accepted?.mode ?? 'blocking',
    laneQueued: false,
    laneMs: 0,
    model: null,
    provider: null,
    stream: false,
    code: 'ok',
    status: 0,
    queued: false,
    queueMs: 0,
    ttfbMs: null,
    totalMs: 0,
    bytesIn: 0,
    bytesOut: 0,
    frames: 0,
    usage: null,
    partial: false,
    evidence: false,
    traceId: null,
    releaseMs: null,
  }
  const tp = req.headers.traceparent
  const trace: ExchangeTrace = deps.tracing?.start(typeof tp === 'string' ? tp : undefined, {
    'sluice.exchange_id': rec.exchangeId,
    'sluice.run_id': rec.runId,
    'sluice.route': route,
    'sluice.mode': rec.mode,
    'sluice.session_id': rec.sessionId,
  }) ?? NO_TRACE
  rec.traceId = trace.traceId
  let released: Promise<void> | null = null
  const ac = new AbortController()
  const signal = ac.signal
  const onClientClose = (): void => { if (!res.writableFinished) ac.abort() }
  res.once('close', onClientClose)
  const cut = (err: SluiceError): void => ac.abort(err)
  deps.background.aborts.add(cut)
  const outer = accepted?.signal
  const onOuterAbort = (): void => ac.abort(outer?.reason)
  if (outer) { if (outer.aborted) onOuterAbort(); else outer.addEventListener('abort', onOuterAbort, { once: true }) }

  let holdings: Holdings | null = accepted?.holdings ?? null
  let upstreamStarted = false
  let bodyBytes = accepted ? accepted.holdings.heldBytes : 0
  let upstreamRes: Dispatcher.ResponseData | null = null
  let turn: TurnTicket | null = accepted?.turn ?? null
  let lane: LaneTicket | null = accepted?.lane ?? null
  if (holdings) {
    const h = holdings
    if (res.closed) h.settle('http')
    else res.once('close', () => h.settle('http'))
  }
  try {
    // 1. Before the body: who, which run, which session.
    const key = accepted?.key ?? deps.auth.authenticate(req.headers)
    rec.keyName = key.name
    if (!accepted) {
      rec.sessionId = sessionIdOf(req.headersDistinct)
      turn = deps.turns.take(key, rec.runId)
      // The synchronous lane check: an aborted request is never counted.
      if (rec.sessionId !== null && deps.sessions.enabled) {
        if (signal.aborted) throw abortCause(signal)
        lane = deps.sessions.enter(key.name, rec.sessionId, rec.exchangeId)
      }
    }
    // A cancel request from any worker (non-blocking cancel, JSON-RPC session/cancel) aborts this exchange.
    lane?.watchCancel(() => ac.abort(new SluiceError('exchange_cancelled', { exchangeId: rec.exchangeId })))
    trace.set({ 'sluice.key_name': key.name, 'sluice.session_id': rec.sessionId })
    if (lane && !lane.ranAtOnce) {
      rec.laneQueued = true
      const laneSpan = trace.phase('session.lane', { 'sluice.session_id': rec.sessionId })
      laneSpan.event('waiting for the session\'s turn')
      const laneAt = performance.now()
      try {
        await lane.wait(signal)
      } finally {
        rec.laneMs = performance.now() - laneAt
        laneSpan.end({ 'sluice.wait_ms': rec.laneMs })
      }
    }

    // 2. An exchange permit (FIFO, body still unread).
    let queuedAt = 0
    const admission = trace.phase('admission')
    try {
      holdings = await deps.admission.admit(signal, ['processing', 'upstream', 'http'], () => {
        rec.queued = true
        queuedAt = performance.now()
        admission.event('waiting for model capacity')
      }, holdings ?? undefined)
    } finally {
      if (rec.queued) rec.queueMs = performance.now() - queuedAt
      admission.end({ 'sluice.queued': rec.queued, 'sluice.wait_ms': rec.queueMs })
    }
    const h = holdings
    deps.ledger.observe(HIST_QUEUE_WAIT, rec.laneMs + rec.queueMs)
    trace.event('exchange permit admitted', { 'sluice.run_id': rec.runId, 'sluice.queue_ms': rec.queueMs, 'sluice.lane_ms': rec.laneMs })
    released = new Promise<void>((resolve) => h.onRelease(() => {
      rec.releaseMs = performance.now() - started
      deps.ledger.observe(HIST_TOTAL, rec.releaseMs)
      trace.event('exchange released', { 'sluice.run_id': rec.runId })
      resolve()
    }))
    if (lane) { h.tookLane(lane); lane = null }
    if (!accepted) {
      if (res.closed) h.settle('http')
      else res.once('close', () => h.settle('http'))
    }
    if (signal.aborted) throw abortCause(signal)
    accepted?.onStarted?.()

    // 3. The body, bounded and reserved; then bounded JSON and preparation under the parse permit.
    let prepared: PrepareOk
    if (accepted) {
      prepared = accepted.prepared
      rec.bytesIn = bodyBytes
    } else {
      const body = await readBody(req, h, deps.config.limits.maxBodyBytes, signal)
      bodyBytes = body.byteLength
      rec.bytesIn = bodyBytes
      const parse = trace.phase('parse', { 'sluice.bytes_in': bodyBytes })
      try {
        prepared = await prepare(deps, h, route, body, signal)
      } finally {
        parse.end()
      }
      bodyBytes = prepared.body.byteLength
    }
    rec.model = prepared.model
    rec.stream = prepared.stream && route !== 'count_tokens'

    // 4. Where it goes, and whether this key may go there.
    Router.checkPin(key, prepared.requestedModel, prepared.model)
    const provider = deps.router.resolve(prepared.model)
    rec.provider = provider.config.name
    Router.checkProtocol(ROUTE_PROTOCOL[route], provider, prepared.model)

    // 5. Upstream. The body buffer is released once the provider has answered.
    upstreamStarted = true
    const sent = performance.now()
    const wait = trace.phase('provider.wait', { 'sluice.provider': rec.provider, 'sluice.model': rec.model })
    try {
      upstreamRes = await deps.upstreams.send({ provider, path: ROUTE_PATH[route], clientHeaders: req.headers, body: prepared.body, signal })
    } catch (err) {
      h.settle('upstream')
      wait.end({ 'sluice.code': transportError(err, signal).code })
      throw err
    }
    const up = upstreamRes
    rec.ttfbMs = performance.now() - sent
    deps.ledger.observe(HIST_FIRST_BYTE, rec.ttfbMs)
    wait.end({ 'http.response.status_code': up.statusCode })
    up.body.once('close', () => h.settle('upstream'))
    // undici's body, destroyed before it was read to the end, emits RequestAbortedError: a
    // body refused unread (below) must not take the worker down as an uncaught 'error'.
    up.body.on('error', () => {})
    h.unreserve(bodyBytes)
    bodyBytes = 0

    // 6. Provider refusal before any byte: our JSON, signed, never the provider's bytes.
    if (up.statusCode >= 400) {
      throw await providerFailure({ deps, holdings: h, signal }, up)
    }

    // A streaming request must get an event stream: anything else (a 200 login page, a JSON
    // body) is the provider breaking its protocol, refused before any byte, never evidence.
    if (rec.stream && !isEventStream(up.headers)) {
      throw new SluiceError('provider_protocol_error', { reason: 'not an event stream', contentType: headerExcerpt(up.headers['content-type']) },
        'the provider answered a streaming request with something that is not text/event-stream')
    }

    // 7. Relay. A non-streaming answer is held and read whole before any byte goes out: its
    // failures throw, and are refused below like every failure before the first byte.
    const relay = trace.phase('relay', { 'sluice.stream': rec.stream })
    deps.ledger.gauge(RG_STREAMS, 1)
    let outcome: Outcome = { code: 'internal_error' }
    try {
      outcome = rec.stream
        ? await relayStream({ deps, rec, route, up, res, holdings: h, signal })
        : await relayBuffered({ deps, rec, route, up, res, holdings: h, signal })
    } catch (err) {
      outcome = { code: (signal.aborted ? abortCause(signal) : transportError(err, signal)).code }
      throw err
    } finally {
      deps.ledger.gauge(RG_STREAMS, -1)
      relay.end({ 'sluice.code': outcome.code, 'sluice.bytes_out': rec.bytesOut, 'sluice.frames': rec.frames, 'sluice.partial': rec.partial })
    }
    rec.code = outcome.code
    rec.status = res.statusCode
  } catch (err) {
    const se = signal.aborted ? abortCause(signal) : transportError(err, signal)
    rec.code = se.code
    // A turn is spent by an exchange that reached the provider; a local refusal gives it back.
    if (!upstreamStarted) turn?.giveBack()
    if (upstreamRes && !upstreamRes.body.destroyed) upstreamRes.body.destroy()
    // The caller is about to see the outcome: the session may go on (Holdings.releaseLane).
    lane?.release()
    holdings?.releaseLane()
    if (!res.headersSent && !res.destroyed) {
      rec.status = se.status
      sendRefusal(deps, res, se, rec, accepted ? null : !holdings || bodyBytes === 0 ? req : null)
    } else {
      deps.ledger.countRefusal(se.code)
      if (!res.destroyed) res.destroy()
    }
  } finally {
    res.off('close', onClientClose)
    deps.background.aborts.delete(cut)
    outer?.removeEventListener('abort', onOuterAbort)
    // A lane entry not yet handed to the holdings (refused or aborted before a permit).
    lane?.release()
    if (holdings) {
      if (!upstreamStarted) holdings.settle('upstream')
      holdings.settle('processing')
    }
    rec.totalMs = performance.now() - started
    if (!res.writableFinished && !res.destroyed) {
      await new Promise<void>((resolve) => res.once('close', () => resolve()))
      rec.totalMs = performance.now() - started
    }
    // The record is written once everything is actually released (upstream closed too), so
    // releaseMs and the trace's end are the real release. A release that never comes (a bug)
    // still gets its line, with releaseMs null.
    if (released) {
      let timer: ReturnType<typeof setTimeout> | undefined
      await Promise.race([released, new Promise((resolve) => { timer = setTimeout(resolve, RELEASE_LOG_WAIT_MS).unref() })])
      clearTimeout(timer) // not one 30 s timer left behind per exchange
    }
    trace.end({
      'sluice.code': rec.code,
      'http.response.status_code': rec.status,
      'sluice.model': rec.model,
      'sluice.provider': rec.provider,
      'sluice.stream': rec.stream,
      'sluice.bytes_in': rec.bytesIn,
      'sluice.bytes_out': rec.bytesOut,
      'sluice.frames': rec.frames,
      'sluice.partial': rec.partial,
      'sluice.evidence': rec.evidence,
      'sluice.total_ms': rec.totalMs,
      'sluice.release_ms': rec.releaseMs,
      'sluice.usage.input_tokens': rec.usage?.inputTokens,
      'sluice.usage.output_tokens': rec.usage?.outputTokens,
    })
    deps.log(rec as unknown as Record<string, unknown>)
  }
  return rec
}

/**
 * Bounded JSON + preparation in the parser pool under the parse permit, returned as soon as
 * the parse settles. `envelope`: the body wraps the exchange (non-blocking mode, JSON-RPC).
 * `body`'s bytes are reserved in `h`; on return the prepared body's are instead (a rewritten
 * body is reserved before the original's bytes are returned).
 */
export async function prepare (deps: ExchangeDeps, h: Holdings, route: Route, body: Uint8Array, signal: AbortSignal, envelope?: 'exchange' | 'rpc'): Promise<PrepareOk> {
  const size = body.byteLength // the buffer is transferred to the parser: read it first
  await deps.ledger.parse.acquire({ signal })
  h.tookParse()
  let result
  try {
    // The body's ArrayBuffer is transferred to the parser (zero copy) and comes back.
    result = await deps.parser.prepare({
      body,
      route,
      envelope,
      limits: { maxDepth: deps.config.limits.maxJsonDepth, maxNodes: deps.config.limits.maxJsonNodes },
      aliases: deps.router.aliases as Record<string, string>,
    }, { signal })
  } finally {
    // Returned as soon as the parse settles; a crashed parser settles only after its exit.
    h.releaseParse()
  }
  if (!result.ok) throw SluiceError.from(result.error)
  if (result.body.byteLength !== size) {
    h.reserve(result.body.byteLength)
    h.unreserve(size)
  }
  return result
}

/** A provider error response before any byte reached the client: read a bounded excerpt
 *  (8 KiB), map it under the parse permit, never forward the provider's bytes as ours. */
async function providerFailure (ctx: { deps: ExchangeDeps; holdings: Holdings; signal: AbortSignal }, up: Dispatcher.ResponseData): Promise<SluiceError> {
  const cap = 8192
  const parts: Buffer[] = []
  let n = 0
  try {
    for await (const chunk of up.body) {
      const c = chunk as Buffer
      parts.push(c.subarray(0, cap - n))
      n += Math.min(c.length, cap - n)
      if (n >= cap) break
    }
  } catch {}
  if (!up.body.destroyed) up.body.destroy()
  const retryAfter = up.headers['retry-after']
  await ctx.deps.ledger.parse.acquire({ signal: ctx.signal })
  ctx.holdings.tookParse()
  let info
  try {
    info = providerErrorFromResponse(up.statusCode, Buffer.concat(parts, n), typeof retryAfter === 'string' ? retryAfter : null)
  } finally {
    ctx.holdings.releaseParse()
  }
  const err = providerSluiceError(info)
  // A provider's own 4xx refusal of the request keeps its status: the request was refused.
  if (err.code === 'provider_error' && up.statusCode >= 400 && up.statusCode < 500) err.withStatus(up.statusCode)
  return err
}

function isEventStream (headers: Dispatcher.ResponseData['headers']): boolean {
  const ct = headers['content-type']
  return typeof ct === 'string' && ct.startsWith('text/event-stream')
}

/** A refusal or failure before any downstream byte: one JSON shape, signed when the provider failed. */
function sendRefusal (deps: ExchangeDeps, res: ServerResponse, err: SluiceError, rec: ExchangeRecord, unreadBody: IncomingMessage | null): void {
  deps.ledger.countRefusal(err.code)
  // A session refusal issues no id (seed 002): the exchange was never accepted.
  const body: Record<string, unknown> = err.code === 'prompt_queue_full' ? err.toBody() : { ...err.toBody(), exchangeId: rec.exchangeId }
  if (err.side === 'provider') {
    const record = failureRecord(err, rec)
    body.record = record
    body.signature = deps.signer.sign(record)
  }
  const id: Record<string, string> = err.code === 'prompt_queue_full' ? {} : { 'x-sluice-exchange-id': rec.exchangeId }
  sendJson(res, err.status, body, { ...err.headers(), ...id, ...closeIfUnread(unreadBody) })
}
