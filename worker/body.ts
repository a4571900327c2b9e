// Reading a request body with a byte cap, every byte reserved against the aggregate budget
// before it is held. The body arrives in one ArrayBuffer sized to it, ready to be
// transferred (not copied) to the parser pool.
//
// Two deadlines bound the read, because the exchange permit (and lane slot, turn, bytes) is
// taken before the body is read: no byte for `bodyIdleMs`, or not complete `bodyReadMs` after
// the read began, and the read fails with body_timeout (408). The request is then only
// paused, never destroyed: the refusal can still be written on its socket, and the reply
// closes the connection (reply.ts closeIfUnread), so the rest of the body is never read.
// Without these, fastify's requestTimeout (0) and clientStallMs (writes only) let a body that
// stops arriving hold its permit forever.

import type { IncomingMessage } from 'node:http'
import { SluiceError } from '../src/errors.ts'
import type { ExchangeScope } from './scope.ts'

export interface BodyLimits {
  readonly maxBodyBytes: number
  readonly bodyIdleMs: number
  readonly bodyReadMs: number
}

export async function readBody (req: IncomingMessage, scope: ExchangeScope, limits: BodyLimits, signal: AbortSignal): Promise<Uint8Array> {
  const maxBytes = limits.maxBodyBytes
  const declared = req.headers['content-length']
  if (declared !== undefined) {
    const n = declaredLength(declared, maxBytes)
    scope.reserve(n)
    const body = new DeclaredBody(n)
    // Node's parser takes the rest of the packet in hand (the body, when it came with the
    // headers) after the 'request' event returns, and before this microtask runs.
    if (req.readableLength < n) await null
    await pump(req, signal, limits, body.push, n)
    return body.done()
  }
  // Chunked: reserve as chunks arrive, then one exact-size copy (reserved too, while both exist).
  const chunks: Buffer[] = []
  let total = 0
  await pump(req, signal, limits, (chunk) => {
    total += chunk.byteLength
    if (total > maxBytes) throw new SluiceError('payload_too_large', { limit: maxBytes })
    scope.reserve(chunk.byteLength)
    chunks.push(chunk)
  })
  scope.reserve(total)
  const out = new Uint8Array(new ArrayBuffer(total))
  let at = 0
  for (const c of chunks) { out.set(c, at); at += c.byteLength }
  chunks.length = 0
  scope.unreserve(total)
  return out
}

/**
 * Whether the request's body may still be on its way into the request's buffer: nothing of it
 * there yet, the request not complete. A body that came in the packet of its headers is pushed
 * by Node's parser when the 'request' event returns, before the next microtask.
 */
export function bodyNotInHand (req: IncomingMessage): boolean {
  return req.readableLength === 0 && !req.complete
}

/**
 * readBody without a promise, for a body already all in hand: with a Content-Length, every
 * declared byte in the request's buffer (or the request complete), the caller still there. Its
 * bytes are reserved and read out as readBody would (the same refusals, thrown); null, nothing
 * reserved, when the body is not all there, and then readBody reads it. An exchange whose body
 * came with its headers reads it here one microtask after the 'request' event (runExchange),
 * without readBody's own promise and its hand-offs.
 */
export function readBodyNow (req: IncomingMessage, scope: ExchangeScope, limits: BodyLimits, signal: AbortSignal): Uint8Array | null {
  const declared = req.headers['content-length']
  if (declared === undefined || signal.aborted || req.destroyed || !allInHand(req, Number(declared))) return null
  const n = declaredLength(declared, limits.maxBodyBytes)
  scope.reserve(n)
  const body = new DeclaredBody(n)
  drainNow(req, body.push)
  return body.done()
}

/** A Content-Length as a byte count, or its refusal: not a count, or over the cap. */
function declaredLength (declared: string, maxBytes: number): number {
  const n = Number(declared)
  if (!Number.isSafeInteger(n) || n < 0) throw new SluiceError('invalid_request', { header: 'content-length' }, 'invalid Content-Length')
  if (n > maxBytes) throw new SluiceError('payload_too_large', { limit: maxBytes, declared: n })
  return n
}

