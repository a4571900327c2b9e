// OpenAI Responses request <-> CanonicalRequest.
//
//   Responses (client body)                          canonical
//   ──────────────────────────────────────────────   ─────────────────────────────────────────────────────
//   instructions                                     system[] (role system)
//   input: string                                    one user message
//   message {role, content: string | parts}          Message (system/developer kept in place)
//     input_text / output_text / text / refusal      text part
//     input_image {image_url | file_id, detail}      image part (data: URL -> base64); file_id refused (the
//                                                    file lives in the client's OpenAI account)
//   reasoning {id, summary, content, encrypted_content}  reasoning part; opaque only when encrypted_content is
//                                                    our envelope (anything else is dropped, never forwarded)
//   function_call {call_id, name, namespace?, arguments}  tool_call kind function
//   custom_tool_call {call_id, name, input}          tool_call kind custom (arguments = raw input)
//   tool_search_call {call_id, arguments}            tool_call kind tool_search (arguments = JSON text)
//   *_output {call_id, output}                       tool_result in a user message (kind of the output)
//   tool_search_output {call_id, tools}              tool_result listing the loaded tools; the tools join `tools`
//   web_search_call                                  dropped (a hosted result no other provider can read)
//   tools: function / namespace{tools} / custom /    ToolDef (names.ts gives the wire names)
//          tool_search / hosted (web_search, ...)
//   tool_choice auto|none|required|{function|custom} ToolChoice; allowed_tools -> its mode; hosted choice -> auto
//   max_output_tokens, temperature, top_p            same
//   reasoning {effort, summary}                      reasoning (enabled unless effort 'none')
//   text.format {json_schema|json_object|text}       output
//   previous_response_id                             expanded before this decoder by the gateway's store
//                                                    (worker/continuation.ts); seen here: refused (store off)
//   conversation, background                         refused
//   dropped: store, include, prompt_cache_key, prompt_cache_retention, client_metadata, metadata, user,
//            safety_identifier, service_tier, truncation, text.verbosity, max_tool_calls, top_logprobs,
//            stream_options, parallel hints of hosted tools
//
// Encoding for a Responses provider (the client is Chat or Messages) writes the same shapes, with
// `store: false` (translation keeps no state upstream) and, whenever reasoning is on or replayed,
// `include: ['reasoning.encrypted_content']` so the reasoning comes back as an envelope. Function
// tools are sent with `strict: false` unless the client asked (Responses defaults to strict).
// Stop sequences: Responses has none -> refused naming the client's field.

import type { CanonicalRequest, Message, OutputFormat, Part, ToolCall, ToolChoice, ToolDef, ToolKind, ToolOutput } from '../canonical.ts'
import { unwrapOpaque } from '../envelope.ts'
import { wireNameOf } from '../names.ts'
import { parseOpenaiReasoningOpaque } from '../reasoning.ts'
import { mapHosted } from './hosted.ts'
import {
  arr, effortForBudget, encodeTools, imageFromUrl, imageUrl, invalid, isObj, newRequest, normaliseTurns, obj, optBool, optNum, optStr, str,
  type EncodeContext, type Json,
} from './common.ts'

// ─── decode ────────────────────────────────────────────────────────────────────────────

