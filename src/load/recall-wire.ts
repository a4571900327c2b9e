// The wire side of the recall-burst load (src/load/recall.ts): what an agent session sends in
// each of the three client protocols (a user turn steered by a `#sim` directive that asks for
// 1..8 parallel calls, then the recall: the calls and their tool results), and what it reads
// back from a stream (response id, calls with their ids, names and arguments, text), parsed
// from the raw SSE bytes so a cut stream (a client cancel) is read as far as it went.
//
// Tools offered per client protocol (the sim's `call=` names resolve on the client's and on
// the translated request alike, src/sim/README.md "Named calls"):
//   responses  exec_command (function), mcp_docs.search (a function in a namespace: MCP),
//              apply_patch (custom / freeform), tool_search
//   chat       exec_command, read_file, search_code (functions)
//   messages   Bash, Read, Grep (tool_use)

import { lastUserText, parseDirective, type SimProtocol } from '../sim/directive.ts'
import { seedFrom } from '../sim/rng.ts'
import { parseScenario } from '../sim/scenario.ts'
import { buildScript } from '../sim/script.ts'

export type ClientProto = 'chat' | 'responses' | 'messages'
export type ProviderProto = 'openai-chat' | 'openai-responses' | 'anthropic'

export const CLIENT_PATH: Readonly<Record<ClientProto, string>> = {
  chat: '/v1/chat/completions',
  responses: '/v1/responses',
  messages: '/v1/messages',
}

/** The sluice-side protocol a client protocol speaks (same protocol when it equals the provider's). */
export const CLIENT_WIRE: Readonly<Record<ClientProto, ProviderProto>> = { chat: 'openai-chat', responses: 'openai-responses', messages: 'anthropic' }

/** One tool a session may be asked to call: the `call=` name, and what the client must see. */
export interface ToolAsk { call: string; name: string; namespace: string | null; kind: 'function' | 'custom' | 'tool_search' }

const obj = { type: 'object' }
const strProp = (p: string) => ({ ...obj, properties: { [p]: { type: 'string' } }, required: [p] })

export const TOOLS: Readonly<Record<ClientProto, readonly ToolAsk[]>> = {
  responses: [
    { call: 'exec_command', name: 'exec_command', namespace: null, kind: 'function' },
    { call: 'mcp_docs.search', name: 'search', namespace: 'mcp_docs', kind: 'function' },
    { call: 'apply_patch', name: 'apply_patch', namespace: null, kind: 'custom' },
    { call: 'tool_search', name: 'tool_search', namespace: null, kind: 'tool_search' },
  ],
  chat: [
    { call: 'exec_command', name: 'exec_command', namespace: null, kind: 'function' },
    { call: 'read_file', name: 'read_file', namespace: null, kind: 'function' },
    { call: 'search_code', name: 'search_code', namespace: null, kind: 'function' },
  ],
  messages: [
    { call: 'Bash', name: 'Bash', namespace: null, kind: 'function' },
    { call: 'Read', name: 'Read', namespace: null, kind: 'function' },
    { call: 'Grep', name: 'Grep', namespace: null, kind: 'function' },
  ],
}

function toolDecls (proto: ClientProto): unknown[] {
  if (proto === 'responses') {
    return [
      { type: 'function', name: 'exec_command', description: 'Runs a shell command.', strict: false, parameters: strProp('cmd') },
      { type: 'namespace', name: 'mcp_docs', description: 'Docs MCP server.', tools: [{ type: 'function', name: 'search', description: 'Searches the docs.', strict: false, parameters: strProp('query') }] },
      { type: 'custom', name: 'apply_patch', description: 'Applies a patch.' },
      { type: 'tool_search', description: 'Finds more tools.' },
    ]
  }
  if (proto === 'chat') {
    return [
      { type: 'function', function: { name: 'exec_command', description: 'Runs a shell command.', parameters: strProp('cmd') } },
      { type: 'function', function: { name: 'read_file', description: 'Reads a file.', parameters: strProp('path') } },
      { type: 'function', function: { name: 'search_code', description: 'Searches code.', parameters: strProp('query') } },
    ]
  }
  return [
    { name: 'Bash', description: 'Runs a command.', input_schema: strProp('command') },
    { name: 'Read', description: 'Reads a file.', input_schema: strProp('file_path') },
    { name: 'Grep', description: 'Searches files.', input_schema: strProp('pattern') },
  ]
}

