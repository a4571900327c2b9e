// HTTP helpers shared by the client: reading the gateway's answers, and the body wrapper that
// releases a session reservation exactly once.
//
// releasingResponse(res, done) returns a Response with the same status, headers (and url)
// whose body is a pull-through ReadableStream over the original one; with releaseOnAbort(),
// which the session wires before fetch is even called, `release` runs on the first of:
//   - the body's last read (done)            blocking completion
//   - a read that fails                      the connection broke or the request was aborted
//   - cancel() of the body                   the consumer gave up (SDKs cancel unread bodies)
//   - the signal aborting                    the caller's abort, even when nobody reads again
//   - no body at all                         at once
//   - the body being garbage-collected       a body nobody reads or cancels (a safety net:
//                                            late, but the slot is not lost for good)
// (fetch itself rejecting is the session's own catch.) `release` must be idempotent (the
// session's is): several of these may fire. The wrapper has highWaterMark 0, so it reads from
// the network only when its consumer reads: no buffering is added and backpressure is the
// original stream's.

import { SluiceRequestError, SluiceResponseError, type SluiceErrorBody } from './errors.ts'

/** `Retry-After` as seconds (delta-seconds or an HTTP date); null when absent or unreadable. */
export function retryAfterSeconds (value: string | null, now = Date.now()): number | null {
  if (value === null) return null
  const v = value.trim()
  if (/^\d+$/.test(v)) return Number(v)
  const at = Date.parse(v)
  if (Number.isNaN(at)) return null
  return Math.max(0, Math.ceil((at - now) / 1000))
}

function isObject (v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

/** A non-2xx answer as a SluiceRequestError (reads the body). */
export async function refusal (res: Response): Promise<SluiceRequestError> {
  let text = ''
  try {
    text = await res.text()
  } catch {}
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {}
  const body: SluiceErrorBody = isObject(parsed) && typeof parsed.code === 'string'
    ? { ...parsed, code: parsed.code, error: typeof parsed.error === 'string' ? parsed.error : `HTTP ${res.status}` }
    : { code: `http_${res.status}`, error: text.slice(0, 1000) || res.statusText || `HTTP ${res.status}` }
  const fromBody = typeof body.retryAfterSeconds === 'number' ? body.retryAfterSeconds : null
  return new SluiceRequestError(res.status, body, retryAfterSeconds(res.headers.get('retry-after')) ?? fromBody)
}

/** A 2xx answer's JSON; a body that is not JSON is a SluiceResponseError. */
export async function readJson (res: Response, what: string): Promise<unknown> {
  const text = await res.text()
  try {
    return JSON.parse(text)
  } catch (err) {
    throw new SluiceResponseError(res.status, `${what}: the answer (HTTP ${res.status}) is not JSON`, err)
  }
}

export async function readObject (res: Response, what: string): Promise<Record<string, unknown>> {
  const v = await readJson(res, what)
  if (!isObject(v)) throw new SluiceResponseError(res.status, `${what}: the answer (HTTP ${res.status}) is not a JSON object`)
  return v
}

const unread = new FinalizationRegistry<() => void>((release) => release())

/**
 * `release` wrapped to also run when `signal` aborts (from now on); the returned function
 * releases and stops listening. Both may run any number of times: `release` must be idempotent.
 */
export function releaseOnAbort (release: () => void, signal: AbortSignal | null): () => void {
  const done = (): void => {
    signal?.removeEventListener('abort', done)
    release()
  }
  if (signal?.aborted === true) done()
  else signal?.addEventListener('abort', done, { once: true })
  return done
}

/** `res` with a body that calls `done` when it ends, errors, is cancelled or is collected unread. */
export function releasingResponse (res: Response, done: () => void): Response {
  if (res.body === null) {
    done()
    return res
  }
  const reader = res.body.getReader()
  const body = new ReadableStream<Uint8Array>({
    async pull (controller) {
      let r: Awaited<ReturnType<typeof reader.read>>
      try {
        r = await reader.read()
      } catch (err) {
        done()
        throw err
      }
      if (r.done) {
        done()
        controller.close()
      } else {
        controller.enqueue(r.value)
      }
    },
    cancel (reason) {
      done()
      return reader.cancel(reason)
    },
  }, { highWaterMark: 0 })
  const out = new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers })
  Object.defineProperty(out, 'url', { value: res.url })
  Object.defineProperty(out, 'redirected', { value: res.redirected })
  unread.register(body, done)
  return out
}
