// The simulated model provider: one plain node:http server speaking Chat Completions,
// Responses and Messages, streaming and not, steered by the `#sim` directive.
//
// It is the upstream in benchmarks, so the per-event path is kept small: frames come from
// templates prepared once per request (see frames.ts), back-to-back events are coalesced into
// writes of up to BATCH_BYTES, and `res.write()` backpressure is honoured by waiting for
// 'drain'. A long back-to-back stream yields to the event loop every YIELD_BYTES so one fast
// reader cannot starve the other connections.
//
// Lifecycle of one exchange (each emits exactly one 'request' and one 'end'):
//   headers -> auth (before the body, like a real provider) -> body -> directive -> ttft wait
//   -> fault | stream | JSON body.
// Outcome of 'end':
//   completed     the sim wrote the whole response and Node flushed it;
//   client-closed the client went away first (including during ttft, a stall or backpressure);
//   fault         the sim itself ended the exchange abnormally: reset, status-503/429,
//                 cut-mid-stream, error-event, `error=`, `truncate=eof`. (malformed-frame and
//                 oversize-frame streams continue to the end and report completed, as do
//                 truncate=args and truncate=length, which end with a proper terminal.)

import { timingSafeEqual } from 'node:crypto'
import { EventEmitter } from 'node:events'
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http'
import { nodeHttp } from '../net/node-http.ts'
import type { AddressInfo, Socket } from 'node:net'
import { setImmediate as yieldTurn } from 'node:timers/promises'
import { chat } from './chat.ts'
import { faultKeysOf, isObject, lastUserText, parseDirective, type SimProtocol } from './directive.ts'
import { errorBody, SIM_ERRORS, type ErrorFamily, type SimErrorKind } from './errors.ts'
import { messages } from './messages.ts'
import type { Renderer } from './protocol.ts'
import { responses } from './responses.ts'
import { seedFrom } from './rng.ts'
import { parseScenario, STREAM_ERROR_ROWS, streamErrorBody } from './scenario.ts'
import { strictRefusal } from './strict.ts'
import { buildScript, SIM_CREATED, type Script } from './script.ts'

export interface SimOptions {
  /** Default 127.0.0.1. */
  host?: string
  /** Default 0 (an ephemeral port). */
  port?: number
  /** When set, requests must carry it as `Authorization: Bearer` or `x-api-key`. */
  apiKey?: string
  /** Ids listed by GET /v1/models. */
  models?: readonly string[]
  /** Largest request body accepted (413 above). Default 64 MiB. */
  maxBodyBytes?: number
  /**
   * Refuse replayed reasoning as the providers do (strict.ts): missing thinking on an Anthropic
   * tool turn, signatures / encrypted_content this sim did not issue. Default false.
   */
  strict?: boolean
}

export type SimEndpoint = 'chat.completions' | 'responses' | 'messages' | 'messages.count_tokens' | 'models' | 'model' | 'unknown'

export interface SimRequestEvent {
  id: number
  method: string
  path: string
  headers: IncomingHttpHeaders
  /** The protocol of the route; null for /v1/models and unknown routes. */
  protocol: SimProtocol | null
  endpoint: SimEndpoint
  /** The key the sim saw (Bearer token, else x-api-key), whether or not it checks keys. */
  apiKey: string | null
}

export type SimOutcome = 'completed' | 'client-closed' | 'fault'

export interface SimEndEvent {
  id: number
  outcome: SimOutcome
  /** SSE frames written (including an injected malformed or error frame); 0 for JSON bodies. */
  eventsSent: number
  durationMs: number
  /** HTTP status sent, 0 when none was (reset, or the client left first). */
  status: number
  /**
   * performance.now() when the sim first read the end of this exchange's connection (its EOF
   * or reset), when it did before the exchange ended. 'end' itself comes later, after the
   * socket's close callback: a request on another connection read in the same event-loop turn
   * is emitted before it, so an observer ordering exchanges (one at a time?) orders by this.
   */
  goneAt?: number
  /**
   * performance.now() when the sim answered with a fault before any byte (reset, 503, 429):
   * the exchange is over for the provider from then. 'end' comes later, as for goneAt, and for
   * a reset after the socket's close callback, by when the caller may have sent its next
   * request on another connection.
   */
  faultAt?: number
}

