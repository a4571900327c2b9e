// Anthropic Messages: the named event stream and the `message` body.
//
// Stream layout (every frame has an `event:` line):
//   message_start (usage.input_tokens, output_tokens 1)
//   thinking block (when thinking is on): content_block_start {type:"thinking"},
//                    thinking_delta*, signature_delta, content_block_stop
//   redacted_thinking blocks (`redacted=N`): content_block_start {type:"redacted_thinking",data},
//                    content_block_stop
//   text block (when there is text): content_block_start, ping, text_delta*, content_block_stop
//                    (the real API sends its ping there; without text it follows message_start)
//   tool_use blocks: content_block_start {type:"tool_use",id,name,input:{}},
//                    input_json_delta*, content_block_stop
//   a server web search (`call=web_search` with a web_search_* server tool): the same as a
//                    server_tool_use block (id srvtoolu_...), then a web_search_tool_result
//                    block; usage gains server_tool_use.web_search_requests; it does not make
//                    stop_reason tool_use
//   message_delta (stop_reason "end_turn" | "tool_use", usage.output_tokens), message_stop
// Truncations: `args`, `length` and `filter` close the cut block normally (stop_reason
// tool_use / max_tokens / refusal); `eof` ends after its last delta. A JSON body cannot hold cut input: there the
// cut call's input is {}.

import { named, FramePlan } from './frames.ts'
import { ERROR_EVENT_MESSAGE, MALFORMED_MARK, oversizeIndex, type Renderer } from './protocol.ts'
import { streamErrorBody } from './scenario.ts'
import { outputTokens, type Script, type ToolCall } from './script.ts'

function stopReason(script: Script): string {
  if (script.truncate === 'length') return 'max_tokens'
  if (script.truncate === 'filter') return 'refusal'
  // A server tool (web search) runs at the provider: only client tools stop for tool_use.
  return script.tools.some(t => t.kind !== 'web_search') ? 'tool_use' : 'end_turn'
}

function webSearches(script: Script): number {
  let n = 0
  for (const t of script.tools) if (t.kind === 'web_search') n++
  return n
}

/** `,"server_tool_use":{...}` for usage when the answer ran web searches, else ''. */
function serverToolUsage(script: Script): string {
  const n = webSearches(script)
  return n === 0 ? '' : `,"server_tool_use":{"web_search_requests":${n}}`
}

/** The web_search_tool_result block of a server web search (one deterministic result). */
function searchResult(tool: ToolCall): string {
  const blob = 'Sim' + Buffer.from('search:' + tool.key).toString('base64')
  return `{"type":"web_search_tool_result","tool_use_id":"srvtoolu_${tool.key}","content":[{"type":"web_search_result","title":"Sim result","url":"https://example.com/sim","encrypted_content":"${blob}","page_age":null}]}`
}

function toolBlockHead(tool: ToolCall): string {
  const type = tool.kind === 'web_search' ? 'server_tool_use' : 'tool_use'
  const prefix = tool.kind === 'web_search' ? 'srvtoolu_' : 'toolu_'
  return `"type":"${type}","id":"${prefix}${tool.key}","name":${JSON.stringify(tool.name)}`
}

function usage(script: Script, output: number): string {
  // Anthropic's input_tokens excludes the cached part (cache_read_input_tokens).
  const cached = script.cachedTokens ?? 0
  return `{"input_tokens":${script.inputTokens - cached},"cache_creation_input_tokens":0,"cache_read_input_tokens":${cached},"output_tokens":${output}${serverToolUsage(script)},"service_tier":"standard"}`
}

/** The input object of a non-streaming tool_use block: the arguments when they are a JSON object. */
function inputJson(tool: ToolCall): string {
  if (!tool.complete) return '{}'
  try {
    const v: unknown = JSON.parse(tool.args)
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? tool.args : '{}'
  } catch {
    return '{}'
  }
}