/** A call as a session received it. */
export interface GotCall {
  /** call_id (Responses), tool_calls[].id (Chat), tool_use id (Messages). */
  id: string
  /** Responses item id (fc_/ctc_/tsc_...), else null. */
  itemId: string | null
  name: string
  namespace: string | null
  kind: 'function' | 'custom' | 'tool_search'
  /** Arguments JSON text (custom: the input; tool_search: its arguments as JSON text). */
  args: string
  /** The call was received whole (its done event / its block stop / the Chat finish). */
  complete: boolean
}

/** What one stream brought. */
export interface GotStream {
  responseId: string | null
  text: string
  calls: GotCall[]
  /** The stream's terminal arrived (Chat [DONE] after a finish, response.completed, message_stop). */
  terminal: boolean
  /** An error event in the stream (the failure tail), its code if any. */
  error: string | null
  /** Every id-like value seen (response, item and call ids), for the cross-session check. */
  ids: string[]
}

interface Frame { event: string | null; data: string }

/** Whole SSE frames of `text` (a trailing partial frame is dropped). */
export function sseFrames (text: string): Frame[] {
  const out: Frame[] = []
  const parts = text.replace(/\r\n/g, '\n').split('\n\n')
  parts.pop() // after the last "\n\n": partial or empty
  for (const p of parts) {
    let event: string | null = null
    const data: string[] = []
    for (const line of p.split('\n')) {
      if (line.startsWith('event:')) event = line.slice(6).trim()
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''))
    }
    if (data.length > 0 || event !== null) out.push({ event, data: data.join('\n') })
  }
  return out
}

function parseJson (s: string): Record<string, unknown> | null {
  try { const v = JSON.parse(s) as unknown; return typeof v === 'object' && v !== null ? v as Record<string, unknown> : null } catch { return null }
}

const S = (v: unknown): string | null => typeof v === 'string' ? v : null
const O = (v: unknown): Record<string, unknown> => (typeof v === 'object' && v !== null ? v : {}) as Record<string, unknown>

export function parseStream (proto: ClientProto, bytes: Buffer): GotStream {
  const g: GotStream = { responseId: null, text: '', calls: [], terminal: false, error: null, ids: [] }
  const frames = sseFrames(bytes.toString('utf8'))
  if (proto === 'chat') {
    const byIndex = new Map<number, GotCall>()
    let finished = false
    for (const f of frames) {
      if (f.data === '[DONE]') { g.terminal = finished; continue }
      const j = parseJson(f.data)
      if (j === null) continue
      if (j.error !== undefined) { g.error = S(O(j.error).code) ?? 'error'; continue }
      if (g.responseId === null && S(j.id) !== null) g.responseId = S(j.id)
      for (const c of Array.isArray(j.choices) ? j.choices as unknown[] : []) {
        const ch = O(c)
        const d = O(ch.delta)
        if (typeof d.content === 'string') g.text += d.content
        for (const tc of Array.isArray(d.tool_calls) ? d.tool_calls as unknown[] : []) {
          const t = O(tc)
          const idx = typeof t.index === 'number' ? t.index : -1
          let call = byIndex.get(idx)
          if (call === undefined) { call = { id: '', itemId: null, name: '', namespace: null, kind: 'function', args: '', complete: false }; byIndex.set(idx, call) }
          if (S(t.id) !== null) call.id = S(t.id)!
          const fn = O(t.function)
          if (S(fn.name) !== null) call.name += S(fn.name)
          if (S(fn.arguments) !== null) call.args += S(fn.arguments)
        }
        if (ch.finish_reason !== null && ch.finish_reason !== undefined) finished = true
      }
    }
    g.calls = [...byIndex.entries()].sort((a, b) => a[0] - b[0]).map(([, c]) => ({ ...c, complete: finished }))
  } else if (proto === 'responses') {
    const open = new Map<string, GotCall>()
    for (const f of frames) {
      const j = parseJson(f.data)
      if (j === null) continue
      const type = S(j.type) ?? f.event
      if (type === 'response.created' || type === 'response.in_progress') g.responseId ??= S(O(j.response).id)
      else if (type === 'response.output_text.delta') g.text += S(j.delta) ?? ''
      else if (type === 'response.output_item.added' || type === 'response.output_item.done') {
        const it = O(j.item)
        const call = responsesCall(it, type === 'response.output_item.done')
        if (call === null) continue
        if (call.itemId !== null) g.ids.push(call.itemId)
        if (call.complete) { open.delete(call.itemId ?? call.id); g.calls.push(call) } else open.set(call.itemId ?? call.id, call)
      } else if (type === 'response.completed' || type === 'response.incomplete') { g.terminal = type === 'response.completed'; g.responseId ??= S(O(j.response).id) }
      else if (type === 'response.failed') g.error = S(O(O(j.response).error).code) ?? 'failed'
      else if (type === 'error') g.error = S(j.code) ?? S(O(j.error).code) ?? 'error'
    }
    for (const c of open.values()) g.calls.push(c) // started, never done: incomplete
  } else {
    const blocks = new Map<number, GotCall>()
    for (const f of frames) {
      const j = parseJson(f.data)
      if (j === null) continue
      const type = S(j.type) ?? f.event
      if (type === 'message_start') g.responseId = S(O(j.message).id)
      else if (type === 'content_block_start') {
        const b = O(j.content_block)
        if (b.type === 'tool_use' && typeof j.index === 'number') blocks.set(j.index, { id: S(b.id) ?? '', itemId: null, name: S(b.name) ?? '', namespace: null, kind: 'function', args: '', complete: false })
      } else if (type === 'content_block_delta') {
        const d = O(j.delta)
        if (d.type === 'text_delta') g.text += S(d.text) ?? ''
        else if (d.type === 'input_json_delta' && typeof j.index === 'number') { const c = blocks.get(j.index); if (c !== undefined) c.args += S(d.partial_json) ?? '' }
      } else if (type === 'content_block_stop' && typeof j.index === 'number') { const c = blocks.get(j.index); if (c !== undefined) c.complete = true }
      else if (type === 'message_stop') g.terminal = true
      else if (type === 'error') g.error = S(O(j.error).type) ?? 'error'
    }
    g.calls = [...blocks.entries()].sort((a, b) => a[0] - b[0]).map(([, c]) => ({ ...c, args: c.args === '' && c.complete ? '{}' : c.args }))
  }
  if (g.responseId !== null) g.ids.push(g.responseId)
  for (const c of g.calls) if (c.id !== '') g.ids.push(c.id)
  return g
}

