// Request preparation: the one task the parser pool runs (DESIGN.md "The exchange
// lifecycle", step 5). A pure function of its input, so it runs the same in a pool thread
// (src/json/task.ts) and in a test.
//
//   bytes -> checkJson (caps, before anything is built)
//         -> UTF-8 decode (fatal) -> JSON.parse
//         -> shape: an object with a non-empty string `model`; `stream` boolean if present
//         -> alias: splice the new model into the bytes, or return the bytes untouched
//         -> translate (only with `task.translate`, a model on a provider of another protocol):
//            the parsed object -> translateRequest (src/translate/request) -> the provider's
//            body, serialised once into a fresh ArrayBuffer that goes back by transfer; the
//            result's `translation` carries the small facts the answer side needs (the tool
//            table, dropped hosted tools, the client's stream flags), never the messages.
//            On the count_tokens route there is nothing to send upstream: the body is the
//            client's answer `{"input_tokens":N}` (countTokensEstimate) and `estimate` says so.
//         -> conversation state (only with `task.continuation`, a translated responses route,
//            worker/continuation.ts): the stored chain (`history`, blobs restored) goes in
//            front of the client's `input` and `previous_response_id` is dropped, before the
//            translation; with `keep`, this turn's own input items come back (`turn`: a JSON
//            array text, strings over the blob threshold split out as blobs) for the store.
//            The plain parse of a responses body reports `state` (previous_response_id,
//            store) when it is not the default, and changes nothing else.
//
// Request translation is parsing (issue 12): it runs here, under the caller's parse permit, in
// the same pool hop as the checks. Envelopes ('exchange' / 'rpc') are not translated in the
// same hop: their route and model are only known once parsed, and which protocol the model's
// provider speaks is the router's business (config patterns), not the pool's. The caller
// translates an envelope's exchange body with a second call: `prepare({ body: ok.body, route:
// ok.envelope.route, aliases: {}, translate })` (ok.body is the re-serialised exchange body,
// its alias already applied). `translate` together with `envelope` is refused (internal_error).
//
// It never throws: a refusal is plain data `{ ok: false, error: { code, details } }` with a
// catalogue code, because it crosses a thread boundary (match on `code`, never instanceof).
// Refusals never echo body content: positions are byte offsets, reasons are fixed strings.
// The parsed object never leaves this function; only a few scalars do.

import { SluiceError, type ErrorCode, type ErrorDetails } from '../errors.ts'
import type { Protocol } from '../translate/canonical.ts'
import { countTokensEstimate, translateRequest } from '../translate/request/index.ts'
import { historyItems, inputItems, MissingBlob, restoreBlobs, splitBlobs, type BlobBytes } from '../state/items.ts'
import { summarise, type RequestSummary } from '../translate/summary.ts'
import { checkJson, type JsonLimits } from './bounded.ts'
import { replaceTopLevelMember } from './splice.ts'
import { findSyntaxError, lineColumn, utf8ErrorAt } from './syntax.ts'
import { ROUTE_PROTOCOL, ROUTES, type Route } from '../protocols/routes.ts'

export type { Route }

export interface PrepareTask {
  /** The raw request body. In the pool its ArrayBuffer is transferred: the caller gives it up. */
  body: Uint8Array
  route: Route
  /**
   * The body is an envelope around the exchange body: 'exchange' = `{ route, body }`
   * (non-blocking mode), 'rpc' = a JSON-RPC 2.0 request whose `session/prompt` params carry
   * `{ sessionId, route, body }`. `route` above is then ignored. The exchange body is
   * re-serialised from the parsed object (request bytes are not relayed exactly in these
   * modes; response bytes are).
   */
  envelope?: 'exchange' | 'rpc'
  limits: JsonLimits
  /** Client-facing model name -> the provider's model name. */
  aliases: Record<string, string>
  /** The model's provider speaks another protocol: translate the body (plain bodies only). */
  translate?: TranslateSpec
  /** With `translate` on the responses route: conversation state (issue 13, src/state/items.ts). */
  continuation?: ContinuationTask
}

/**
 * A translated Responses request and the conversation store (worker/continuation.ts). The
 * worker reads the chain from the store; the items are parsed here, where the request is.
 */
