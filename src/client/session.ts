// One session of the client SDK: its local reservation count and every way to send it work.
//
// The count is an early-failure guard (DESIGN.md "Sessions"): the server's session lane is the
// authority. A reservation is taken synchronously before anything is sent; at the limit the
// call fails with PendingPromptLimitError and sends nothing. Each reservation is a `release`
// closure that decrements the count the first time it runs and never again, so any number of
// end paths may race to call it.
//
// What takes a reservation, and what releases it:
//   fetch (bound; for SDKs)   a POST to /v1/chat/completions, /v1/responses, /v1/messages or
//                             /v1/messages/count_tokens (the routes that enter the gateway's
//                             session lane; any query string). Other requests (GET /v1/models)
//                             only get the headers. Released when the response body
//                             is fully read, errors or is cancelled, when the request's signal
//                             aborts, at once when there is no body, when fetch rejects
//                             (http.ts releasingResponse), or late when the body is
//                             garbage-collected unread.
//   prompt()                  the same, through fetch: the body is read to its end (or the read
//                             fails) before prompt() returns or throws.
//   submit()                  reserved before the POST to /v1/sessions/:id/exchanges; a non-202,
//                             a network failure or an abort before acceptance releases at once;
//                             after the 202 the reservation follows the exchange in the Watch
//                             (watch.ts) until turn_complete, turn_error, the caller's abort or
//                             the loss of the event stream.
// events() and cancel() take no reservation.
//
// A signal that is already aborted is refused before counting (nothing is reserved, nothing
// is sent). submit()'s abort while its POST is in flight rejects at once and releases; if the
// POST then turns out accepted, the SDK asks the server to cancel that exchange.

import { PendingPromptLimitError, SluiceResponseError } from './errors.ts'
import { isEventStream, readEvents, type SessionEvent } from './events.ts'
import { readObject, refusal, releaseOnAbort, releasingResponse } from './http.ts'
import { Watch, type TurnResult } from './watch.ts'

export type Route = 'chat' | 'responses' | 'messages'

export const ROUTE_PATHS: Readonly<Record<Route, string>> = {
  chat: '/v1/chat/completions',
  responses: '/v1/responses',
  messages: '/v1/messages',
}

/** The routes the gateway puts in a session lane (count_tokens too: it is an exchange). */
const COUNTED_PATHS = [...Object.values(ROUTE_PATHS), '/v1/messages/count_tokens']

type FetchFn = (input: string | URL | Request, init?: RequestInit) => Promise<Response>

/** What a session needs from its client (internal). */
export interface SessionConfig {
  /** Without a trailing slash. */
  baseURL: string
  apiKey: string | undefined
  limit: number | null
  fetch: FetchFn
  eventStreamRetries: number
}

export interface PromptOptions { signal?: AbortSignal }
export interface SubmitOptions { signal?: AbortSignal }
export interface EventsOptions { lastEventId?: string; signal?: AbortSignal }
export interface Submitted {
  exchangeId: string
  /**
   * The 202's `lastEventId`: every event of this exchange comes after it, so
   * `events({ lastEventId })` sees all of them (null when the gateway did not say).
   */
  lastEventId: string | null
  /**
   * Settles when the exchange ends: TurnResult on turn_complete; SluiceTurnError on turn_error;
   * the signal's reason on abort; SluiceStreamError when the event stream is lost. It has a
   * handler attached already, so leaving it unobserved never raises an unhandled rejection.
   */
  result: Promise<TurnResult>
}

function isCounted (input: string | URL | Request, method: string): boolean {
  if (method !== 'POST') return false
  let path: string
  try {
    path = new URL(input instanceof Request ? input.url : input).pathname
  } catch {
    return false
  }
  return COUNTED_PATHS.some((p) => path.endsWith(p))
}

function routePath (route: Route): string {
  const p = ROUTE_PATHS[route]
  if (p === undefined || !Object.hasOwn(ROUTE_PATHS, route)) throw new TypeError(`unknown route ${JSON.stringify(route)}: expected 'chat', 'responses' or 'messages'`)
  return p
}

function checkBody (body: unknown): void {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new TypeError('the request body must be a JSON object')
}

