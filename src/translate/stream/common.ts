// Small readers the decoders share: usage fields, provider error objects, stop reasons.

import { providerErrorCode } from '../../protocols/provider-error.ts'
import type { StopReason, Usage } from '../canonical.ts'
import type { Emitter } from './emit.ts'

export function isObj (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function n (v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined
}

function put (u: Usage, k: 'cachedInputTokens' | 'cacheCreationInputTokens' | 'reasoningTokens', v: unknown): void {
  const x = n(v)
  if (x !== undefined) u[k] = x
}

/** Chat `usage`: prompt_tokens (cached included), completion_tokens (reasoning included). */
export function chatUsage (v: unknown): Usage | null {
  if (!isObj(v)) return null
  const i = n(v.prompt_tokens)
  const o = n(v.completion_tokens)
  if (i === undefined && o === undefined) return null
  const u: Usage = { inputTokens: i ?? 0, outputTokens: o ?? 0 }
  if (isObj(v.prompt_tokens_details)) put(u, 'cachedInputTokens', v.prompt_tokens_details.cached_tokens)
  if (isObj(v.completion_tokens_details)) put(u, 'reasoningTokens', v.completion_tokens_details.reasoning_tokens)
  return u
}

/** Responses `usage`: input_tokens (cached included), output_tokens (reasoning included). */
export function responsesUsage (v: unknown): Usage | null {
  if (!isObj(v)) return null
  const i = n(v.input_tokens)
  const o = n(v.output_tokens)
  if (i === undefined && o === undefined) return null
  const u: Usage = { inputTokens: i ?? 0, outputTokens: o ?? 0 }
  if (isObj(v.input_tokens_details)) put(u, 'cachedInputTokens', v.input_tokens_details.cached_tokens)
  if (isObj(v.output_tokens_details)) put(u, 'reasoningTokens', v.output_tokens_details.reasoning_tokens)
  return u
}

/**
 * Messages `usage`, as canonical totals: Anthropic counts input_tokens apart from
 * cache_read_input_tokens and cache_creation_input_tokens; the canonical inputTokens is all
 * three (like OpenAI's), cachedInputTokens the cache reads. Fields absent from a
 * message_delta's usage are left out (it is merged over message_start's).
 */
export function messagesUsage (v: unknown): Partial<Usage> | null {
  if (!isObj(v)) return null
  const base = n(v.input_tokens)
  const read = n(v.cache_read_input_tokens)
  const created = n(v.cache_creation_input_tokens)
  const o = n(v.output_tokens)
  const u: Partial<Usage> = {}
  if (base !== undefined || read !== undefined || created !== undefined) u.inputTokens = (base ?? 0) + (read ?? 0) + (created ?? 0)
  if (read !== undefined) u.cachedInputTokens = read
  if (created !== undefined) u.cacheCreationInputTokens = created
  if (o !== undefined) u.outputTokens = o
  return Object.keys(u).length === 0 ? null : u
}

export function chatStop (r: string): StopReason {
  switch (r) {
    case 'length': return 'length'
    case 'tool_calls': case 'function_call': return 'tool_calls'
    case 'content_filter': return 'content_filter'
    default: return 'end'
  }
}

export function messagesStop (r: string): StopReason {
  switch (r) {
    case 'max_tokens': case 'model_context_window_exceeded': return 'length'
    case 'tool_use': return 'tool_calls'
    case 'refusal': return 'refusal'
    default: return 'end' // end_turn, stop_sequence, pause_turn
  }
}

const RETRY_IN = /try again in\s*(\d+(?:\.\d+)?)\s*(ms|s|seconds?)\b/i

/** A provider error object -> `error` with the catalogue code (provider-error.ts). */
export function providerFailure (e: Emitter, err: unknown, fallbackType: string, status = 0): void {
  let type = fallbackType
  let code: string | undefined
  let message = 'the provider reported an error'
  if (typeof err === 'string') message = err
  else if (isObj(err)) {
    if (typeof err.type === 'string') type = err.type
    if (typeof err.code === 'string') code = err.code
    else if (typeof err.code === 'number') code = String(err.code)
    if (typeof err.message === 'string') message = err.message.length > 300 ? err.message.slice(0, 300) + '…' : err.message
  }
  const extra: { providerType?: string; providerCode?: string; retryAfterSeconds?: number } = { providerType: type }
  if (code !== undefined) extra.providerCode = code
  const m = RETRY_IN.exec(message)
  if (m !== null) extra.retryAfterSeconds = Math.max(1, Math.ceil(Number(m[1]) / (m[2] === 'ms' ? 1000 : 1)))
  e.fail(providerErrorCode(status, type, code ?? null), `the provider reported ${code ?? type}: ${message}`, extra)
}
