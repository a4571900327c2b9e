// Anthropic Messages request <-> CanonicalRequest.
//
//   Messages (client body)                            canonical
//   ───────────────────────────────────────────────   ──────────────────────────────────────────────
//   system: string | text blocks                      system[] (role system)
//   messages role system (Claude Code)                Message system (kept in place)
//   text / image {base64 | url} blocks                text / image parts (file sources refused)
//   tool_use {id, name, input}                        tool_call kind function (arguments = JSON text)
//   tool_result {tool_use_id, content, is_error}      tool_result
//   thinking {thinking, signature}                    reasoning; opaque only when the signature is our envelope
//   redacted_thinking {data}                          reasoning redacted; opaque only when data is our envelope
//   server_tool_use / *_tool_result (hosted)          dropped (hosted history no other provider can read)
//   tools {name, input_schema} / typed (web_search_*, bash_*, ...)   function / hosted
//   tool_choice auto|any|tool|none + disable_parallel_tool_use      auto|required|tool|none + parallelToolCalls
//   max_tokens, temperature, top_p, stop_sequences    same
//   thinking enabled{budget_tokens} | adaptive | disabled, output_config.effort   reasoning
//   output_config.format json_schema                  output
//   dropped: metadata, context_management, top_k, service_tier, container, mcp_servers, cache_control
//
// Encoding for an Anthropic provider (the client is Chat or Responses):
//   - `max_tokens` is required: the client's max tokens, else DEFAULT_MAX_TOKENS (8192), plus the
//     thinking budget when thinking is on (so the answer keeps its 8192);
//   - thinking: reasoning on -> {type:'enabled', budget_tokens} (common.ts effort table), the budget
//     capped below a client's max tokens; off when that leaves < 1024, when the tool choice forces a
//     tool (Anthropic refuses forced tool use with thinking), or when an assistant tool_use turn of
//     the current tool loop (after the last real user message) does not start with a thinking block
//     restored for this provider (Anthropic refuses such a turn while thinking is on). With thinking
//     off, no thinking block is sent at all. With thinking on, temperature / top_p are left out
//     (Anthropic refuses them with thinking); otherwise top_p is left out when temperature is set
//     (newer models refuse both);
//   - leading system / developer messages join `system`; later ones stay `role: 'system'` messages;
//   - tool results go first in the user message right after their tool_use; consecutive same-role
//     messages are merged; empty text blocks are left out; a history call id outside
//     ^[a-zA-Z0-9_-]+$ is rewritten the same way in the call and its result (common.ts);
//   - custom tools get one `input` string parameter, tool_search is a function; web_search maps to
//     web_search_20250305, other hosted tools are dropped and listed;
//   - structured output: json_schema -> output_config.format; json_object is refused naming the field.

import type { CanonicalRequest, ImageSource, Message, Part, ToolCall, ToolChoice, ToolDef, ToolOutput } from '../canonical.ts'
import { unwrapOpaque } from '../envelope.ts'
import { wireNameOf } from '../names.ts'
import { parseAnthropicThinkingOpaque } from '../reasoning.ts'
import { mapHosted } from './hosted.ts'
import {
  arr, argumentsObject, budgetForEffort, customToolSchema, encodeTools, imageFromUrl, invalid, isObj, MIN_THINKING_BUDGET, newRequest, normaliseTurns,
  obj, optBool, optNum, optStr, providerCallId, str, type EncodeContext, type Json,
} from './common.ts'

export const DEFAULT_MAX_TOKENS = 8192
/** tool_use ids: ^[a-zA-Z0-9_-]+$ (kept short; common.ts providerCallId). */
const CALL_ID_MAX = 64

// ─── decode ────────────────────────────────────────────────────────────────────────────

