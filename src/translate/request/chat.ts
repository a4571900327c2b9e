// OpenAI Chat Completions request <-> CanonicalRequest.
//
//   Chat (client body)                                canonical
//   ───────────────────────────────────────────────   ──────────────────────────────────────────────
//   messages role system / developer                  Message system / developer (kept in place)
//   role user: string | text / image_url parts        user text / image parts (data: URL -> base64)
//   role assistant: content + tool_calls              assistant text + tool_call parts (function; custom)
//   role tool {tool_call_id, content}                 tool_result in a user message
//   tools function / custom                           ToolDef (names.ts wire names)
//   tool_choice auto|none|required|{function|custom}  ToolChoice (allowed_tools -> its mode)
//   parallel_tool_calls                               parallelToolCalls
//   max_completion_tokens ?? max_tokens               maxOutputTokens
//   temperature, top_p, stop (string | string[])      same
//   reasoning_effort                                  reasoning.effort (enabled unless 'none')
//   response_format text|json_object|json_schema      output
//   refused: n > 1, audio output, input_audio / file parts, legacy function role / functions
//   dropped: stream_options (set by the encoder), store, metadata, user, safety_identifier, seed,
//            logprobs, top_logprobs, logit_bias, frequency_penalty, presence_penalty, service_tier,
//            prompt_cache_key, verbosity, web_search_options, prediction
//
// Encoding for a Chat provider (the client is Responses or Messages):
//   - system / developer (and instructions) become `system` messages (`developer` is not
//     understood by many Chat-protocol servers);
//   - each tool result becomes a `tool` message right after its assistant message; images in a
//     tool result go in one user message after those tool messages (a tool message holds text only);
//   - reasoning parts are dropped: Chat has no way to send them back (no issuer is ours);
//   - custom tools become functions with one `input` string parameter, tool_search a function;
//     hosted tools are dropped and listed (Chat has no server tools);
//   - max tokens as `max_completion_tokens`; streaming asks for `stream_options.include_usage`;
//   - a history call id over 40 characters (or with characters outside [a-zA-Z0-9_-]) is
//     rewritten the same way in the call and its tool message (common.ts providerCallId).

import type { CanonicalRequest, OutputFormat, Part, ToolCall, ToolChoice, ToolDef, ToolKind, ToolOutput } from '../canonical.ts'
import { wireNameOf } from '../names.ts'
import {
  arr, customArguments, customToolSchema, effortForBudget, imageFromUrl, imageUrl, invalid, isObj, newRequest, normaliseTurns, obj,
  optBool, optNum, optStr, outputImages, outputText, providerCallId, str, type EncodeContext, type Json,
} from './common.ts'

/** OpenAI refuses longer tool_call ids (common.ts providerCallId). */
const CALL_ID_MAX = 40

// ─── decode ────────────────────────────────────────────────────────────────────────────

export function decodeChatRequest (body: unknown): CanonicalRequest {
  const b = obj(body, 'body')
  if (typeof b.n === 'number' && b.n > 1) throw invalid('n', 'several choices are not supported on a translated route')
  if (Array.isArray(b.modalities) && b.modalities.includes('audio')) throw invalid('modalities', 'audio output cannot be translated')
  if (b.functions !== undefined || b.function_call !== undefined) throw invalid(b.functions !== undefined ? 'functions' : 'function_call', 'the legacy function fields are not translated: use tools / tool_choice')
  const req = newRequest('openai-chat', b)
  const kinds = new Map<string, ToolKind>()
  arr(b.messages, 'messages').forEach((raw, i) => {
    const f = `messages[${i}]`
    const m = obj(raw, f)
    const role = str(m.role, `${f}.role`)
    if (role === 'system' || role === 'developer' || role === 'user') {
      req.messages.push({ role, parts: decodeContent(m.content, `${f}.content`, role === 'user') })
    } else if (role === 'assistant') {
      const parts: Part[] = m.content === undefined || m.content === null ? [] : decodeContent(m.content, `${f}.content`, false)
      if (Array.isArray(m.tool_calls)) {
        m.tool_calls.forEach((tc, j) => {
          const call = decodeCall(tc, `${f}.tool_calls[${j}]`)
          kinds.set(call.callId, call.kind)
          parts.push({ type: 'tool_call', call })
        })
      }
      req.messages.push({ role: 'assistant', parts })
    } else if (role === 'tool') {
      const callId = str(m.tool_call_id, `${f}.tool_call_id`)
      const output: ToolOutput = typeof m.content === 'string' ? m.content : decodeContent(m.content, `${f}.content`, false).map(p => p as { type: 'text'; text: string })
      const part: Part = { type: 'tool_result', callId, kind: kinds.get(callId) ?? 'function', output }
      const last = req.messages[req.messages.length - 1]
      if (last !== undefined && last.role === 'user' && last.parts.every(p => p.type === 'tool_result')) last.parts.push(part)
      else req.messages.push({ role: 'user', parts: [part] })
    } else {
      throw invalid(`${f}.role`, `role "${role}" cannot be translated`)
    }
  })
  if (Array.isArray(b.tools)) b.tools.forEach((t, i) => { req.tools.push(decodeTool(t, `tools[${i}]`)) })
  if (b.tool_choice !== undefined && b.tool_choice !== null) req.toolChoice = decodeToolChoice(b.tool_choice)
  req.parallelToolCalls = optBool(b.parallel_tool_calls, 'parallel_tool_calls')
  req.maxOutputTokens = optNum(b.max_completion_tokens, 'max_completion_tokens') ?? optNum(b.max_tokens, 'max_tokens')
  req.temperature = optNum(b.temperature, 'temperature')
  req.topP = optNum(b.top_p, 'top_p')
  if (typeof b.stop === 'string') req.stop = [b.stop]
  else if (Array.isArray(b.stop)) req.stop = b.stop.map((s, i) => str(s, `stop[${i}]`))
  const effort = optStr(b.reasoning_effort, 'reasoning_effort')
  if (effort !== undefined) req.reasoning = { enabled: effort !== 'none', effort }
  if (isObj(b.response_format)) req.output = decodeFormat(b.response_format)
  return req
}

