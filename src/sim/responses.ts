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
//   function_call items (output_index continues contiguously):
//     output_item.added, function_call_arguments.delta*, function_call_arguments.done,
//     output_item.done
//   response.completed                                        (output + usage)
//
// The response object echoes the request's settings (instructions, reasoning, store, text,
// tools, tool_choice, ...) as the real API does; it is serialised once per request and the
// changing fields (status, output, usage) are spliced in.

import { named, FramePlan } from './frames.ts'
import { ERROR_EVENT_MESSAGE, MALFORMED_MARK, oversizeIndex, type Renderer } from './protocol.ts'
import { outputTokens, type Script, type ToolCall } from './script.ts'

const STATUS = '"@@sim-status@@"'
const OUTPUT = '"@@sim-output@@"'
const USAGE = '"@@sim-usage@@"'

type ResponseJson = (status: string, output: string, usage: string) => string

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
    error: null,
    incomplete_details: null,
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
  const o = json.indexOf(OUTPUT, s)
  const u = json.indexOf(USAGE, o)
  const p0 = json.slice(0, s)
  const p1 = json.slice(s + STATUS.length, o)
  const p2 = json.slice(o + OUTPUT.length, u)
  const p3 = json.slice(u + USAGE.length)
  return (status, output, usage) => p0 + '"' + status + '"' + p1 + output + p2 + usage + p3
}

function usageJson(script: Script): string {
  const out = outputTokens(script)
  return `{"input_tokens":${script.inputTokens},"input_tokens_details":{"cached_tokens":0},"output_tokens":${out},` +
    `"output_tokens_details":{"reasoning_tokens":0},"total_tokens":${script.inputTokens + out}}`
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
  return `{"id":"${tool.itemId}","type":"function_call","status":"${status}","arguments":${argsJson},"call_id":"${callId(tool)}","name":${JSON.stringify(tool.name)}}`
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
  if (script.text !== null) items.push(messageItem(script, 'completed', '[' + textPart('"' + script.text.full() + '"') + ']'))
  for (const tool of script.tools) items.push(functionItem(tool, 'completed', JSON.stringify(tool.args)))
  return '[' + items.join(',') + ']'
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
    plan.one(seq => named('response.output_text.done', `{"type":"response.output_text.done","sequence_number":${seq},${item},"text":${fullJson()},"logprobs":[]}`))
    plan.one(seq => named('response.content_part.done', `{"type":"response.content_part.done","sequence_number":${seq},${item},"part":${textPart(fullJson())}}`))
    plan.one(seq => named('response.output_item.done', `{"type":"response.output_item.done","sequence_number":${seq},"output_index":${oi},"item":${messageItem(script, 'completed', '[' + textPart(fullJson()) + ']')}}`))
  }

  for (const tool of script.tools) {
    const oi = outputIndex++
    const ref = `"item_id":"${tool.itemId}","output_index":${oi}`
    plan.one(seq => named('response.output_item.added', `{"type":"response.output_item.added","sequence_number":${seq},"output_index":${oi},"item":${functionItem(tool, 'in_progress', '""')}}`))
    plan.add(tool.chunks.length, (c, seq) => named('response.function_call_arguments.delta', `{"type":"response.function_call_arguments.delta","sequence_number":${seq},${ref},"delta":"${tool.chunks[c]}"}`))
    plan.one(seq => named('response.function_call_arguments.done', `{"type":"response.function_call_arguments.done","sequence_number":${seq},${ref},"arguments":${JSON.stringify(tool.args)}}`))
    plan.one(seq => named('response.output_item.done', `{"type":"response.output_item.done","sequence_number":${seq},"output_index":${oi},"item":${functionItem(tool, 'completed', JSON.stringify(tool.args))}}`))
  }

  plan.one(seq => named('response.completed', `{"type":"response.completed","sequence_number":${seq},"response":${response('completed', outputJson(script), usageJson(script))}}`))
  return plan
}

function json(script: Script): string {
  return responseTemplate(script)('completed', outputJson(script), usageJson(script))
}

export const responses: Renderer = {
  stream,
  json,
  malformed: seq => `event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":${seq},"delta":"${MALFORMED_MARK}\n\n`,
  errorEvent: seq => named('error', JSON.stringify({ type: 'error', sequence_number: seq, code: 'server_error', message: ERROR_EVENT_MESSAGE, param: null })),
}