/** Where a connection's peer-gone time is kept on its socket (see SimEndEvent.goneAt). */
const kGoneAt = Symbol('sim.goneAt')
type MarkedSocket = Socket & { [kGoneAt]?: number }

export interface SimStats {
  requests: number
  active: number
  completed: number
  clientClosed: number
  faults: number
}

/**
 * The request body as the sim received it (POST routes, once read; not for requests refused
 * before the body, e.g. 401). Lets a test check what a gateway sent upstream (a translated
 * request) and which directive text the sim read from it.
 */
export interface SimBodyEvent {
  id: number
  path: string
  endpoint: SimEndpoint
  /** The protocol of the route; null for /v1/models and unknown routes. */
  protocol: SimProtocol | null
  /** The exact bytes. */
  bytes: Buffer
  /** The parsed JSON, undefined when the body is not JSON. */
  json: unknown
  /** The last user turn's text the directive is read from (generation routes); else null. */
  directiveText: string | null
}

/** A streamed answer's first bytes (headers and its first frames) handed to the socket. */
export interface SimFirstEvent {
  id: number
}

export interface SimEvents {
  request: [SimRequestEvent]
  body: [SimBodyEvent]
  first: [SimFirstEvent]
  end: [SimEndEvent]
}

export interface Sim {
  readonly port: number
  /** Base URL without a path, e.g. http://127.0.0.1:8089. */
  readonly url: string
  readonly events: EventEmitter<SimEvents>
  stats(): SimStats
  close(): Promise<void>
}

export const DEFAULT_MODELS: readonly string[] = ['sim-model', 'gpt-5.5', 'gpt-4o-mini', 'claude-opus-5-5']

const BATCH_BYTES = 16 * 1024
const YIELD_BYTES = 256 * 1024
const RETRY_AFTER_SECONDS = '7'

const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' }

/** One request/response pair and the waits it may be parked in. */
class Exchange {
  readonly id: number
  readonly res: ServerResponse
  readonly start = performance.now()
  closed = false
  /** Set before the sim ends the exchange on purpose, so 'close' reports a fault. */
  faulted = false
  /** See SimEndEvent.faultAt. */
  faultAt: number | undefined = undefined
  eventsSent = 0
  /** Runs once, after the streamed answer's first write (the 'first' event); null afterwards. */
  onFirstWrite: (() => void) | null = null
  status = 0
  #wake: (() => void) | null = null

  constructor(id: number, res: ServerResponse) {
    this.id = id
    this.res = res
  }

  /** The sim answers with a fault before any byte: 'close' reports a fault, and when it began. */
  faultNow(): void {
    this.faulted = true
    this.faultAt = performance.now()
  }

  /** Resolves true after `ms`, false as soon as the client goes away. */
  sleep(ms: number): Promise<boolean> {
    if (this.closed) return Promise.resolve(false)
    if (ms <= 0) return Promise.resolve(true)
    return new Promise(resolve => {
      const timer = setTimeout(() => {
        this.#wake = null
        resolve(true)
      }, ms)
      this.#wake = () => {
        clearTimeout(timer)
        this.#wake = null
        resolve(false)
      }
    })
  }

  /** Resolves true on 'drain', false if the client goes away first. */
  drain(): Promise<boolean> {
    if (this.closed) return Promise.resolve(false)
    return new Promise(resolve => {
      const onDrain = (): void => {
        this.#wake = null
        resolve(!this.closed)
      }
      this.res.once('drain', onDrain)
      this.#wake = () => {
        this.res.off('drain', onDrain)
        this.#wake = null
        resolve(false)
      }
    })
  }

  /** Parks until the client goes away (the stall fault). */
  untilClosed(): Promise<void> {
    if (this.closed) return Promise.resolve()
    return new Promise(resolve => {
      this.#wake = () => {
        this.#wake = null
        resolve()
      }
    })
  }

  onClose(): void {
    this.closed = true
    this.#wake?.()
  }
}