function responsesCall (it: Record<string, unknown>, done: boolean): GotCall | null {
  const base = { id: S(it.call_id) ?? '', itemId: S(it.id), namespace: S(it.namespace), complete: done }
  if (it.type === 'function_call') return { ...base, name: S(it.name) ?? '', kind: 'function', args: S(it.arguments) ?? '' }
  if (it.type === 'custom_tool_call') return { ...base, name: S(it.name) ?? '', kind: 'custom', args: S(it.input) ?? '' }
  if (it.type === 'tool_search_call') return { ...base, name: 'tool_search', kind: 'tool_search', args: typeof it.arguments === 'string' ? it.arguments : JSON.stringify(it.arguments ?? {}) }
  return null
}

// ---------------------------------------------------------------------------------------
// Conversations

/** One round's exchange pair as the session keeps it in its history. */
export interface Turn { user: string; calls: GotCall[]; outputs: string[]; answer: string }

/**
 * The request body: the conversation so far (earlier rounds whole), this round's user turn,
 * and, for the recall, this round's calls and their tool outputs last (so the sim answers
 * text: a turn followed by tool results carries no directive).
 */
export function buildBody (proto: ClientProto, model: string, history: readonly Turn[], user: string, recall: { calls: GotCall[]; outputs: string[] } | null): Record<string, unknown> {
  const turns: Array<{ user: string; calls: GotCall[]; outputs: string[]; answer: string | null }> = [...history]
  turns.push({ user, calls: recall?.calls ?? [], outputs: recall?.outputs ?? [], answer: null })
  if (proto === 'chat') {
    const messages: unknown[] = [{ role: 'system', content: 'You are a coding agent.' }]
    for (const t of turns) {
      messages.push({ role: 'user', content: t.user })
      if (t.calls.length > 0) {
        messages.push({ role: 'assistant', content: null, tool_calls: t.calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.args } })) })
        t.calls.forEach((c, i) => messages.push({ role: 'tool', tool_call_id: c.id, content: t.outputs[i] }))
      }
      if (t.answer !== null) messages.push({ role: 'assistant', content: t.answer })
    }
    return { model, stream: true, stream_options: { include_usage: true }, messages, tools: toolDecls(proto) }
  }
  if (proto === 'responses') {
    const input: unknown[] = []
    for (const t of turns) {
      input.push({ type: 'message', role: 'user', content: [{ type: 'input_text', text: t.user }] })
      for (const c of t.calls) input.push(responsesItem(c))
      t.calls.forEach((c, i) => {
        if (c.kind === 'tool_search') input.push({ type: 'tool_search_output', call_id: c.id, status: 'completed', execution: 'client', tools: [] })
        else input.push({ type: c.kind === 'custom' ? 'custom_tool_call_output' : 'function_call_output', call_id: c.id, output: t.outputs[i] })
      })
      if (t.answer !== null) input.push({ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: t.answer, annotations: [] }] })
    }
    return { model, stream: true, store: false, instructions: 'You are a coding agent.', input, tools: toolDecls(proto), parallel_tool_calls: true }
  }
  const messages: unknown[] = []
  for (const t of turns) {
    messages.push({ role: 'user', content: [{ type: 'text', text: t.user }] })
    if (t.calls.length > 0) {
      messages.push({ role: 'assistant', content: t.calls.map((c) => ({ type: 'tool_use', id: c.id, name: c.name, input: parseJson(c.args) ?? {} })) })
      messages.push({ role: 'user', content: t.calls.map((c, i) => ({ type: 'tool_result', tool_use_id: c.id, content: t.outputs[i] })) })
    }
    if (t.answer !== null) messages.push({ role: 'assistant', content: [{ type: 'text', text: t.answer }] })
  }
  return { model, max_tokens: 1024, stream: true, system: 'You are a coding agent.', messages, tools: toolDecls(proto) }
}