export function decodeResponsesRequest (body: unknown): CanonicalRequest {
  const b = obj(body, 'body')
  // previous_response_id never reaches here when the gateway keeps conversation state: the
  // parser pool puts the stored chain in front of `input` and drops it (src/json/prepare.ts,
  // worker/continuation.ts). Seen here, the store is off (or the value is not an id).
  if (b.previous_response_id !== undefined && b.previous_response_id !== null) {
    if (typeof b.previous_response_id !== 'string' || b.previous_response_id === '') throw invalid('previous_response_id', 'must be a non-empty string (a response id)')
    throw invalid('previous_response_id', 'conversation state is not kept on this gateway (limits.continuationBytes is 0) for providers of another protocol: send the whole input')
  }
  if (b.conversation !== undefined && b.conversation !== null) throw invalid('conversation', 'is not supported on a translated route (conversations live in the client\'s OpenAI account): send the whole input, or previous_response_id')
  if (b.background === true) throw invalid('background', 'background responses are not supported on a translated route')
  if (b.prompt !== undefined && b.prompt !== null) throw invalid('prompt', 'stored prompt templates are not supported on a translated route')
  const req = newRequest('openai-responses', b)
  const instructions = optStr(b.instructions, 'instructions')
  if (instructions !== undefined && instructions !== '') req.system.push({ role: 'system', text: instructions })
  // declared tools first: the ones a tool search loaded (in the input) come after them
  if (b.tools !== undefined && b.tools !== null) {
    arr(b.tools, 'tools').forEach((t, i) => { addTool(req, t, `tools[${i}]`) })
  }
  if (typeof b.input === 'string') req.messages.push({ role: 'user', parts: [{ type: 'text', text: b.input }] })
  else if (b.input !== undefined && b.input !== null) decodeInput(arr(b.input, 'input'), req)
  if (b.tool_choice !== undefined && b.tool_choice !== null) req.toolChoice = decodeToolChoice(b.tool_choice)
  req.parallelToolCalls = optBool(b.parallel_tool_calls, 'parallel_tool_calls')
  req.maxOutputTokens = optNum(b.max_output_tokens, 'max_output_tokens')
  req.temperature = optNum(b.temperature, 'temperature')
  req.topP = optNum(b.top_p, 'top_p')
  if (isObj(b.reasoning)) {
    const effort = optStr(b.reasoning.effort, 'reasoning.effort')
    const summary = optStr(b.reasoning.summary, 'reasoning.summary')
    req.reasoning = { enabled: effort !== 'none', ...(effort !== undefined ? { effort } : {}), ...(summary !== undefined ? { summary } : {}) }
  }
  if (isObj(b.text) && isObj(b.text.format)) req.output = decodeFormat(b.text.format)
  return req
}

function decodeFormat (f: Json): OutputFormat {
  const type = str(f.type, 'text.format.type')
  if (type === 'text' || type === 'json_object') return { type }
  if (type !== 'json_schema') throw invalid('text.format.type', `unknown format "${type}"`)
  const out: OutputFormat = { type, schema: obj(f.schema, 'text.format.schema') }
  const name = optStr(f.name, 'text.format.name')
  if (name !== undefined) out.name = name
  const strict = optBool(f.strict, 'text.format.strict')
  if (strict !== undefined) out.strict = strict
  return out
}

function decodeInput (items: unknown[], req: CanonicalRequest): void {
  const kinds = new Map<string, ToolKind>()
  const add = (role: Message['role'], part: Part): void => {
    const last = req.messages[req.messages.length - 1]
    // consecutive assistant items (reasoning, text, calls) are one turn; so are consecutive outputs
    if (last !== undefined && last.role === role && (role === 'assistant' || (role === 'user' && part.type === 'tool_result' && last.parts.every(p => p.type === 'tool_result')))) last.parts.push(part)
    else req.messages.push({ role, parts: [part] })
  }
  items.forEach((raw, i) => {
    const f = `input[${i}]`
    const it = obj(raw, f)
    const type = it.type === undefined ? 'message' : str(it.type, `${f}.type`)
    switch (type) {
      case 'message': {
        const role = str(it.role, `${f}.role`)
        if (role !== 'user' && role !== 'assistant' && role !== 'system' && role !== 'developer') throw invalid(`${f}.role`, `unknown role "${role}"`)
        const parts = decodeContent(it.content, `${f}.content`)
        if (role === 'assistant') for (const p of parts) add('assistant', p)
        else req.messages.push({ role, parts })
        return
      }
      case 'reasoning': {
        const summary = Array.isArray(it.summary) ? it.summary.filter(isObj).map(s => String(s.text ?? '')) : []
        const content = Array.isArray(it.content) ? it.content.filter(isObj).map(s => String(s.text ?? '')) : []
        const part: Part = { type: 'reasoning', text: content.length > 0 ? content.join('') : summary.join('\n\n'), summary }
        if (typeof it.id === 'string') part.id = it.id
        const opaque = typeof it.encrypted_content === 'string' ? unwrapOpaque(it.encrypted_content) : null
        if (opaque !== null) part.opaque = opaque
        add('assistant', part)
        return
      }
      case 'function_call':
      case 'custom_tool_call':
      case 'tool_search_call': {
        const call = decodeCall(it, type, f)
        kinds.set(call.callId, call.kind)
        add('assistant', { type: 'tool_call', call })
        return
      }
      case 'function_call_output':
      case 'custom_tool_call_output':
      case 'tool_search_output': {
        const callId = str(it.call_id, `${f}.call_id`)
        const kind: ToolKind = type === 'function_call_output' ? 'function' : type === 'custom_tool_call_output' ? 'custom' : 'tool_search'
        let output: ToolOutput
        if (type === 'tool_search_output') {
          const tools = arr(it.tools ?? [], `${f}.tools`)
          const names = tools.map((t, j) => addTool(req, t, `${f}.tools[${j}]`, true)).flat()
          output = names.length === 0 ? 'No tools were loaded.' : `Loaded tools: ${names.join(', ')}`
        } else {
          output = decodeOutput(it.output, `${f}.output`)
        }
        add('user', { type: 'tool_result', callId, kind: kinds.get(callId) ?? kind, output })
        return
      }
      case 'web_search_call':
        return
      default:
        throw invalid(`${f}.type`, `input items of type "${type}" cannot be translated for a provider of another protocol`)
    }
  })
}

