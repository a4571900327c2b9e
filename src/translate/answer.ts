// A provider's non-streaming JSON answer -> the client protocol's JSON answer, through the
// canonical events (canonical.ts): the provider's answer is decoded into the same event
// sequence a stream gives (start, item_start / delta / item_end per item, finish), and the
// client's answer is built from those events, never by rendering one protocol and parsing it.
//
//   translateAnswer(from, to, answer, ctx) -> the client's answer object; throws SluiceError
//     from   the provider's protocol     to   the client's protocol
//     answer the provider's parsed JSON  ctx  { request: RequestSummary, issuer, limits }
//
// It runs in the parser pool (src/json/answer.ts) after the bounded checks and JSON.parse.
// The stream side (stream/, `translateJson`) does the same for the JSON of each pair with its
// decoders and collecting encoders; this file is the narrow interface the pool calls, written
// whole here because the stream side was being built in parallel: at the merge it can call
// `translateJson({ from, to, request: requestOf(ctx.request), issuer, limits, budget, answer })`
// instead, with the same refusals.
//
// What is carried: text; reasoning (Anthropic thinking + signature and redacted thinking go to
// Responses clients inside `encrypted_content`, OpenAI `encrypted_content` to Claude clients
// inside the thinking `signature`, both as envelope.ts envelopes of reasoning.ts data); tool
// calls with the client's names restored (names.ts: namespace, custom -> custom_tool_call with
// its raw input, tool_search -> tool_search_call); stop reasons; usage (input, output, cached,
// reasoning). Server-side tool traces (Anthropic server_tool_use / *_tool_result blocks,
// Responses *_call items of hosted tools) are not the client's calls and are left out; their
// text answer stays.
//
// Refusals (SluiceError, catalogue codes):
//   provider_protocol_error  a call with a missing name, malformed or non-object arguments, a
//                            custom call without its string `input`, a call cut by a length stop
//                            (or marked incomplete), an answer with no stop reason / an unknown
//                            item, not the protocol's answer shape: never a completed call
//   provider_error           the answer is the provider's error object (a 200 carrying an error)
//   output_too_large         more than limits.maxOutputItems items or limits.maxOutputBytes
//                            reconstructed bytes

import { SluiceError, type ErrorDetails } from '../errors.ts'
import type { CanonicalEvent, ItemDone, ItemStart, Opaque, Protocol, StopReason, ToolCall, Usage } from './canonical.ts'
import { wrapOpaque } from './envelope.ts'
import { restoreName, type ToolIdentity } from './names.ts'
import { anthropicThinkingOpaque, openaiReasoningOpaque } from './reasoning.ts'
import type { RequestSummary } from './summary.ts'

export interface AnswerLimits { maxOutputItems: number; maxOutputBytes: number }

export interface AnswerContext {
  request: RequestSummary
  /** `<provider protocol>:<provider name>` (envelope.ts issuerOf): the issuer of reasoning blobs. */
  issuer: string
  limits: AnswerLimits
}

type Obj = Record<string, unknown>

export function translateAnswer (from: Protocol, to: Protocol, answer: unknown, ctx: AnswerContext): Obj {
  if (from === to) throw new SluiceError('internal_error', { from, to }, 'a same-protocol answer is relayed byte-exact, never translated')
  const events = decodeAnswer(from, answer, ctx)
  return renderAnswer(to, events, ctx.request)
}

// ─── decoding: provider JSON -> canonical events ─────────────────────────────────────────

function broken (message: string, details: ErrorDetails = {}): SluiceError {
  return new SluiceError('provider_protocol_error', { reason: 'translation', ...details }, message)
}

