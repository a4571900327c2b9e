// A provider body's chunks (src/net/answer.ts AnswerBody, or any Readable), one at a time,
// exactly as they arrived, handed to a callback from the stream's own 'data' event: what `for await (const c of body)` gives, without its copies
// and without a promise per chunk.
//
// Why not the stream's own async iterator: it calls `body.read()`, which hands over everything
// buffered so far as ONE buffer, so whenever two or more socket reads queued up while the relay
// was busy (the usual case at throughput) it concatenates them into a fresh copy. Measured in
// the HTTP worker at throughput (8 streams of 2000 events): that memcpy was the relay's
// largest self time after the socket writes, and every copy is one more external ArrayBuffer,
// which drives V8's external-memory GCs (full mark-compacts, 18 per 30 rounds against 6).
// In flowing mode a Readable emits its buffers one by one and never joins them.
//
// Why a callback and not an async generator over those 'data' events (what this file had
// before): a generator costs, per chunk, its next() promise, its result object, the promise
// it waits on and a pause()/resume() pair (each resume is a nextTick, each paused push one
// more); measured in the HTTP worker relaying 96 streams, that was about a quarter of all it
// allocated per exchange. Here a chunk the handler finishes synchronously costs nothing: the
// body keeps flowing, as a pipe() would. When the handler has to wait (the client's socket is
// full, the parse permit is taken), it returns a promise and the body is paused until that
// settles: nothing is read ahead beyond the chunk in hand (plus what the stream itself buffers
// up to its high-water mark), the backpressure a `for await` loop has.
//
// Semantics kept from the iterator: chunks in order, never two handlers at once; an 'error'
// rejects (once the handler in progress, if any, has settled); a stream destroyed without
// 'end' rejects with ERR_STREAM_PREMATURE_CLOSE; a handler that throws, rejects or returns
// STOP ends the pump and destroys the body, as the iterator's destroyOnReturn does on leaving
// the loop early.

import type { AnswerSource } from './answer.ts'

/** A chunk handler's "no more": the pump resolves and the body is destroyed. */
export const STOP: unique symbol = Symbol('stop')

/** What a chunk handler returns: nothing (the next chunk may come), STOP, or a promise of either. */
export type ChunkStep = void | typeof STOP | Promise<void | typeof STOP>

function ignore (): void {}

function prematureClose (): Error {
  return Object.assign(new Error('Premature close'), { code: 'ERR_STREAM_PREMATURE_CLOSE' })
}

/**
 * Calls `onChunk` for each chunk of `body`, in order, one at a time. Resolves when the body
 * ended (or a handler returned STOP), rejects with the body's error, a premature close, or what
 * a handler threw.
 */
export function pumpChunks (body: AnswerSource, onChunk: (chunk: Buffer) => ChunkStep): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    /** A handler's promise is pending: the body is paused. */
    let busy = false
    let done = false
    let ended = false
    let failed: { error: unknown } | null = null
    /** Chunks that came while busy (a stream should not emit any once paused; kept in order if it does). */
    const queue: Buffer[] = []

    const finish = (error: { error: unknown } | null): void => {
      if (done) return
      done = true
      body.off('data', onData)
      body.off('end', onEnd)
      body.off('error', onError)
      body.off('close', onClose)
      // An error the body emits from now on (undici aborting it after the consumer left) has
      // nobody to reach; unheard, it would be an uncaught exception.
      if (body.listenerCount('error') === 0) body.on('error', ignore)
      if (error !== null || !ended) { if (!body.destroyed) body.destroy() }
      if (error !== null) reject(error.error)
      else resolve()
    }
    /** After a chunk: what happened meanwhile decides (more chunks, an error, the end). */
    const settle = (): void => {
      while (!busy && !done && queue.length > 0) run(queue.shift()!)
      if (busy || done) return
      if (failed !== null) finish(failed)
      else if (ended) finish(null)
      else body.resume()
    }
    const run = (chunk: Buffer): void => {
      let step: ChunkStep
      try {
        step = onChunk(chunk)
      } catch (error) {
        finish({ error })
        return
      }
      if (step === undefined) return
      if (step === STOP) { finish(null); return }
      busy = true
      body.pause()
      step.then(stepDone, stepFailed)
    }
    // One handler's promise at a time: the same two callbacks serve every wait.
    const stepDone = (v: void | typeof STOP): void => {
      busy = false
      if (v === STOP) finish(null)
      else settle()
    }
    const stepFailed = (error: unknown): void => {
      busy = false
      finish({ error })
    }
    const onData = (chunk: Buffer): void => {
      if (done) return
      if (busy || queue.length > 0) { queue.push(chunk); body.pause(); return }
      run(chunk)
    }
    const onEnd = (): void => { ended = true; if (!busy && queue.length === 0) finish(null) }
    const onError = (error: unknown): void => {
      if (failed === null) failed = { error }
      if (!busy) finish(failed)
    }
    const onClose = (): void => {
      if (!ended && failed === null) failed = { error: prematureClose() }
      if (!busy) settle()
    }

    if (body.readableEnded) { ended = true; finish(null); return }
    if (body.destroyed) { failed = { error: body.errored ?? prematureClose() }; finish(failed); return }
    body.on('data', onData)
    body.on('end', onEnd)
    body.on('error', onError)
    body.on('close', onClose)
    body.resume()
  })
}