function decodeCall (it: Json, type: string, f: string): ToolCall {
  const callId = str(it.call_id, `${f}.call_id`)
  let call: ToolCall
  if (type === 'function_call') {
    call = { kind: 'function', callId, name: str(it.name, `${f}.name`), arguments: str(it.arguments ?? '', `${f}.arguments`) }
    const ns = optStr(it.namespace, `${f}.namespace`)
    if (ns !== undefined) call.namespace = ns
  } else if (type === 'custom_tool_call') {
    call = { kind: 'custom', callId, name: str(it.name, `${f}.name`), arguments: str(it.input ?? '', `${f}.input`) }
  } else {
    call = { kind: 'tool_search', callId, name: 'tool_search', arguments: typeof it.arguments === 'string' ? it.arguments : JSON.stringify(it.arguments ?? {}) }
  }
  if (typeof it.id === 'string') call.itemId = it.id
  return call
}

function decodeContent (content: unknown, f: string): Part[] {
  if (typeof content === 'string') return [{ type: 'text', text: content }]
  return arr(content, f).map((raw, j): Part => {
    const p = obj(raw, `${f}[${j}]`)
    const type = str(p.type, `${f}[${j}].type`)
    if (type === 'input_text' || type === 'output_text' || type === 'text') return { type: 'text', text: str(p.text, `${f}[${j}].text`) }
    if (type === 'refusal') return { type: 'text', text: str(p.refusal, `${f}[${j}].refusal`) }
    if (type === 'input_image') return decodeImage(p, `${f}[${j}]`)
    throw invalid(`${f}[${j}].type`, `content of type "${type}" cannot be translated for a provider of another protocol`)
  })
}

function decodeImage (p: Json, f: string): Part & { type: 'image' } {
  if (typeof p.image_url !== 'string') {
    if (p.file_id !== undefined) throw invalid(`${f}.file_id`, 'an OpenAI file id cannot be read by a provider of another protocol: send the image as image_url (a URL or a data: URL)')
    throw invalid(`${f}.image_url`, 'must be a string')
  }
  const part: Part & { type: 'image' } = { type: 'image', source: imageFromUrl(p.image_url) }
  if (typeof p.detail === 'string') part.detail = p.detail
  return part
}

