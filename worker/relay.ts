// The relay: provider bytes to the client, exactly, at the client's pace.
//
// Streaming: each upstream chunk is pushed through the SSE framer (which only observes), its
// frames classified from bytes; the few that can carry a terminal, usage or an error are
// parsed under the parse permit; then the chunk is written to the client unchanged. The
// upstream is read only as fast as the client drains (pumpChunks + 'drain'), so a slow
// client holds at most one chunk plus the socket buffers. The first fatal (malformed or
// oversize frame, provider error event, transport failure, no terminal, budget) ends the
// stream with a signed failure tail in the client protocol's own error event, then a clean
// end; except after a provider error event that is itself its protocol's terminal (Responses
// `response.failed`, relayed whole): the stream has had its one terminal, nothing follows. The client only ever receives whole frames: an unterminated frame at the end of a
// chunk is held back until it ends, and a malformed frame is cut off where it starts; so a
// tail always begins at a frame boundary.
//
// Non-streaming: the whole answer is held (reserved, up to maxOutputBytes) and read in the
// parser pool before any byte goes out, so every failure of a non-streaming answer reaches the
// caller as the signed JSON refusal (see relayBuffered).

import type { UpstreamAnswer } from '../src/net/answer.ts'
import type { ServerResponse } from 'node:http'
import { abortCause, SluiceError, type ErrorCode } from '../src/errors.ts'
import { StreamTracker, inspectorFor, type ProtocolInspector, type StreamFailure } from '../src/protocols/index.ts'
import { SseFramer } from '../src/sse/framer.ts'
import type { AnswerOk, AnswerTranslateSpec } from '../src/json/answer.ts'
import { ROUTE_PROTOCOL, type Route } from '../src/protocols/routes.ts'
import type { Protocol } from '../src/translate/canonical.ts'
import type { ExchangeDeps, ExchangeRecord } from './deps.ts'
import { failureRecord } from './reply.ts'
import type { ExchangeScope } from './scope.ts'
import { responseHeaders, transportError } from './upstream.ts'
import { pumpChunks, STOP, type ChunkStep } from '../src/net/chunks.ts'
import { writeBody } from '../src/net/body-write.ts'

export interface Outcome { code: ErrorCode | 'ok' }

interface RelayContext {
  deps: ExchangeDeps
  rec: ExchangeRecord
  route: Route
  up: UpstreamAnswer
  res: ServerResponse
  scope: ExchangeScope
  signal: AbortSignal
  /** A translated non-streaming answer: read and rendered for the client in the parser pool. */
  translate?: { provider: Protocol; spec: AnswerTranslateSpec; headers: Record<string, string>; onKept?: (kept: NonNullable<AnswerOk['kept']>) => void }
}

/**
 * One exchange's waits for a full client socket. wait() resolves on the socket's 'drain';
 * rejects with the exchange's abort cause (client_closed) when its signal aborts or the socket
 * errs, and with client_stalled when the client read nothing for `stallMs` since that wait
 * began (a stuck client must not hold its permit forever). close() when the relay is done:
 * afterwards no listener and no timer of it is left.
 *
 * At throughput a relay waits here every chunk or two (node:http corks the socket until the
 * next tick, so a 64 KiB write reports a full buffer). So the listeners are added once, at the
 * first wait, and there is one stall timer for the exchange: each wait re-arms it
 * (`refresh()`, no allocation), and when it fires between waits it does nothing. A wait costs
 * one promise. (Per wait, a timer and three listeners, or before that AbortSignal.timeout +
 * AbortSignal.any + events.once, were a fifth of the relay's per-chunk time.)
 */
export class ClientDrain {
  readonly #res: ServerResponse
  #socket: ServerResponse['socket'] = null
  readonly #signal: AbortSignal
  readonly #stallMs: number
  #timer: NodeJS.Timeout | null = null
  #resolve: (() => void) | null = null
  #reject: ((err: SluiceError) => void) | null = null
  #closed = false

  constructor (res: ServerResponse, signal: AbortSignal, stallMs: number) {
    this.#res = res
    this.#signal = signal
    this.#stallMs = stallMs
  }

