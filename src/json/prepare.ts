// Request preparation: the one task the parser pool runs (DESIGN.md "The exchange
// lifecycle", step 5). A pure function of its input, so it runs the same in a pool thread
// (src/json/task.ts) and in a test.
//
//   bytes -> checkJson (caps, before anything is built)
//         -> UTF-8 decode (fatal) -> JSON.parse
//         -> shape: an object with a non-empty string `model`; `stream` boolean if present
//         -> alias: splice the new model into the bytes, or return the bytes untouched
//
// It never throws: a refusal is plain data `{ ok: false, error: { code, details } }` with a
// catalogue code, because it crosses a thread boundary (match on `code`, never instanceof).
// Refusals never echo body content: positions are byte offsets, reasons are fixed strings.
// The parsed object never leaves this function; only a few scalars do.

import { SluiceError, type ErrorCode, type ErrorDetails } from '../errors.ts'
import { checkJson, type JsonLimits } from './bounded.ts'
import { replaceTopLevelMember } from './splice.ts'
import { findSyntaxError, lineColumn, utf8ErrorAt } from './syntax.ts'

export type Route = 'chat' | 'responses' | 'messages' | 'count_tokens'

export interface PrepareTask {
  /** The raw request body. In the pool its ArrayBuffer is transferred: the caller gives it up. */
  body: Uint8Array
  route: Route
  limits: JsonLimits
  /** Client-facing model name -> the provider's model name. */
  aliases: Record<string, string>
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
}

export interface PrepareRefusal {
  ok: false
  error: { code: ErrorCode; details: ErrorDetails }
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

function prepareOrThrow ({ body, route, limits, aliases }: PrepareTask): PrepareResult {
  const { depth, nodes } = checkJson(body, limits) // throws json_too_deep / json_too_many_nodes
  // Parsed in its own frame: the decoded text and the object graph are garbage before the
  // splice below allocates a second copy of the body.
  const shape = readShape(body, route)
  if (!shape.ok) return shape
  const { requestedModel, stream, sessionHint } = shape

  let model = requestedModel
  let out = body
  let rewritten = false
  const target = Object.hasOwn(aliases, requestedModel) ? aliases[requestedModel] : undefined
  if (typeof target === 'string' && target.length > 0 && target !== requestedModel) {
    const spliced = replaceTopLevelMember(body, 'model', JSON.stringify(target))
    if (spliced === null) return refusal('internal_error', { reason: 'the model member was not found for the alias' })
    model = target
    out = spliced
    rewritten = true
  }

  const result: PrepareOk = { ok: true, model, requestedModel, stream, body: out, rewritten, depth, nodes }
  if (sessionHint !== undefined) result.sessionHint = sessionHint
  return result
}

interface Shape {
  ok: true
  requestedModel: string
  stream: boolean
  sessionHint: string | undefined
}

function readShape (body: Uint8Array, route: Route): Shape | PrepareRefusal {
  let text: string
  try {
    text = decoder.decode(body)
  } catch {
    const offset = utf8ErrorAt(body)
    return refusal('invalid_json', { reason: 'the body is not UTF-8', ...position(body, offset < 0 ? 0 : offset) })
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    const fault = findSyntaxError(body)
    return refusal('invalid_json', fault ? { reason: fault.reason, ...position(body, fault.offset) } : { reason: 'syntax error' })
  }

  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    return refusal('invalid_request', { field: 'body', reason: 'must be a JSON object' })
  }
  const fields = parsed as Record<string, unknown>
  const requestedModel = fields.model
  if (requestedModel === undefined) return refusal('invalid_request', { field: 'model', reason: 'is required' })
  if (typeof requestedModel !== 'string') return refusal('invalid_request', { field: 'model', reason: 'must be a string' })
  if (requestedModel.length === 0) return refusal('invalid_request', { field: 'model', reason: 'must not be empty' })

  // OpenAI documents `stream` as boolean or null; null means the default (false).
  const stream = fields.stream
  if (stream !== undefined && stream !== null && typeof stream !== 'boolean') {
    return refusal('invalid_request', { field: 'stream', reason: 'must be a boolean' })
  }
  return {
    ok: true,
    requestedModel,
    // count_tokens answers with one JSON object whatever the body says.
    stream: route === 'count_tokens' ? false : stream === true,
    sessionHint: sessionHintOf(route, fields),
  }
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

function refusal (code: ErrorCode, details: ErrorDetails): PrepareRefusal {
  return { ok: false, error: { code, details } }
}