function decodeOutput (o: unknown, f: string): ToolOutput {
  if (typeof o === 'string') return o
  return arr(o, f).map((raw, j) => {
    const p = obj(raw, `${f}[${j}]`)
    if (p.type === 'input_text' || p.type === 'output_text') return { type: 'text' as const, text: str(p.text, `${f}[${j}].text`) }
    if (p.type === 'input_image') {
      const img = decodeImage(p, `${f}[${j}]`)
      return { type: 'image' as const, source: img.source }
    }
    throw invalid(`${f}[${j}].type`, `tool output of type "${String(p.type)}" cannot be translated`)
  })
}

/** Adds one client tool (a namespace adds each of its tools); returns the names added. */
function addTool (req: CanonicalRequest, raw: unknown, f: string, loaded = false, namespace?: string): string[] {
  const t = obj(raw, f)
  const type = str(t.type, `${f}.type`)
  let def: ToolDef
  if (type === 'namespace') {
    const ns = str(t.name, `${f}.name`)
    return arr(t.tools, `${f}.tools`).map((s, j) => addTool(req, s, `${f}.tools[${j}]`, loaded, ns)).flat()
  }
  if (type === 'function') {
    const name = str(t.name, `${f}.name`)
    def = { kind: 'function', name, wireName: wireNameOf(name, namespace) }
    if (t.parameters !== undefined && t.parameters !== null) def.parameters = obj(t.parameters, `${f}.parameters`)
    const strict = optBool(t.strict, `${f}.strict`)
    if (strict !== undefined) def.strict = strict
  } else if (type === 'custom') {
    const name = str(t.name, `${f}.name`)
    def = { kind: 'custom', name, wireName: wireNameOf(name, namespace) }
    if (isObj(t.format)) def.format = t.format
  } else if (type === 'tool_search') {
    def = { kind: 'tool_search', name: 'tool_search', wireName: 'tool_search' }
    if (isObj(t.parameters)) def.parameters = t.parameters
  } else {
    def = { kind: 'hosted', name: type, wireName: type, hosted: t }
  }
  if (namespace !== undefined) def.namespace = namespace
  const description = optStr(t.description, `${f}.description`)
  if (description !== undefined) def.description = description
  // a tool loaded by tool_search may already be declared: the same tool is not a collision
  if (loaded && req.tools.some(d => d.kind === def.kind && d.name === def.name && d.namespace === def.namespace)) return [def.name]
  req.tools.push(def)
  return [def.name]
}

function decodeToolChoice (c: unknown): ToolChoice {
  if (c === 'auto' || c === 'none' || c === 'required') return { type: c }
  const o = obj(c, 'tool_choice')
  if (o.type === 'function' || o.type === 'custom') return { type: 'tool', wireName: wireNameOf(str(o.name, 'tool_choice.name'), optStr(o.namespace, 'tool_choice.namespace')) }
  if (o.type === 'allowed_tools') return { type: o.mode === 'required' ? 'required' : 'auto' }
  return { type: 'auto' }
}

// ─── encode (for a Responses provider) ─────────────────────────────────────────────────