  wait (): Promise<void> {
    if (this.#closed) throw new Error('client drain: wait after close')
    if (this.#resolve !== null) throw new Error('client drain: a second wait while one is pending')
    if (this.#signal.aborted) return Promise.reject(abortCause(this.#signal))
    if (this.#timer === null) {
      this.#res.on('drain', this.#onDrain)
      // A chunk written straight on the socket (writeBody) is waited for there: the response
      // re-emits the socket's 'drain' only after a write of its own was refused.
      this.#socket = this.#res.socket ?? null
      this.#socket?.on('drain', this.#onDrain)
      this.#res.on('error', this.#onFail)
      this.#signal.addEventListener('abort', this.#onFail)
      // The timer was last armed when the pending wait (if any) began: firing, it has lasted stallMs.
      this.#timer = setTimeout(this.#onFail, this.#stallMs)
    } else {
      this.#timer.refresh()
    }
    return new Promise<void>((resolve, reject) => {
      this.#resolve = resolve
      this.#reject = reject
    })
  }

  /** Ends this exchange's waits: listeners and the timer go (a pending wait is left pending: call it only once none is). */
  close (): void {
    if (this.#closed) return
    this.#closed = true
    if (this.#timer === null) return
    clearTimeout(this.#timer)
    this.#res.off('drain', this.#onDrain)
    this.#socket?.off('drain', this.#onDrain)
    this.#res.off('error', this.#onFail)
    this.#signal.removeEventListener('abort', this.#onFail)
  }

  #settle (err: SluiceError | null): void {
    const resolve = this.#resolve
    const reject = this.#reject
    if (resolve === null || reject === null) return // no wait pending: a drain or an error between waits
    this.#resolve = null
    this.#reject = null
    if (err === null) resolve()
    else reject(err)
  }

  readonly #onDrain = (): void => { this.#settle(null) }
  readonly #onFail = (): void => { this.#settle(this.#signal.aborted ? abortCause(this.#signal) : new SluiceError('client_stalled', { stallMs: this.#stallMs })) }
}

export async function relayStream (ctx: RelayContext): Promise<Outcome> {
  const { deps, rec, up, res, scope, signal } = ctx
  const inspector: ProtocolInspector = inspectorFor(ROUTE_PROTOCOL[ctx.route])
  const tracker = new StreamTracker(inspector)
  // What the chunk being pushed completed, in stream order, processed right after push(): the
  // first `count` slots of `list`. Frame i is list.buf[i][list.start[i], list.end[i]) — in the
  // chunk itself, or in the framer's copy of a frame that spanned chunks — or, when
  // list.buf[i] is null, an oversize frame of list.oversize[i] bytes; list.at[i] is where it
  // begins in the chunk. An oversize frame is judged in its place, after the frames before it.
  // The list is taken for each chunk and given back (its slots cleared, so no chunk is kept
  // reachable) once the chunk's frames are judged: nothing is allocated per frame, per chunk
  // or per exchange for them.
  let list: FrameList = EMPTY_LIST
  let count = 0
  const framer = new SseFramer({
    onFrameAt: (buf, start, end, at) => {
      list.buf[count] = buf; list.start[count] = start; list.end[count] = end; list.at[count] = at; list.oversize[count] = 0; count++
    },
    onOversize: (bytes, at) => {
      list.buf[count] = null; list.start[count] = 0; list.end[count] = 0; list.at[count] = at; list.oversize[count] = bytes; count++
    },
  }, { maxFrameBytes: deps.config.limits.sseFrameBytes })

  res.writeHead(up.statusCode, responseHeaders(up.headers, false, rec.exchangeId))
  let bytesOut = 0
  let framesOut = 0
  let failure: SluiceError | null = null
  /** The provider's own error event (the first fatal) went out whole. */
  let inBandRelayed = false
  /** The client had the stream's terminal frame before the first fatal came. */
  let terminalBeforeFailure = false
  // The unterminated frame at the end of what was pushed is held back until it ends: the
  // client only ever receives whole frames, so it stands at a frame boundary whenever a
  // failure tail follows. (Bytes are only delayed, never altered: an incomplete frame is of
  // no use to an SSE client anyway.)
  const pending: Buffer[] = []
  let pendingBytes = 0
  const drain = new ClientDrain(res, signal, deps.config.limits.clientStallMs)
  /** The terminal frame went out corked, to leave with the end of the response (holdForEnd). */
  let heldForEnd = false

  /** Writes the first n bytes of pending + chunk, keeps the rest pending; false = backpressure. */
  const flush = (chunk: Buffer | null, n: number): boolean => {
    if (chunk !== null && pending.length === 0 && n >= 0 && n <= chunk.length) {
      // Nothing held back (the usual case): the chunk goes out as it is, or its first n bytes
      // do and the rest waits. No array op: a push after a shift() regrows the array's store,
      // which was ~4 % of all this worker allocated at 96 streams (sampled heap profile).
      if (n === chunk.length) { bytesOut += n; return writeBody(res, chunk) }
      let ok = true
      if (n > 0) { bytesOut += n; ok = writeBody(res, chunk.subarray(0, n)) }
      pending.push(n > 0 ? chunk.subarray(n) : chunk)
      pendingBytes = chunk.length - n
      return ok
    }
    if (chunk !== null) { pending.push(chunk); pendingBytes += chunk.length }
    let ok = true
    let left = n
    while (left > 0) {
      const head = pending[0]
      const out = head.length <= left ? head : head.subarray(0, left)
      if (out === head) pending.shift()
      else pending[0] = head.subarray(left)
      left -= out.length
      pendingBytes -= out.length
      bytesOut += out.length
      ok = writeBody(res, out)
    }
    return ok
  }

  // The chunk in hand and where its frames stand: set by onChunk, read by the steps below (a
  // chunk whose frames need no waiting is handled in one synchronous call, no promise made).
  let chunk: Buffer | null = null
  /** pendingBytes when the chunk came: the chunk's offsets in pending + chunk coordinates. */
  let before = 0
  /** How many bytes of pending + chunk may go out. */
  let cut = 0
  /** Frames of this chunk that go out. */
  let admitted = 0
  /** The stream's state before the frame being judged. */
  let wasFailed = false
  let wasClosed = false
  /** The frame being inspected (inspectFrame's argument: no closure per frame). */
  let inspecting = 0

  const inspectFrame = (): void => {
    const frame = list.buf[inspecting]!.subarray(list.start[inspecting], list.end[inspecting])
    try {
      tracker.apply(inspector.inspect(frame))
    } catch (err) {
      tracker.inspectFailed(err)
    }
  }

  /** Frame i, counted (and inspected): true when the chunk ends at it (its first fatal). */
  const judged = (i: number): boolean => {
    const now = failureOf(tracker)
    if (!wasFailed && now !== null) {
      terminalBeforeFailure = wasClosed
      // Keep a bad frame from the client: cut where it starts (it may have begun in
      // held-back bytes). The provider's own error event (in-band) goes out whole,
      // unless it quotes a configured provider key: then only the (scrubbed) tail does.
      // Either way nothing after it does, even when this chunk carries more: cut where
      // the next frame begins (the rest of the chunk is the held-back partial frame).
      const buf = list.buf[i]!
      if (!now.inBand || deps.router.scrubber.carriesSecret(buf.subarray(list.start[i], list.end[i]))) cut = Math.max(0, before + list.at[i])
      else {
        admitted++
        inBandRelayed = true
        if (i + 1 < count) cut = before + list.at[i + 1]
      }
      return true
    }
    if (now === null) admitted++
    return false
  }

  /**
   * The chunk's frames from `from` on, each counted and judged, the few that need it inspected
   * under the parse permit: -1 when they are done, or the index of a frame that waits for the
   * permit (taken by another exchange; frames() goes on after it once it is inspected).
   */
  const frames = (from: number): number => {
    for (let i = from; i < count && cut > 0; i++) {
      wasFailed = failureOf(tracker) !== null
      wasClosed = tracker.closed
      const buf = list.buf[i]
      if (buf === null) {
        // Over the cap: nothing of it goes out (it may have begun in held-back bytes).
        tracker.oversize(list.oversize[i])
        if (!wasFailed) {
          terminalBeforeFailure = wasClosed
          cut = Math.max(0, before + list.at[i])
        }
        return -1
      }
      const fs = list.start[i]
      const fe = list.end[i]
      if (tracker.frameAt(buf, fs, fe, inspector.classifyAt(buf, fs, fe))) {
        inspecting = i
        if (!scope.tryUnderParse(inspectFrame)) return i
      }
      if (judged(i)) return -1
    }
    return -1
  }

  /** The chunk's frames are judged: what may go out goes; STOP after a fatal, or wait for the client. */
  const sendChunk = (): ChunkStep => {
    giveFrameList(list, count)
    list = EMPTY_LIST // the list may be another relay's from now on
    const failed = failureOf(tracker)
    framesOut += admitted
    // The caller is about to see the stream's terminal event: its session may go on now.
    // (A relayed response.failed is one too: no tail follows it, see below.)
    if (tracker.closed && (failed === null || (inBandRelayed && tracker.terminal === 'failed'))) {
      scope.releaseLane()
      if (!heldForEnd) { heldForEnd = true; holdForEnd(res) }
    }
    const ok = flush(chunk, cut)
    chunk = null
    if (failed !== null) return STOP
    if (!ok) return drain.wait()
  }

  /** A frame waits for the parse permit: the rest of the chunk, asynchronously. */
  const afterPermit = async (at: number): Promise<void | typeof STOP> => {
    while (at >= 0) {
      await scope.underParse(signal, inspectFrame)
      at = judged(at) ? -1 : frames(at + 1)
    }
    return await sendChunk()
  }

  const onChunk = (data: Buffer): ChunkStep => {
    chunk = data
    count = 0
    list = takeFrameList()
    framer.push(data)
    before = pendingBytes
    // In pending + chunk coordinates: everything up to the partial frame may go out.
    cut = before + data.length - framer.partialFrameBytes
    admitted = 0
    try {
      scope.setFloating(framer.bufferedBytes, before + data.length + res.writableLength)
    } catch (err) {
      // No room to hold this chunk: none of it goes out, the stream ends here.
      // A chunk larger than the whole budget is the provider's output, not the caller's
      // request: reported as the local capacity it is, never storage_request_too_large.
      const code = SluiceError.from(err).code
      tracker.fail(code === 'storage_request_too_large' ? 'storage_budget_exhausted' : code, 'the stream needed more bytes than the storage budget had')
      cut = 0
    }
    const at = frames(0)
    return at < 0 ? sendChunk() : afterPermit(at)
  }

  try {
    try {
      await pumpChunks(up.body, onChunk)
    } finally {
      drain.close()
    }
  } catch (err) {
    const se = signal.aborted ? abortCause(signal) : transportError(err, signal)
    if (se.code === 'client_stalled') {
      // Nobody is reading: no tail could be delivered. Cut the connection.
      if (!up.body.destroyed) up.body.destroy()
      scope.setFloating(0, 0)
      res.destroy()
      deps.ledger.countRefusal(se.code)
      rec.bytesOut = bytesOut
      rec.frames = framesOut
      rec.usage = usageOf(tracker)
      rec.partial = true
      return { code: se.code }
    }
    if (se.code === 'client_closed') {
      rec.bytesOut = bytesOut
      rec.frames = framesOut
      rec.usage = usageOf(tracker)
      rec.partial = true
      return { code: 'client_closed' }
    }
    failure = se
  }
  if (!up.body.destroyed) up.body.destroy()
  // Whatever is still held back is an unfinished frame: it never reaches the client.
  pending.length = 0
  pendingBytes = 0

  let verdict
  if (tracker.failure === null && failure === null) {
    verdict = tracker.end({ trailingBytes: framer.end()?.length ?? 0 })
  } else {
    verdict = tracker.end(failure ? { error: { code: failure.code, message: failure.message } } : {})
  }
  scope.setFloating(0, 0)
  rec.bytesOut = bytesOut
  rec.frames = framesOut
  rec.usage = usageOf(tracker)
  rec.partial = verdict.partial
  rec.evidence = verdict.ok

  if (verdict.ok) {
    await endResponse(res)
    return { code: 'ok' }
  }
  const f = verdict.failure!
  // The message may quote the provider's error type and code: scrubbed like any provider text.
  const err = failure ?? new SluiceError(f.code, {}, deps.router.scrubber.text(f.message) ?? '')
  deps.ledger.countRefusal(err.code)
  if (terminalBeforeFailure && f.frame !== -1 && !f.inBand) {
    // The client already has the stream's own terminal frame: a tail would not be read.
    // (Not when the closing frame itself failed its check: it was kept back, the tail follows.)
    await endResponse(res)
    return { code: err.code }
  }
  if (inBandRelayed && tracker.terminal === 'failed') {
    // The provider's error event was its protocol's terminal (Responses response.failed), and
    // the client has it whole: a tail would be a second terminal. The failure still counts
    // (its code, no evidence). Messages `event: error`, a Chat error frame, a Responses
    // `error` event are no terminal: the signed tail follows them. (The lane went before the
    // frame did.)
    await endResponse(res)
    return { code: err.code }
  }
  const record = failureRecord(err, rec, { frames: framesOut, bytes: bytesOut }, verdict.usage)
  const tail = inspector.failureTail(record, deps.signer.sign(record), tracker.tailContext())
  scope.releaseLane()
  await endResponse(res, tail)
  return { code: err.code }
}

/**
 * Non-streaming: nothing goes out until the whole answer is held and read. The body is kept
 * (every byte reserved in the storage budget, at most limits.maxOutputBytes), then read in the
 * parser pool under the parse permit (bounded JSON checks, JSON.parse, usage: never parsed in
 * this worker's heap, src/json/answer.ts), and only then sent, at the client's pace. So a
 * provider that cuts, stalls or sends something that is not JSON costs the caller nothing it
 * has seen: this throws the failure's SluiceError and runExchange answers with the signed JSON
 * refusal. An answer over maxOutputBytes (declared or counted) is output_too_large.
 */
export async function relayBuffered (ctx: RelayContext): Promise<Outcome> {
  const { deps, rec, up, res, scope, signal } = ctx
  const limits = deps.config.limits
  const cap = limits.maxOutputBytes
  if (!isJson(up.headers)) {
    throw new SluiceError('provider_protocol_error', { reason: 'not JSON', contentType: headerExcerpt(up.headers['content-type']) }, 'the provider answered with a body that is not JSON')
  }
  const declared = contentLength(up.headers)
  if (declared !== null && declared > cap) throw tooLarge(cap, declared)
  let body: Buffer
  try {
    const held = new HeldAnswer(scope, cap, declared)
    try {
      await pumpChunks(up.body, (data) => { held.push(data) })
    } catch (err) {
      throw err instanceof SluiceError ? err : signal.aborted ? abortCause(signal) : transportError(err, signal)
    }
    const bytes = held.take()
    // The buffer is transferred to the parser thread (zero copy) and comes back.
    const result = await scope.underParse(signal, () => deps.parser.readAnswer({
      kind: 'answer',
      body: bytes,
      protocol: ctx.translate?.provider ?? ROUTE_PROTOCOL[ctx.route],
      ...(ctx.translate ? { translate: ctx.translate.spec } : {}),
      limits: { maxDepth: limits.maxJsonDepth, maxNodes: limits.maxJsonNodes },
    }, { signal }))
    if (!result.ok) throw SluiceError.from(result.error)
    if (signal.aborted) throw abortCause(signal)
    body = Buffer.from(result.body.buffer, result.body.byteOffset, result.body.byteLength)
    rec.usage = result.usage
    // The conversation store keeps the turn before the client gets any of the answer.
    if (result.kept !== undefined) ctx.translate?.onKept?.(result.kept)
  } catch (err) {
    scope.setFloating(0, 0)
    throw err
  }

  const headers = ctx.translate
    ? { 'content-type': 'application/json', ...ctx.translate.headers }
    : responseHeaders(up.headers, false, rec.exchangeId)
  res.writeHead(up.statusCode, { ...headers, 'content-length': String(body.length) })
  let bytesOut = 0
  const drain = new ClientDrain(res, signal, limits.clientStallMs)
  try {
    // Slices at the client's pace; the last one only after the session's slot is returned:
    // the caller must not hold the whole answer before that (see ExchangeScope.releaseLane).
    for (let at = 0; at < body.length; at += ANSWER_SLICE) {
      const slice = body.subarray(at, at + ANSWER_SLICE)
      if (at + slice.length === body.length) scope.releaseLane()
      const ok = res.write(slice)
      bytesOut += slice.length
      if (!ok) await drain.wait()
    }
  } catch (err) {
    const se = signal.aborted ? abortCause(signal) : SluiceError.from(err)
    scope.setFloating(0, 0)
    rec.bytesOut = bytesOut
    rec.partial = true
    // Nobody is reading (client_stalled), or nobody is there (client_closed): cut.
    if (se.code !== 'client_closed') deps.ledger.countRefusal(se.code)
    res.destroy()
    return { code: se.code }
  } finally {
    drain.close()
  }
  scope.releaseLane() // an empty body has no last slice
  rec.bytesOut = bytesOut
  rec.partial = false
  rec.evidence = true
  await endResponse(res)
  scope.setFloating(0, 0)
  return { code: 'ok' }
}

/**
 * The frames one chunk completed (see relayStream), in arrays whose capacity is kept: this
 * worker's relays take one per chunk and give it back once the chunk is judged. A relay that
 * grew its own lists anew for each exchange made ~40 KB of young garbage per 2000-event
 * stream (measured: 80 scavenges per 2000 streams in a 1 MB semi-space, against 8 without).
 * A list is taken per chunk, not per exchange, so only the chunks being judged at once hold
 * one (a chunk waits only for the parse permit or the client).
 */
interface FrameList {
  readonly buf: Array<Buffer | null>
  readonly start: number[]
  readonly end: number[]
  readonly at: number[]
  readonly oversize: number[]
}

const newFrameList = (): FrameList => ({ buf: [], start: [], end: [], at: [], oversize: [] })
/** Before the first chunk: never written (a frame is only reported inside push()). */
const EMPTY_LIST: FrameList = newFrameList()
const freeFrameLists: FrameList[] = []
/** Lists kept for reuse, and the capacity above which one is not kept (a chunk of many tiny frames). */
const FREE_LISTS_KEPT = 16
const FRAME_LIST_KEPT_CAPACITY = 2048

function takeFrameList (): FrameList {
  return freeFrameLists.pop() ?? newFrameList()
}

/** Clears the first `count` slots (no chunk stays reachable) and keeps the list for the next chunk. */
function giveFrameList (list: FrameList, count: number): void {
  if (list === EMPTY_LIST) return
  // A loop, not fill(): Array.prototype.fill is a call into the runtime (~0.3 % of the worker's CPU).
  const buf = list.buf
  for (let i = 0; i < count; i++) buf[i] = null
  if (freeFrameLists.length < FREE_LISTS_KEPT && list.buf.length <= FRAME_LIST_KEPT_CAPACITY) freeFrameLists.push(list)
}

/** A held answer goes out in slices of this size, each awaiting 'drain' when the socket is full. */
const ANSWER_SLICE = 64 * 1024

/**
 * The answer being held, its bytes reserved as the relay's floating reservation (counted in
 * sluice_stream_pending_bytes). With a content-length the whole buffer is reserved and
 * allocated once and chunks are copied in; without one the chunks are kept and joined at the
 * end (both copies reserved for that moment). Either way the result owns its ArrayBuffer, so
 * it can be transferred to the parser pool without another copy.
 */
class HeldAnswer {
  private readonly scope: ExchangeScope
  private readonly cap: number
  private buf: Buffer | null = null
  private readonly chunks: Buffer[] = []
  private n = 0

  constructor (scope: ExchangeScope, cap: number, declared: number | null) {
    this.scope = scope
    this.cap = cap
    if (declared !== null) {
      scope.setFloating(0, declared)
      this.buf = Buffer.allocUnsafeSlow(declared)
    }
  }

  push (chunk: Buffer): void {
    if (this.n + chunk.length > this.cap) throw tooLarge(this.cap, this.n + chunk.length)
    if (this.buf !== null) {
      if (this.n + chunk.length > this.buf.length) {
        throw new SluiceError('provider_protocol_error', { reason: 'longer than its content-length', contentLength: this.buf.length }, 'the provider sent more bytes than its content-length')
      }
      chunk.copy(this.buf, this.n)
    } else {
      this.scope.setFloating(0, this.n + chunk.length)
      this.chunks.push(chunk)
    }
    this.n += chunk.length
  }

  /** The whole answer, in a buffer of its own. */
  take (): Buffer {
    if (this.buf !== null) {
      // undici refuses a body shorter than its content-length; this is only a second check.
      if (this.n !== this.buf.length) throw new SluiceError('provider_protocol_error', { reason: 'shorter than its content-length', contentLength: this.buf.length }, 'the provider sent fewer bytes than its content-length')
      return this.buf
    }
    this.scope.setFloating(0, 2 * this.n)
    const out = Buffer.allocUnsafeSlow(this.n)
    let at = 0
    for (const c of this.chunks) { c.copy(out, at); at += c.length }
    this.chunks.length = 0
    this.scope.setFloating(0, this.n)
    return out
  }
}

function tooLarge (cap: number, bytes: number): SluiceError {
  return new SluiceError('output_too_large', { limit: cap, bytes }, `the provider's answer is larger than this gateway holds (limits.maxOutputBytes ${cap})`)
}

function contentLength (headers: UpstreamAnswer['headers']): number | null {
  const v = headers['content-length']
  return typeof v === 'string' && /^\d{1,15}$/.test(v) ? Number(v) : null
}

/** A provider header value for a refusal's details: bounded, never a provider's essay. */
export function headerExcerpt (v: string | string[] | undefined): string | null {
  if (v === undefined) return null
  const s = Array.isArray(v) ? v.join(', ') : v
  return s.length > 64 ? s.slice(0, 64) + '…' : s
}

function isJson (headers: UpstreamAnswer['headers']): boolean {
  const ct = headers['content-type']
  return typeof ct === 'string' && /^application\/(.+\+)?json\b/i.test(ct)
}

/** A fresh read of the tracker's first fatal (a call, so no stale type narrowing). */
function failureOf (tracker: StreamTracker): StreamFailure | null {
  return tracker.failure
}

function usageOf (tracker: StreamTracker): Record<string, number> | null {
  const u = tracker.usage
  return u ? { ...u } as Record<string, number> : null
}

/**
 * The stream's terminal frame is about to be written: the client socket is corked once more, so
 * that the frame leaves together with the end of the response (the chunked encoding's last
 * chunk), which res.end() writes and then uncorks fully. One send instead of two for the
 * client's last read, which it would otherwise wake for twice. The provider's body usually ends
 * in the same turn of the loop as its terminal frame; if it does not (a provider that keeps the
 * response open after its terminal), the frame is not held past this turn: setImmediate
 * uncorks. Uncorking a socket that end() already uncorked, or that a later exchange on the same
 * connection corked for the same reason, only sends sooner.
 */
export function holdForEnd (res: ServerResponse): void {
  // A non-blocking exchange's sink (worker/sink.ts) stands in for the response: no socket.
  const socket = res.socket as ServerResponse['socket'] | undefined
  if (socket === null || socket === undefined || res.writableEnded) return
  socket.cork()
  setImmediate(uncorkHeld, socket)
}

function uncorkHeld (socket: NonNullable<ServerResponse['socket']>): void {
  if (socket.writableCorked > 0) socket.uncork()
}

/** Ends the response (optionally with a last chunk) and waits for it to be flushed or closed. */
export async function endResponse (res: ServerResponse, last?: Buffer): Promise<void> {
  if (res.destroyed) return
  await new Promise<void>((resolve) => {
    res.once('close', resolve)
    res.end(last, () => resolve())
  })
}