export interface ContinuationTask {
  /**
   * The chain `previous_response_id` names, as joinPayloads() (src/state/items.ts) made it,
   * root first: its items are put before the request's own `input`, and
   * `previous_response_id` is dropped, before the request is translated. Transferred.
   */
  history?: Uint8Array
  /** The chain's blobs (the store's copies), for the references inside `history`. */
  blobs?: BlobBytes[]
  /** Return this turn's own input items for the store (PrepareOk.turn), strings over this split out as blobs. */
  keep?: { blobThreshold: number }
}

/** What the client said about conversation state (responses route only; absent: none, store: true). */
export interface StateInfo {
  /** `previous_response_id` when it is a non-empty string, else null (any other value stays in the body). */
  previousResponseId: string | null
  /** The client's `store`: true unless it is `false` (the OpenAI API's default is true). */
  store: boolean
}

export interface TranslateSpec {
  /** The provider's protocol (the client's is the route's). */
  to: Protocol
  /** issuerOf(to, provider name) (src/translate/envelope.ts): whose reasoning blobs are restored. */
  issuer: string
  /** The provider's model name; default: the alias target, else the model the client named. */
  model?: string
  /** False when the provider's model takes no reasoning parameters (EncodeContext.reasoning). */
  reasoning?: boolean
}

/** What the answer side of a translated exchange needs (src/translate/summary.ts), + the pair. */
export interface TranslationInfo extends RequestSummary {
  /** The client's protocol. */
  from: Protocol
  /** The provider's protocol. */
  to: Protocol
}


export interface PrepareOk {
  ok: true
  /** The model the provider will see (the alias target when rewritten). */
  model: string
  /** The model the client asked for (equal to `model` unless rewritten). */
  requestedModel: string
  stream: boolean
  /** The bytes to send upstream: the original bytes unless `rewritten`. */
  body: Uint8Array
  rewritten: boolean
  depth: number
  nodes: number
  /** A session id carried in the body (see sessionHintOf), when there is one. */
  sessionHint?: string
  /** What the envelope said (PrepareTask.envelope). */
  envelope?: EnvelopeInfo
  /** With PrepareTask.translate: `body` is the provider's body, translated. */
  translation?: TranslationInfo
  /** The responses route (plain and envelope bodies): previous_response_id and store, only when not the defaults (none, store: true). */
  state?: StateInfo
  /**
   * With PrepareTask.continuation.keep: this turn's own input items (the client's `input`
   * without the history), a JSON array text with blob references, and the blobs.
   */
  turn?: { input: Uint8Array, blobs: BlobBytes[] }
  /**
   * With PrepareTask.translate on the count_tokens route: the local estimate; `body` is then
   * the client's answer `{"input_tokens":N}` (nothing goes upstream).
   */
  estimate?: { input_tokens: number }
}

export interface RpcCall {
  id: string | number | null
  method: string
  /** The params' scalar members (never the exchange body). */
  params: Record<string, string | number | boolean | null>
}

export interface EnvelopeInfo {
  /** The exchange's route; absent for a JSON-RPC call that carries no exchange. */
  route?: Route
  rpc?: RpcCall
}

const ENVELOPE_ROUTES = ROUTES
const encoder = new TextEncoder()

export interface PrepareRefusal {
  ok: false
  /**
   * `message` only for translation refusals (PrepareTask.translate): the translator's own
   * sentence naming the field or tool (e.g. two tools colliding on one wire name).
   */
  error: { code: ErrorCode; details: ErrorDetails; message?: string }
}

export type PrepareResult = PrepareOk | PrepareRefusal

const decoder = new TextDecoder('utf-8', { fatal: true })

/** Longest body-carried session id taken as a hint; anything longer is ignored. */
const MAX_SESSION_HINT = 256

export function prepare (task: PrepareTask): PrepareResult {
  try {
    return prepareOrThrow(task)
  } catch (err) {
    const e = SluiceError.from(err)
    return refusal(e.code, e.code === 'internal_error' ? { reason: 'request preparation failed' } : e.details)
  }
}

