// OpenAI Responses: the typed event stream and the `response` object.
//
// Stream layout (every event has `event:` and a `sequence_number` equal to its frame index):
//   response.created, response.in_progress                    (status in_progress, output [])
//   reasoning item (output_index 0, with `thinking=N`):
//     output_item.added, reasoning_summary_part.added, reasoning_summary_text.delta*,
//     reasoning_summary_text.done, reasoning_summary_part.done, output_item.done
//     (the done item carries encrypted_content when the request includes
//     "reasoning.encrypted_content")
//   message item (next output_index, when there is text):
//     output_item.added, content_part.added, output_text.delta*, output_text.done,
//     content_part.done, output_item.done
//   function_call items (output_index continues contiguously; `namespace` on a function
//   offered inside a namespace tool):
//     output_item.added, function_call_arguments.delta*, function_call_arguments.done,
//     output_item.done
//   custom_tool_call items (`call=` a custom tool):
//     output_item.added, custom_tool_call_input.delta*, custom_tool_call_input.done,
//     output_item.done
//   tool_search_call items (`call=tool_search`; execution "client", arguments an object):
//     output_item.added (arguments {}), output_item.done (the arguments)
//   web_search_call items (`call=web_search`, a hosted tool): output_item.added,
//     web_search_call.in_progress, .searching, .completed, output_item.done (action search)
//   response.completed                                        (output + usage)
// Truncations: `args` completes normally with the cut arguments; `length` / `filter` skip the
// cut item's arguments/input .done, mark it status "incomplete" and end with response.incomplete
// (incomplete_details.reason "max_output_tokens" / "content_filter"); `eof` ends after the cut item's last delta.
//
// The response object echoes the request's settings (instructions, reasoning, store, text,
// tools, tool_choice, ...) as the real API does; it is serialised once per request and the
// changing fields (status, output, usage) are spliced in.

import { named, FramePlan } from './frames.ts'
import { ERROR_EVENT_MESSAGE, MALFORMED_MARK, oversizeIndex, type Renderer } from './protocol.ts'
import { isEarlyStop, STREAM_ERROR_ROWS, type SimStreamError } from './scenario.ts'
import { outputTokens, type Script, type ToolCall } from './script.ts'

const STATUS = '"@@sim-status@@"'
const ERROR = '"@@sim-error@@"'
const INCOMPLETE = '"@@sim-incomplete@@"'
const OUTPUT = '"@@sim-output@@"'
const USAGE = '"@@sim-usage@@"'

type ResponseJson = (status: string, output: string, usage: string, error?: string, incomplete?: string) => string

/** Serialises the request echo once; returns a cheap splicer for the three changing fields. */
function responseTemplate(script: Script): ResponseJson {
  const r = script.request
  const echo = (key: string, fallback: unknown): unknown => (r[key] === undefined ? fallback : r[key])
  const json = JSON.stringify({
    id: 'resp_' + script.id,
    object: 'response',
    created_at: script.created,
    status: '@@sim-status@@',
    background: echo('background', false),
    error: '@@sim-error@@',
    incomplete_details: '@@sim-incomplete@@',
    instructions: echo('instructions', null),
    max_output_tokens: echo('max_output_tokens', null),
    model: script.model,
    output: '@@sim-output@@',
    parallel_tool_calls: echo('parallel_tool_calls', true),
    previous_response_id: echo('previous_response_id', null),
    reasoning: echo('reasoning', { effort: null, summary: null }),
    store: echo('store', true),
    temperature: echo('temperature', 1),
    text: echo('text', { format: { type: 'text' } }),
    tool_choice: echo('tool_choice', 'auto'),
    tools: echo('tools', []),
    top_p: echo('top_p', 1),
    truncation: echo('truncation', 'disabled'),
    usage: '@@sim-usage@@',
    user: echo('user', null),
    metadata: echo('metadata', {}),
  })
  // A quote inside an echoed string value is escaped, so these markers (with their quotes)
  // can only be the placeholders; status and output come before any free-form echo of keys.
  const s = json.indexOf(STATUS)
  const e = json.indexOf(ERROR, s)
  const i = json.indexOf(INCOMPLETE, e)
  const o = json.indexOf(OUTPUT, i)
  const u = json.indexOf(USAGE, o)
  const p0 = json.slice(0, s)
  const p1 = json.slice(s + STATUS.length, e)
  const p1e = json.slice(e + ERROR.length, i)
  const p1i = json.slice(i + INCOMPLETE.length, o)
  const p2 = json.slice(o + OUTPUT.length, u)
  const p3 = json.slice(u + USAGE.length)
  return (status, output, usage, error = 'null', incomplete = 'null') =>
    p0 + '"' + status + '"' + p1 + error + p1e + incomplete + p1i + output + p2 + usage + p3
}

