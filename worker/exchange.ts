// One model exchange, from its acceptance to its release (DESIGN.md "The exchange lifecycle"):
//
//   accepted (worker/accept.ts: auth, session id, drain, heap, turn, lane)
//   -> the session's turn (one active per session, FIFO)
//   -> exchange permit (FIFO queue, body unread)
//   -> body (bytes reserved, capped) -> parse permit: bounded JSON + preparation (piscina)
//   -> model pin, provider, protocol -> upstream (undici) -> relay (backpressure, inspection,
//   signed failure tail) -> release when processing, upstream and HTTP have all settled.
//
// The same function runs every mode: `res` is the HTTP response of a blocking route, or a
// CollectingSink (worker/sink.ts) for non-blocking mode and JSON-RPC, whose bodies were read
// and prepared at acceptance (`opts.prepared`). Release is owned by the exchange's
// ExchangeScope. A failure before the first downstream byte is a JSON refusal with its
// catalogue code (worker/reply.ts); after it, a signed failure tail in the client protocol's
// own error event, then a clean end. Only before the first downstream byte may the upstream
// request be retried (inside upstreams.send(), worker/upstream.ts); never after it.

import { pumpChunks, STOP } from '../src/net/chunks.ts'
import type { UpstreamAnswer } from '../src/net/answer.ts'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { abortCause, SluiceError } from '../src/errors.ts'
import { inWorkerParseBytes } from '../src/config/limits.ts'
import { prepare as prepareHere, type ContinuationTask, type PrepareOk, type PrepareResult, type PrepareTask, type TranslateSpec, type TranslationInfo } from '../src/json/prepare.ts'
import { HIST_FIRST_BYTE, HIST_QUEUE_WAIT, HIST_TOTAL, RG_STREAMS, RG_TRANSLATIONS } from '../src/ledger/layout.ts'
import { affinityKey } from '../src/ledger/providers.ts'
import { providerErrorFromResponse, providerSluiceError } from '../src/protocols/index.ts'
import { PROTOCOL_ROUTE, ROUTE_PATH, ROUTE_PROTOCOL, type Route } from '../src/protocols/routes.ts'
import { issuerOf } from '../src/translate/envelope.ts'
import { createStreamTranslator } from '../src/translate/stream/index.ts'
import { requestOf } from '../src/translate/summary.ts'
import { Router } from '../src/routing.ts'
import { NO_TRACE, type ExchangeTrace } from '../src/telemetry/tracing.ts'
import type { Accepted } from './accept.ts'
import { bodyNotInHand, readBody, readBodyNow } from './body.ts'
import { Continuation, DEFAULT_STATE } from './continuation.ts'
import { newRecord, type ExchangeDeps, type ExchangeRecord } from './deps.ts'
import { headerExcerpt, relayBuffered, relayStream, type Outcome } from './relay.ts'
import { relayTranslatedStream, ScopeBudget, translatedHeaders } from './relay-translated.ts'
import { refuse } from './reply.ts'
import type { ExchangeScope } from './scope.ts'
import { transportError, UpstreamAbort } from './upstream.ts'

/** How long the exchange's log line waits for the actual release before it is written anyway. */
const RELEASE_LOG_WAIT_MS = 30_000

export interface RunOptions {
  /** Non-blocking mode and JSON-RPC: the body read and prepared at acceptance (its bytes
   *  are held by the scope). Blocking routes read the body here, after the permit. */
  prepared?: PrepareOk
  /** The caller went away (a blocking client's hang-up, a JSON-RPC caller's): aborts the exchange. */
  signal?: AbortSignal
  /** Called once the exchange holds its lane turn and an exchange permit. */
  onStarted?: () => void
  /**
   * Non-blocking mode and JSON-RPC: hands the settled result (in the sink) to the caller —
   * a session event, a JSON-RPC answer — while the exchange still holds everything, the
   * sink's bytes included; called once, whatever the outcome, before the scope can release.
   */
  deliver?: (rec: ExchangeRecord) => void
}

/** Starts the exchange's trace (a no-op without an exporter) and names it in the record. */
export function startTrace (deps: ExchangeDeps, req: IncomingMessage, rec: ExchangeRecord): ExchangeTrace {
  const tp = req.headers.traceparent
  const trace = deps.tracing?.start(typeof tp === 'string' ? tp : undefined, {
    'sluice.exchange_id': rec.exchangeId,
    'sluice.run_id': rec.runId,
    'sluice.route': rec.route,
    'sluice.mode': rec.mode,
    'sluice.session_id': rec.sessionId,
  }) ?? NO_TRACE
  rec.traceId = trace.traceId
  return trace
}

