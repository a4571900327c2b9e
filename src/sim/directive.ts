// The `#sim` directive: how a test or benchmark tells the simulated provider what to do.
//
// Grammar (one line of the last user turn's text; keys optional, unknown keys ignored):
//
//   line   = *WSP "#sim" *( 1*WSP token ) *WSP
//   token  = key [ "=" value ]          a bare key means key=1 (e.g. `parallel`)
//   key    = ttft | tokens | interval | tools | parallel | fault | at | size | bytes | thinking
//          | call | args | truncate | error | redacted | cached | reasoning_tokens
//          | reasoning_content | stagger          (the scenario keys: see scenario.ts)
//
// Numbers are non-negative decimal integers; a malformed number is ignored (the default
// stays), a large one is clamped to the limit below. When the text holds several `#sim`
// lines they are applied in order, later keys winning.
//
// "The last user turn" is the last message with role `user` (Claude Code's interleaved
// `role:"system"` entries are skipped). If tool results follow it (Chat `role:"tool"`,
// Responses `*_output` items) — or, in Anthropic, it holds only `tool_result` blocks — the
// turn carries no directive and the defaults apply. This is the same rule in every
// protocol, so a directive survives translation, and an agent's tool loop ends: the turn
// after a tool result gets plain text.
//
// `fault_key=K[,K...]` scopes the fault to those API keys (read by `faultKeysOf`, apart from
// SimDirective): the fault fires only for a request carrying one of them (as `Authorization:
// Bearer` or `x-api-key`); a request with any other key, or none, is answered as if there were
// no fault. A provider with several accounts where some are out, reset or rate-limited (the
// recall-burst load's accounts, src/load/recall.ts).

export const FAULTS = [
  'reset-before-first-byte',
  'status-503',
  'status-429',
  'cut-mid-stream',
  'malformed-frame',
  'oversize-frame',
  'stall',
  'error-event',
] as const

export type SimFault = (typeof FAULTS)[number]

export interface SimDirective {
  /** ms before the first byte (headers and first event go out together). */
  ttft: number
  /** number of text deltas. */
  tokens: number
  /** ms between events; 0 = back to back. */
  interval: number
  /** number of tool calls. */
  tools: number
  /** interleave the tool-call argument deltas of several tools (Chat Completions). */
  parallel: boolean
  fault: SimFault | null
  /** the fault fires after this many events; null = half of the stream. */
  at: number | null
  /** bytes of the oversize frame. */
  size: number
  /** approximate bytes of each text delta; null = short words. */
  bytes: number | null
  /**
   * reasoning deltas before the answer (Anthropic thinking block with a signature, Responses
   * reasoning item with a summary and encrypted_content; Chat has no reasoning channel).
   * null = the protocol default: 2 when an Anthropic request enables thinking, else 0.
   */
  thinking: number | null
}

export const DEFAULT_DIRECTIVE: Readonly<SimDirective> = Object.freeze({
  ttft: 0,
  tokens: 8,
  interval: 0,
  tools: 0,
  parallel: false,
  fault: null,
  at: null,
  size: 1536 * 1024,
  bytes: null,
  thinking: null,
})

export const LIMITS = Object.freeze({
  ttft: 600_000,
  interval: 60_000,
  tokens: 1_000_000,
  tools: 128,
  at: 100_000_000,
  size: 64 * 1024 * 1024,
  bytes: 1024 * 1024,
})

const DIRECTIVE_LINE = /^[ \t]*#sim(?:[ \t]+(.*))?$/gm

/** Applies every `#sim` line in `text` over the defaults. */
export function parseDirective(text: string | null): SimDirective {
  const d: SimDirective = { ...DEFAULT_DIRECTIVE }
  for (const [key, value] of directiveTokens(text)) apply(d, key, value)
  return d
}

/** The keys of the last `fault_key` of `text` (empty: the fault is not scoped to keys). */
export function faultKeysOf(text: string | null): string[] {
  let k: string[] = []
  for (const [key, value] of directiveTokens(text)) if (key === 'fault_key') k = value.split(',').filter((x) => x !== '')
  return k
}

/**
 * Every `key=value` token of every `#sim` line in `text`, in order (a bare key gives value
 * "1"). Shared by `parseDirective` and the scenario keys of scenario.ts.
 */
export function* directiveTokens(text: string | null): Generator<[key: string, value: string], void, undefined> {
  if (text === null || !text.includes('#sim')) return
  for (const m of text.matchAll(DIRECTIVE_LINE)) {
    const rest = m[1]
    if (rest === undefined) continue
    for (const token of rest.split(/\s+/)) {
      if (token === '') continue
      const eq = token.indexOf('=')
      yield eq < 0 ? [token, '1'] : [token.slice(0, eq), token.slice(eq + 1)]
    }
  }
}

function apply(d: SimDirective, key: string, value: string): void {
  switch (key) {
    case 'ttft':
    case 'interval':
    case 'tokens':
    case 'tools': {
      const n = int(value)
      if (n !== null) d[key] = Math.min(n, LIMITS[key])
      return
    }
    case 'at': {
      const n = int(value)
      if (n !== null) d.at = Math.min(n, LIMITS.at)
      return
    }
    case 'thinking': {
      const n = int(value)
      if (n !== null) d.thinking = Math.min(n, LIMITS.tokens)
      return
    }
    case 'size':
    case 'bytes': {
      const n = int(value)
      if (n !== null && n > 0) d[key] = Math.min(n, LIMITS[key])
      return
    }
    case 'parallel':
      if (value === '1' || value === 'true' || value === 'yes') d.parallel = true
      else if (value === '0' || value === 'false' || value === 'no') d.parallel = false
      return
    case 'fault':
      d.fault = (FAULTS as readonly string[]).includes(value) ? (value as SimFault) : d.fault
      return
    default:
      return // unknown keys are ignored on purpose: directives may come from newer tests
  }
}

function int(value: string): number | null {
  if (!/^\d{1,12}$/.test(value)) return null
  return Number(value)
}

export type SimProtocol = 'openai-chat' | 'openai-responses' | 'anthropic'

/**
 * The text of the last user turn, or null when there is none (or it is a tool-result turn).
 * Accepts every content shape the three protocols allow: a string, or an array of text /
 * input_text parts (other parts are skipped).
 */
export function lastUserText(protocol: SimProtocol, body: unknown): string | null {
  if (!isObject(body)) return null
  if (protocol === 'openai-responses') {
    const input = body.input
    if (typeof input === 'string') return input
    return lastUserOf(input, item => isToolOutputItem(item))
  }
  const messages = body.messages
  if (protocol === 'openai-chat') {
    return lastUserOf(messages, item => item.role === 'tool' || item.role === 'function')
  }
  return lastUserOf(messages, () => false)
}

function lastUserOf(items: unknown, isToolOutput: (item: Record<string, unknown>) => boolean): string | null {
  if (!Array.isArray(items)) return null
  for (let i = items.length - 1; i >= 0; i--) {
    const item: unknown = items[i]
    if (!isObject(item)) continue
    if (isToolOutput(item)) return null
    if (item.role === 'user' && (item.type === undefined || item.type === 'message')) return textOf(item.content)
  }
  return null
}

function isToolOutputItem(item: Record<string, unknown>): boolean {
  return typeof item.type === 'string' && item.type.endsWith('_output')
}

function textOf(content: unknown): string | null {
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) return null
  let text: string | null = null
  for (const part of content) {
    if (!isObject(part)) continue
    if ((part.type === 'text' || part.type === 'input_text') && typeof part.text === 'string') {
      text = text === null ? part.text : text + '\n' + part.text
    }
  }
  return text
}

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}