/** Rejects with the signal's reason when it aborts first; `late` gets the value that came too late. */
function abortable<T> (p: Promise<T>, signal: AbortSignal | undefined, late: (value: T) => void): Promise<T> {
  if (signal === undefined) return p
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason)
    signal.addEventListener('abort', onAbort, { once: true })
    p.then((v) => {
      signal.removeEventListener('abort', onAbort)
      if (signal.aborted) late(v)
      else resolve(v)
    }, (err) => {
      signal.removeEventListener('abort', onAbort)
      reject(err)
    })
  })
}

export class SluiceSession {
  readonly id: string
  #cfg: SessionConfig
  #count = 0
  #watch: Watch | null = null

  constructor (id: string, cfg: SessionConfig) {
    this.id = id
    this.#cfg = cfg
  }

  /** Reservations this SDK holds for the session (prompts sent or being sent, not yet released). */
  get pending (): number { return this.#count }

  /**
   * A fetch for this session, for the official SDKs or direct use: adds `x-session-id`, and
   * `authorization: Bearer <apiKey>` when the client has a key and the request carries neither
   * `authorization` nor `x-api-key`; reserves for the prompt routes (see the file comment).
   */
  readonly fetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const req = input instanceof Request ? input : null
    const headers = new Headers(init?.headers ?? req?.headers)
    headers.set('x-session-id', this.id)
    const key = this.#cfg.apiKey
    if (key !== undefined && !headers.has('authorization') && !headers.has('x-api-key')) headers.set('authorization', `Bearer ${key}`)
    const method = (init?.method ?? req?.method ?? 'GET').toUpperCase()
    const signal = init?.signal ?? req?.signal ?? null
    const next: RequestInit = { ...init, headers }
    if (!isCounted(input, method) || signal?.aborted === true) return this.#cfg.fetch(input, next)
    const release = releaseOnAbort(this.#reserve(), signal)
    let res: Response
    try {
      res = await this.#cfg.fetch(input, next)
    } catch (err) {
      release()
      throw err
    }
    return releasingResponse(res, release)
  }

  /**
   * A blocking prompt: POSTs `body` to the route and returns the parsed JSON answer. A non-2xx
   * answer throws SluiceRequestError; a 2xx that is not JSON throws SluiceResponseError. For a
   * streaming body use `fetch` (or an SDK over it) or submit().
   */
  async prompt (route: Route, body: object, opts: PromptOptions = {}): Promise<unknown> {
    const path = routePath(route)
    checkBody(body)
    if ((body as { stream?: unknown }).stream === true) throw new TypeError('prompt() reads one JSON answer; for stream: true use session.fetch (or an SDK over it) or submit()')
    const res = await this.fetch(this.#cfg.baseURL + path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify(body),
      signal: opts.signal,
    })
    if (!res.ok) throw await refusal(res)
    const text = await res.text()
    try {
      return JSON.parse(text)
    } catch (err) {
      throw new SluiceResponseError(res.status, `${path}: the answer (HTTP ${res.status}) is not JSON`, err)
    }
  }

  /**
   * A non-blocking prompt: resolves once the gateway has accepted the exchange into the
   * session's lane (202), with its id and a promise of its end.
   */
  async submit (route: Route, body: object, opts: SubmitOptions = {}): Promise<Submitted> {
    routePath(route)
    checkBody(body)
    const { signal } = opts
    signal?.throwIfAborted()
    const release = this.#reserve()
    const watch = this.#watching()
    try {
      const accepted = await abortable(this.#accept(watch, route, body), signal, (a) => this.#cancelQuietly(a.exchangeId))
      const { exchangeId } = accepted
      const result = watch.track(exchangeId, release, signal, accepted.lastEventId)
      result.catch(() => {})
      return { exchangeId, lastEventId: accepted.lastEventId, result }
    } catch (err) {
      release()
      throw err
    } finally {
      watch.posting--
      watch.maybeStop()
    }
  }

  /**
   * The session's event stream, as sent by the server (one connection, no reconnect: pass the
   * last event's `id` as `lastEventId` to resume). A non-2xx answer throws SluiceRequestError.
   */
  async * events (opts: EventsOptions = {}): AsyncGenerator<SessionEvent, void, undefined> {
    const res = await this.#connect(opts.lastEventId ?? null, opts.signal)
    yield * readEvents(res)
  }

  /** Asks the gateway to cancel an exchange; true when it was still running or queued. */
  async cancel (exchangeId: string): Promise<boolean> {
    const res = await this.#request('POST', `${this.#sessionPath()}/exchanges/${encodeURIComponent(exchangeId)}/cancel`, {})
    if (!res.ok) throw await refusal(res)
    const body = await readObject(res, 'cancel')
    return body.cancelled === true
  }

  #reserve (): () => void {
    const limit = this.#cfg.limit
    if (limit !== null && this.#count >= limit) throw new PendingPromptLimitError(this.id, limit, this.#count)
    this.#count++
    let held = true
    return () => {
      if (!held) return
      held = false
      this.#count--
    }
  }

  #sessionPath (): string {
    return `/v1/sessions/${encodeURIComponent(this.id)}`
  }