/** The end of every exchange, accepted or refused at the door: its trace ends, its one log line. */
export function finishRecord (deps: ExchangeDeps, rec: ExchangeRecord, trace: ExchangeTrace): void {
  endTrace(rec, trace)
  deps.log(rec as unknown as Record<string, unknown>)
}

/** The exchange's trace ends now, with the record's figures (nothing to do without an exporter). */
function endTrace (rec: ExchangeRecord, trace: ExchangeTrace): void {
  if (trace === NO_TRACE) return
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
    'sluice.continuation.turns': rec.continuation?.turns,
    'sluice.continuation.stored': rec.continuation?.stored,
  })
}

/**
 * A request refused before it was accepted (auth, session id, drain, heap, turn, lane): its
 * refusal, trace and log line. Blocking routes name the exchange id they would have used
 * (not for prompt_queue_full); the other modes issue none.
 */
export function refusedAtTheDoor (deps: ExchangeDeps, req: IncomingMessage, res: ServerResponse, rec: ExchangeRecord, err: SluiceError, started: number, rpcId?: string | number | null): void {
  const trace = startTrace(deps, req, rec)
  rec.code = err.code
  rec.status = err.status
  refuse(deps.ledger, res, err, {
    unread: req,
    exchange: rec.mode === 'blocking' ? { rec, signer: deps.signer } : null,
    rpcId,
  })
  rec.totalMs = performance.now() - started
  finishRecord(deps, rec, trace)
}

