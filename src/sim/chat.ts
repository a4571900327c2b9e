// OpenAI Chat Completions: `chat.completion.chunk` frames and the `chat.completion` body.
//
// Stream layout:
//   role chunk — {"role":"assistant","content":""}; when the answer is tool calls only, the
//                role rides on the first tool-call head instead (content null), as in the API
//   reasoning deltas — {"reasoning_content":"..."} (DeepSeek style; only with `reasoning_content`)
//   text deltas — {"content":"..."}
//   tool calls — per tool a head {index,id,type:"function",function:{name,arguments:""}} then
//                argument deltas; with `parallel=1` all heads first, then the argument deltas
//                round-robin across tools (provider-interleaved parallel calls); with
//                `stagger` call k joins the round-robin one round after call k-1 (its head
//                arrives after the earlier calls' arguments began)
//   finish chunk — delta {}, finish_reason "stop" | "tool_calls"
//   usage chunk — choices [] (only with stream_options.include_usage)
//   data: [DONE]
// Truncations: `length` ends with finish_reason "length", `filter` with "content_filter"; `eof` ends right after the cut
// call's (or the text's) last delta, without a finish chunk, usage or [DONE].

import { isObject } from './directive.ts'
import { data, FramePlan } from './frames.ts'
import { ERROR_EVENT_MESSAGE, MALFORMED_MARK, oversizeIndex, type Renderer } from './protocol.ts'
import { streamErrorBody } from './scenario.ts'
import { outputTokens, type Script, type ToolCall } from './script.ts'

const DONE = 'data: [DONE]\n\n'

function usageJson(script: Script): string {
  const out = outputTokens(script)
  const base = `{"prompt_tokens":${script.inputTokens},"completion_tokens":${out},"total_tokens":${script.inputTokens + out}`
  if (script.cachedTokens === null && script.reasoningTokens === null) return base + '}'
  // The details objects as the API sends them, only when the directive asks for the counts.
  return base + `,"prompt_tokens_details":{"cached_tokens":${script.cachedTokens ?? 0},"audio_tokens":0},` +
    `"completion_tokens_details":{"reasoning_tokens":${script.reasoningTokens ?? 0},"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`
}

function finishReason(script: Script): string {
  if (script.truncate === 'length') return 'length'
  if (script.truncate === 'filter') return 'content_filter'
  return script.tools.length > 0 ? 'tool_calls' : 'stop'
}

function callId(tool: ToolCall): string {
  return 'call_' + tool.key
}

function stream(script: Script): FramePlan {
  const req = script.request
  const includeUsage = isObject(req.stream_options) && req.stream_options.include_usage === true
  // Precomputed once: every chunk is head + delta + tail.
  const base = `{"id":"chatcmpl-${script.id}","object":"chat.completion.chunk","created":${script.created},"model":${script.modelJson},"system_fingerprint":"fp_sim"`
  const head = base + ',"choices":[{"index":0,"delta":'
  const usageNull = includeUsage ? ',"usage":null' : ''
  const tail = ',"logprobs":null,"finish_reason":null}]' + usageNull + '}\n\n'
  const chunk = (delta: string): string => 'data: ' + head + delta + tail

  const plan = new FramePlan()
  const text = script.text
  // As the real API does: the role rides on its own chunk before text, or on the first
  // tool-call head when the answer is tool calls only.
  const tools = script.tools
  const thinking = script.thinking
  const roleOnHead = text === null && tools.length > 0 && thinking === null
  if (!roleOnHead) plan.one(() => chunk(text !== null ? '{"role":"assistant","content":""}' : '{"role":"assistant","content":null}'))
  if (thinking !== null) plan.add(thinking.count, j => chunk('{"reasoning_content":"' + thinking.piece(j) + '"}'))
  if (text !== null) {
    const textDelta = (piece: string): string => chunk('{"content":"' + piece + '"}')
    if (script.directive.fault === 'oversize-frame') {
      text.insertOversize(oversizeIndex(script, plan.next), script.directive.size - Buffer.byteLength(textDelta('')))
    }
    plan.add(text.count, j => textDelta(text.piece(j)))
  }

  const toolHead = (k: number): string => {
    const t = tools[k]
    const role = roleOnHead && k === 0 ? '"role":"assistant","content":null,' : ''
    return chunk(`{${role}"tool_calls":[{"index":${k},"id":"${callId(t)}","type":"function","function":{"name":${JSON.stringify(t.name)},"arguments":""}}]}`)
  }
  const toolArgs = (k: number, c: number): string =>
    chunk(`{"tool_calls":[{"index":${k},"function":{"arguments":"${tools[k].chunks[c]}"}}]}`)

  if (script.directive.parallel && tools.length > 1) {
    // Order of (tool, chunk) pairs; chunk -1 is the head. Heads first, then round-robin.
    const order: Array<[number, number]> = []
    if (script.scenario.stagger) {
      // Round r carries fragment r-k of every call k <= r (fragment 0 is the head).
      for (let r = 0; ; r++) {
        let any = false
        for (let k = 0; k < tools.length && k <= r; k++) {
          const c = r - k - 1
          if (c < tools[k].chunks.length) {
            order.push([k, c])
            any = true
          }
        }
        if (!any && r >= tools.length) break
      }
    } else {
      for (let k = 0; k < tools.length; k++) order.push([k, -1])
      for (let c = 0; ; c++) {
        let any = false
        for (let k = 0; k < tools.length; k++) {
          if (c < tools[k].chunks.length) {
            order.push([k, c])
            any = true
          }
        }
        if (!any) break
      }
    }
    plan.add(order.length, j => {
      const [k, c] = order[j]
      return c < 0 ? toolHead(k) : toolArgs(k, c)
    })
  } else {
    for (let k = 0; k < tools.length; k++) {
      plan.one(() => toolHead(k))
      plan.add(tools[k].chunks.length, c => toolArgs(k, c))
    }
  }

  if (script.truncate === 'eof') return plan
  plan.one(() => 'data: ' + head + `{},"logprobs":null,"finish_reason":"${finishReason(script)}"}]` + usageNull + '}\n\n')
  if (includeUsage) plan.one(() => data(base + ',"choices":[],"usage":' + usageJson(script) + '}'))
  plan.one(() => DONE)
  return plan
}

function json(script: Script): string {
  const message: Record<string, unknown> = {
    role: 'assistant',
    content: script.text === null ? null : script.text.full(),
    refusal: null,
    annotations: [],
  }
  if (script.thinking !== null) message.reasoning_content = script.thinking.full()
  if (script.tools.length > 0) {
    message.tool_calls = script.tools.map(t => ({ id: callId(t), type: 'function', function: { name: t.name, arguments: t.args } }))
  }
  const body = {
    id: 'chatcmpl-' + script.id,
    object: 'chat.completion',
    created: script.created,
    model: script.model,
    system_fingerprint: 'fp_sim',
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason(script) }],
    usage: JSON.parse(usageJson(script)) as unknown,
  }
  return JSON.stringify(body)
}

export const chat: Renderer = {
  stream,
  json,
  malformed: () => `data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"${MALFORMED_MARK}\n\n`,
  errorEvent: () => data(JSON.stringify({ error: { message: ERROR_EVENT_MESSAGE, type: 'server_error', param: null, code: 'server_error' } })),
  streamError: (_script, kind) => data(streamErrorBody('openai', kind)),
}