function responsesItem (c: GotCall): Record<string, unknown> {
  const id = c.itemId === null ? {} : { id: c.itemId }
  if (c.kind === 'custom') return { type: 'custom_tool_call', ...id, call_id: c.id, name: c.name, input: c.args, status: 'completed' }
  if (c.kind === 'tool_search') return { type: 'tool_search_call', ...id, call_id: c.id, execution: 'client', status: 'completed', arguments: parseJson(c.args) ?? {} }
  return { type: 'function_call', ...id, call_id: c.id, name: c.name, ...(c.namespace === null ? {} : { namespace: c.namespace }), arguments: c.args, status: 'completed' }
}

// ---------------------------------------------------------------------------------------
// Checking a stream against what the provider said

/** What the sim says it answered one request (src/load/sim-child.ts --script). */
export interface Said {
  rid: string
  /** [key, itemId, name, kind, namespace, args] per call, in order. */
  calls: Array<[string, string, string, string, string | null, string]>
  text: string
}

/**
 * What the sim answers (answered) the request `bytes` on `protocol`: its own buildScript over
 * the same bytes (the sim is deterministic), as sim-child.ts --script reports it.
 */
export function saidFor (protocol: SimProtocol, bytes: Buffer, json: Record<string, unknown>): Said {
  const text = lastUserText(protocol, json)
  const s = buildScript(protocol, json, bytes.length, seedFrom(bytes), parseDirective(text), parseScenario(text))
  return { rid: s.id, calls: s.tools.map((c) => [c.key, c.itemId, c.name, c.kind, c.namespace, c.args]), text: s.text === null ? '' : s.text.full() }
}

/**
 * Everything wrong with `got` as the answer to the request the sim answered with `said`,
 * asked for `asks` (the client-side tools, in call order) with arguments carrying `marker`.
 * A cut stream (cancelled by the client) is checked as far as it went.
 */
export function checkStream (got: GotStream, said: Said, asks: readonly ToolAsk[], marker: string, whole: boolean): string[] {
  const bad: string[] = []
  if (got.responseId !== null && !got.responseId.includes(said.rid)) bad.push(`response id ${got.responseId} is not the provider's (${said.rid})`)
  if (whole ? got.text !== said.text : !said.text.startsWith(got.text)) bad.push(`text ${JSON.stringify(got.text.slice(0, 80))} is not the provider's ${JSON.stringify(said.text.slice(0, 80))}`)
  if (whole && got.calls.length !== said.calls.length) bad.push(`${got.calls.length} calls, the provider made ${said.calls.length}`)
  got.calls.forEach((c, i) => {
    const s = said.calls[i]
    if (s === undefined) { bad.push(`call ${i} (${c.id}) was never made by the provider`); return }
    if (c.id !== '' && !c.id.includes(s[0])) bad.push(`call ${i} id ${c.id} is not the provider's (key ${s[0]})`)
    if (!c.complete) return
    const ask = asks[i % asks.length]
    if (c.name !== ask.name || c.namespace !== ask.namespace || c.kind !== ask.kind) bad.push(`call ${i} is ${c.kind} ${c.namespace ?? ''}.${c.name}, asked ${ask.kind} ${ask.namespace ?? ''}.${ask.name}`)
    if (!c.args.includes(marker)) bad.push(`call ${i} arguments ${JSON.stringify(c.args.slice(0, 120))} do not carry this session's marker ${marker}`)
  })
  return bad
}