export async function runExchange (deps: ExchangeDeps, accepted: Accepted, route: Route, req: IncomingMessage, res: ServerResponse, opts: RunOptions = {}): Promise<ExchangeRecord> {
  const started = performance.now()
  const { scope, lane } = accepted
  // After an idle spell the parser pool has no thread (limits.parserIdleMs). A body that will
  // be parsed there (declared at or above inWorkerParseBytes, or of unknown length) starts it
  // now, so its start-up overlaps the body read, not a held parse permit. A small body is
  // parsed in this thread and needs none (a JSON answer warms it below, after the parse).
  if (bodyMayNeedThePool(req, deps.config.limits)) deps.parser.warm()
  const rec = newRecord({
    exchangeId: accepted.exchangeId,
    runId: accepted.runId,
    route,
    mode: accepted.mode,
    keyName: accepted.key.name,
    sessionId: accepted.sessionId,
  })
  const trace = startTrace(deps, req, rec)
  trace.set({ 'sluice.key_name': accepted.key.name })
  let released: Promise<void> | null = null
  const ac = new AbortController()
  const signal = ac.signal
  // Every abort of the exchange goes through here: the controller's signal, then the provider
  // request's (UpstreamAbort: undici listens there, without an AbortSignal listener per request).
  const upstreamAbort = new UpstreamAbort()
  const abort = (reason?: unknown): void => {
    ac.abort(reason)
    upstreamAbort.fire(signal.reason)
  }
  const onClientClose = (): void => { if (!res.writableFinished) abort() }
  res.once('close', onClientClose)
  scope.settleOnClose(res)
  const cut = (err: SluiceError): void => abort(err)
  deps.background.aborts.add(cut)
  const outer = opts.signal
  const onOuterAbort = (): void => abort(outer?.reason)
  if (outer) { if (outer.aborted) onOuterAbort(); else outer.addEventListener('abort', onOuterAbort, { once: true }) }

  let upstreamStarted = false
  let bodyBytes = scope.heldBytes
  let upstreamRes: UpstreamAnswer | null = null
  let cont: Continuation | null = null
  try {
    // 1. The session's turn. A cancel request from any worker (non-blocking cancel, JSON-RPC
    //    session/cancel) aborts this exchange.
    lane?.watchCancel(() => abort(new SluiceError('exchange_cancelled', { exchangeId: rec.exchangeId })))
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
      // A blocking exchange takes a free permit in this turn (most do); only a wait needs the
      // promise. The other modes keep the hand-off their callers rely on: they finish their own
      // turn (the 202, the envelope's bookkeeping) before the exchange starts (onStarted).
      if (accepted.mode !== 'blocking' || !deps.admission.tryAdmit(scope, signal)) {
        await deps.admission.admit(scope, signal, () => {
          rec.queued = true
          queuedAt = performance.now()
          admission.event('waiting for model capacity')
        })
      }
    } finally {
      if (rec.queued) rec.queueMs = performance.now() - queuedAt
      admission.end({ 'sluice.queued': rec.queued, 'sluice.wait_ms': rec.queueMs })
    }
    deps.ledger.observe(HIST_QUEUE_WAIT, rec.laneMs + rec.queueMs)
    trace.event('exchange permit admitted', { 'sluice.run_id': rec.runId, 'sluice.queue_ms': rec.queueMs, 'sluice.lane_ms': rec.laneMs })
    released = new Promise<void>((resolve) => scope.onRelease(() => {
      rec.releaseMs = performance.now() - started
      deps.ledger.observe(HIST_TOTAL, rec.releaseMs)
      trace.event('exchange released', { 'sluice.run_id': rec.runId })
      resolve()
    }))
    if (signal.aborted) throw abortCause(signal)
    opts.onStarted?.()

    // 3. The body, bounded and reserved; then bounded JSON and preparation under the parse permit.
    let prepared: PrepareOk
    if (opts.prepared) {
      prepared = opts.prepared
      rec.bytesIn = bodyBytes
    } else {
      // A body that came with the headers is in the request's buffer one microtask after the
      // 'request' event (Node's parser pushes it when the event returns): read then, and a
      // small one parsed, without a promise each (readBodyNow, prepareNow).
      if (bodyNotInHand(req)) await null
      const body = readBodyNow(req, scope, deps.config.limits, signal) ?? await readBody(req, scope, deps.config.limits, signal)
      bodyBytes = body.byteLength
      rec.bytesIn = bodyBytes
      const parse = trace.phase('parse', { 'sluice.bytes_in': bodyBytes })
      try {
        prepared = prepareNow(deps, scope, route, body) ?? await prepare(deps, scope, route, body, signal)
      } finally {
        parse.end()
      }
      bodyBytes = prepared.body.byteLength
    }
    rec.model = prepared.model
    rec.stream = prepared.stream && route !== 'count_tokens'
    // A JSON answer is read in the parser pool (worker/relay.ts relayBuffered): start its
    // thread now, so that its start-up overlaps the provider's answer.
    if (!rec.stream) deps.parser.warm()

    // 4. Where it goes, and whether this key may go there.
    Router.checkPin(accepted.key, prepared.requestedModel, prepared.model)
    const provider = deps.router.resolve(prepared.model)
    rec.provider = provider.config.name
    const client = ROUTE_PROTOCOL[route]
    const target = provider.config.protocol
    Router.checkProtocol(client, provider, prepared.model)
    // 4b. A provider of another protocol: one semantic translation (src/translate/). The
    //     request is translated in the parser pool under the parse permit, in a second pool
    //     call: which protocol a model's provider speaks is known only once the body is parsed.
    let translation: TranslationInfo | null = null
    const issuer = issuerOf(target, provider.config.name)
    if (target !== client) {
      rec.translated = `${client}->${target}`
      trace.set({ 'sluice.translated': rec.translated })
      // Conversation state (worker/continuation.ts): a previous_response_id is expanded from
      // the store, or refused with its code, before anything goes upstream.
      cont = route === 'responses' ? Continuation.begin(deps.continuations, scope, accepted.key.name, prepared.state ?? DEFAULT_STATE) : null
      rec.continuation = cont?.record ?? null
      const c = cont
      let t: PrepareOk
      try {
        t = await underParsePhase(trace, () => prepare(deps, scope, route, prepared.body, signal, undefined, { to: target, issuer, model: prepared.model }, c?.task()))
      } finally {
        c?.prepared(null) // the history's bytes go back, whether the call succeeded or not
      }
      c?.prepared(t)
      prepared = { ...t, requestedModel: prepared.requestedModel }
      bodyBytes = prepared.body.byteLength
      if (route === 'count_tokens') {
        // No Anthropic provider to count for: a local estimate (gpt-tokenizer, o200k_base).
        answerLocally(res, rec, prepared.body, { 'x-sluice-token-estimate': 'gpt-tokenizer/o200k_base', ...translatedHeaders(rec, target, client, []) })
        scope.releaseLane()
        return rec
      }
      translation = t.translation ?? null
      if (translation === null) throw new SluiceError('internal_error', {}, 'translation returned no summary')
      if (translation.droppedTools.length > 0) {
        rec.droppedTools = translation.droppedTools
        trace.set({ 'sluice.dropped_tools': translation.droppedTools.join(',') })
      }
    }

    // 5. Upstream. The body buffer is released once the provider has answered.
    upstreamStarted = true
    const sent = performance.now()
    const wait = trace.phase('provider.wait', { 'sluice.provider': rec.provider, 'sluice.model': rec.model })
    try {
      // Accounts, breaker and retries before the first downstream byte (worker/upstream.ts):
      // the body is replayed from prepared.body, held in this scope; an error answer is
      // read and mapped (providerFailure) inside send(), so it may be retried on another account.
      upstreamRes = await deps.upstreams.send({
        provider, path: ROUTE_PATH[translation === null ? route : PROTOCOL_ROUTE[target]], clientHeaders: req.headers, body: prepared.body, signal, abort: upstreamAbort,
        model: prepared.model,
        session: accepted.sessionId === null ? null : affinityKey(accepted.key.name, accepted.sessionId),
        refusal: (failed) => providerFailure(deps, scope, failed, signal),
        committed: () => res.headersSent,
        event: (name, attrs) => wait.event(name, attrs),
      })
    } catch (err) {
      scope.settle('upstream')
      wait.end({ 'sluice.code': transportError(err, signal).code })
      throw err
    }
    const up = upstreamRes
    rec.ttfbMs = performance.now() - sent
    deps.ledger.observe(HIST_FIRST_BYTE, rec.ttfbMs)
    wait.end({ 'http.response.status_code': up.statusCode })
    up.body.once('close', () => scope.settle('upstream'))
    // undici's body, destroyed before it was read to the end, emits RequestAbortedError: a
    // body refused unread (below) must not take the worker down as an uncaught 'error'.
    up.body.on('error', () => {})
    scope.unreserve(bodyBytes)
    bodyBytes = 0

    // 6. Provider refusal before any byte: our JSON, signed, never the provider's bytes.
    if (up.statusCode >= 400) {
      throw await providerFailure(deps, scope, up, signal)
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
    if (translation !== null) deps.ledger.gauge(RG_TRANSLATIONS, 1)
    let outcome: Outcome = { code: 'internal_error' }
    try {
      if (translation === null) {
        outcome = rec.stream
          ? await relayStream({ deps, rec, route, up, res, scope, signal })
          : await relayBuffered({ deps, rec, route, up, res, scope, signal })
      } else {
        const limits = { maxOutputItems: deps.config.limits.maxOutputItems, maxOutputBytes: deps.config.limits.maxOutputBytes }
        const headers = translatedHeaders(rec, target, client, translation.droppedTools)
        if (rec.stream) {
          const budget = new ScopeBudget(scope, deps.ledger)
          const translator = createStreamTranslator({ from: target, to: client, request: requestOf(translation), budget, issuer, limits, includeUsage: translation.includeUsage, ...(cont ? { state: cont.state } : {}) })
          const c = cont
          const onFinished = c ? (): void => { const k = translator.takeKept(); if (k !== null) c.commit(k.id, Buffer.from(k.output)) } : undefined
          outcome = await relayTranslatedStream({ deps, rec, up, res, scope, signal, translator, budget, headers, onFinished })
        } else {
          const c = cont
          outcome = await relayBuffered({ deps, rec, route, up, res, scope, signal, translate: { provider: target, spec: { to: client, request: translation, issuer, limits, ...(c ? { state: c.state } : {}) }, headers, onKept: c ? (k) => c.commit(k.id, k.output) : undefined } })
        }
      }
    } catch (err) {
      outcome = { code: (signal.aborted ? abortCause(signal) : transportError(err, signal)).code }
      throw err
    } finally {
      deps.ledger.gauge(RG_STREAMS, -1)
      if (translation !== null) deps.ledger.gauge(RG_TRANSLATIONS, -1)
      relay.end({ 'sluice.code': outcome.code, 'sluice.bytes_out': rec.bytesOut, 'sluice.frames': rec.frames, 'sluice.partial': rec.partial })
    }
    rec.code = outcome.code
    rec.status = res.statusCode
  } catch (err) {
    const se = signal.aborted ? abortCause(signal) : transportError(err, signal)
    rec.code = se.code
    // A turn is spent by an exchange that reached the provider; a local refusal gives it back.
    if (!upstreamStarted) scope.giveBackTurn()
    if (upstreamRes && !upstreamRes.body.destroyed) upstreamRes.body.destroy()
    // The caller is about to see the outcome: the session may go on.
    scope.releaseLane()
    if (!res.headersSent && !res.destroyed) rec.status = se.status
    refuse(deps.ledger, res, se, {
      unread: rec.mode === 'blocking' ? req : null,
      exchange: { rec, signer: deps.signer },
    })
  } finally {
    res.off('close', onClientClose)
    deps.background.aborts.delete(cut)
    outer?.removeEventListener('abort', onOuterAbort)
    if (!upstreamStarted) scope.settle('upstream')
    cont?.dropTurn()
    opts.deliver?.(rec)
    scope.settle('processing')
    rec.totalMs = performance.now() - started
    if (!res.writableFinished && !res.destroyed) {
      await new Promise<void>((resolve) => res.once('close', () => resolve()))
      rec.totalMs = performance.now() - started
    }
    // The record is written once everything is actually released (upstream closed too), so
    // releaseMs and the trace's end are the real release. A release that never comes (a bug)
    // still gets its line, with releaseMs null.
    if (released && !scope.isReleased) {
      let timer: ReturnType<typeof setTimeout> | undefined
      await Promise.race([released, new Promise((resolve) => { timer = setTimeout(resolve, RELEASE_LOG_WAIT_MS).unref() })])
      clearTimeout(timer) // not one 30 s timer left behind per exchange
    }
    // The trace ends at the release; the log line and the exemplars follow a moment later
    // (Background.later): not in the way of the caller's next request, which follows this end
    // within a few hundred µs.
    endTrace(rec, trace)
    const upstream = upstreamRes
    deps.background.later(() => {
      deps.log(rec as unknown as Record<string, unknown>)
      deps.exemplars.keepExchange({ req, res, upstream, own: [rec, scope] })
    })
  }
  return rec
}

