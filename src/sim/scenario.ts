// The scenario keys of the `#sim` directive: which tools are called and how, truncations,
// provider errors mid-stream, redacted thinking, Chat reasoning_content, usage details.
//
// They share the directive's grammar and lines (`directiveTokens` in directive.ts) but are
// parsed into their own record, so `SimDirective` keeps its shape and defaults:
//
//   call=NAME[,NAME...]   repeatable; the tools to call, in order (cycled when tools=N is larger)
//   args=TEXT             the arguments (or custom-tool input) of every call, verbatim;
//                         percent-decoded (`%20` is a space); `args=none` is the empty text
//   truncate=args|length|filter|eof   (filter: a content-filter stop; `content_filter` accepted)
//   error=overloaded|rate_limit|invalid_request|context_length|insufficient_quota
//                         (the protocols' own names are accepted too, e.g. overloaded_error,
//                         rate_limit_exceeded, context_length_exceeded)
//   redacted=N            Anthropic redacted_thinking blocks
//   cached=N              cached input tokens in usage
//   reasoning_tokens=N    reasoning tokens in usage (added to the output tokens)
//   reasoning_content     Chat: `reasoning_content` deltas (DeepSeek style), `thinking=N` of them
//   stagger               Chat with `parallel`: call k's head comes only after the earlier calls'
//                         arguments began (a wave), instead of all heads first
//
// Unknown keys are ignored here as in parseDirective (each parser ignores the other's keys).

import { directiveTokens } from './directive.ts'

export const TRUNCATIONS = ['args', 'length', 'filter', 'eof'] as const
export type SimTruncation = (typeof TRUNCATIONS)[number]

/** A truncation that ends with the provider's stop (length or content filter), not a cut stream. */
export function isEarlyStop(t: SimTruncation | null): t is 'length' | 'filter' {
  return t === 'length' || t === 'filter'
}

export const STREAM_ERRORS = ['overloaded', 'rate_limit', 'invalid_request', 'context_length', 'insufficient_quota'] as const
export type SimStreamError = (typeof STREAM_ERRORS)[number]

const ERROR_ALIASES: Readonly<Record<string, SimStreamError>> = Object.freeze({
  overloaded_error: 'overloaded',
  server_is_overloaded: 'overloaded',
  rate_limit_error: 'rate_limit',
  rate_limit_exceeded: 'rate_limit',
  invalid_request_error: 'invalid_request',
  invalid_prompt: 'invalid_request',
  context_length_exceeded: 'context_length',
  billing_error: 'insufficient_quota',
})

export interface SimScenario {
  /** Names of the tools to call, in order; empty = the `tools=N` default (declared tools, cycled). */
  readonly calls: readonly string[]
  /** Forced argument text (custom tools: input) of every call; null = generated from the schema. */
  readonly args: string | null
  readonly truncate: SimTruncation | null
  /** A provider error in the stream (at `at`), or the HTTP error when not streaming. */
  readonly error: SimStreamError | null
  /** Anthropic redacted_thinking blocks after the thinking block. */
  readonly redacted: number
  /** Cached input tokens reported in usage; null = the field stays 0 / absent as before. */
  readonly cached: number | null
  /** Reasoning tokens reported in usage; null = 0 / absent. */
  readonly reasoningTokens: number | null
  /** Chat Completions: stream the reasoning as `reasoning_content` deltas. */
  readonly reasoningContent: boolean
  /** Chat Completions with `parallel`: start call k one round after call k-1. */
  readonly stagger: boolean
}

export const DEFAULT_SCENARIO: Readonly<SimScenario> = Object.freeze({
  calls: Object.freeze([]) as readonly string[],
  args: null,
  truncate: null,
  error: null,
  redacted: 0,
  cached: null,
  reasoningTokens: null,
  reasoningContent: false,
  stagger: false,
})

export const SCENARIO_LIMITS = Object.freeze({
  calls: 128,
  redacted: 16,
  usageTokens: 1_000_000_000,
  argsBytes: 64 * 1024,
})

