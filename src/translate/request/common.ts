// What the three request adapters share: shape checks that refuse with the field's path, the
// encode context, images (data: URL <-> base64), the reasoning effort <-> thinking budget table,
// the custom-tool parameter schema, and the turn normalisation that puts every tool result
// right after the assistant message that called it.

import { createHash } from 'node:crypto'
import { SluiceError } from '../../errors.ts'
import type { CanonicalRequest, ImageSource, Message, Part, Protocol, ToolDef, ToolOutput } from '../canonical.ts'

/** What an encoder needs beyond the canonical request. */
export interface EncodeContext {
  /** The provider's own model name. */
  model: string
  /** `issuerOf(provider protocol, provider name)`: only envelopes from this issuer are restored. */
  issuer: string
  stream: boolean
  /**
   * Whether the provider's model takes reasoning parameters (default true). False: no
   * reasoning / reasoning_effort / thinking / include is sent and no reasoning is replayed —
   * a model without reasoning refuses those fields. (Not yet a config field: the caller decides.)
   */
  reasoning?: boolean
}

export type Json = Record<string, unknown>

export function invalid (field: string, message: string): SluiceError {
  return new SluiceError('invalid_request', { field }, `${field}: ${message}`)
}

export function isObj (v: unknown): v is Json {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

export function obj (v: unknown, field: string): Json {
  if (!isObj(v)) throw invalid(field, 'must be an object')
  return v
}

export function arr (v: unknown, field: string): unknown[] {
  if (!Array.isArray(v)) throw invalid(field, 'must be an array')
  return v
}

export function str (v: unknown, field: string): string {
  if (typeof v !== 'string') throw invalid(field, 'must be a string')
  return v
}

export function optStr (v: unknown, field: string): string | undefined {
  return v === undefined || v === null ? undefined : str(v, field)
}

export function optNum (v: unknown, field: string): number | undefined {
  if (v === undefined || v === null) return undefined
  if (typeof v !== 'number' || !Number.isFinite(v)) throw invalid(field, 'must be a number')
  return v
}

export function optBool (v: unknown, field: string): boolean | undefined {
  if (v === undefined || v === null) return undefined
  if (typeof v !== 'boolean') throw invalid(field, 'must be a boolean')
  return v
}

/** A field the translation cannot carry: refused, naming it, rather than silently dropped. */
/** The canonical request a decoder starts from: `client`, and the body's model and stream flag (checked). */
export function newRequest (client: Protocol, b: Json): CanonicalRequest {
  return {
    client,
    model: str(b.model, 'model'),
    stream: optBool(b.stream, 'stream') ?? false,
    system: [],
    messages: [],
    tools: [],
    droppedTools: [],
  }
}

/** The request's tools as `encode` puts them on the provider's wire; one it cannot (null) is named in req.droppedTools. */
export function encodeTools (req: CanonicalRequest, encode: (t: ToolDef, req: CanonicalRequest) => Json | null): Json[] {
  const tools: Json[] = []
  for (const t of req.tools) {
    const enc = encode(t, req)
    if (enc === null) req.droppedTools.push(t.name)
    else tools.push(enc)
  }
  return tools
}

// ─── images ─────────────────────────────────────────────────────────────────────────────

const DATA_URL = /^data:([a-zA-Z0-9.+/-]+);base64,(.*)$/s

/** An image URL as the canonical source: a base64 data: URL becomes base64 data. */
export function imageFromUrl (url: string): ImageSource {
  const m = DATA_URL.exec(url)
  return m === null ? { kind: 'url', url } : { kind: 'base64', mediaType: m[1], data: m[2] }
}

/** The canonical source as one URL (base64 becomes a data: URL). */
export function imageUrl (s: ImageSource): string {
  return s.kind === 'url' ? s.url : `data:${s.mediaType};base64,${s.data}`
}

// ─── reasoning effort <-> thinking budget ──────────────────────────────────────────────
//
//   effort (OpenAI reasoning.effort / reasoning_effort, Anthropic output_config.effort)
//   minimal 1024 · low 2048 · medium 8192 · high 16384 · xhigh/max 32768 budget_tokens
//   budget -> effort: < 4096 low · < 16384 medium · < 32768 high · else xhigh
//   (`minimal` is never produced from a budget: it disables tools on some OpenAI models)

const BUDGET: Record<string, number> = { minimal: 1024, low: 2048, medium: 8192, high: 16384, xhigh: 32768, max: 32768 }
export const DEFAULT_EFFORT = 'medium'
/** Anthropic's smallest thinking budget. */
export const MIN_THINKING_BUDGET = 1024

export function budgetForEffort (effort: string | undefined): number {
  return BUDGET[effort ?? DEFAULT_EFFORT] ?? BUDGET[DEFAULT_EFFORT]
}

export function effortForBudget (budget: number): string {
  if (budget < 4096) return 'low'
  if (budget < 16384) return 'medium'
  if (budget < 32768) return 'high'
  return 'xhigh'
}

// ─── custom tools as functions ─────────────────────────────────────────────────────────

/**
 * The one-parameter schema a custom/freeform tool gets on a function-only provider. The
 * parameter's description carries the tool's grammar, the only place the model can read it.
 */
export function customToolSchema (format: Json | undefined): Json {
  let description = 'The raw input of this freeform tool, as plain text (not JSON-encoded).'
  if (format !== undefined && format.type === 'grammar' && typeof format.definition === 'string') {
    const syntax = typeof format.syntax === 'string' ? format.syntax : 'grammar'
    description += ` It must follow this ${syntax} grammar:\n${format.definition}`
  } else if (format !== undefined && format.type === 'regex' && typeof format.definition === 'string') {
    description += ` It must match this regular expression: ${format.definition}`
  }
  return { type: 'object', properties: { input: { type: 'string', description } }, required: ['input'], additionalProperties: false }
}

/** The function arguments a custom call's raw input becomes (and back). */
export function customArguments (input: string): string {
  return JSON.stringify({ input })
}

// ─── tool output ───────────────────────────────────────────────────────────────────────

export function outputText (o: ToolOutput): string {
  if (typeof o === 'string') return o
  const texts: string[] = []
  for (const p of o) if (p.type === 'text') texts.push(p.text)
  return texts.join('\n')
}

export function outputImages (o: ToolOutput): ImageSource[] {
  if (typeof o === 'string') return []
  const images: ImageSource[] = []
  for (const p of o) if (p.type === 'image') images.push(p.source)
  return images
}

/**
 * A history call id in the form a provider accepts (Anthropic: ^[a-zA-Z0-9_-]+$; OpenAI Chat:
 * at most 40 characters). A valid id is unchanged; another is sanitised and suffixed with a hash
 * of the original, so distinct ids stay distinct. The same function rewrites a call and its
 * result, so they still pair; the provider never sends these ids back (its answer has new ones).
 */
export function providerCallId (id: string, max: number): string {
  if (id.length <= max && /^[a-zA-Z0-9_-]+$/.test(id)) return id
  const suffix = '_' + createHash('sha256').update(id, 'utf8').digest('hex').slice(0, 12)
  return id.replace(/[^a-zA-Z0-9_-]/g, '_').slice(0, max - suffix.length) + suffix
}

/** JSON arguments as the object Anthropic's tool_use.input needs. */
export function argumentsObject (args: string, field: string): Json {
  if (args.trim() === '') return {}
  let v: unknown
  try {
    v = JSON.parse(args)
  } catch {
    throw invalid(field, 'the tool call\'s arguments are not valid JSON')
  }
  if (!isObj(v)) throw invalid(field, 'the tool call\'s arguments are not a JSON object')
  return v
}

// ─── turns ─────────────────────────────────────────────────────────────────────────────

/**
 * The history with every tool result placed in a user message right after the assistant
 * message holding its call (results first, in call order, then whatever else that user
 * message had), consecutive messages of the same role merged, and system/developer messages
 * that would split a call from its results moved after the results.
 *
 * Refuses (invalid_request) a result without an earlier call, a call answered twice, and a
 * call without a result: every provider refuses those too, and guessing would invent output.
 */
export function normaliseTurns (messages: readonly Message[], client: Protocol): Message[] {
  const results = new Map<string, Part>()
  const called = new Set<string>()
  for (const m of messages) {
    for (const p of m.parts) {
      if (p.type === 'tool_call') called.add(p.call.callId)
      if (p.type === 'tool_result') {
        if (!called.has(p.callId)) throw invalid(resultField(client), `tool result "${p.callId}" answers no earlier tool call`)
        if (results.has(p.callId)) throw invalid(resultField(client), `tool call "${p.callId}" has more than one result`)
        results.set(p.callId, p)
      }
    }
  }
  const out: Message[] = []
  const push = (m: Message): void => {
    if (m.parts.length === 0) return
    const last = out[out.length - 1]
    if (last !== undefined && last.role === m.role && (m.role === 'user' || m.role === 'assistant')) last.parts.push(...m.parts)
    else out.push({ role: m.role, parts: [...m.parts] })
  }
  let deferred: Message[] = []
  let pending: string[] = []
  const flush = (): void => {
    if (pending.length > 0) {
      const missing = pending.find(id => !results.has(id))
      if (missing !== undefined) throw invalid(resultField(client), `tool call "${missing}" has no result`)
      push({ role: 'user', parts: pending.map(id => results.get(id) as Part) })
      pending = []
    }
    for (const m of deferred) push(m)
    deferred = []
  }
  for (const m of messages) {
    const rest = m.parts.filter(p => p.type !== 'tool_result')
    if (m.role === 'system' || m.role === 'developer') {
      if (pending.length > 0) deferred.push({ role: m.role, parts: rest })
      else push({ role: m.role, parts: rest })
      continue
    }
    if (m.role === 'assistant') {
      // An assistant message straight after one with calls: the calls still wait for results.
      if (pending.length > 0 && rest.some(p => p.type === 'tool_call')) {
        push({ role: 'assistant', parts: rest })
        for (const p of rest) if (p.type === 'tool_call') pending.push(p.call.callId)
        continue
      }
      flush()
      push({ role: 'assistant', parts: rest })
      for (const p of rest) if (p.type === 'tool_call') pending.push(p.call.callId)
      continue
    }
    // user: results go where the calls are; the rest follows them
    flush()
    push({ role: 'user', parts: rest })
  }
  flush()
  return out
}

function resultField (client: Protocol): string {
  return client === 'openai-responses' ? 'input' : 'messages'
}