export function encodeResponsesRequest (req: CanonicalRequest, ctx: EncodeContext): Json {
  const body: Json = { model: ctx.model }
  const instructions = req.system.map(s => s.text).join('\n\n')
  if (instructions !== '') body.instructions = instructions
  let replayed = false
  const input: Json[] = []
  for (const m of normaliseTurns(req.messages, req.client)) {
    if (m.role === 'assistant') {
      for (const p of m.parts) {
        if (p.type === 'text') {
          if (p.text !== '') input.push({ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: p.text, annotations: [] }] })
        }
        else if (p.type === 'tool_call') input.push(encodeCall(p.call))
        else if (p.type === 'reasoning') {
          const r = ctx.reasoning !== false && p.opaque !== undefined && p.opaque.issuer === ctx.issuer ? parseOpenaiReasoningOpaque(p.opaque.data) : null
          if (r === null) continue // another issuer's blob (or none): never sent
          replayed = true
          const item: Json = { type: 'reasoning' }
          if (r.id !== undefined) item.id = r.id
          item.summary = []
          item.encrypted_content = r.encrypted_content
          input.push(item)
        }
      }
      continue
    }
    const content: Json[] = []
    const flush = (): void => {
      if (content.length > 0) input.push({ type: 'message', role: m.role, content: content.splice(0) })
    }
    for (const p of m.parts) {
      if (p.type === 'text') content.push({ type: 'input_text', text: p.text })
      else if (p.type === 'image') content.push({ type: 'input_image', image_url: imageUrl(p.source), detail: p.detail ?? 'auto' })
      else if (p.type === 'tool_result') {
        flush()
        input.push(encodeResult(p))
      }
    }
    flush()
  }
  body.input = input
  const tools = encodeTools(req, encodeTool)
  if (tools.length > 0) {
    body.tools = tools
    if (req.toolChoice !== undefined) body.tool_choice = encodeChoice(req.toolChoice, req)
    if (req.parallelToolCalls !== undefined) body.parallel_tool_calls = req.parallelToolCalls
  }
  if (req.maxOutputTokens !== undefined) body.max_output_tokens = req.maxOutputTokens
  if (req.temperature !== undefined) body.temperature = req.temperature
  if (req.topP !== undefined) body.top_p = req.topP
  if (req.stop !== undefined && req.stop.length > 0) throw invalid(req.client === 'anthropic' ? 'stop_sequences' : 'stop', 'the provider (Responses protocol) has no stop sequences')
  const reasoning = ctx.reasoning === false ? undefined : req.reasoning
  if (reasoning !== undefined && reasoning.enabled) {
    const effort = reasoning.effort ?? (reasoning.budgetTokens !== undefined ? effortForBudget(reasoning.budgetTokens) : undefined)
    body.reasoning = { ...(effort !== undefined ? { effort } : {}), summary: reasoning.summary ?? 'auto' }
  } else if (reasoning !== undefined && reasoning.effort === 'none') {
    body.reasoning = { effort: 'none' }
  }
  if (body.reasoning !== undefined && (body.reasoning as Json).effort !== 'none') replayed = true
  if (replayed) body.include = ['reasoning.encrypted_content']
  if (req.output !== undefined && req.output.type !== 'text') {
    const f = req.output
    body.text = { format: f.type === 'json_object' ? { type: 'json_object' } : { type: 'json_schema', name: f.name ?? 'output', schema: f.schema, ...(f.strict !== undefined ? { strict: f.strict } : {}) } }
  }
  body.store = false
  body.stream = ctx.stream
  return body
}

function encodeCall (c: ToolCall): Json {
  const name = wireNameOf(c.name, c.namespace)
  if (c.kind === 'custom') return { type: 'custom_tool_call', call_id: c.callId, name, input: c.arguments }
  return { type: 'function_call', call_id: c.callId, name, arguments: c.arguments === '' ? '{}' : c.arguments }
}

function encodeResult (p: Part & { type: 'tool_result' }): Json {
  const output = typeof p.output === 'string'
    ? p.output
    : p.output.map(o => o.type === 'text' ? { type: 'input_text', text: o.text } : { type: 'input_image', image_url: imageUrl(o.source), detail: 'auto' })
  return { type: p.kind === 'custom' ? 'custom_tool_call_output' : 'function_call_output', call_id: p.callId, output }
}

function encodeTool (t: ToolDef, req: CanonicalRequest): Json | null {
  if (t.kind === 'hosted') return mapHosted(t, req.client, 'openai-responses')
  if (t.kind === 'custom') {
    const out: Json = { type: 'custom', name: t.wireName }
    if (t.description !== undefined) out.description = t.description
    if (t.format !== undefined) out.format = t.format
    return out
  }
  const out: Json = { type: 'function', name: t.wireName }
  if (t.description !== undefined) out.description = t.description
  out.parameters = t.parameters ?? { type: 'object', properties: {} }
  out.strict = t.strict ?? false
  return out
}

function encodeChoice (c: ToolChoice, req: CanonicalRequest): unknown {
  if (c.type !== 'tool') return c.type
  const def = req.tools.find(t => t.wireName === c.wireName)
  return { type: def?.kind === 'custom' ? 'custom' : 'function', name: c.wireName }
}