interface Route {
  endpoint: SimEndpoint
  protocol: SimProtocol | null
  family: ErrorFamily
  method: 'GET' | 'POST'
  renderer: Renderer | null
}

function route(path: string, headers: IncomingHttpHeaders): Route {
  switch (path) {
    case '/v1/chat/completions':
      return { endpoint: 'chat.completions', protocol: 'openai-chat', family: 'openai', method: 'POST', renderer: chat }
    case '/v1/responses':
      return { endpoint: 'responses', protocol: 'openai-responses', family: 'openai', method: 'POST', renderer: responses }
    case '/v1/messages':
      return { endpoint: 'messages', protocol: 'anthropic', family: 'anthropic', method: 'POST', renderer: messages }
    case '/v1/messages/count_tokens':
      return { endpoint: 'messages.count_tokens', protocol: 'anthropic', family: 'anthropic', method: 'POST', renderer: null }
  }
  const family: ErrorFamily = headers['anthropic-version'] !== undefined ? 'anthropic' : 'openai'
  if (path === '/v1/models') return { endpoint: 'models', protocol: null, family, method: 'GET', renderer: null }
  if (path.startsWith('/v1/models/')) return { endpoint: 'model', protocol: null, family, method: 'GET', renderer: null }
  return { endpoint: 'unknown', protocol: null, family, method: 'GET', renderer: null }
}

function keyOf(headers: IncomingHttpHeaders): string | null {
  const auth = headers.authorization
  if (typeof auth === 'string' && /^bearer /i.test(auth)) return auth.slice(7).trim()
  const x = headers['x-api-key']
  return typeof x === 'string' ? x : null
}