function incompleteReason(script: Script): string {
  return script.truncate === 'filter' ? '{"reason":"content_filter"}' : '{"reason":"max_output_tokens"}'
}

function usageJson(script: Script): string {
  const out = outputTokens(script)
  return `{"input_tokens":${script.inputTokens},"input_tokens_details":{"cached_tokens":${script.cachedTokens ?? 0}},"output_tokens":${out},` +
    `"output_tokens_details":{"reasoning_tokens":${script.reasoningTokens ?? 0}},"total_tokens":${script.inputTokens + out}}`
}

function callId(tool: ToolCall): string {
  return 'call_' + tool.key
}

function messageItem(script: Script, status: string, contentJson: string): string {
  return `{"id":"${script.messageItemId}","type":"message","status":"${status}","role":"assistant","content":${contentJson}}`
}

function textPart(textJson: string): string {
  return `{"type":"output_text","annotations":[],"logprobs":[],"text":${textJson}}`
}

function functionItem(tool: ToolCall, status: string, argsJson: string): string {
  const namespace = tool.namespace === null ? '' : ',"namespace":' + JSON.stringify(tool.namespace)
  return `{"id":"${tool.itemId}","type":"function_call","status":"${status}","arguments":${argsJson},"call_id":"${callId(tool)}","name":${JSON.stringify(tool.name)}${namespace}}`
}

/** The call's output item; `full` false is the `output_item.added` form (no arguments yet). */
function callItem(tool: ToolCall, status: string, full: boolean): string {
  if (tool.kind === 'custom') {
    return `{"id":"${tool.itemId}","type":"custom_tool_call","status":"${status}","call_id":"${callId(tool)}","name":${JSON.stringify(tool.name)},"input":${full ? JSON.stringify(tool.args) : '""'}}`
  }
  if (tool.kind === 'web_search') {
    const action = full ? `,"action":{"type":"search","query":${JSON.stringify(searchQuery(tool.args))}}` : ''
    return `{"id":"${tool.itemId}","type":"web_search_call","status":"${status}"${action}}`
  }
  if (tool.kind === 'tool_search') {
    return `{"id":"${tool.itemId}","type":"tool_search_call","status":"${status}","call_id":"${callId(tool)}","execution":"client","arguments":${full ? searchArguments(tool.args) : '{}'}}`
  }
  return functionItem(tool, status, full ? JSON.stringify(tool.args) : '""')
}

/** The query of a web search call: `query` of its arguments, else the argument text. */
function searchQuery(args: string): string {
  try {
    const v: unknown = JSON.parse(args)
    if (typeof v === 'object' && v !== null && typeof (v as Record<string, unknown>).query === 'string') return (v as Record<string, string>).query
  } catch {
    // cut or forced arguments: the text itself
  }
  return args
}

/** tool_search_call arguments are a JSON value, not a string: the text when it is JSON. */
function searchArguments(args: string): string {
  try {
    JSON.parse(args)
    return args
  } catch {
    return JSON.stringify(args) // forced or cut arguments that are not JSON stay visible as a string
  }
}

/** Status of a call item once done: the call cut by truncate=length is incomplete. */
function callStatus(script: Script, tool: ToolCall): string {
  return !tool.complete && isEarlyStop(script.truncate) ? 'incomplete' : 'completed'
}

function textStatus(script: Script): string {
  return isEarlyStop(script.truncate) && script.tools.length === 0 ? 'incomplete' : 'completed'
}

function wantsEncryptedReasoning(script: Script): boolean {
  const include = script.request.include
  return Array.isArray(include) && include.includes('reasoning.encrypted_content')
}