function prepareOrThrow ({ body, route, limits, aliases, envelope, translate, continuation }: PrepareTask): PrepareResult {
  if (translate !== undefined && envelope !== undefined) {
    return refusal('internal_error', { reason: 'an envelope is translated in a second call (its exchange body)' })
  }
  if (translate !== undefined && ROUTE_PROTOCOL[route] === translate.to) {
    return refusal('internal_error', { reason: 'a same-protocol route is relayed byte-exact, never translated' })
  }
  if (continuation !== undefined && (translate === undefined || route !== 'responses')) {
    return refusal('internal_error', { reason: 'conversation state is expanded only on a translated responses route' })
  }
  const { depth, nodes } = checkJson(body, limits) // throws json_too_deep / json_too_many_nodes
  if (envelope !== undefined) return prepareEnvelope(body, envelope, aliases, depth, nodes)
  if (translate !== undefined) {
    try {
      return prepareTranslated(body, route, aliases, translate, depth, nodes, continuation)
    } catch (err) {
      const e = SluiceError.from(err)
      if (e.code === 'internal_error') throw e
      return { ok: false, error: { code: e.code, details: e.details, message: e.message } }
    }
  }
  // Parsed in its own frame: the decoded text and the object graph are garbage before the
  // splice below allocates a second copy of the body.
  const shape = readShape(body, route)
  if (!shape.ok) return shape
  const { requestedModel, stream, sessionHint, state } = shape

  let model = requestedModel
  let out = body
  let rewritten = false
  // A leading UTF-8 byte-order mark is not part of a JSON text (RFC 8259 8.1); the check
  // above ignores it, as the RFC allows, so it is also dropped from what is forwarded (a
  // provider would refuse it): the one rewrite besides the alias. A copy, so the result owns
  // exactly its bytes (the reservation follows byteLength).
  if (hasBom(body)) {
    out = body.slice(BOM_BYTES)
    rewritten = true
  }
  const target = Object.hasOwn(aliases, requestedModel) ? aliases[requestedModel] : undefined
  if (typeof target === 'string' && target.length > 0 && target !== requestedModel) {
    const spliced = replaceTopLevelMember(out, 'model', JSON.stringify(target))
    if (spliced === null) return refusal('internal_error', { reason: 'the model member was not found for the alias' })
    model = target
    out = spliced
    rewritten = true
  }

  const result: PrepareOk = { ok: true, model, requestedModel, stream, body: out, rewritten, depth, nodes }
  if (sessionHint !== undefined) result.sessionHint = sessionHint
  if (state !== undefined) result.state = state
  return result
}

function prepareTranslated (body: Uint8Array, route: Route, aliases: Record<string, string>, spec: TranslateSpec, depth: number, nodes: number, continuation?: ContinuationTask): PrepareResult {
  const parsed = parseBody(body)
  if (!parsed.ok) return parsed
  const value = parsed.value
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return refusal('invalid_request', { field: 'body', reason: 'must be a JSON object' })
  }
  const shape = shapeOf(value as Record<string, unknown>, route)
  if (!shape.ok) return shape
  const { requestedModel, stream, sessionHint } = shape
  const target = Object.hasOwn(aliases, requestedModel) ? aliases[requestedModel] : undefined
  const model = spec.model ?? (typeof target === 'string' && target.length > 0 ? target : requestedModel)
  const from = ROUTE_PROTOCOL[route]
  // This turn's own items, before the history goes in front of them.
  const own = continuation === undefined ? [] : inputItems((value as Record<string, unknown>).input)
  if (continuation?.history !== undefined) {
    const expanded = expandHistory(continuation.history, continuation.blobs ?? [])
    if (!expanded.ok) return expanded
    const v = value as Record<string, unknown>
    v.input = [...expanded.items, ...own]
    delete v.previous_response_id
  }
  let result: PrepareOk
  if (route === 'count_tokens') {
    const estimate = countTokensEstimate(value) // throws invalid_request naming the field
    result = { ok: true, model, requestedModel, stream, body: encoder.encode(JSON.stringify(estimate)), rewritten: true, depth, nodes, estimate }
  } else {
    const out = translateRequest(spec.reasoning === undefined
      ? { from, to: spec.to, body: value, model, issuer: spec.issuer }
      : { from, to: spec.to, body: value, model, issuer: spec.issuer, reasoning: spec.reasoning }) // throws invalid_request naming the field
    const translation: TranslationInfo = { from, to: spec.to, ...summarise(out.request, value) }
    result = { ok: true, model, requestedModel, stream, body: encoder.encode(JSON.stringify(out.body)), rewritten: true, depth, nodes, translation }
    if (continuation?.keep !== undefined) {
      // After the translation (which only reads `own`): the entry the store keeps for this turn.
      const split = splitBlobs(own, continuation.keep.blobThreshold)
      result.turn = { input: encoder.encode(JSON.stringify(split.items)), blobs: split.blobs }
    }
  }
  if (sessionHint !== undefined) result.sessionHint = sessionHint
  return result
}

