// Reading a provider's non-streaming answer: the parser pool's second task (src/json/task.ts).
// A pure function of its input, like prepare.ts, so it runs the same in a pool thread and in a
// test.
//
//   bytes -> checkJson (the same depth and node caps as request bodies, before anything is
//            built) -> UTF-8 decode (fatal) -> JSON.parse -> a JSON object -> its usage
//
// Why here and not in the HTTP worker: an answer may be up to limits.maxOutputBytes (8 MiB),
// and 8 MiB of `{}` values is 2.5 million objects, more than a 128 MiB worker heap holds
// (measured: ERR_WORKER_OUT_OF_MEMORY, every exchange on that worker lost). A parser thread
// that runs out of heap costs one refusal (worker_heap_exhausted { pool: 'parser' }).
//
// Refusals are plain data with a catalogue code (they cross a thread boundary):
//   output_too_large { reason: 'nodes' | 'depth', limit }  past this gateway's JSON caps: the
//                          answer may be valid, it is more than the gateway reads (local side)
//   provider_protocol_error { reason }                      not UTF-8, not JSON, not an object
// The parsed object never leaves this function; only the usage numbers do.
//
// Translated exchanges (`task.translate`, issue 12): after the same checks and parse, the
// provider's answer is translated into the client protocol's answer by the stream side's own
// decoders and the same canonical events (translateJson, src/translate/stream/index.ts, over
// requestOf(summary)), and serialised once into a fresh ArrayBuffer that goes back by transfer in place of the
// provider's bytes (`translated: true`). `usage` is still read from the provider's answer.
// Its refusals come back the same way: provider_protocol_error for a call that is not complete
// (truncated or malformed arguments, a length stop inside a call) — never a completed call —,
// the provider error's catalogue code for an error object in the answer (provider_error,
// provider_unavailable for an overloaded one, ... as in a stream), output_too_large past
// translate.limits (maxOutputItems items, maxOutputBytes bytes of items or of the answer).
// A pool thread has no ledger: the bytes translation keeps are charged to a CountingBudget
// capped at maxOutputBytes (the answer is whole in this thread's heap already; the cap keeps
// what translation builds beside it to the same bound).

import type { ErrorCode, ErrorDetails } from '../errors.ts'
import { isErrorCode } from '../errors.ts'
import type { Protocol, Usage } from '../protocols/types.ts'
import { usageFromJson as chatUsage } from '../protocols/chat.ts'
import { usageFromJson as messagesUsage } from '../protocols/messages.ts'
import { usageFromJson as responsesUsage } from '../protocols/responses.ts'
import { CountingBudget } from '../translate/canonical.ts'
import { errorDetails, translateJson, type TranslateLimits } from '../translate/stream/index.ts'
import { requestOf, type RequestSummary } from '../translate/summary.ts'
import { checkJson, type JsonLimits } from './bounded.ts'

export interface AnswerTask {
  kind: 'answer'
  /** The answer's bytes. In the pool its ArrayBuffer is transferred and comes back in the result. */
  body: Uint8Array
  protocol: Protocol
  limits: JsonLimits
  /** Translate the answer for a client of another protocol (`protocol` is the provider's). */
  translate?: AnswerTranslateSpec
}

export interface AnswerTranslateSpec {
  /** The client's protocol. */
  to: Protocol
  /** What prepare() returned as `translation` (PrepareOk.translation): tools, stream flags, ... */
  request: RequestSummary
  /** issuerOf(provider protocol, provider name): the reasoning blobs' issuer. */
  issuer: string
  limits: TranslateLimits
  /**
   * A Responses client whose turn the conversation store keeps (worker/continuation.ts): the
   * answer echoes `previous_response_id` and `store`, and its id and `output` (JSON array
   * text) come back in AnswerOk.kept for the store's entry.
   */
  state?: { previousResponseId: string | null, store: boolean, keep: boolean, idSuffix?: string }
}