function sameKey(a: string, b: string): boolean {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

function readBody(req: IncomingMessage, limit: number): Promise<Buffer | 'too-large' | null> {
  return new Promise(resolve => {
    const chunks: Buffer[] = []
    let size = 0
    let over = false
    req.on('data', (chunk: Buffer) => {
      size += chunk.length
      if (size > limit) {
        over = true
        chunks.length = 0
      } else if (!over) chunks.push(chunk)
    })
    req.on('end', () => resolve(over ? 'too-large' : Buffer.concat(chunks, size)))
    req.on('error', () => resolve(null))
    req.on('close', () => resolve(null)) // no-op after 'end': a promise settles once
  })
}

export async function startSim(opts: SimOptions = {}): Promise<Sim> {
  const host = opts.host ?? '127.0.0.1'
  const apiKey = opts.apiKey
  const maxBody = opts.maxBodyBytes ?? 64 * 1024 * 1024
  const modelIds = opts.models ?? DEFAULT_MODELS
  const events = new EventEmitter<SimEvents>()
  const counters: SimStats = { requests: 0, active: 0, completed: 0, clientClosed: 0, faults: 0 }
  let nextId = 0

  const modelEntry = (id: string): Record<string, unknown> => ({
    id,
    object: 'model',
    created: SIM_CREATED,
    owned_by: 'sluice-sim',
    // Anthropic's model shape, so either SDK's models.list() accepts the same list.
    type: 'model',
    display_name: id,
    created_at: new Date(SIM_CREATED * 1000).toISOString(),
  })
  const modelList = JSON.stringify({
    object: 'list',
    data: modelIds.map(modelEntry),
    has_more: false,
    first_id: modelIds[0] ?? null,
    last_id: modelIds[modelIds.length - 1] ?? null,
  })

  const finish = (ex: Exchange, socket: MarkedSocket | null): void => {
    const outcome: SimOutcome = ex.faulted ? 'fault' : ex.res.writableFinished ? 'completed' : 'client-closed'
    counters.active--
    if (outcome === 'completed') counters.completed++
    else if (outcome === 'fault') counters.faults++
    else counters.clientClosed++
    events.emit('end', {
      id: ex.id,
      outcome,
      eventsSent: ex.eventsSent,
      durationMs: performance.now() - ex.start,
      status: ex.res.headersSent ? ex.res.statusCode : 0,
      ...(outcome === 'client-closed' && socket?.[kGoneAt] !== undefined ? { goneAt: socket[kGoneAt] } : {}),
      ...(outcome === 'fault' && ex.faultAt !== undefined ? { faultAt: ex.faultAt } : {}),
    })
  }

  const send = (ex: Exchange, status: number, body: string, headers: Record<string, string> = {}): void => {
    ex.status = status
    ex.res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), ...headers })
    ex.res.end(body)
  }

  const sendError = (ex: Exchange, family: ErrorFamily, kind: SimErrorKind, headers: Record<string, string> = {}): void => {
    send(ex, SIM_ERRORS[kind].status, errorBody(family, kind), headers)
  }

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = req.url ?? '/'
    const q = url.indexOf('?')
    const path = q < 0 ? url : url.slice(0, q)
    const r = route(path, req.headers)
    const key = keyOf(req.headers)
    const ex = new Exchange(++nextId, res)
    ex.onFirstWrite = () => events.emit('first', { id: ex.id })
    counters.requests++
    counters.active++
    const socket: MarkedSocket | null = req.socket
    res.on('close', () => {
      ex.onClose()
      finish(ex, socket)
    })
    events.emit('request', { id: ex.id, method: req.method ?? 'GET', path, headers: req.headers, protocol: r.protocol, endpoint: r.endpoint, apiKey: key })

    if (r.endpoint === 'unknown') return sendError(ex, r.family, 'not_found')
    if (req.method !== r.method) return sendError(ex, r.family, 'method_not_allowed', { allow: r.method })
    if (apiKey !== undefined && (key === null || !sameKey(key, apiKey))) return sendError(ex, r.family, 'unauthorized')

    const raw = await readBody(req, maxBody)
    if (raw === null || ex.closed) return
    if (raw === 'too-large') return sendError(ex, r.family, 'too_large')

    if (r.endpoint === 'models') return send(ex, 200, modelList)
    if (r.endpoint === 'model') {
      const id = decodeURIComponent(path.slice('/v1/models/'.length))
      return modelIds.includes(id) ? send(ex, 200, JSON.stringify(modelEntry(id))) : sendError(ex, r.family, 'not_found')
    }

    let body: unknown
    try {
      body = JSON.parse(raw.toString('utf8'))
    } catch {
      body = undefined
    }
    if (events.listenerCount('body') > 0) {
      const generation = r.renderer !== null && r.protocol !== null && isObject(body)
      events.emit('body', { id: ex.id, path, endpoint: r.endpoint, protocol: r.protocol, bytes: raw, json: body, directiveText: generation ? lastUserText(r.protocol as SimProtocol, body) : null })
    }
    if (!isObject(body)) return sendError(ex, r.family, 'invalid_request')
    if (r.endpoint === 'messages.count_tokens') return send(ex, 200, JSON.stringify({ input_tokens: Math.max(1, Math.ceil(raw.length / 4)) }))

    const protocol = r.protocol as SimProtocol
    const renderer = r.renderer as Renderer
    if (opts.strict === true) {
      const refusal = strictRefusal(protocol, body)
      if (refusal !== null) return send(ex, refusal.status, refusal.body)
    }
    const userText = lastUserText(protocol, body)
    const directive = parseDirective(userText)
    // A fault scoped to another account's key is not this request's (directive.ts `fault_key`).
    const faultKeys = faultKeysOf(userText)
    if (faultKeys.length > 0 && !faultKeys.some((k) => key !== null && sameKey(key, k))) directive.fault = null
    const seed = seedFrom(raw)
    const script = buildScript(protocol, body, raw.length, seed, directive, parseScenario(userText))
    const idHeader = r.family === 'anthropic' ? 'request-id' : 'x-request-id'
    const idHeaders = { [idHeader]: 'req_sim' + seed.hex.slice(0, 24) }

    if (!(await ex.sleep(directive.ttft))) return
    switch (directive.fault) {
      case 'reset-before-first-byte':
        ex.faultNow()
        res.socket?.resetAndDestroy()
        return
      case 'status-503':
        ex.faultNow()
        return sendError(ex, r.family, 'unavailable', idHeaders)
      case 'status-429':
        ex.faultNow()
        return sendError(ex, r.family, 'rate_limited', { ...idHeaders, 'retry-after': RETRY_AFTER_SECONDS })
    }
    if (script.stream) await streamResponse(ex, renderer, script, idHeaders)
    else await jsonResponse(ex, renderer, script, idHeaders)
  }

  const server = nodeHttp.createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      // A bug in the sim must not look like a provider behaviour: make it loud and obvious.
      console.error('sluice sim: internal error', err)
      if (!res.headersSent) {
        res.writeHead(500, { 'content-type': 'text/plain' })
        res.end('sluice sim internal error\n')
      } else res.destroy()
    })
  })

  server.on('connection', (socket: MarkedSocket) => {
    const gone = (): void => { socket[kGoneAt] ??= performance.now() }
    socket.once('end', gone)
    socket.once('error', gone)
  })

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  const port = (server.address() as AddressInfo).port
  const urlHost = host.includes(':') ? `[${host}]` : host

  return {
    port,
    url: `http://${urlHost}:${port}`,
    events,
    stats: () => ({ ...counters }),
    close: () =>
      new Promise<void>(resolve => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  }
}

