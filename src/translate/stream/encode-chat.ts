// Canonical events -> an OpenAI Chat Completions stream.
//
// The chunk rules the openai SDK's chat.completions.stream() and Chat clients hold a stream
// to: every chunk has the same id, created and model; the first carries `role: "assistant"`;
// text as `content` deltas, reasoning as `reasoning_content` deltas (the DeepSeek-style
// field Chat clients read; Chat has no place for an opaque blob, so none is sent); each tool
// call as `tool_calls` deltas with its own index (0, 1, ... in emission order): the first with
// id, type and function.name, then its arguments (a custom tool's call: `type: "custom"`,
// `custom.name`, then `custom.input` deltas, as the JSON answer has it); one chunk with `finish_reason`; a usage
// chunk (`choices: []`) when the client asked (stream_options.include_usage); `data: [DONE]`.
// A failure is the signed error frame, with no [DONE] after it.
//
// A call goes out whole, at its `item_end` (its two chunks, the head and then all its arguments
// in one delta), never live: Chat has no per-call end, and Chat clients finalise whatever call
// they hold when the stream ends — the AI SDK's chat model reports a `tool-call` for a call cut
// short even after the error frame. So a truncated call (which never gets `item_end`) reaches
// a Chat client not at all. Nothing extra is kept for it: the decoder holds the call's
// arguments, charged to the budget as 'tool_arguments', until that `item_end`, which carries
// them whole (`call.arguments`, the same text the argument deltas join to). Text and reasoning
// stream live.

import { chat } from '../../protocols/chat.ts'
import type { FailureRecord } from '../../sse/sign.ts'
import type { CanonicalEvent, StopReason, Usage } from '../canonical.ts'
import { openaiErrorFields, type ErrorEvent } from './client-errors.ts'
import { Output, answerBase, type EncoderOptions, type StreamEncoder } from './encoder.ts'

const J = JSON.stringify

/** The client's id: the provider's (a fresh one when it sent none), `chatcmpl-` prefixed unless it is. */
export function chatId (providerId: string): string {
  const id = answerBase(providerId)
  return id.startsWith('chatcmpl') ? id : 'chatcmpl-' + id
}

export function chatFinish (s: StopReason): string {
  switch (s) {
    case 'length': return 'length'
    case 'tool_calls': return 'tool_calls'
    case 'content_filter': case 'refusal': return 'content_filter'
    default: return 'stop'
  }
}

export function chatUsageJson (u: Usage | null): Record<string, unknown> | null {
  if (u === null) return null
  return {
    prompt_tokens: u.inputTokens,
    completion_tokens: u.outputTokens,
    total_tokens: u.inputTokens + u.outputTokens,
    prompt_tokens_details: { cached_tokens: u.cachedInputTokens ?? 0 },
    completion_tokens_details: { reasoning_tokens: u.reasoningTokens ?? 0 },
  }
}

export class ChatEncoder implements StreamEncoder {
  readonly #o: EncoderOptions
  readonly #out = new Output()
  /** `{"id":...,"object":"chat.completion.chunk","created":...,"model":...,"choices":[` */
  #head = ''
  #kind: 'text' | 'reasoning' | 'tool' | null = null
  #tool = -1
  error: ErrorEvent | null = null
  finished = false
  usage: Usage | null = null

  constructor (o: EncoderOptions) { this.#o = o }

  take (): Buffer[] { return this.#out.take() }

  #chunk (delta: string, finish = 'null'): void {
    this.#out.push(`data: ${this.#head}{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish}}]}\n\n`)
  }

  event (e: CanonicalEvent): void {
    if (this.error !== null || this.finished) return
    switch (e.type) {
      case 'start': {
        const model = e.model !== '' ? e.model : this.#o.request.model
        this.#head = `{"id":${J(chatId(e.id))},"object":"chat.completion.chunk","created":${e.created ?? Math.floor(Date.now() / 1000)},"model":${J(model)},"choices":[`
        this.#chunk('{"role":"assistant","content":""}')
        return
      }
      case 'item_start': {
        const it = e.item
        // A call's chunks wait for its item_end (the header comment says why).
        this.#kind = it.kind === 'tool_call' ? 'tool' : it.kind
        return
      }
      case 'delta':
        if (this.#kind === 'text') this.#chunk(`{"content":${J(e.text)}}`)
        else if (this.#kind === 'reasoning') this.#chunk(`{"reasoning_content":${J(e.text)}}`)
        // a call's argument deltas: item_end carries them whole
        return
      case 'summary_delta':
        if (this.#kind === 'reasoning') this.#chunk(`{"reasoning_content":${J(e.text)}}`)
        return
      case 'item_end': {
        this.#kind = null
        if (e.item.kind !== 'tool_call') return
        const c = e.item.call
        const i = ++this.#tool
        if (c.kind === 'custom') {
          this.#chunk(`{"tool_calls":[{"index":${i},"id":${J(c.callId)},"type":"custom","custom":{"name":${J(c.name)},"input":""}}]}`)
          if (c.arguments.length > 0) this.#chunk(`{"tool_calls":[{"index":${i},"custom":{"input":${J(c.arguments)}}}]}`)
        } else {
          this.#chunk(`{"tool_calls":[{"index":${i},"id":${J(c.callId)},"type":"function","function":{"name":${J(c.name)},"arguments":""}}]}`)
          if (c.arguments.length > 0) this.#chunk(`{"tool_calls":[{"index":${i},"function":{"arguments":${J(c.arguments)}}}]}`)
        }
        return
      }
      case 'usage':
        this.usage = e.usage
        return
      case 'finish':
        if (e.usage !== undefined) this.usage = e.usage
        this.#chunk('{}', `"${chatFinish(e.stop)}"`)
        if (this.#o.includeUsage === true) {
          this.#out.push(`data: ${this.#head}],"usage":${J(chatUsageJson(this.usage))}}\n\n`)
        }
        this.#out.push('data: [DONE]\n\n')
        this.finished = true
        return
      case 'error':
        this.error = e
    }
  }

  failureTail (record: FailureRecord, signature: string): Buffer {
    const ctx: Parameters<typeof chat.failureTail>[2] = {}
    if (this.error !== null) {
      const f = openaiErrorFields(this.error)
      ctx.errorCode = f.errorCode
      if (f.errorType !== undefined) ctx.errorType = f.errorType
      if (f.messageSuffix !== undefined) ctx.messageSuffix = f.messageSuffix
    }
    return chat.failureTail(record, signature, ctx)
  }

  dispose (): void {}
}
