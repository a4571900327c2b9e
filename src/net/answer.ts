// A provider's answer straight from undici's dispatch(): the status, the headers, and the body
// as a light chunk source (AnswerBody), instead of undici's request() and its Readable body.
//
// Why: request() hands the body to a Node Readable (undici's BodyReadable), so every chunk is
// pushed into a stream state, emitted from it, and followed by a maybeReadMore tick; and the
// response callback runs in an AsyncResource. Measured at 96 streams (CPU per exchange, every
// thread, four processes side by side, rotated rounds): the bare pass-through written with
// dispatch() and a handler cost 0.885 [0.84..0.98] of the same pass-through written with
// request() and pipeline(); the Readable's ticks were ~5 % of all the HTTP worker allocated.
// Here a chunk goes from undici's parser to the one consumer's 'data' listener in one call.
//
// AnswerBody keeps the part of a Readable's contract that sluice's consumers use
// (src/net/chunks.ts pumpChunks, the 'close' listeners that settle an exchange and return an
// account's claim): 'data' / 'end' / 'error' / 'close' events, pause() / resume(), destroy(),
// `destroyed`, `closed`, `readableEnded`, `errored`. Its rules, as a Readable's:
//   - no 'data' before a consumer resume()s it, none after a pause(): chunks that come meanwhile
//     wait, and undici's parser is paused once 64 KiB have (a Readable's high-water mark);
//     resume() emits what waited first, on a later tick (never inside resume()), then resumes
//     undici;
//   - 'end' only once every chunk was emitted; then 'close', on a later tick;
//   - a transport failure after the headers: 'error' (to listeners, if any), then 'close';
//   - destroy() before the end aborts the request (undici closes the connection), then
//     'close'; after the end it only closes. 'close' comes exactly once, whatever happens.

import { EventEmitter } from 'node:events'
import type { IncomingHttpHeaders } from 'node:http'
import type { Dispatcher } from 'undici'

/** What relays and refusals read of a provider's answer (undici's request() ResponseData has it too). */
export interface UpstreamAnswer {
  statusCode: number
  headers: IncomingHttpHeaders
  body: AnswerSource
}

/** The chunk source contract (satisfied by AnswerBody and by a Node Readable). */
export interface AnswerSource {
  readonly destroyed: boolean
  readonly closed: boolean
  readonly readableEnded: boolean
  readonly errored: Error | null
  pause (): unknown
  resume (): unknown
  destroy (err?: Error): unknown
  on (event: string, listener: (...args: any[]) => void): unknown
  once (event: string, listener: (...args: any[]) => void): unknown
  off (event: string, listener: (...args: any[]) => void): unknown
  listenerCount (event: string): number
}

/** What aborts an answer: an AbortSignal, or an EventEmitter that emits 'abort' and carries `reason`. */
export type AbortSource = AbortSignal | (EventEmitter & { reason: unknown })

function abortedError (reason: unknown): Error {
  if (reason instanceof Error) return reason
  return Object.assign(new Error('Request aborted'), { name: 'AbortError', code: 'UND_ERR_ABORTED' })
}

export class AnswerBody extends EventEmitter implements AnswerSource {
  #controller: Dispatcher.DispatchController
  /** Chunks that came while nobody was reading, and their bytes. */
  #waiting: Buffer[] = []
  #waitingBytes = 0
  #flowing = false
  /** undici's parser paused by this body (WAITING_MAX bytes waited). */
  #paused = false
  /** A drain of #waiting is scheduled. */
  #draining = false
  /** undici reported the end; 'end' follows once #waiting is emitted. */
  #ended = false
  #endEmitted = false
  #destroyed = false
  #closed = false
  #errored: Error | null = null
  #onClose: (() => void) | null

  constructor (controller: Dispatcher.DispatchController, onClose: (() => void) | null) {
    super()
    this.#controller = controller
    this.#onClose = onClose
  }