/** A body of `n` declared bytes, copied into one buffer of that size as its chunks come. */
class DeclaredBody {
  readonly #out: Uint8Array
  #at = 0
  constructor (n: number) { this.#out = new Uint8Array(new ArrayBuffer(n)) }

  /** One chunk in; a body longer than declared is refused. */
  readonly push = (chunk: Buffer): void => {
    if (this.#at + chunk.byteLength > this.#out.byteLength) throw new SluiceError('invalid_request', { header: 'content-length' }, 'the body is longer than its Content-Length')
    this.#out.set(chunk, this.#at)
    this.#at += chunk.byteLength
  }

  /** The body, once it ended: shorter than declared, the caller went away (client_closed). */
  done (): Uint8Array {
    if (this.#at !== this.#out.byteLength) throw new SluiceError('client_closed', { received: this.#at, declared: this.#out.byteLength })
    return this.#out
  }
}

/** Every byte of the body in the request's buffer (or the request complete): see drainBuffered. */
function allInHand (req: IncomingMessage, declared: number): boolean {
  return req.complete || req.readableLength === declared
}

/**
 * A body all in the request's buffer when its read begins: complete (the exchange waited for
 * its permit or its lane while Node's parser took the rest and pushed its end), or every
 * declared byte there (it came with the headers: Node's parser never hands over more than
 * Content-Length, and its end of message comes later). It is read out synchronously, with no
 * listeners, no deadline timers and no 'data' turn. A request whose end is still to come is
 * resumed, as a finished pump leaves it, so that end comes and it closes as it would have.
 * A read waits for this one microtask only: waiting a loop phase for Node to parse the body
 * cost more at 96 streams than it saved (docs/benchmarks.md).
 */
function drainBuffered (req: IncomingMessage, onChunk: (chunk: Buffer) => void): Promise<void> {
  try {
    drainNow(req, onChunk)
  } catch (err) {
    return Promise.reject(SluiceError.from(err))
  }
  return Promise.resolve()
}

/** drainBuffered's read, synchronously: a throw of `onChunk` leaves the request paused. */
function drainNow (req: IncomingMessage, onChunk: (chunk: Buffer) => void): void {
  for (let chunk = req.read() as Buffer | null; chunk !== null; chunk = req.read() as Buffer | null) onChunk(chunk)
  if (!req.complete) req.resume()
}

/**
 * Feeds each chunk of `req` to `onChunk` (synchronously; a throw ends the read with that
 * error) until the body ends. Rejects with client_closed when the caller goes away or the
 * signal aborts, and body_timeout at either deadline. Settles exactly once; every listener
 * and timer is removed when it does, and a request it failed on is left paused. `declared` is the
 * Content-Length (-1 without one): with all of it buffered, the body is read out at once.
 */
function pump (req: IncomingMessage, signal: AbortSignal, limits: BodyLimits, onChunk: (chunk: Buffer) => void, declared = -1): Promise<void> {
  if (signal.aborted) return Promise.reject(new SluiceError('client_closed'))
  if (req.readableEnded) return Promise.resolve()
  // The caller went away before the read began, complete or not: nothing of it is read (its
  // 'close' has been and gone, and no listener below would hear it).
  if (req.destroyed) return Promise.reject(new SluiceError('client_closed'))
  if (allInHand(req, declared)) return drainBuffered(req, onChunk)
  return new Promise<void>((resolve, reject) => {
    let received = 0
    let settled = false
    const finish = (err: SluiceError | null): void => {
      if (settled) return
      settled = true
      clearTimeout(idle)
      clearTimeout(deadline)
      req.off('data', onData)
      req.off('end', onEnd)
      req.off('error', onError)
      req.off('close', onClose)
      signal.removeEventListener('abort', onAbort)
      if (err) { req.pause(); reject(err) } else resolve()
    }
    const timeout = (reason: 'idle' | 'deadline', limitMs: number) => () => finish(new SluiceError('body_timeout', { reason, limitMs, received }))
    const onData = (chunk: Buffer): void => {
      if (settled) return
      received += chunk.byteLength
      idle.refresh()
      try {
        onChunk(chunk)
      } catch (err) {
        finish(SluiceError.from(err))
      }
    }
    const onEnd = (): void => finish(req.readableAborted || signal.aborted ? new SluiceError('client_closed') : null)
    const onError = (err: Error): void => finish(err instanceof SluiceError ? err : new SluiceError('client_closed', { cause: (err as { code?: string }).code ?? 'aborted' }))
    // 'close' before 'end': the caller went away mid-body.
    const onClose = (): void => { if (!req.readableEnded) finish(new SluiceError('client_closed')) }
    const onAbort = (): void => finish(new SluiceError('client_closed'))
    const idle = setTimeout(timeout('idle', limits.bodyIdleMs), limits.bodyIdleMs)
    const deadline = setTimeout(timeout('deadline', limits.bodyReadMs), limits.bodyReadMs)
    req.on('data', onData)
    req.once('end', onEnd)
    req.once('error', onError)
    req.once('close', onClose)
    signal.addEventListener('abort', onAbort, { once: true })
    req.resume()
  })
}