function stream(script: Script): FramePlan {
  const plan = new FramePlan()
  plan.one(() => named('message_start', `{"type":"message_start","message":{"id":"msg_${script.id}","type":"message","role":"assistant","model":${script.modelJson},"content":[],"stop_reason":null,"stop_sequence":null,"usage":${usage(script, 1)}}}`))
  const ping = (): string => named('ping', '{"type":"ping"}')
  const text = script.text
  if (text === null) plan.one(ping)

  let index = 0
  const thinking = script.thinking
  if (thinking !== null) {
    const b = index++
    plan.one(() => named('content_block_start', `{"type":"content_block_start","index":${b},"content_block":{"type":"thinking","thinking":"","signature":""}}`))
    const head = `event: content_block_delta\ndata: {"type":"content_block_delta","index":${b},"delta":{"type":"thinking_delta","thinking":"`
    plan.add(thinking.count, j => head + thinking.piece(j) + '"}}\n\n')
    plan.one(() => named('content_block_delta', `{"type":"content_block_delta","index":${b},"delta":{"type":"signature_delta","signature":"${script.signature}"}}`))
    plan.one(() => named('content_block_stop', `{"type":"content_block_stop","index":${b}}`))
  }
  for (const data of script.redacted) {
    const b = index++
    plan.one(() => named('content_block_start', `{"type":"content_block_start","index":${b},"content_block":{"type":"redacted_thinking","data":"${data}"}}`))
    plan.one(() => named('content_block_stop', `{"type":"content_block_stop","index":${b}}`))
  }
  if (text !== null) {
    const b = index++
    plan.one(() => named('content_block_start', `{"type":"content_block_start","index":${b},"content_block":{"type":"text","text":""}}`))
    plan.one(ping)
    const head = `event: content_block_delta\ndata: {"type":"content_block_delta","index":${b},"delta":{"type":"text_delta","text":"`
    const tail = '"}}\n\n'
    if (script.directive.fault === 'oversize-frame') {
      text.insertOversize(oversizeIndex(script, plan.next), script.directive.size - Buffer.byteLength(head + tail))
    }
    plan.add(text.count, j => head + text.piece(j) + tail)
    if (script.truncate === 'eof' && script.tools.length === 0) return plan
    plan.one(() => named('content_block_stop', `{"type":"content_block_stop","index":${b}}`))
  }

  for (const tool of script.tools) {
    const b = index++
    plan.one(() => named('content_block_start', `{"type":"content_block_start","index":${b},"content_block":{${toolBlockHead(tool)},"input":{}}}`))
    plan.add(tool.chunks.length, c => named('content_block_delta', `{"type":"content_block_delta","index":${b},"delta":{"type":"input_json_delta","partial_json":"${tool.chunks[c]}"}}`))
    if (!tool.complete && script.truncate === 'eof') return plan
    plan.one(() => named('content_block_stop', `{"type":"content_block_stop","index":${b}}`))
    if (tool.kind === 'web_search' && tool.complete) {
      const r = index++
      plan.one(() => named('content_block_start', `{"type":"content_block_start","index":${r},"content_block":${searchResult(tool)}}`))
      plan.one(() => named('content_block_stop', `{"type":"content_block_stop","index":${r}}`))
    }
  }

  plan.one(() => named('message_delta', `{"type":"message_delta","delta":{"stop_reason":"${stopReason(script)}","stop_sequence":null},"usage":{"output_tokens":${outputTokens(script)}${serverToolUsage(script)}}}`))
  plan.one(() => named('message_stop', '{"type":"message_stop"}'))
  return plan
}

function json(script: Script): string {
  const content: string[] = []
  // Text pieces are JSON-safe by construction (see script.ts), so quoting is enough.
  if (script.thinking !== null) content.push(`{"type":"thinking","thinking":"${script.thinking.full()}","signature":"${script.signature}"}`)
  for (const data of script.redacted) content.push(`{"type":"redacted_thinking","data":"${data}"}`)
  if (script.text !== null) content.push('{"type":"text","text":"' + script.text.full() + '"}')
  for (const tool of script.tools) {
    content.push(`{${toolBlockHead(tool)},"input":${inputJson(tool)}}`)
    if (tool.kind === 'web_search' && tool.complete) content.push(searchResult(tool))
  }
  return `{"id":"msg_${script.id}","type":"message","role":"assistant","model":${script.modelJson},"content":[${content.join(',')}],` +
    `"stop_reason":"${stopReason(script)}","stop_sequence":null,"usage":${usage(script, outputTokens(script))}}`
}

export const messages: Renderer = {
  stream,
  json,
  malformed: () => `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"${MALFORMED_MARK}\n\n`,
  errorEvent: () => named('error', JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: ERROR_EVENT_MESSAGE } })),
  streamError: (_script, kind) => named('error', streamErrorBody('anthropic', kind)),
}