function decodeContent (content: unknown, f: string, images: boolean): Part[] {
  if (typeof content === 'string') return [{ type: 'text', text: content }]
  return arr(content, f).map((raw, j): Part => {
    const p = obj(raw, `${f}[${j}]`)
    if (p.type === 'text') return { type: 'text', text: str(p.text, `${f}[${j}].text`) }
    if (p.type === 'refusal') return { type: 'text', text: str(p.refusal, `${f}[${j}].refusal`) }
    if (p.type === 'image_url' && images) {
      const u = obj(p.image_url, `${f}[${j}].image_url`)
      const part: Part & { type: 'image' } = { type: 'image', source: imageFromUrl(str(u.url, `${f}[${j}].image_url.url`)) }
      if (typeof u.detail === 'string') part.detail = u.detail
      return part
    }
    throw invalid(`${f}[${j}].type`, `content of type "${String(p.type)}" cannot be translated here`)
  })
}

function decodeCall (raw: unknown, f: string): ToolCall {
  const tc = obj(raw, f)
  const callId = str(tc.id, `${f}.id`)
  if (tc.type === 'custom') {
    const c = obj(tc.custom, `${f}.custom`)
    return { kind: 'custom', callId, name: str(c.name, `${f}.custom.name`), arguments: str(c.input ?? '', `${f}.custom.input`) }
  }
  const fn = obj(tc.function, `${f}.function`)
  return { kind: 'function', callId, name: str(fn.name, `${f}.function.name`), arguments: str(fn.arguments ?? '', `${f}.function.arguments`) }
}

function decodeTool (raw: unknown, f: string): ToolDef {
  const t = obj(raw, f)
  if (t.type === 'custom') {
    const c = obj(t.custom, `${f}.custom`)
    const name = str(c.name, `${f}.custom.name`)
    const def: ToolDef = { kind: 'custom', name, wireName: wireNameOf(name) }
    const d = optStr(c.description, `${f}.custom.description`)
    if (d !== undefined) def.description = d
    if (isObj(c.format)) def.format = c.format
    return def
  }
  if (t.type !== 'function') throw invalid(`${f}.type`, `tools of type "${String(t.type)}" cannot be translated`)
  const fn = obj(t.function, `${f}.function`)
  const name = str(fn.name, `${f}.function.name`)
  const def: ToolDef = { kind: 'function', name, wireName: wireNameOf(name) }
  const d = optStr(fn.description, `${f}.function.description`)
  if (d !== undefined) def.description = d
  if (fn.parameters !== undefined && fn.parameters !== null) def.parameters = obj(fn.parameters, `${f}.function.parameters`)
  const strict = optBool(fn.strict, `${f}.function.strict`)
  if (strict !== undefined) def.strict = strict
  return def
}

function decodeToolChoice (c: unknown): ToolChoice {
  if (c === 'auto' || c === 'none' || c === 'required') return { type: c }
  const o = obj(c, 'tool_choice')
  if (o.type === 'function') return { type: 'tool', wireName: wireNameOf(str(obj(o.function, 'tool_choice.function').name, 'tool_choice.function.name')) }
  if (o.type === 'custom') return { type: 'tool', wireName: wireNameOf(str(obj(o.custom, 'tool_choice.custom').name, 'tool_choice.custom.name')) }
  if (o.type === 'allowed_tools') return { type: isObj(o.allowed_tools) && o.allowed_tools.mode === 'required' ? 'required' : 'auto' }
  throw invalid('tool_choice.type', `unknown tool_choice "${String(o.type)}"`)
}