/**
 * The items of a stored chain, blobs restored. The history is the store's own bytes (each
 * payload was a checked request's items or a translated answer's output), so it is parsed
 * without the body caps; the pool thread's heap limit still bounds it. Anything unreadable is
 * an honest continuation_expired, never a shorter conversation.
 */
function expandHistory (history: Uint8Array, blobs: readonly BlobBytes[]): { ok: true, items: unknown[] } | PrepareRefusal {
  try {
    const items = historyItems(JSON.parse(decoder.decode(history)))
    return { ok: true, items: restoreBlobs(items, new Map(blobs.map(b => [b.hash, b.bytes]))) }
  } catch (err) {
    return refusal('continuation_expired', { field: 'previous_response_id', reason: err instanceof MissingBlob ? 'a stored blob is missing' : 'the stored chain is unreadable' })
  }
}

interface Shape {
  ok: true
  requestedModel: string
  stream: boolean
  sessionHint: string | undefined
  state?: StateInfo
}

function prepareEnvelope (body: Uint8Array, kind: 'exchange' | 'rpc', aliases: Record<string, string>, depth: number, nodes: number): PrepareResult {
  const parsed = parseBody(body)
  if (!parsed.ok) return parsed
  const outer = parsed.value
  if (outer === null || typeof outer !== 'object' || Array.isArray(outer)) return refusal('invalid_request', { field: kind === 'rpc' ? 'jsonrpc' : 'body', reason: 'must be a JSON object' })
  const o = outer as Record<string, unknown>
  let rpc: RpcCall | undefined
  let holder: Record<string, unknown> = o
  let prefix = ''
  if (kind === 'rpc') {
    const id = o.id === undefined ? null : o.id
    if (id !== null && typeof id !== 'string' && typeof id !== 'number') return refusal('invalid_request', { field: 'id', reason: 'must be a string, a number or null' })
    if (o.jsonrpc !== '2.0') return refusal('invalid_request', { field: 'jsonrpc', reason: 'must be "2.0"', rpcId: id })
    if (typeof o.method !== 'string' || o.method.length === 0) return refusal('invalid_request', { field: 'method', reason: 'must be a non-empty string', rpcId: id })
    const params = o.params === undefined ? {} : o.params
    if (params === null || typeof params !== 'object' || Array.isArray(params)) return refusal('invalid_request', { field: 'params', reason: 'must be an object', rpcId: id })
    const scalars: RpcCall['params'] = {}
    for (const [k, v] of Object.entries(params as Record<string, unknown>)) {
      if (v === null || typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') scalars[k] = v
    }
    rpc = { id, method: o.method, params: scalars }
    if (o.method !== 'session/prompt') {
      return { ok: true, model: '', requestedModel: '', stream: false, body: new Uint8Array(0), rewritten: false, depth, nodes, envelope: { rpc } }
    }
    holder = params as Record<string, unknown>
    prefix = 'params.'
  }
  const fail = (field: string, reason: string): PrepareRefusal => refusal('invalid_request', rpc ? { field: prefix + field, reason, rpcId: rpc.id } : { field: prefix + field, reason })
  const r = holder.route
  if (typeof r !== 'string' || !ENVELOPE_ROUTES.includes(r as Route)) return fail('route', `must be one of ${ENVELOPE_ROUTES.join(', ')}`)
  const route = r as Route
  const inner = holder.body
  if (inner === null || typeof inner !== 'object' || Array.isArray(inner)) return fail('body', 'must be a JSON object')
  const shape = shapeOf(inner as Record<string, unknown>, route)
  if (!shape.ok) {
    const d = { ...shape.error.details, field: prefix + 'body.' + String(shape.error.details.field ?? '') }
    return { ok: false, error: { code: shape.error.code, details: rpc ? { ...d, rpcId: rpc.id } : d } }
  }
  const fields = inner as Record<string, unknown>
  let model = shape.requestedModel
  const target = Object.hasOwn(aliases, model) ? aliases[model] : undefined
  const rewritten = typeof target === 'string' && target.length > 0 && target !== model
  if (rewritten) { fields.model = target; model = target }
  const result: PrepareOk = {
    ok: true,
    model,
    requestedModel: shape.requestedModel,
    stream: shape.stream,
    body: encoder.encode(JSON.stringify(fields)),
    rewritten,
    depth,
    nodes,
    envelope: rpc ? { route, rpc } : { route },
  }
  if (shape.sessionHint !== undefined) result.sessionHint = shape.sessionHint
  if (shape.state !== undefined) result.state = shape.state
  return result
}

function parseBody (body: Uint8Array): { ok: true; value: unknown } | PrepareRefusal {
  let text: string
  try {
    text = decoder.decode(body)
  } catch {
    const offset = utf8ErrorAt(body)
    return refusal('invalid_json', { reason: 'the body is not UTF-8', ...position(body, offset < 0 ? 0 : offset) })
  }
  try {
    return { ok: true, value: JSON.parse(text) }
  } catch {
    const fault = findSyntaxError(body)
    return refusal('invalid_json', fault ? { reason: fault.reason, ...position(body, fault.offset) } : { reason: 'syntax error' })
  }
}

function readShape (body: Uint8Array, route: Route): Shape | PrepareRefusal {
  const p = parseBody(body)
  if (!p.ok) return p
  const parsed = p.value
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    return refusal('invalid_request', { field: 'body', reason: 'must be a JSON object' })
  }
  return shapeOf(parsed as Record<string, unknown>, route)
}