async function streamResponse(ex: Exchange, renderer: Renderer, script: Script, headers: Record<string, string>): Promise<void> {
  const res = ex.res
  const d = script.directive
  const plan = renderer.stream(script)
  const streamError = d.fault === null ? script.scenario.error : null
  const fault = d.fault === 'cut-mid-stream' || d.fault === 'malformed-frame' || d.fault === 'stall' || d.fault === 'error-event' ? d.fault : streamError !== null ? 'error-event' : null
  let at = fault === null ? -1 : Math.min(d.at ?? Math.floor(plan.total / 2), plan.total)
  // A Responses stream always opens with response.created; response.failed comes after it.
  if (streamError !== null && script.protocol === 'openai-responses' && at === 0) at = 1
  ex.status = 200
  res.writeHead(200, { ...SSE_HEADERS, ...headers })

  let batch = ''
  let sinceYield = 0
  const flush = async (): Promise<boolean> => {
    if (ex.closed) return false
    if (batch.length === 0) return true
    const chunk = batch
    batch = ''
    sinceYield += chunk.length
    const onFirst = ex.onFirstWrite
    ex.onFirstWrite = null
    const ok = res.write(chunk)
    onFirst?.()
    if (!ok) {
      sinceYield = 0
      return ex.drain()
    }
    if (sinceYield >= YIELD_BYTES) {
      sinceYield = 0
      await yieldTurn()
    }
    return !ex.closed
  }

  /** Fires the stream fault at frame index `at`; returns whether the stream goes on. */
  const fire = async (seq: number): Promise<boolean> => {
    switch (fault) {
      case 'malformed-frame':
        batch += renderer.malformed(seq)
        ex.eventsSent++
        return true
      case 'error-event':
        batch += streamError !== null ? renderer.streamError(script, streamError, seq) : renderer.errorEvent(seq)
        ex.eventsSent++
        ex.faulted = true
        if (await flush()) res.end()
        return false
      case 'cut-mid-stream':
        if (!(await flush())) return false
        ex.faulted = true
        res.flushHeaders()
        await cutAfterFlush(res)
        return false
      case 'stall':
        if (!(await flush())) return false
        res.flushHeaders()
        await ex.untilClosed()
        return false
      default:
        return true
    }
  }

  let i = 0
  for (const frame of plan.frames()) {
    if (i === at && !(await fire(i))) return
    if (d.interval > 0 && i > 0) {
      if (!(await flush())) return
      if (!(await ex.sleep(d.interval))) return
    }
    batch += frame
    i++
    ex.eventsSent++
    if ((d.interval > 0 || batch.length >= BATCH_BYTES) && !(await flush())) return
  }
  if (i === at && !(await fire(i))) return
  // truncate=eof: the plan stopped short of its terminal; the HTTP response still ends cleanly.
  if (script.truncate === 'eof') ex.faulted = true
  if (await flush()) res.end()
}