/**
 * prepare() without a promise, for a plain exchange body parsed in this thread (below
 * limits.inWorkerParseBytes) while the parse permit is free now: the same task, caps, permit
 * and reservations. Null, nothing done, when it must wait (the pool, or the permit taken):
 * then prepare() does it.
 */
export function prepareNow (deps: ExchangeDeps, scope: ExchangeScope, route: Route, body: Uint8Array): PrepareOk | null {
  if (body.byteLength >= inWorkerParseBytes(deps.config.limits)) return null
  const task = prepareTask(deps, route, body)
  const out: { result: PrepareResult | null } = { result: null }
  if (!scope.tryUnderParse(() => { out.result = prepareHere(task) }) || out.result === null) return null
  return takePrepared(scope, body.byteLength, out.result)
}

/**
 * Bounded JSON + preparation under the parse permit, returned as soon as the parse settles:
 * in this thread below limits.inWorkerParseBytes, else in the parser pool. `envelope`: the body wraps the exchange (non-blocking mode, JSON-RPC).
 * `body`'s bytes are reserved in `scope`; on return the prepared body's are instead (a
 * rewritten body is reserved before the original's bytes are returned).
 */
export async function prepare (deps: ExchangeDeps, scope: ExchangeScope, route: Route, body: Uint8Array, signal: AbortSignal, envelope?: 'exchange' | 'rpc', translate?: TranslateSpec, continuation?: ContinuationTask): Promise<PrepareOk> {
  const size = body.byteLength // the buffer is transferred to the parser: read it first
  // The body's ArrayBuffer is transferred to the parser (zero copy) and comes back; a crashed
  // parser settles (and so returns the permit) only after its thread's exit.
  const task = prepareTask(deps, route, body, translate)
  if (envelope !== undefined) task.envelope = envelope
  if (translate !== undefined) task.translate = translate
  if (continuation !== undefined) task.continuation = continuation
  // A small body is parsed here, in this thread (DESIGN.md step 5): the same pure function, the
  // same caps, the same permit; only the thread hop (~0.1 ms of structured clone, two context
  // switches and a piscina task) is saved. Its size, history and blobs included, is below
  // inWorkerParseBytes, which is bounded by this worker's heap headroom (src/config/limits.ts).
  const inWorker = parseInputBytes(task) < inWorkerParseBytes(deps.config.limits)
  const result = await scope.underParse(signal, () => inWorker ? prepareHere(task) : deps.parser.prepare(task, { signal }))
  return takePrepared(scope, size, result)
}