function decodeFormat (f: Json): OutputFormat {
  const type = str(f.type, 'response_format.type')
  if (type === 'text' || type === 'json_object') return { type }
  if (type !== 'json_schema') throw invalid('response_format.type', `unknown format "${type}"`)
  const js = obj(f.json_schema, 'response_format.json_schema')
  const out: OutputFormat = { type, name: str(js.name, 'response_format.json_schema.name') }
  if (js.schema !== undefined) out.schema = obj(js.schema, 'response_format.json_schema.schema')
  const strict = optBool(js.strict, 'response_format.json_schema.strict')
  if (strict !== undefined) out.strict = strict
  return out
}

// ─── encode (for a Chat provider) ──────────────────────────────────────────────────────

export function encodeChatRequest (req: CanonicalRequest, ctx: EncodeContext): Json {
  const messages: Json[] = []
  for (const s of req.system) messages.push({ role: 'system', content: s.text })
  for (const m of normaliseTurns(req.messages, req.client)) {
    if (m.role === 'assistant') {
      const text = m.parts.filter(p => p.type === 'text').map(p => (p as { text: string }).text).join('')
      const calls = m.parts.filter(p => p.type === 'tool_call').map(p => encodeCall((p as { call: ToolCall }).call))
      if (text === '' && calls.length === 0) continue // reasoning only: nothing Chat can carry
      const out: Json = { role: 'assistant', content: text === '' ? null : text }
      if (calls.length > 0) out.tool_calls = calls
      messages.push(out)
      continue
    }
    const content: Json[] = []
    const images: Json[] = []
    for (const p of m.parts) {
      if (p.type === 'tool_result') {
        messages.push({ role: 'tool', tool_call_id: providerCallId(p.callId, CALL_ID_MAX), content: outputText(p.output) })
        for (const img of outputImages(p.output)) images.push({ type: 'image_url', image_url: { url: imageUrl(img) } })
      } else if (p.type === 'text') content.push({ type: 'text', text: p.text })
      else if (p.type === 'image') content.push({ type: 'image_url', image_url: { url: imageUrl(p.source), ...(p.detail !== undefined ? { detail: p.detail } : {}) } })
    }
    if (images.length > 0) messages.push({ role: 'user', content: [{ type: 'text', text: 'Images returned by the tool calls above:' }, ...images] })
    if (content.length === 0) continue
    if (m.role !== 'user') {
      const text = content.filter(c => c.type === 'text').map(c => c.text as string).join('\n\n')
      if (text !== '') messages.push({ role: 'system', content: text }) // a system message holds text only
    } else messages.push({ role: 'user', content: content.length === 1 && content[0].type === 'text' ? content[0].text : content })
  }
  const body: Json = { model: ctx.model, messages }
  const tools: Json[] = []
  for (const t of req.tools) {
    if (t.kind === 'hosted') {
      req.droppedTools.push(t.name)
      continue
    }
    const fn: Json = { name: t.wireName }
    if (t.description !== undefined) fn.description = t.description
    fn.parameters = t.kind === 'custom' ? customToolSchema(t.format) : t.parameters ?? { type: 'object', properties: {} }
    if (t.strict !== undefined && t.kind !== 'custom') fn.strict = t.strict
    tools.push({ type: 'function', function: fn })
  }
  if (tools.length > 0) {
    body.tools = tools
    if (req.toolChoice !== undefined) body.tool_choice = encodeChoice(req.toolChoice)
    if (req.parallelToolCalls !== undefined) body.parallel_tool_calls = req.parallelToolCalls
  }
  if (req.maxOutputTokens !== undefined) body.max_completion_tokens = req.maxOutputTokens
  if (req.temperature !== undefined) body.temperature = req.temperature
  if (req.topP !== undefined) body.top_p = req.topP
  if (req.stop !== undefined && req.stop.length > 0) body.stop = req.stop
  const r = req.reasoning
  if (r !== undefined && ctx.reasoning !== false) {
    const effort = r.enabled ? r.effort ?? (r.budgetTokens !== undefined ? effortForBudget(r.budgetTokens) : undefined) : r.effort === 'none' ? 'none' : undefined
    if (effort !== undefined) body.reasoning_effort = effort
  }
  if (req.output !== undefined && req.output.type !== 'text') {
    const f = req.output
    body.response_format = f.type === 'json_object'
      ? { type: 'json_object' }
      : { type: 'json_schema', json_schema: { name: f.name ?? 'output', ...(f.schema !== undefined ? { schema: f.schema } : {}), ...(f.strict !== undefined ? { strict: f.strict } : {}) } }
  }
  body.stream = ctx.stream
  if (ctx.stream) body.stream_options = { include_usage: true }
  return body
}

function encodeCall (c: ToolCall): Json {
  const args = c.kind === 'custom' ? customArguments(c.arguments) : c.arguments === '' ? '{}' : c.arguments
  return { id: providerCallId(c.callId, CALL_ID_MAX), type: 'function', function: { name: wireNameOf(c.name, c.namespace), arguments: args } }
}

function encodeChoice (c: ToolChoice): unknown {
  return c.type === 'tool' ? { type: 'function', function: { name: c.wireName } } : c.type
}
