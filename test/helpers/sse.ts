// A small SSE reader for behaviour tests: the gateway's session events stream
// (GET /v1/sessions/:id/events) and the blocking routes' `text/event-stream` bodies.
// Frames are cut on blank lines; `id:`, `event:` and `data:` fields are read as the
// EventSource rules say (one leading space dropped, data lines joined with "\n"); comment
// frames (`: ping`) are counted, not returned.

import { Agent, getGlobalDispatcher, request, setGlobalDispatcher, type Dispatcher } from 'undici'

export interface SseEvent {
  /** The `id:` field, null when the frame had none. */
  id: string | null
  /** The `event:` field, null when the frame had none. */
  event: string | null
  data: string
}

/** Cuts SSE text into frames; feed it chunks, read `take()`. */
export class SseParser {
  private buf = ''
  private out: SseEvent[] = []
  comments = 0

  push (chunk: string): void {
    this.buf += chunk
    for (;;) {
      const m = /\r\n\r\n|\n\n|\r\r/.exec(this.buf)
      if (!m) break
      const frame = this.buf.slice(0, m.index)
      this.buf = this.buf.slice(m.index + m[0].length)
      this.frame(frame)
    }
  }

  /** The bytes after the last complete frame (non-empty when a stream ended inside one). */
  get rest (): string { return this.buf }

  take (): SseEvent[] {
    const out = this.out
    this.out = []
    return out
  }

  private frame (text: string): void {
    let id: string | null = null
    let event: string | null = null
    const data: string[] = []
    let fields = 0
    for (const line of text.split(/\r\n|\r|\n/)) {
      if (line === '') continue
      if (line.startsWith(':')) { this.comments++; continue }
      const colon = line.indexOf(':')
      const field = colon === -1 ? line : line.slice(0, colon)
      let value = colon === -1 ? '' : line.slice(colon + 1)
      if (value.startsWith(' ')) value = value.slice(1)
      fields++
      if (field === 'id') id = value
      else if (field === 'event') event = value
      else if (field === 'data') data.push(value)
    }
    if (fields > 0) this.out.push({ id, event, data: data.join('\n') })
  }
}

/** Parses a whole SSE body. */
export function parseSseText (text: string): SseEvent[] {
  const p = new SseParser()
  p.push(text)
  p.push('\n\n')
  return p.take()
}

export interface EventStreamOptions {
  key: string
  /** Sent as the Last-Event-ID header. */
  lastEventId?: string | number
  /** Sent as `?lastEventId=` instead. */
  queryLastEventId?: string | number
  /** A pinned client (clientOnRow); else the global dispatcher. */
  client?: Dispatcher
}

/**
 * One open `GET /v1/sessions/:id/events`. `next()` waits for the next event (throws after
 * `ms`, a bound, never an assertion on time); `until()` collects events up to and including
 * the first that matches; `close()` hangs up.
 */
export class EventStream {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  private readonly body: Dispatcher.ResponseData['body']
  private readonly parser = new SseParser()
  private readonly queue: SseEvent[] = []
  private waiter: (() => void) | null = null
  private ended = false
  private error: Error | null = null
  private text = ''

  constructor (res: Dispatcher.ResponseData) {
    this.status = res.statusCode
    this.headers = res.headers
    this.body = res.body
    this.body.setEncoding('utf8')
    this.body.on('data', (chunk: string) => {
      if (this.status !== 200) { this.text += chunk; return }
      this.parser.push(chunk)
      this.queue.push(...this.parser.take())
      this.wake()
    })
    this.body.on('end', () => { this.ended = true; this.wake() })
    this.body.on('error', (err: Error) => { this.error = err; this.ended = true; this.wake() })
    this.body.on('close', () => { this.ended = true; this.wake() })
  }

  private wake (): void {
    const w = this.waiter
    this.waiter = null
    w?.()
  }

  /** `: ping` and other comment frames seen so far. */
  get comments (): number { return this.parser.comments }

  /** The body of a non-200 answer, parsed as JSON. */
  async json (): Promise<Record<string, unknown>> {
    await new Promise<void>((resolve) => { if (this.ended) resolve(); else this.body.once('close', () => resolve()) })
    return JSON.parse(this.text) as Record<string, unknown>
  }