export function decodeMessagesRequest (body: unknown): CanonicalRequest {
  const b = obj(body, 'body')
  const req = newRequest('anthropic', b)
  if (typeof b.system === 'string') {
    if (b.system !== '') req.system.push({ role: 'system', text: b.system })
  } else if (b.system !== undefined && b.system !== null) {
    arr(b.system, 'system').forEach((s, i) => {
      const text = str(obj(s, `system[${i}]`).text, `system[${i}].text`)
      if (text !== '') req.system.push({ role: 'system', text })
    })
  }
  arr(b.messages, 'messages').forEach((raw, i) => {
    const f = `messages[${i}]`
    const m = obj(raw, f)
    const role = str(m.role, `${f}.role`)
    if (role !== 'user' && role !== 'assistant' && role !== 'system') throw invalid(`${f}.role`, `unknown role "${role}"`)
    req.messages.push({ role, parts: decodeContent(m.content, `${f}.content`) })
  })
  if (Array.isArray(b.tools)) b.tools.forEach((t, i) => { req.tools.push(decodeTool(t, `tools[${i}]`)) })
  if (isObj(b.tool_choice)) {
    const c = b.tool_choice
    if (c.type === 'auto') req.toolChoice = { type: 'auto' }
    else if (c.type === 'any') req.toolChoice = { type: 'required' }
    else if (c.type === 'none') req.toolChoice = { type: 'none' }
    else if (c.type === 'tool') req.toolChoice = { type: 'tool', wireName: wireNameOf(str(c.name, 'tool_choice.name')) }
    else throw invalid('tool_choice.type', `unknown tool_choice "${String(c.type)}"`)
    if (optBool(c.disable_parallel_tool_use, 'tool_choice.disable_parallel_tool_use') === true) req.parallelToolCalls = false
  }
  req.maxOutputTokens = optNum(b.max_tokens, 'max_tokens')
  req.temperature = optNum(b.temperature, 'temperature')
  req.topP = optNum(b.top_p, 'top_p')
  if (b.stop_sequences !== undefined && b.stop_sequences !== null) req.stop = arr(b.stop_sequences, 'stop_sequences').map((s, i) => str(s, `stop_sequences[${i}]`))
  const effort = isObj(b.output_config) ? optStr(b.output_config.effort, 'output_config.effort') : undefined
  if (isObj(b.thinking)) {
    const t = b.thinking
    if (t.type === 'enabled') req.reasoning = { enabled: true, budgetTokens: optNum(t.budget_tokens, 'thinking.budget_tokens'), ...(effort !== undefined ? { effort } : {}) }
    else if (t.type === 'adaptive' || t.type === 'between_tools') req.reasoning = { enabled: true, ...(effort !== undefined ? { effort } : {}) }
    else req.reasoning = { enabled: false }
  } else if (effort !== undefined) {
    req.reasoning = { enabled: false, effort }
  }
  if (isObj(b.output_config) && isObj(b.output_config.format)) {
    const fmt = b.output_config.format
    if (fmt.type !== 'json_schema') throw invalid('output_config.format.type', `unknown format "${String(fmt.type)}"`)
    req.output = { type: 'json_schema', schema: obj(fmt.schema, 'output_config.format.schema') }
  }
  return req
}

const HOSTED_RESULT = /_tool_result$/

function decodeContent (content: unknown, f: string): Part[] {
  if (typeof content === 'string') return [{ type: 'text', text: content }]
  const parts: Part[] = []
  arr(content, f).forEach((raw, j) => {
    const bf = `${f}[${j}]`
    const b = obj(raw, bf)
    const type = str(b.type, `${bf}.type`)
    if (type === 'text') parts.push({ type: 'text', text: str(b.text, `${bf}.text`) })
    else if (type === 'image') parts.push({ type: 'image', source: decodeImage(b.source, `${bf}.source`) })
    else if (type === 'tool_use') {
      const input = b.input === undefined ? {} : b.input
      parts.push({ type: 'tool_call', call: { kind: 'function', callId: str(b.id, `${bf}.id`), name: str(b.name, `${bf}.name`), arguments: JSON.stringify(input) } })
    } else if (type === 'tool_result') {
      const callId = str(b.tool_use_id, `${bf}.tool_use_id`)
      const part: Part = { type: 'tool_result', callId, kind: 'function', output: decodeResultContent(b.content, `${bf}.content`) }
      if (b.is_error === true) part.isError = true
      parts.push(part)
    } else if (type === 'thinking') {
      const part: Part = { type: 'reasoning', text: str(b.thinking, `${bf}.thinking`) }
      const opaque = unwrapOpaque(str(b.signature ?? '', `${bf}.signature`))
      if (opaque !== null) part.opaque = opaque
      parts.push(part)
    } else if (type === 'redacted_thinking') {
      const part: Part = { type: 'reasoning', text: '', redacted: true }
      const opaque = unwrapOpaque(str(b.data, `${bf}.data`))
      if (opaque !== null) part.opaque = opaque
      parts.push(part)
    } else if (type === 'server_tool_use' || HOSTED_RESULT.test(type)) {
      // hosted tool history: only the provider that ran it can read it
    } else {
      throw invalid(`${bf}.type`, `content blocks of type "${type}" cannot be translated for a provider of another protocol`)
    }
  })
  return parts
}