function reasoningItem(script: Script, summaryJson: string): string {
  const encrypted = wantsEncryptedReasoning(script) ? `,"encrypted_content":"${script.signature}"` : ''
  return `{"id":"${script.reasoningItemId}","type":"reasoning","summary":${summaryJson}${encrypted}}`
}

function summaryPart(textJson: string): string {
  return `{"type":"summary_text","text":${textJson}}`
}

/** Completed output items, in output_index order. */
function outputJson(script: Script): string {
  const items: string[] = []
  if (script.thinking !== null) items.push(reasoningItem(script, '[' + summaryPart('"' + script.thinking.full() + '"') + ']'))
  // Text pieces are JSON-safe by construction (see script.ts), so quoting is enough.
  if (script.text !== null) items.push(messageItem(script, textStatus(script), '[' + textPart('"' + script.text.full() + '"') + ']'))
  for (const tool of script.tools) items.push(callItem(tool, callStatus(script, tool), true))
  return '[' + items.join(',') + ']'
}

/** response.completed, or response.incomplete after a length truncation. */
function terminal(script: Script, response: ResponseJson, seq: number): string {
  if (isEarlyStop(script.truncate)) {
    return named('response.incomplete', `{"type":"response.incomplete","sequence_number":${seq},"response":${response('incomplete', outputJson(script), usageJson(script), 'null', incompleteReason(script))}}`)
  }
  return named('response.completed', `{"type":"response.completed","sequence_number":${seq},"response":${response('completed', outputJson(script), usageJson(script))}}`)
}