/**
 * Closes the connection (FIN, no chunked terminator) once everything written so far is on the
 * socket. Node keeps chunked writes in the response until a nextTick uncork, so ending the
 * socket at once would drop them; one macrotask later they have reached the socket, and
 * destroySoon() sends them before the FIN.
 */
async function cutAfterFlush(res: ServerResponse): Promise<void> {
  await yieldTurn()
  res.socket?.destroySoon()
}

async function jsonResponse(ex: Exchange, renderer: Renderer, script: Script, headers: Record<string, string>): Promise<void> {
  const res = ex.res
  const d = script.directive
  const text = script.text
  if (d.fault === 'oversize-frame' && text !== null) text.insertOversize(Math.floor(text.count / 2), d.size)
  const body = Buffer.from(renderer.json(script))
  // A non-streaming call takes as long as the stream would have: one interval per delta.
  let deltas = text === null ? 0 : text.count
  for (const tool of script.tools) deltas += tool.chunks.length
  if (!(await ex.sleep(d.interval * deltas))) return

  const head = (length: number): void => {
    ex.status = 200
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(length), ...headers })
  }
  const error = script.scenario.error
  if (d.fault === null && error !== null) {
    // error=KIND, not streaming: the provider's HTTP error in its own format.
    ex.faulted = true
    const family: ErrorFamily = script.protocol === 'anthropic' ? 'anthropic' : 'openai'
    const row = STREAM_ERROR_ROWS[error]
    const err = streamErrorBody(family, error)
    ex.status = family === 'anthropic' ? row.anthropicStatus : row.openaiStatus
    res.writeHead(ex.status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(err)), ...headers, ...row.headers })
    res.end(err)
    return
  }
  if (d.fault === null && script.truncate === 'eof') {
    // Not streaming: a complete HTTP response whose JSON stops half-way.
    ex.faulted = true
    const cut = body.subarray(0, body.length >> 1)
    head(cut.length)
    res.end(cut)
    return
  }
  switch (d.fault) {
    case 'error-event': {
      ex.faulted = true
      const family: ErrorFamily = script.protocol === 'anthropic' ? 'anthropic' : 'openai'
      const err = errorBody(family, 'server_error')
      ex.status = 500
      res.writeHead(500, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(err)), ...headers })
      res.end(err)
      return
    }
    case 'malformed-frame': {
      const broken = body.subarray(0, body.length - 1) // drop the closing brace: not JSON
      head(broken.length)
      res.end(broken)
      return
    }
    case 'cut-mid-stream':
      head(body.length)
      res.write(body.subarray(0, body.length >> 1))
      ex.faulted = true
      await cutAfterFlush(res)
      return
    case 'stall':
      head(body.length)
      res.write(body.subarray(0, body.length >> 1))
      await ex.untilClosed()
      return
    default:
      head(body.length)
      res.end(body)
  }
}