  get destroyed (): boolean { return this.#destroyed }
  get closed (): boolean { return this.#closed }
  get readableEnded (): boolean { return this.#endEmitted }
  get errored (): Error | null { return this.#errored }

  /** Stops 'data'; chunks that come meanwhile wait (undici is paused once WAITING_MAX bytes have). */
  pause (): this {
    this.#flowing = false
    return this
  }

  resume (): this {
    if (this.#flowing || this.#destroyed) return this
    this.#flowing = true
    if (this.#waiting.length > 0 || this.#ended) {
      if (!this.#draining) { this.#draining = true; process.nextTick(drainWaiting, this) }
    } else {
      this.#resumeUndici()
    }
    return this
  }

  #resumeUndici (): void {
    if (!this.#paused) return
    this.#paused = false
    this.#controller.resume()
  }

  /** Emits what waited, in order, while flowing; then the end, or resumes undici. */
  _drain (): void {
    this.#draining = false
    while (this.#flowing && !this.#destroyed && this.#waiting.length > 0) {
      const chunk = this.#waiting.shift()!
      this.#waitingBytes -= chunk.length
      this.emit('data', chunk)
    }
    if (!this.#flowing || this.#destroyed) return
    if (this.#ended) this.#emitEnd()
    else this.#resumeUndici()
  }

  destroy (err?: Error): this {
    if (this.#destroyed) return this
    this.#destroyed = true
    this.#waiting.length = 0
    this.#waitingBytes = 0
    if (!this.#endEmitted && !this.#ended) this.#controller.abort(abortedError(err))
    if (err !== undefined) this.#fail(err)
    this.#scheduleClose()
    return this
  }

  // ---- undici's side (AnswerHandler) ----

  _push (chunk: Buffer): void {
    if (this.#destroyed) return
    if (this.#flowing && this.#waiting.length === 0) { this.emit('data', chunk); return }
    this.#waiting.push(chunk)
    this.#waitingBytes += chunk.length
    if (this.#waitingBytes >= WAITING_MAX && !this.#paused) { this.#paused = true; this.#controller.pause() }
  }

  _end (): void {
    if (this.#destroyed || this.#ended) return
    this.#ended = true
    if (this.#flowing && this.#waiting.length === 0 && !this.#draining) this.#emitEnd()
  }

  _error (err: Error): void {
    if (this.#destroyed) return
    this.#destroyed = true
    this.#waiting.length = 0
    this.#waitingBytes = 0
    this.#fail(err)
    this.#scheduleClose()
  }

  #emitEnd (): void {
    if (this.#endEmitted) return
    this.#endEmitted = true
    this.emit('end')
    this.#destroyed = true
    this.#scheduleClose()
  }

  #fail (err: Error): void {
    if (this.#errored === null) this.#errored = err
    if (this.listenerCount('error') > 0) this.emit('error', err)
  }

  #scheduleClose (): void {
    process.nextTick(closeBody, this)
  }

  _close (): void {
    if (this.#closed) return
    this.#closed = true
    const onClose = this.#onClose
    this.#onClose = null
    onClose?.()
    this.emit('close')
  }
}

/**
 * Bytes that may wait unread before undici's parser is paused: a Readable's high-water mark
 * (undici's body has 64 KiB). Not 0: a parser paused by the first unread chunk would not hear
 * the connection fail either, and a body nobody reads yet must still close when it does.
 */
const WAITING_MAX = 64 * 1024

function drainWaiting (body: AnswerBody): void { body._drain() }
function closeBody (body: AnswerBody): void { body._close() }

/**
 * undici's dispatch handler for one request: resolves at the response headers (status >= 200)
 * with an UpstreamAnswer, rejects with the transport error before them. The abort source aborts
 * the request before the headers and destroys the body after them (its reason the error).
 */
class AnswerHandler implements Dispatcher.DispatchHandler {
  readonly #resolve: (a: UpstreamAnswer) => void
  readonly #reject: (err: unknown) => void
  readonly #abort: AbortSource | null
  #controller: Dispatcher.DispatchController | null = null
  #body: AnswerBody | null = null
  #settled = false
  #reason: Error | null = null

  constructor (resolve: (a: UpstreamAnswer) => void, reject: (err: unknown) => void, abort: AbortSource | null) {
    this.#resolve = resolve
    this.#reject = reject
    this.#abort = abort
    if (abort !== null) {
      if (abort instanceof EventEmitter) abort.once('abort', this.#onAbort) // called at once when it already fired
      else if (abort.aborted) this.#reason = abortedError(abort.reason)
      else abort.addEventListener('abort', this.#onAbort, { once: true })
    }
  }

  readonly #onAbort = (): void => {
    const reason = abortedError(this.#abort?.reason)
    if (this.#body !== null) { this.#body.destroy(reason); return }
    this.#reason = reason
    this.#controller?.abort(reason)
  }

  #unlisten (): void {
    const abort = this.#abort
    if (abort === null) return
    if (abort instanceof EventEmitter) abort.off('abort', this.#onAbort)
    else abort.removeEventListener('abort', this.#onAbort)
  }

  onRequestStart (controller: Dispatcher.DispatchController): void {
    this.#controller = controller
    if (this.#reason !== null) controller.abort(this.#reason)
  }

  onResponseStart (controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    if (statusCode < 200 || this.#settled) return // 1xx: informational, the answer follows
    this.#settled = true
    this.#body = new AnswerBody(controller, () => { this.#unlisten() })
    this.#resolve({ statusCode, headers, body: this.#body })
  }

  onResponseData (_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.#body?._push(chunk)
  }

  onResponseEnd (): void {
    this.#body?._end()
  }

  onResponseError (_controller: Dispatcher.DispatchController, err: Error): void {
    if (this.#body !== null) { this.#body._error(err); return }
    if (this.#settled) return
    this.#settled = true
    this.#unlisten()
    this.#reject(err)
  }
}

/** One request on `dispatcher`: resolves at the response headers, rejects with undici's transport error. */
export function dispatchAnswer (dispatcher: Dispatcher, opts: Dispatcher.DispatchOptions, abort: AbortSource | null): Promise<UpstreamAnswer> {
  return new Promise<UpstreamAnswer>((resolve, reject) => {
    const handler = new AnswerHandler(resolve, reject, abort)
    try {
      dispatcher.dispatch(opts, handler)
    } catch (err) {
      handler.onResponseError(null as never, err as Error)
    }
  })
}