  async next (ms = 10_000): Promise<SseEvent> {
    const deadline = Date.now() + ms
    for (;;) {
      const e = this.queue.shift()
      if (e) return e
      if (this.ended) throw this.error ?? new Error('event stream ended')
      const left = deadline - Date.now()
      if (left <= 0) throw new Error(`no session event within ${ms} ms`)
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left)
        this.waiter = () => { clearTimeout(timer); resolve() }
      })
      this.waiter = null
    }
  }

  /** Events up to and including the first for which `pred` holds. */
  async until (pred: (e: SseEvent) => boolean, ms = 15_000): Promise<SseEvent[]> {
    const deadline = Date.now() + ms
    const out: SseEvent[] = []
    for (;;) {
      const e = await this.next(Math.max(1, deadline - Date.now()))
      out.push(e)
      if (pred(e)) return out
    }
  }

  /** Events buffered so far, without waiting. */
  drain (): SseEvent[] { return this.queue.splice(0) }

  close (): void {
    if (!this.body.destroyed) this.body.destroy()
  }
}

export async function openEvents (baseUrl: string, sessionId: string, opts: EventStreamOptions): Promise<EventStream> {
  const headers: Record<string, string> = { authorization: `Bearer ${opts.key}`, accept: 'text/event-stream' }
  if (opts.lastEventId !== undefined) headers['last-event-id'] = String(opts.lastEventId)
  let path = `/v1/sessions/${encodeURIComponent(sessionId)}/events`
  if (opts.queryLastEventId !== undefined) path += `?lastEventId=${encodeURIComponent(String(opts.queryLastEventId))}`
  const res = opts.client
    ? await opts.client.request({ method: 'GET', path, headers })
    : await request(baseUrl + path, { method: 'GET', headers })
  return new EventStream(res)
}

/** The JSON of an event's data. */
export function dataOf (e: SseEvent): Record<string, unknown> {
  return JSON.parse(e.data) as Record<string, unknown>
}

/** True for the event that ends an exchange (turn_complete or turn_error). */
export function endsExchange (exchangeId: string): (e: SseEvent) => boolean {
  return (e) => (e.event === 'turn_complete' || e.event === 'turn_error') && dataOf(e).exchangeId === exchangeId
}

// ---- Requests around sessions: submit, cancel, JSON-RPC, blocking calls ----

export interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  json: Record<string, unknown>
  text: string
}

/** POSTs JSON (or raw text) and reads the whole answer. */
export async function postJson (baseUrl: string, path: string, body: unknown, headers: Record<string, string>, client?: Dispatcher): Promise<Answer> {
  const opts = { method: 'POST' as const, headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) }
  const res = client ? await client.request({ path, ...opts }) : await request(baseUrl + path, opts)
  const text = await res.body.text()
  let json: Record<string, unknown> = {}
  try { json = JSON.parse(text) as Record<string, unknown> } catch {}
  return { status: res.statusCode, headers: res.headers, json, text }
}

export function bearer (key: string): Record<string, string> {
  return { authorization: `Bearer ${key}` }
}

/** Non-blocking submit: POST /v1/sessions/:id/exchanges { route, body }. */
export function submit (baseUrl: string, key: string, sessionId: string, route: string, body: unknown, opts: { client?: Dispatcher; headers?: Record<string, string> } = {}): Promise<Answer> {
  return postJson(baseUrl, `/v1/sessions/${encodeURIComponent(sessionId)}/exchanges`, { route, body }, { ...bearer(key), ...opts.headers }, opts.client)
}

export function cancelExchange (baseUrl: string, key: string, sessionId: string, exchangeId: string, client?: Dispatcher): Promise<Answer> {
  return postJson(baseUrl, `/v1/sessions/${encodeURIComponent(sessionId)}/exchanges/${encodeURIComponent(exchangeId)}/cancel`, '', bearer(key), client)
}

/** One JSON-RPC call at POST /rpc. */
export function rpc (baseUrl: string, key: string | null, method: string, params?: unknown, id: string | number | null = 1): Promise<Answer> {
  const call: Record<string, unknown> = { jsonrpc: '2.0', id, method }
  if (params !== undefined) call.params = params
  return postJson(baseUrl, '/rpc', call, key === null ? {} : bearer(key))
}

export const ROUTE_PATHS: Record<string, string> = {
  chat: '/v1/chat/completions',
  responses: '/v1/responses',
  messages: '/v1/messages',
  count_tokens: '/v1/messages/count_tokens',
}

/** The blocking call with the same body, on the route's own path. */
export function blocking (baseUrl: string, key: string, route: string, body: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  return postJson(baseUrl, ROUTE_PATHS[route], body, { ...bearer(key), ...headers })
}

/**
 * Closes this process's pooled keep-alive connections (undici's global dispatcher, which
 * fetch shares) and installs a fresh one. Call it before stopping the gateway: its drain
 * otherwise waits until the client drops an idle keep-alive connection (about 28 s with
 * undici's defaults) after an events stream has been used.
 */
export async function dropConnections (): Promise<void> {
  const old = getGlobalDispatcher()
  setGlobalDispatcher(new Agent())
  await old.close().catch(() => {})
}