function isObj (v: unknown): v is Obj {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

function num (v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined
}

/** Collects the events of one answer and keeps its caps. */
class Events {
  readonly out: CanonicalEvent[] = []
  readonly #limits: AnswerLimits
  readonly #lookup: Map<string, ToolIdentity>
  #index = 0
  #bytes = 0
  calls = 0

  constructor (ctx: AnswerContext) {
    this.#limits = ctx.limits
    this.#lookup = new Map(ctx.request.tools.map(t => [t.wireName, t.namespace === undefined ? { kind: t.kind, name: t.name } : { kind: t.kind, name: t.name, namespace: t.namespace }]))
  }

  start (id: unknown, model: unknown, created: unknown): void {
    const e: CanonicalEvent = { type: 'start', id: typeof id === 'string' ? id : '', model: typeof model === 'string' ? model : '' }
    const c = num(created)
    if (c !== undefined) e.created = Math.floor(c)
    this.out.push(e)
  }

  #item (start: ItemStart, text: string, done: ItemDone, bytes: number): void {
    if (this.#index >= this.#limits.maxOutputItems) {
      throw new SluiceError('output_too_large', { reason: 'items', limit: this.#limits.maxOutputItems }, `the provider's answer has more than ${this.#limits.maxOutputItems} items (limits.maxOutputItems)`)
    }
    this.#bytes += bytes
    if (this.#bytes > this.#limits.maxOutputBytes) {
      throw new SluiceError('output_too_large', { reason: 'bytes', limit: this.#limits.maxOutputBytes }, `the provider's answer holds more than ${this.#limits.maxOutputBytes} bytes of items (limits.maxOutputBytes)`)
    }
    const index = this.#index++
    this.out.push({ type: 'item_start', index, item: start })
    if (text !== '') this.out.push({ type: 'delta', index, text })
    this.out.push({ type: 'item_end', index, item: done })
  }

  text (text: string): void {
    if (text === '') return
    this.#item({ kind: 'text' }, text, { kind: 'text', text }, Buffer.byteLength(text))
  }

  reasoning (text: string, summary: string[], opaque: Opaque | undefined, extra: { id?: string; redacted?: boolean } = {}): void {
    if (text === '' && summary.length === 0 && opaque === undefined) return
    const done: ItemDone = { kind: 'reasoning', text, summary }
    if (opaque !== undefined) done.opaque = opaque
    if (extra.redacted === true) done.redacted = true
    if (extra.id !== undefined) done.id = extra.id
    const start: ItemStart = extra.id === undefined ? { kind: 'reasoning' } : { kind: 'reasoning', id: extra.id }
    let bytes = Buffer.byteLength(text) + (opaque === undefined ? 0 : Buffer.byteLength(opaque.data))
    for (const s of summary) bytes += Buffer.byteLength(s)
    this.#item(start, text, done, bytes)
  }

  /**
   * One tool call the provider made, by wire name: `args` is a JSON text (Chat, Responses
   * function_call), an object (Anthropic tool_use input) or, for `raw`, a custom call's input.
   * Checked whole before it is ended: a call that is not complete is refused.
   */
  call (callId: unknown, wireName: unknown, args: unknown, raw = false): void {
    const n = this.calls++
    if (typeof wireName !== 'string' || wireName === '') throw broken(`tool call ${n} has no name`, { call: n })
    const id = typeof callId === 'string' && callId !== '' ? callId : `call_${n}`
    const who = restoreName(this.#lookup, wireName)
    let argText: string
    if (raw) {
      if (typeof args !== 'string') throw broken(`custom tool call ${n} ("${wireName}") has no string input`, { call: n })
      if (who.kind !== 'custom') throw broken(`tool call ${n} ("${wireName}") is a custom call to a tool that is not a custom tool`, { call: n })
      argText = args
    } else {
      let value: unknown
      if (typeof args === 'string') {
        if (args.trim() === '') value = {}
        else {
          try {
            value = JSON.parse(args)
          } catch {
            throw broken(`tool call ${n} ("${wireName}") has malformed arguments (not JSON: truncated or broken)`, { call: n })
          }
        }
      } else value = args
      if (!isObj(value)) throw broken(`tool call ${n} ("${wireName}") has arguments that are not a JSON object`, { call: n })
      if (who.kind === 'custom') {
        if (typeof value.input !== 'string') throw broken(`custom tool call ${n} ("${wireName}") has no string "input" argument`, { call: n })
        argText = value.input
      } else argText = typeof args === 'string' && args.trim() !== '' ? args : JSON.stringify(value)
    }
    const call: ToolCall = { kind: who.kind, callId: id, name: who.name, arguments: argText }
    if (who.namespace !== undefined) call.namespace = who.namespace
    const start: ItemStart = { kind: 'tool_call', toolKind: who.kind, callId: id, name: who.name }
    if (who.namespace !== undefined) start.namespace = who.namespace
    this.#item(start, argText, { kind: 'tool_call', call }, Buffer.byteLength(argText) + Buffer.byteLength(id) + Buffer.byteLength(who.name))
  }

  finish (stop: StopReason, usage: Usage | undefined): void {
    if (stop === 'length' && this.lastIsCall()) throw broken('the provider stopped for its length limit inside a tool call: its arguments are incomplete')
    if (stop === 'end' && this.calls > 0) stop = 'tool_calls'
    // a tool stop with no call of the client's (none made, or only server-side tools ran)
    else if (stop === 'tool_calls' && this.calls === 0) stop = 'end'
    this.out.push(usage === undefined ? { type: 'finish', stop } : { type: 'finish', stop, usage })
  }

  lastIsCall (): boolean {
    for (let i = this.out.length - 1; i >= 0; i--) {
      const e = this.out[i]
      if (e.type === 'item_end') return e.item.kind === 'tool_call'
    }
    return false
  }
}

function decodeAnswer (from: Protocol, answer: unknown, ctx: AnswerContext): CanonicalEvent[] {
  if (!isObj(answer)) throw broken('the provider answer is not a JSON object')
  const ev = new Events(ctx)
  if (from === 'openai-chat') decodeChat(answer, ev)
  else if (from === 'openai-responses') decodeResponses(answer, ev, ctx.issuer)
  else decodeMessages(answer, ev, ctx.issuer)
  return ev.out
}

function providerError (e: unknown): SluiceError {
  const o = isObj(e) ? e : {}
  const details: ErrorDetails = { reason: 'error in the answer' }
  if (typeof o.type === 'string') details.providerType = o.type
  if (typeof o.code === 'string') details.providerCode = o.code
  const message = typeof o.message === 'string' ? o.message : 'the provider answered with an error'
  return new SluiceError('provider_error', details, message)
}

function textOf (content: unknown): string {
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) return ''
  const parts: string[] = []
  for (const p of content) if (isObj(p) && typeof p.text === 'string') parts.push(p.text)
  return parts.join('')
}

// Chat: { id, model, created, choices: [{ message: { content, reasoning_content?, refusal?,
// tool_calls? }, finish_reason }], usage }
function decodeChat (a: Obj, ev: Events): void {
  if (a.error !== undefined && a.error !== null) throw providerError(a.error)
  const choice = Array.isArray(a.choices) ? a.choices[0] : undefined
  if (!isObj(choice) || !isObj(choice.message)) throw broken('the provider answer has no choices[0].message')
  const m = choice.message
  ev.start(a.id, a.model, a.created)
  const reasoning = typeof m.reasoning_content === 'string' ? m.reasoning_content : typeof m.reasoning === 'string' ? m.reasoning : ''
  ev.reasoning(reasoning, [], undefined)
  const refusal = typeof m.refusal === 'string' && m.refusal !== '' ? m.refusal : null
  ev.text(refusal ?? textOf(m.content))
  if (m.tool_calls !== undefined && m.tool_calls !== null) {
    if (!Array.isArray(m.tool_calls)) throw broken('choices[0].message.tool_calls is not an array')
    for (const tc of m.tool_calls) {
      if (!isObj(tc)) throw broken('a tool call is not an object')
      if (tc.type === 'custom' && isObj(tc.custom)) ev.call(tc.id, tc.custom.name, tc.custom.input, true)
      else if (isObj(tc.function)) ev.call(tc.id, tc.function.name, tc.function.arguments)
      else throw broken('a tool call has no function')
    }
  }
  const reason = choice.finish_reason
  let stop: StopReason
  switch (reason) {
    case 'stop': stop = 'end'; break
    case 'length': stop = 'length'; break
    case 'tool_calls': case 'function_call': stop = 'tool_calls'; break
    case 'content_filter': stop = 'content_filter'; break
    default: throw broken(`the provider answer has no known finish_reason (${typeof reason === 'string' ? reason.slice(0, 40) : String(reason)})`)
  }
  if (refusal !== null && stop === 'end') stop = 'refusal'
  if (stop === 'length' && ev.calls > 0) throw broken('the provider stopped for its length limit (finish_reason length) with tool calls: their arguments are incomplete')
  ev.finish(stop, chatUsage(a.usage))
}

function chatUsage (u: unknown): Usage | undefined {
  if (!isObj(u)) return undefined
  const usage: Usage = { inputTokens: num(u.prompt_tokens) ?? 0, outputTokens: num(u.completion_tokens) ?? 0 }
  const cached = isObj(u.prompt_tokens_details) ? num(u.prompt_tokens_details.cached_tokens) : undefined
  if (cached !== undefined) usage.cachedInputTokens = cached
  const reasoning = isObj(u.completion_tokens_details) ? num(u.completion_tokens_details.reasoning_tokens) : undefined
  if (reasoning !== undefined) usage.reasoningTokens = reasoning
  return usage
}

// Responses: { id, created_at, model, status, incomplete_details, error, output: [items], usage }
function decodeResponses (a: Obj, ev: Events, issuer: string): void {
  if (a.status === 'failed' || (a.error !== undefined && a.error !== null)) throw providerError(a.error)
  if (!Array.isArray(a.output)) throw broken('the provider answer has no output list')
  ev.start(a.id, a.model, a.created_at)
  let refused = false
  for (const it of a.output) {
    if (!isObj(it)) throw broken('an output item is not an object')
    const incomplete = it.status === 'incomplete'
    switch (it.type) {
      case 'message': {
        const parts: string[] = []
        for (const c of Array.isArray(it.content) ? it.content : []) {
          if (!isObj(c)) continue
          if (c.type === 'output_text' && typeof c.text === 'string') parts.push(c.text)
          else if (c.type === 'refusal' && typeof c.refusal === 'string') { parts.push(c.refusal); refused = true }
        }
        ev.text(parts.join(''))
        break
      }
      case 'reasoning': {
        const summary: string[] = []
        for (const s of Array.isArray(it.summary) ? it.summary : []) if (isObj(s) && typeof s.text === 'string') summary.push(s.text)
        const text = textOf(it.content)
        const id = typeof it.id === 'string' ? it.id : undefined
        const enc = typeof it.encrypted_content === 'string' && it.encrypted_content !== '' ? it.encrypted_content : undefined
        const opaque = enc === undefined ? undefined : openaiReasoningOpaque(issuer, id === undefined ? { encrypted_content: enc } : { id, encrypted_content: enc })
        ev.reasoning(text, summary, opaque, id === undefined ? {} : { id })
        break
      }
      case 'function_call':
        if (incomplete) throw broken(`function call "${String(it.name).slice(0, 64)}" is incomplete`)
        ev.call(it.call_id, it.name, it.arguments)
        break
      case 'custom_tool_call':
        if (incomplete) throw broken(`custom tool call "${String(it.name).slice(0, 64)}" is incomplete`)
        ev.call(it.call_id, it.name, it.input, true)
        break
      default:
        // hosted tools' own traces (web_search_call, ...): run by the provider, not the client's
        if (typeof it.type === 'string' && it.type.endsWith('_call')) break
        throw broken(`the provider answer has an output item of unknown type (${typeof it.type === 'string' ? it.type.slice(0, 40) : typeof it.type})`)
    }
  }
  let stop: StopReason
  if (a.status === 'completed') stop = refused ? 'refusal' : 'end'
  else if (a.status === 'incomplete') {
    const reason = isObj(a.incomplete_details) ? a.incomplete_details.reason : undefined
    stop = reason === 'content_filter' ? 'content_filter' : 'length'
  } else throw broken(`the provider answer is not complete (status ${typeof a.status === 'string' ? a.status.slice(0, 20) : String(a.status)})`)
  ev.finish(stop, responsesUsage(a.usage))
}

function responsesUsage (u: unknown): Usage | undefined {
  if (!isObj(u)) return undefined
  const usage: Usage = { inputTokens: num(u.input_tokens) ?? 0, outputTokens: num(u.output_tokens) ?? 0 }
  const cached = isObj(u.input_tokens_details) ? num(u.input_tokens_details.cached_tokens) : undefined
  if (cached !== undefined) usage.cachedInputTokens = cached
  const reasoning = isObj(u.output_tokens_details) ? num(u.output_tokens_details.reasoning_tokens) : undefined
  if (reasoning !== undefined) usage.reasoningTokens = reasoning
  return usage
}

// Messages: { id, type: 'message', model, content: [blocks], stop_reason, usage }
function decodeMessages (a: Obj, ev: Events, issuer: string): void {
  if (a.type === 'error') throw providerError(a.error)
  if (!Array.isArray(a.content)) throw broken('the provider answer has no content list')
  ev.start(a.id, a.model, undefined)
  for (const b of a.content) {
    if (!isObj(b)) throw broken('a content block is not an object')
    switch (b.type) {
      case 'text':
        if (typeof b.text !== 'string') throw broken('a text block has no text')
        ev.text(b.text)
        break
      case 'thinking': {
        if (typeof b.thinking !== 'string') throw broken('a thinking block has no thinking text')
        const signature = typeof b.signature === 'string' ? b.signature : ''
        ev.reasoning(b.thinking, [], signature === '' ? undefined : anthropicThinkingOpaque(issuer, { type: 'thinking', thinking: b.thinking, signature }))
        break
      }
      case 'redacted_thinking':
        if (typeof b.data !== 'string') throw broken('a redacted_thinking block has no data')
        ev.reasoning('', [], anthropicThinkingOpaque(issuer, { type: 'redacted_thinking', data: b.data }), { redacted: true })
        break
      case 'tool_use':
        ev.call(b.id, b.name, b.input === undefined ? {} : b.input)
        break
      default:
        // server tools (server_tool_use, web_search_tool_result, ...): run by the provider
        if (typeof b.type === 'string' && (b.type === 'server_tool_use' || b.type.endsWith('_tool_result'))) break
        throw broken(`the provider answer has a content block of unknown type (${typeof b.type === 'string' ? b.type.slice(0, 40) : typeof b.type})`)
    }
  }
  let stop: StopReason
  switch (a.stop_reason) {
    case 'end_turn': case 'stop_sequence': case 'pause_turn': stop = 'end'; break
    case 'max_tokens': case 'model_context_window_exceeded': stop = 'length'; break
    case 'tool_use': stop = 'tool_calls'; break
    case 'refusal': stop = 'refusal'; break
    default: throw broken(`the provider answer has no known stop_reason (${typeof a.stop_reason === 'string' ? a.stop_reason.slice(0, 40) : String(a.stop_reason)})`)
  }
  ev.finish(stop, messagesUsage(a.usage))
}

function messagesUsage (u: unknown): Usage | undefined {
  if (!isObj(u)) return undefined
  const read = num(u.cache_read_input_tokens) ?? 0
  const created = num(u.cache_creation_input_tokens) ?? 0
  const usage: Usage = { inputTokens: (num(u.input_tokens) ?? 0) + read + created, outputTokens: num(u.output_tokens) ?? 0 }
  if (read > 0) usage.cachedInputTokens = read
  if (created > 0) usage.cacheCreationInputTokens = created
  return usage
}

// ─── rendering: canonical events -> the client's JSON answer ─────────────────────────────

interface Collected { id: string; model: string; created: number; items: ItemDone[]; stop: StopReason; usage: Usage | undefined }

function collect (events: readonly CanonicalEvent[], request: RequestSummary): Collected {
  const c: Collected = { id: '', model: request.model, created: Math.floor(Date.now() / 1000), items: [], stop: 'end', usage: undefined }
  for (const e of events) {
    if (e.type === 'start') {
      c.id = e.id
      if (e.model !== '') c.model = e.model
      if (e.created !== undefined) c.created = e.created
    } else if (e.type === 'item_end') c.items.push(e.item)
    else if (e.type === 'usage') c.usage = e.usage
    else if (e.type === 'finish') {
      c.stop = e.stop
      if (e.usage !== undefined) c.usage = e.usage
    }
  }
  return c
}

/**
 * The client's answer id from the provider's (the stream side's rule: prefixed when it lacks
 * the client protocol's prefix, characters outside [A-Za-z0-9_-] replaced for Responses and
 * Messages ids); a fresh one when the provider sent none.
 */
function ident (prefix: 'chatcmpl-' | 'resp_' | 'msg_', providerId: string): string {
  const id = providerId === '' ? crypto.randomUUID().replaceAll('-', '') : providerId
  if (prefix === 'chatcmpl-') return id.startsWith('chatcmpl') ? id : prefix + id
  const clean = id.replace(/[^A-Za-z0-9_-]/g, '_')
  return clean.startsWith(prefix) ? clean : prefix + clean
}

export function renderAnswer (to: Protocol, events: readonly CanonicalEvent[], request: RequestSummary): Obj {
  const c = collect(events, request)
  if (to === 'openai-chat') return renderChat(c)
  if (to === 'openai-responses') return renderResponses(c, request)
  return renderMessages(c)
}

function renderChat (c: Collected): Obj {
  const text: string[] = []
  const reasoning: string[] = []
  const calls: Obj[] = []
  for (const d of c.items) {
    if (d.kind === 'text') text.push(d.text)
    else if (d.kind === 'reasoning') { const r = d.text !== '' ? d.text : d.summary.join('\n\n'); if (r !== '') reasoning.push(r) }
    else if (d.call.kind === 'custom') calls.push({ id: d.call.callId, type: 'custom', custom: { name: d.call.name, input: d.call.arguments } })
    else calls.push({ id: d.call.callId, type: 'function', function: { name: d.call.name, arguments: d.call.arguments } })
  }
  const refusal = c.stop === 'refusal'
  const message: Obj = { role: 'assistant', content: refusal || text.length === 0 ? null : text.join(''), refusal: refusal ? text.join('') : null }
  if (reasoning.length > 0) message.reasoning_content = reasoning.join('\n\n')
  if (calls.length > 0) message.tool_calls = calls
  const finish = c.stop === 'length' ? 'length' : c.stop === 'tool_calls' ? 'tool_calls' : c.stop === 'content_filter' || c.stop === 'refusal' ? 'content_filter' : 'stop'
  const out: Obj = { id: ident('chatcmpl-', c.id), object: 'chat.completion', created: c.created, model: c.model, choices: [{ index: 0, message, logprobs: null, finish_reason: finish }] }
  if (c.usage !== undefined) {
    const u = c.usage
    out.usage = {
      prompt_tokens: u.inputTokens,
      completion_tokens: u.outputTokens,
      total_tokens: u.inputTokens + u.outputTokens,
      prompt_tokens_details: { cached_tokens: u.cachedInputTokens ?? 0 },
      completion_tokens_details: { reasoning_tokens: u.reasoningTokens ?? 0 },
    }
  }
  return out
}

const ITEM_PREFIX = { text: 'msg', reasoning: 'rs', function: 'fc', custom: 'ctc', tool_search: 'tsc', hosted: 'fc' } as const

function renderResponses (c: Collected, request: RequestSummary): Obj {
  const id = ident('resp_', c.id)
  const base = id.slice('resp_'.length)
  const output = c.items.map((d, i): Obj => {
    const itemId = `${d.kind === 'tool_call' ? ITEM_PREFIX[d.call.kind] : ITEM_PREFIX[d.kind]}_${base}_${i}`
    if (d.kind === 'text') {
      const content = c.stop === 'refusal' ? { type: 'refusal', refusal: d.text } : { type: 'output_text', annotations: [], logprobs: [], text: d.text }
      return { id: itemId, type: 'message', status: 'completed', role: 'assistant', content: [content] }
    }
    if (d.kind === 'reasoning') {
      const summary = d.summary.length > 0 ? d.summary : d.text !== '' ? [d.text] : []
      const item: Obj = { id: itemId, type: 'reasoning', summary: summary.map(text => ({ type: 'summary_text', text })) }
      if (d.opaque !== undefined) item.encrypted_content = wrapOpaque(d.opaque)
      return item
    }
    const k = d.call
    if (k.kind === 'custom') {
      const item: Obj = { id: itemId, type: 'custom_tool_call', status: 'completed', call_id: k.callId, name: k.name, input: k.arguments }
      if (k.namespace !== undefined) item.namespace = k.namespace
      return item
    }
    if (k.kind === 'tool_search') {
      return { id: itemId, type: 'tool_search_call', status: 'completed', call_id: k.callId, execution: 'client', arguments: JSON.parse(k.arguments) as unknown }
    }
    const item: Obj = { id: itemId, type: 'function_call', status: 'completed', arguments: k.arguments, call_id: k.callId, name: k.name }
    if (k.namespace !== undefined) item.namespace = k.namespace
    return item
  })
  const incomplete = c.stop === 'length' || c.stop === 'content_filter'
  const u = c.usage
  return {
    id,
    object: 'response',
    created_at: c.created,
    status: incomplete ? 'incomplete' : 'completed',
    background: false,
    error: null,
    incomplete_details: incomplete ? { reason: c.stop === 'content_filter' ? 'content_filter' : 'max_output_tokens' } : null,
    instructions: null,
    max_output_tokens: request.maxOutputTokens ?? null,
    model: c.model,
    output,
    parallel_tool_calls: request.parallelToolCalls ?? true,
    previous_response_id: null,
    reasoning: { effort: request.reasoning?.effort ?? null, summary: request.reasoning?.summary ?? null },
    store: false,
    temperature: request.temperature ?? 1,
    text: { format: { type: 'text' } },
    tool_choice: 'auto',
    tools: [],
    top_p: request.topP ?? 1,
    truncation: 'disabled',
    usage: u === undefined
      ? null
      : {
          input_tokens: u.inputTokens,
          input_tokens_details: { cached_tokens: u.cachedInputTokens ?? 0 },
          output_tokens: u.outputTokens,
          output_tokens_details: { reasoning_tokens: u.reasoningTokens ?? 0 },
          total_tokens: u.inputTokens + u.outputTokens,
        },
    user: null,
    metadata: {},
  }
}

function renderMessages (c: Collected): Obj {
  const content: Obj[] = []
  for (const d of c.items) {
    if (d.kind === 'text') content.push({ type: 'text', text: d.text })
    else if (d.kind === 'reasoning') {
      const thinking = d.text !== '' ? d.text : d.summary.join('\n\n')
      content.push({ type: 'thinking', thinking, signature: d.opaque !== undefined ? wrapOpaque(d.opaque) : '' })
    } else content.push({ type: 'tool_use', id: d.call.callId, name: d.call.name, input: JSON.parse(d.call.arguments === '' ? '{}' : d.call.arguments) as unknown })
  }
  const stop = c.stop === 'length' ? 'max_tokens' : c.stop === 'tool_calls' ? 'tool_use' : c.stop === 'content_filter' || c.stop === 'refusal' ? 'refusal' : 'end_turn'
  const u = c.usage
  const cached = u?.cachedInputTokens ?? 0
  const created = u?.cacheCreationInputTokens ?? 0
  const usage = u === undefined
    ? { input_tokens: 0, output_tokens: 0 }
    : { input_tokens: Math.max(0, u.inputTokens - cached - created), cache_creation_input_tokens: created, cache_read_input_tokens: cached, output_tokens: u.outputTokens }
  return { id: ident('msg_', c.id), type: 'message', role: 'assistant', model: c.model, content, stop_reason: stop, stop_sequence: null, usage }
}