function decodeImage (raw: unknown, f: string): ImageSource {
  const s = obj(raw, f)
  if (s.type === 'base64') return { kind: 'base64', mediaType: str(s.media_type, `${f}.media_type`), data: str(s.data, `${f}.data`) }
  if (s.type === 'url') return imageFromUrl(str(s.url, `${f}.url`))
  throw invalid(`${f}.type`, `image sources of type "${String(s.type)}" cannot be read by a provider of another protocol`)
}

function decodeResultContent (c: unknown, f: string): ToolOutput {
  if (c === undefined || c === null) return ''
  if (typeof c === 'string') return c
  return arr(c, f).map((raw, j) => {
    const b = obj(raw, `${f}[${j}]`)
    if (b.type === 'text') return { type: 'text' as const, text: str(b.text, `${f}[${j}].text`) }
    if (b.type === 'image') return { type: 'image' as const, source: decodeImage(b.source, `${f}[${j}].source`) }
    throw invalid(`${f}[${j}].type`, `tool result content of type "${String(b.type)}" cannot be translated`)
  })
}

function decodeTool (raw: unknown, f: string): ToolDef {
  const t = obj(raw, f)
  if (t.type !== undefined && t.type !== null && t.type !== 'custom') {
    const type = str(t.type, `${f}.type`)
    return { kind: 'hosted', name: typeof t.name === 'string' ? t.name : type, wireName: typeof t.name === 'string' ? t.name : type, hosted: t }
  }
  const name = str(t.name, `${f}.name`)
  const def: ToolDef = { kind: 'function', name, wireName: wireNameOf(name) }
  const d = optStr(t.description, `${f}.description`)
  if (d !== undefined) def.description = d
  if (t.input_schema !== undefined) def.parameters = obj(t.input_schema, `${f}.input_schema`)
  return def
}

// ─── encode (for an Anthropic provider) ────────────────────────────────────────────────

interface Turn { role: 'user' | 'assistant' | 'system'; content: Json[] }

export function encodeMessagesRequest (req: CanonicalRequest, ctx: EncodeContext): Json {
  const turns = normaliseTurns(req.messages, req.client)
  const system: Json[] = req.system.map(s => ({ type: 'text', text: s.text }))
  let lead = 0
  while (lead < turns.length && (turns[lead].role === 'system' || turns[lead].role === 'developer')) {
    for (const p of turns[lead].parts) if (p.type === 'text' && p.text !== '') system.push({ type: 'text', text: p.text })
    lead++
  }
  const rest = turns.slice(lead)

  // thinking: wanted, affordable, not against a forced tool, and every tool turn of the loop starts with our block
  const r = req.reasoning
  const forced = req.toolChoice?.type === 'required' || req.toolChoice?.type === 'tool'
  let budget = r !== undefined && r.enabled && !forced && ctx.reasoning !== false ? (r.budgetTokens ?? budgetForEffort(r.effort)) : 0
  if (req.maxOutputTokens !== undefined && budget >= req.maxOutputTokens) budget = req.maxOutputTokens - 1
  let messages = encodeTurns(rest, ctx, budget >= MIN_THINKING_BUDGET)
  if (budget >= MIN_THINKING_BUDGET && !toolLoopHasThinking(messages)) budget = 0
  if (budget < MIN_THINKING_BUDGET) messages = encodeTurns(rest, ctx, false)
  const thinking = budget >= MIN_THINKING_BUDGET
  const maxTokens = req.maxOutputTokens ?? DEFAULT_MAX_TOKENS + (thinking ? budget : 0)

  const body: Json = { model: ctx.model, max_tokens: maxTokens }
  if (system.length > 0) body.system = system
  body.messages = messages
  const tools = encodeTools(req, encodeTool)
  if (tools.length > 0) {
    body.tools = tools
    const choice = encodeChoice(req.toolChoice, req.parallelToolCalls)
    if (choice !== undefined) body.tool_choice = choice
  }
  if (thinking) body.thinking = { type: 'enabled', budget_tokens: budget }
  if (!thinking && req.temperature !== undefined) body.temperature = req.temperature
  else if (!thinking && req.topP !== undefined) body.top_p = req.topP
  if (req.stop !== undefined && req.stop.length > 0) body.stop_sequences = req.stop
  if (req.output !== undefined && req.output.type !== 'text') {
    if (req.output.type === 'json_object') throw invalid(req.client === 'openai-chat' ? 'response_format' : 'text.format', 'the provider (Anthropic) has no JSON-object mode: use a json_schema format')
    body.output_config = { format: { type: 'json_schema', schema: req.output.schema ?? { type: 'object' } } }
  }
  body.stream = ctx.stream
  return body
}