  /** A request of the SDK's own (no reservation): auth and session headers. */
  #request (method: string, path: string, opts: { headers?: Record<string, string>, body?: unknown, signal?: AbortSignal }): Promise<Response> {
    const headers = new Headers(opts.headers)
    headers.set('x-session-id', this.id)
    if (this.#cfg.apiKey !== undefined) headers.set('authorization', `Bearer ${this.#cfg.apiKey}`)
    let body: string | undefined
    if (opts.body !== undefined) {
      headers.set('content-type', 'application/json')
      body = JSON.stringify(opts.body)
    }
    return this.#cfg.fetch(this.#cfg.baseURL + path, { method, headers, body, signal: opts.signal })
  }

  async #connect (lastEventId: string | null, signal: AbortSignal | undefined): Promise<Response> {
    const headers: Record<string, string> = { accept: 'text/event-stream' }
    if (lastEventId !== null) headers['last-event-id'] = lastEventId
    const res = await this.#request('GET', `${this.#sessionPath()}/events`, { headers, signal })
    if (!res.ok) throw await refusal(res)
    if (!isEventStream(res)) {
      res.body?.cancel().catch(() => {})
      throw new SluiceResponseError(res.status, `session events: the answer is ${res.headers.get('content-type') ?? 'untyped'}, not text/event-stream`)
    }
    return res
  }

  /**
   * Waits for the event stream, POSTs the exchange, returns its id once accepted (202), and
   * the 202's `lastEventId` (every event of the exchange comes after it) when given.
   */
  async #accept (watch: Watch, route: Route, body: object): Promise<{ exchangeId: string, lastEventId: string | null }> {
    await watch.ready
    const res = await this.#request('POST', `${this.#sessionPath()}/exchanges`, { headers: { accept: 'application/json' }, body: { route, body } })
    if (res.status !== 202) {
      if (res.ok) {
        res.body?.cancel().catch(() => {})
        throw new SluiceResponseError(res.status, `submit: expected 202 Accepted, got HTTP ${res.status}`)
      }
      throw await refusal(res)
    }
    const answer = await readObject(res, 'submit')
    if (typeof answer.exchangeId !== 'string' || answer.exchangeId === '') throw new SluiceResponseError(res.status, 'submit: the 202 answer has no exchangeId')
    const after = answer.lastEventId
    const lastEventId = (typeof after === 'number' && Number.isSafeInteger(after) && after >= 0) || (typeof after === 'string' && /^\d+$/.test(after)) ? String(after) : null
    return { exchangeId: answer.exchangeId, lastEventId }
  }

  #cancelQuietly (exchangeId: string): void {
    this.cancel(exchangeId).catch(() => {})
  }

  /** The running Watch (or a new one), with this caller counted in `posting`. */
  #watching (): Watch {
    let w = this.#watch
    if (w === null || w.stopped) {
      w = new Watch({
        connect: (lastEventId, signal) => this.#connect(lastEventId, signal),
        cancel: (id) => this.#cancelQuietly(id),
        detach: (watch) => { if (this.#watch === watch) this.#watch = null },
        retries: this.#cfg.eventStreamRetries,
      })
      this.#watch = w
    }
    w.posting++
    return w
  }
}