function stream(script: Script): FramePlan {
  const response = responseTemplate(script)
  const plan = new FramePlan()
  plan.one(seq => named('response.created', `{"type":"response.created","sequence_number":${seq},"response":${response('in_progress', '[]', 'null')}}`))
  plan.one(seq => named('response.in_progress', `{"type":"response.in_progress","sequence_number":${seq},"response":${response('in_progress', '[]', 'null')}}`))

  let outputIndex = 0
  const thinking = script.thinking
  if (thinking !== null) {
    const oi = outputIndex++
    const ref = `"item_id":"${script.reasoningItemId}","output_index":${oi},"summary_index":0`
    const fullJson = (): string => '"' + thinking.full() + '"'
    plan.one(seq => named('response.output_item.added', `{"type":"response.output_item.added","sequence_number":${seq},"output_index":${oi},"item":{"id":"${script.reasoningItemId}","type":"reasoning","summary":[]}}`))
    plan.one(seq => named('response.reasoning_summary_part.added', `{"type":"response.reasoning_summary_part.added","sequence_number":${seq},${ref},"part":${summaryPart('""')}}`))
    plan.add(thinking.count, (j, seq) => named('response.reasoning_summary_text.delta', `{"type":"response.reasoning_summary_text.delta","sequence_number":${seq},${ref},"delta":"${thinking.piece(j)}"}`))
    plan.one(seq => named('response.reasoning_summary_text.done', `{"type":"response.reasoning_summary_text.done","sequence_number":${seq},${ref},"text":${fullJson()}}`))
    plan.one(seq => named('response.reasoning_summary_part.done', `{"type":"response.reasoning_summary_part.done","sequence_number":${seq},${ref},"part":${summaryPart(fullJson())}}`))
    plan.one(seq => named('response.output_item.done', `{"type":"response.output_item.done","sequence_number":${seq},"output_index":${oi},"item":${reasoningItem(script, '[' + summaryPart(fullJson()) + ']')}}`))
  }
  const text = script.text
  if (text !== null) {
    const oi = outputIndex++
    const item = `"item_id":"${script.messageItemId}","output_index":${oi},"content_index":0`
    const fullJson = (): string => '"' + text.full() + '"'
    plan.one(seq => named('response.output_item.added', `{"type":"response.output_item.added","sequence_number":${seq},"output_index":${oi},"item":${messageItem(script, 'in_progress', '[]')}}`))
    plan.one(seq => named('response.content_part.added', `{"type":"response.content_part.added","sequence_number":${seq},${item},"part":${textPart('""')}}`))
    const deltaHead = 'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":'
    const deltaMid = ',' + item + ',"delta":"'
    const deltaTail = '","logprobs":[]}\n\n'
    const textDelta = (piece: string, seq: number): string => deltaHead + seq + deltaMid + piece + deltaTail
    if (script.directive.fault === 'oversize-frame') {
      const index = oversizeIndex(script, plan.next)
      text.insertOversize(index, script.directive.size - Buffer.byteLength(textDelta('', plan.next + index)))
    }
    plan.add(text.count, (j, seq) => textDelta(text.piece(j), seq))
    if (script.truncate === 'eof' && script.tools.length === 0) return plan
    const status = textStatus(script)
    plan.one(seq => named('response.output_text.done', `{"type":"response.output_text.done","sequence_number":${seq},${item},"text":${fullJson()},"logprobs":[]}`))
    plan.one(seq => named('response.content_part.done', `{"type":"response.content_part.done","sequence_number":${seq},${item},"part":${textPart(fullJson())}}`))
    plan.one(seq => named('response.output_item.done', `{"type":"response.output_item.done","sequence_number":${seq},"output_index":${oi},"item":${messageItem(script, status, '[' + textPart(fullJson()) + ']')}}`))
  }

  for (const tool of script.tools) {
    const oi = outputIndex++
    const ref = `"item_id":"${tool.itemId}","output_index":${oi}`
    plan.one(seq => named('response.output_item.added', `{"type":"response.output_item.added","sequence_number":${seq},"output_index":${oi},"item":${callItem(tool, 'in_progress', false)}}`))
    if (tool.kind === 'function') {
      plan.add(tool.chunks.length, (c, seq) => named('response.function_call_arguments.delta', `{"type":"response.function_call_arguments.delta","sequence_number":${seq},${ref},"delta":"${tool.chunks[c]}"}`))
    } else if (tool.kind === 'custom') {
      plan.add(tool.chunks.length, (c, seq) => named('response.custom_tool_call_input.delta', `{"type":"response.custom_tool_call_input.delta","sequence_number":${seq},${ref},"delta":"${tool.chunks[c]}"}`))
    } else if (tool.kind === 'web_search') {
      for (const phase of ['in_progress', 'searching', 'completed']) {
        if (phase === 'completed' && !tool.complete) break
        plan.one(seq => named(`response.web_search_call.${phase}`, `{"type":"response.web_search_call.${phase}","sequence_number":${seq},"output_index":${oi},"item_id":"${tool.itemId}"}`))
      }
    }
    if (!tool.complete && script.truncate === 'eof') return plan
    if (tool.complete || !isEarlyStop(script.truncate)) {
      if (tool.kind === 'function') {
        plan.one(seq => named('response.function_call_arguments.done', `{"type":"response.function_call_arguments.done","sequence_number":${seq},${ref},"arguments":${JSON.stringify(tool.args)}}`))
      } else if (tool.kind === 'custom') {
        plan.one(seq => named('response.custom_tool_call_input.done', `{"type":"response.custom_tool_call_input.done","sequence_number":${seq},${ref},"input":${JSON.stringify(tool.args)}}`))
      }
    }
    plan.one(seq => named('response.output_item.done', `{"type":"response.output_item.done","sequence_number":${seq},"output_index":${oi},"item":${callItem(tool, callStatus(script, tool), true)}}`))
  }

  plan.one(seq => terminal(script, response, seq))
  return plan
}

function json(script: Script): string {
  const response = responseTemplate(script)
  if (isEarlyStop(script.truncate)) return response('incomplete', outputJson(script), usageJson(script), 'null', incompleteReason(script))
  return response('completed', outputJson(script), usageJson(script))
}

/** `response.failed` for `error=KIND`: status failed, `error.code` / `error.message` as Codex reads them. */
function failed(script: Script, kind: SimStreamError, seq: number): string {
  const row = STREAM_ERROR_ROWS[kind]
  const error = JSON.stringify({ code: row.openaiCode, message: row.openaiMessage })
  return named('response.failed', `{"type":"response.failed","sequence_number":${seq},"response":${responseTemplate(script)('failed', '[]', 'null', error)}}`)
}

export const responses: Renderer = {
  stream,
  json,
  malformed: seq => `event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":${seq},"delta":"${MALFORMED_MARK}\n\n`,
  errorEvent: seq => named('error', JSON.stringify({ type: 'error', sequence_number: seq, code: 'server_error', message: ERROR_EVENT_MESSAGE, param: null })),
  streamError: failed,
}