export function parseScenario(text: string | null): SimScenario {
  const calls: string[] = []
  const s: { -readonly [K in keyof SimScenario]: SimScenario[K] } = { ...DEFAULT_SCENARIO, calls }
  for (const [key, value] of directiveTokens(text)) {
    switch (key) {
      case 'call':
        for (const name of value.split(',')) {
          if (name !== '' && calls.length < SCENARIO_LIMITS.calls) calls.push(name)
        }
        break
      case 'args': {
        const decoded = value === 'none' ? '' : percentDecode(value)
        if (decoded.length <= SCENARIO_LIMITS.argsBytes) s.args = decoded
        break
      }
      case 'truncate':
        if ((TRUNCATIONS as readonly string[]).includes(value)) s.truncate = value as SimTruncation
        else if (value === 'content_filter') s.truncate = 'filter'
        break
      case 'error': {
        const kind = (STREAM_ERRORS as readonly string[]).includes(value) ? (value as SimStreamError) : ERROR_ALIASES[value]
        if (kind !== undefined) s.error = kind
        break
      }
      case 'redacted': {
        const n = int(value)
        if (n !== null) s.redacted = Math.min(n, SCENARIO_LIMITS.redacted)
        break
      }
      case 'cached':
      case 'reasoning_tokens': {
        const n = int(value)
        if (n !== null) s[key === 'cached' ? 'cached' : 'reasoningTokens'] = Math.min(n, SCENARIO_LIMITS.usageTokens)
        break
      }
      case 'reasoning_content':
      case 'stagger': {
        const field = key === 'stagger' ? 'stagger' : 'reasoningContent'
        if (value === '1' || value === 'true' || value === 'yes') s[field] = true
        else if (value === '0' || value === 'false' || value === 'no') s[field] = false
        break
      }
      default:
        break
    }
  }
  return s
}

function int(value: string): number | null {
  return /^\d{1,12}$/.test(value) ? Number(value) : null
}

function percentDecode(value: string): string {
  if (!value.includes('%')) return value
  try {
    return decodeURIComponent(value)
  } catch {
    return value // a literal '%' that is not an escape
  }
}

/** How each protocol family reports one `error=` kind. */
export interface StreamErrorRow {
  readonly anthropicType: string
  readonly anthropicStatus: number
  readonly anthropicMessage: string
  readonly openaiType: string
  readonly openaiCode: string
  readonly openaiStatus: number
  readonly openaiMessage: string
  readonly param: string | null
  /** Extra headers of the non-streaming answer. */
  readonly headers: Readonly<Record<string, string>>
}

/** The "try again in" time Codex parses out of a rate_limit_exceeded message. */
export const RATE_LIMIT_RETRY = '1.5s'

export const STREAM_ERROR_ROWS: Readonly<Record<SimStreamError, StreamErrorRow>> = Object.freeze({
  overloaded: {
    anthropicType: 'overloaded_error', anthropicStatus: 529, anthropicMessage: 'Overloaded (simulated)',
    openaiType: 'server_error', openaiCode: 'server_is_overloaded', openaiStatus: 503,
    openaiMessage: 'The server is overloaded (simulated). Please try again later.', param: null, headers: {},
  },
  rate_limit: {
    anthropicType: 'rate_limit_error', anthropicStatus: 429, anthropicMessage: 'Number of request tokens has exceeded your per-minute rate limit (simulated)',
    openaiType: 'tokens', openaiCode: 'rate_limit_exceeded', openaiStatus: 429,
    openaiMessage: `Rate limit reached for sim-model on tokens per min (TPM): Limit 30000, Used 30000, Requested 1000 (simulated). Please try again in ${RATE_LIMIT_RETRY}.`,
    param: null, headers: { 'retry-after': '2', 'retry-after-ms': '1500' },
  },
  invalid_request: {
    anthropicType: 'invalid_request_error', anthropicStatus: 400, anthropicMessage: 'sim: invalid request (simulated)',
    openaiType: 'invalid_request_error', openaiCode: 'invalid_prompt', openaiStatus: 400,
    openaiMessage: 'sim: invalid prompt (simulated)', param: null, headers: {},
  },
  context_length: {
    anthropicType: 'invalid_request_error', anthropicStatus: 400, anthropicMessage: 'prompt is too long: 210000 tokens > 200000 maximum (simulated)',
    openaiType: 'invalid_request_error', openaiCode: 'context_length_exceeded', openaiStatus: 400,
    openaiMessage: 'Your input exceeds the context window of this model (simulated). Please adjust your input and try again.', param: 'input', headers: {},
  },
  insufficient_quota: {
    anthropicType: 'billing_error', anthropicStatus: 402, anthropicMessage: 'Your credit balance is too low to access the API (simulated)',
    openaiType: 'insufficient_quota', openaiCode: 'insufficient_quota', openaiStatus: 429,
    openaiMessage: 'You exceeded your current quota, please check your plan and billing details (simulated).', param: null, headers: {},
  },
})

/** `{"error":{...}}` (OpenAI) / `{"type":"error","error":{...}}` (Anthropic) for one kind. */
export function streamErrorBody(family: 'openai' | 'anthropic', kind: SimStreamError): string {
  const row = STREAM_ERROR_ROWS[kind]
  if (family === 'anthropic') return JSON.stringify({ type: 'error', error: { type: row.anthropicType, message: row.anthropicMessage } })
  return JSON.stringify({ error: { message: row.openaiMessage, type: row.openaiType, param: row.param, code: row.openaiCode } })
}