function prepareTask (deps: ExchangeDeps, route: Route, body: Uint8Array, translate?: TranslateSpec): PrepareTask {
  return {
    body,
    route,
    limits: { maxDepth: deps.config.limits.maxJsonDepth, maxNodes: deps.config.limits.maxJsonNodes },
    // A translated body's alias was applied by the first call: not again.
    aliases: translate === undefined ? deps.router.aliases as Record<string, string> : {},
  }
}

/** A settled preparation: its refusal thrown, or the prepared body's bytes reserved in place of the original's. */
function takePrepared (scope: ExchangeScope, size: number, result: PrepareResult): PrepareOk {
  if (!result.ok) throw SluiceError.from({ code: result.error.code, details: result.error.details, message: result.error.message })
  if (result.body.byteLength !== size) {
    scope.reserve(result.body.byteLength)
    scope.unreserve(size)
  }
  return result
}

/** The bytes a prepare task parses: the body, and a continuation's history and blobs. */
function parseInputBytes (task: PrepareTask): number {
  let n = task.body.byteLength
  const c = task.continuation
  if (c?.history !== undefined) n += c.history.byteLength
  if (c?.blobs !== undefined) for (const b of c.blobs) n += b.bytes.byteLength
  return n
}

/**
 * Reads an envelope body (bytes reserved in `scope`) and prepares it in the parser pool
 * under the parse permit. The returned body's bytes stay reserved in `scope`.
 *
 * An envelope holds no exchange permit yet, so its parse first takes a slot of the shared
 * envelope-parse allowance (src/ledger/envelopes.ts), returned once the parse settled: with
 * the allowance full it is refused at once with parse_capacity_exhausted (503, Retry-After),
 * before anything is accepted, and the parse queue keeps its places for the exchanges that
 * hold a permit.
 */