function shapeOf (fields: Record<string, unknown>, route: Route): Shape | PrepareRefusal {
  const requestedModel = fields.model
  if (requestedModel === undefined) return refusal('invalid_request', { field: 'model', reason: 'is required' })
  if (typeof requestedModel !== 'string') return refusal('invalid_request', { field: 'model', reason: 'must be a string' })
  if (requestedModel.length === 0) return refusal('invalid_request', { field: 'model', reason: 'must not be empty' })

  // OpenAI documents `stream` as boolean or null; null means the default (false).
  const stream = fields.stream
  if (stream !== undefined && stream !== null && typeof stream !== 'boolean') {
    return refusal('invalid_request', { field: 'stream', reason: 'must be a boolean' })
  }
  const shape: Shape = {
    ok: true,
    requestedModel,
    // count_tokens answers with one JSON object whatever the body says.
    stream: route === 'count_tokens' ? false : stream === true,
    sessionHint: sessionHintOf(route, fields),
  }
  // Only reported: a same-protocol route forwards both untouched, a translated one acts on
  // them. Absent means the defaults: no previous response, store: true.
  if (route === 'responses') {
    const prev = fields.previous_response_id
    const state: StateInfo = { previousResponseId: typeof prev === 'string' && prev.length > 0 ? prev : null, store: fields.store !== false }
    if (state.previousResponseId !== null || !state.store) shape.state = state
  }
  return shape
}

/**
 * A session id some clients put in the body as well as in a header (the header wins; this is
 * a hint for tracing and for clients that send no header):
 *   chat, responses        -> `prompt_cache_key` (Codex CLI sets it to its session id)
 *   messages, count_tokens -> `metadata.user_id`: Claude Code sends either a JSON text with
 *                             `session_id`, or `user_…_account_…_session_<uuid>`
 * Only a non-empty string of at most MAX_SESSION_HINT characters is taken.
 */
function sessionHintOf (route: Route, fields: Record<string, unknown>): string | undefined {
  if (route === 'chat' || route === 'responses') return bounded(fields.prompt_cache_key)
  const metadata = fields.metadata
  if (metadata === null || typeof metadata !== 'object') return undefined
  const userId = (metadata as Record<string, unknown>).user_id
  if (typeof userId !== 'string' || userId.length > 4 * MAX_SESSION_HINT) return undefined
  if (userId.startsWith('{')) {
    try {
      const inner = JSON.parse(userId) as unknown
      if (inner !== null && typeof inner === 'object') return bounded((inner as Record<string, unknown>).session_id)
    } catch { /* not JSON: no hint */ }
    return undefined
  }
  const at = userId.lastIndexOf('_session_')
  return at === -1 ? undefined : bounded(userId.slice(at + '_session_'.length))
}

function bounded (value: unknown): string | undefined {
  return typeof value === 'string' && value.length > 0 && value.length <= MAX_SESSION_HINT ? value : undefined
}

function position (body: Uint8Array, offset: number): { offset: number; line: number; column: number } {
  return { offset, ...lineColumn(body, offset) }
}

const BOM_BYTES = 3

function hasBom (b: Uint8Array): boolean {
  return b.length >= BOM_BYTES && b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf
}

function refusal (code: ErrorCode, details: ErrorDetails): PrepareRefusal {
  return { ok: false, error: { code, details } }
}