export interface AnswerOk {
  ok: true
  /** The same bytes, untouched (handed back by transfer). */
  body: Uint8Array
  usage: Record<string, number> | null
  depth: number
  nodes: number
  /** With AnswerTask.translate: `body` is the client's answer, not the provider's bytes. */
  translated?: true
  /** With translate.state.keep: the Responses answer's id and its `output` items (a JSON array text). */
  kept?: { id: string, output: Uint8Array }
}

export interface AnswerRefusal {
  ok: false
  error: { code: ErrorCode; details: ErrorDetails; message: string }
}

export type AnswerResult = AnswerOk | AnswerRefusal

const USAGE: Record<Protocol, (value: unknown) => Usage | null> = {
  'openai-chat': chatUsage,
  'openai-responses': responsesUsage,
  anthropic: messagesUsage,
}

const decoder = new TextDecoder('utf-8', { fatal: true })
const encoder = new TextEncoder()

export function readAnswer (task: AnswerTask): AnswerResult {
  const { body, limits } = task
  let shape
  try {
    shape = checkJson(body, limits)
  } catch (err) {
    const code = (err as { code?: unknown }).code
    if (code === 'json_too_many_nodes') {
      return refuse('output_too_large', { reason: 'nodes', limit: limits.maxNodes }, `the provider's answer has more JSON values than this gateway reads (limits.maxJsonNodes ${limits.maxNodes})`)
    }
    if (code === 'json_too_deep') {
      return refuse('output_too_large', { reason: 'depth', limit: limits.maxDepth }, `the provider's answer nests deeper than this gateway reads (limits.maxJsonDepth ${limits.maxDepth})`)
    }
    return refuse(isErrorCode(code) ? code : 'internal_error', {}, 'the provider\'s answer could not be checked')
  }
  let value: unknown
  try {
    value = JSON.parse(decoder.decode(body))
  } catch {
    return refuse('provider_protocol_error', { reason: 'not JSON', bytes: body.byteLength }, 'the provider answered with a body that is not valid JSON')
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return refuse('provider_protocol_error', { reason: 'not a JSON object', bytes: body.byteLength }, 'the provider answered with JSON that is not an object')
  }
  const usage = USAGE[task.protocol](value)
  const usageOut = usage ? { ...usage } as Record<string, number> : null
  if (task.translate === undefined) return { ok: true, body, usage: usageOut, depth: shape.depth, nodes: shape.nodes }
  const { to, request, issuer, limits: out } = task.translate
  const budget = new CountingBudget(out.maxOutputBytes)
  const r = translateJson({ from: task.protocol, to, request: requestOf(request), budget, issuer, limits: out, answer: value })
  if (!r.ok) {
    const code = r.error.code
    return isErrorCode(code) && code !== 'internal_error' ? refuse(code, errorDetails(r.error), r.error.message) : refuse('internal_error', {}, 'the provider\'s answer could not be translated')
  }
  const answer = r.body
  let kept: AnswerOk['kept']
  const state = task.translate.state
  if (state !== undefined && to === 'openai-responses') {
    answer.previous_response_id = state.previousResponseId
    answer.store = state.store
    if (state.idSuffix !== undefined && typeof answer.id === 'string') answer.id += state.idSuffix
    if (state.keep && typeof answer.id === 'string' && Array.isArray(answer.output) && (answer.status === 'completed' || answer.status === 'incomplete')) {
      kept = { id: answer.id, output: encoder.encode(JSON.stringify(answer.output)) }
    }
  }
  const bytes = encoder.encode(JSON.stringify(answer))
  if (bytes.byteLength > out.maxOutputBytes) {
    return refuse('output_too_large', { reason: 'bytes', limit: out.maxOutputBytes }, `the translated answer is larger than ${out.maxOutputBytes} bytes (limits.maxOutputBytes)`)
  }
  const ok: AnswerOk = { ok: true, body: bytes, usage: usageOut, depth: shape.depth, nodes: shape.nodes, translated: true }
  if (kept !== undefined) ok.kept = kept
  return ok
}

function refuse (code: ErrorCode, details: ErrorDetails, message: string): AnswerRefusal {
  return { ok: false, error: { code, details, message } }
}