export async function readEnvelope (deps: ExchangeDeps, req: IncomingMessage, scope: ExchangeScope, kind: 'exchange' | 'rpc', signal: AbortSignal): Promise<PrepareOk> {
  const body = await readBody(req, scope, deps.config.limits, signal)
  if (!deps.ledger.envelopes.tryTake()) {
    throw new SluiceError('parse_capacity_exhausted', { gate: 'parse', reason: 'envelopes', limit: deps.ledger.envelopes.max })
  }
  try {
    // The envelope is gone after this; the exchange body (re-serialised) stays reserved.
    return await prepare(deps, scope, 'chat', body, signal, kind)
  } finally {
    deps.ledger.envelopes.give()
  }
}

/** A provider error response before any byte reached the client: read a bounded excerpt
 *  (8 KiB), map it under the parse permit, never forward the provider's bytes as ours. */
async function providerFailure (deps: ExchangeDeps, scope: ExchangeScope, up: UpstreamAnswer, signal: AbortSignal): Promise<SluiceError> {
  const cap = 8192
  const parts: Buffer[] = []
  let n = 0
  try {
    await pumpChunks(up.body, (c) => {
      parts.push(c.subarray(0, cap - n))
      n += Math.min(c.length, cap - n)
      if (n >= cap) return STOP
    })
  } catch {}
  if (!up.body.destroyed) up.body.destroy()
  const retryAfter = up.headers['retry-after']
  const info = await scope.underParse(signal, () => providerErrorFromResponse(up.statusCode, Buffer.concat(parts, n), typeof retryAfter === 'string' ? retryAfter : null, deps.router.scrubber))
  const err = providerSluiceError(info)
  // A provider's own 4xx refusal of the request keeps its status: the request was refused.
  if (err.code === 'provider_error' && up.statusCode >= 400 && up.statusCode < 500) err.withStatus(up.statusCode)
  return err
}

/** The parse phase of a trace around `fn`. */
async function underParsePhase<T> (trace: ExchangeTrace, fn: () => Promise<T>): Promise<T> {
  const parse = trace.phase('translate')
  try {
    return await fn()
  } finally {
    parse.end()
  }
}

/** An answer the gateway gives itself (count_tokens without an Anthropic provider). */
function answerLocally (res: ServerResponse, rec: ExchangeRecord, body: Uint8Array, headers: Record<string, string>): void {
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(body.byteLength), ...headers })
  res.end(body)
  rec.status = 200
  rec.bytesOut = body.byteLength
}

/** Whether the request's body may be parsed in the parser pool: no declared length, or one at or above inWorkerParseBytes. */
export function bodyMayNeedThePool (req: IncomingMessage, limits: ExchangeDeps['config']['limits']): boolean {
  const declared = req.headers['content-length']
  if (declared === undefined) return true
  const n = Number(declared)
  return !Number.isFinite(n) || n >= inWorkerParseBytes(limits)
}

function isEventStream (headers: UpstreamAnswer['headers']): boolean {
  const ct = headers['content-type']
  return typeof ct === 'string' && ct.startsWith('text/event-stream')
}