function encodeTurns (turns: Message[], ctx: EncodeContext, keepThinking: boolean): Json[] {
  const out: Turn[] = []
  for (const m of turns) {
    const role = m.role === 'developer' ? 'system' : m.role
    const content: Json[] = []
    for (const p of m.parts) {
      if (role === 'system' && p.type !== 'text') continue // a system message holds text only
      const b = encodePart(p, ctx, keepThinking)
      if (b !== null) content.push(b)
    }
    if (content.length === 0) continue
    const last = out[out.length - 1]
    if (last !== undefined && last.role === role && role !== 'system') last.content.push(...content)
    else out.push({ role, content })
  }
  return out.map(t => ({ role: t.role, content: t.content }))
}

function encodePart (p: Part, ctx: EncodeContext, keepThinking: boolean): Json | null {
  switch (p.type) {
    case 'text': return p.text === '' ? null : { type: 'text', text: p.text }
    case 'image': return { type: 'image', source: encodeImage(p.source) }
    case 'reasoning': {
      if (!keepThinking || p.opaque === undefined || p.opaque.issuer !== ctx.issuer) return null // never another issuer's blob
      const block = parseAnthropicThinkingOpaque(p.opaque.data)
      return block === null ? null : { ...block }
    }
    case 'tool_call': return encodeCall(p.call)
    case 'tool_result': {
      const blocks = typeof p.output === 'string'
        ? []
        : p.output.filter(o => o.type !== 'text' || o.text !== '').map(o => o.type === 'text' ? { type: 'text', text: o.text } : { type: 'image', source: encodeImage(o.source) })
      const content = typeof p.output === 'string' ? p.output : blocks.length > 0 ? blocks : ''
      const out: Json = { type: 'tool_result', tool_use_id: providerCallId(p.callId, CALL_ID_MAX), content }
      if (p.isError === true) out.is_error = true
      return out
    }
  }
}

function encodeCall (c: ToolCall): Json {
  const input = c.kind === 'custom' ? { input: c.arguments } : argumentsObject(c.arguments, `tool call ${c.callId}`)
  return { type: 'tool_use', id: providerCallId(c.callId, CALL_ID_MAX), name: wireNameOf(c.name, c.namespace), input }
}

function encodeImage (s: ImageSource): Json {
  return s.kind === 'url' ? { type: 'url', url: s.url } : { type: 'base64', media_type: s.mediaType, data: s.data }
}

/** Every assistant tool_use turn after the last real user message starts with a thinking block. */
function toolLoopHasThinking (messages: Json[]): boolean {
  let start = 0
  messages.forEach((m, i) => {
    if (m.role === 'user' && (m.content as Json[]).some(b => b.type !== 'tool_result')) start = i + 1
  })
  for (const m of messages.slice(start)) {
    const content = m.content as Json[]
    if (m.role !== 'assistant' || !content.some(b => b.type === 'tool_use')) continue
    if (content[0].type !== 'thinking' && content[0].type !== 'redacted_thinking') return false
  }
  return true
}

function encodeTool (t: ToolDef, req: CanonicalRequest): Json | null {
  if (t.kind === 'hosted') return mapHosted(t, req.client, 'anthropic')
  const out: Json = { name: t.wireName }
  if (t.description !== undefined) out.description = t.description
  out.input_schema = t.kind === 'custom' ? customToolSchema(t.format) : t.parameters ?? { type: 'object', properties: {} }
  return out
}

function encodeChoice (c: ToolChoice | undefined, parallel: boolean | undefined): Json | undefined {
  const noParallel = parallel === false
  if (c === undefined) return noParallel ? { type: 'auto', disable_parallel_tool_use: true } : undefined
  if (c.type === 'none') return { type: 'none' }
  const out: Json = c.type === 'auto' ? { type: 'auto' } : c.type === 'required' ? { type: 'any' } : { type: 'tool', name: c.wireName }
  if (noParallel) out.disable_parallel_tool_use = true
  return out
}
