// Canonical events -> an Anthropic Messages stream.
//
// The lifecycle the anthropic SDK's messages.stream() and Claude Code hold a stream to:
//   message_start (once, first), then per item one content block with the item's index
//   (contiguous from 0, strictly nested: content_block_start, content_block_delta*,
//   content_block_stop):
//     text       text_delta
//     reasoning  a thinking block: thinking_delta (summary parts joined by a blank line),
//                then, when the provider issued an opaque (OpenAI encrypted_content), one
//                signature_delta carrying it in a sluice envelope (envelope.ts); an item
//                with an opaque and no text at all: a redacted_thinking block, `data` the
//                envelope
//     tool call  tool_use {id, name, input: {}}: input_json_delta
//   then one message_delta (stop_reason, usage) and message_stop; or the signed `event: error`.

import { messages } from '../../protocols/messages.ts'
import type { FailureRecord } from '../../sse/sign.ts'
import type { CanonicalEvent, StopReason, Usage } from '../canonical.ts'
import { wrapOpaque } from '../envelope.ts'
import { anthropicErrorType, type ErrorEvent } from './client-errors.ts'
import { Output, prefixedId, type EncoderOptions, type StreamEncoder } from './encoder.ts'

const J = JSON.stringify

/** The client's id: the provider's (a fresh one when it sent none), `[^A-Za-z0-9_-]` -> `_`, `msg_` prefixed. */
export function messageId (providerId: string): string {
  return prefixedId('msg_', providerId)
}

export function anthropicStop (s: StopReason): string {
  switch (s) {
    case 'length': return 'max_tokens'
    case 'tool_calls': return 'tool_use'
    case 'content_filter': case 'refusal': return 'refusal'
    default: return 'end_turn'
  }
}

export function anthropicUsage (u: Usage | null): Record<string, number> {
  if (u === null) return { input_tokens: 0, output_tokens: 0 }
  const cached = u.cachedInputTokens ?? 0
  const created = u.cacheCreationInputTokens ?? 0
  return {
    input_tokens: Math.max(0, u.inputTokens - cached - created),
    cache_creation_input_tokens: created,
    cache_read_input_tokens: cached,
    output_tokens: u.outputTokens,
  }
}

export class MessagesEncoder implements StreamEncoder {
  readonly #o: EncoderOptions
  readonly #out = new Output()
  #kind: 'text' | 'thinking' | 'tool' | null = null
  #index = -1
  #summaryPart = -1
  /** For a reasoning item: its block was started (by its first text). */
  #blockOpen = true
  error: ErrorEvent | null = null
  finished = false
  usage: Usage | null = null

  constructor (o: EncoderOptions) { this.#o = o }

  take (): Buffer[] { return this.#out.take() }

  #frame (type: string, body: string): void {
    this.#out.push(`event: ${type}\ndata: {"type":"${type}"${body}}\n\n`)
  }

  event (e: CanonicalEvent): void {
    if (this.error !== null || this.finished) return
    switch (e.type) {
      case 'start': {
        const model = e.model !== '' ? e.model : this.#o.request.model
        this.#frame('message_start', `,"message":{"id":${J(messageId(e.id))},"type":"message","role":"assistant","model":${J(model)},"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`)
        return
      }
      case 'item_start': {
        this.#index = e.index
        const it = e.item
        if (it.kind === 'text') {
          this.#kind = 'text'
          this.#frame('content_block_start', `,"index":${e.index},"content_block":{"type":"text","text":""}`)
        } else if (it.kind === 'reasoning') {
          // Its block starts with the first text: a reasoning item with no text at all but an
          // opaque becomes a redacted_thinking block (clients keep and replay those verbatim;
          // an empty thinking block may be dropped, and the opaque with it).
          this.#kind = 'thinking'
          this.#summaryPart = -1
          this.#blockOpen = false
        } else {
          this.#kind = 'tool'
          this.#frame('content_block_start', `,"index":${e.index},"content_block":{"type":"tool_use","id":${J(it.callId)},"name":${J(it.name)},"input":{}}`)
        }
        return
      }
      case 'delta':
        if (this.#kind === 'text') this.#frame('content_block_delta', `,"index":${this.#index},"delta":{"type":"text_delta","text":${J(e.text)}}`)
        else if (this.#kind === 'thinking') {
          this.#thinkingStart()
          this.#frame('content_block_delta', `,"index":${this.#index},"delta":{"type":"thinking_delta","thinking":${J(e.text)}}`)
        }
        else if (this.#kind === 'tool') this.#frame('content_block_delta', `,"index":${this.#index},"delta":{"type":"input_json_delta","partial_json":${J(e.text)}}`)
        return
      case 'summary_delta': {
        if (this.#kind !== 'thinking') return
        const sep = this.#summaryPart !== -1 && e.summaryIndex !== this.#summaryPart ? '\n\n' : ''
        this.#summaryPart = e.summaryIndex
        this.#thinkingStart()
        this.#frame('content_block_delta', `,"index":${this.#index},"delta":{"type":"thinking_delta","thinking":${J(sep + e.text)}}`)
        return
      }
      case 'item_end': {
        const it = e.item
        if (it.kind === 'reasoning' && !this.#blockOpen && it.opaque !== undefined) {
          this.#frame('content_block_start', `,"index":${this.#index},"content_block":{"type":"redacted_thinking","data":${J(wrapOpaque(it.opaque))}}`)
        } else if (it.kind === 'reasoning') {
          this.#thinkingStart()
          if (it.opaque !== undefined) this.#frame('content_block_delta', `,"index":${this.#index},"delta":{"type":"signature_delta","signature":${J(wrapOpaque(it.opaque))}}`)
        }
        this.#frame('content_block_stop', `,"index":${this.#index}`)
        this.#kind = null
        return
      }
      case 'usage':
        this.usage = e.usage
        return
      case 'finish':
        if (e.usage !== undefined) this.usage = e.usage
        this.#frame('message_delta', `,"delta":{"stop_reason":"${anthropicStop(e.stop)}","stop_sequence":null},"usage":${J(anthropicUsage(this.usage))}`)
        this.#frame('message_stop', '')
        this.finished = true
        return
      case 'error':
        this.error = e
    }
  }

  #thinkingStart (): void {
    if (this.#blockOpen) return
    this.#blockOpen = true
    this.#frame('content_block_start', `,"index":${this.#index},"content_block":{"type":"thinking","thinking":"","signature":""}`)
  }

  failureTail (record: FailureRecord, signature: string): Buffer {
    const ctx: Parameters<typeof messages.failureTail>[2] = {}
    if (this.error !== null) ctx.errorType = anthropicErrorType(this.error)
    return messages.failureTail(record, signature, ctx)
  }

  dispose (): void {}
}
