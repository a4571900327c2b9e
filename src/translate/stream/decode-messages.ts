// Anthropic Messages provider -> canonical events.
//
// Anthropic sends one content block at a time (content_block_start / _delta / _stop, strictly
// nested), so every block streams live: text, thinking (its `signature_delta` kept for the
// reasoning's opaque), redacted_thinking (its `data` is the opaque), tool_use
// (`input_json_delta`; a custom tool's wrapped input unwrapped live). Server-tool blocks
// (server_tool_use, web_search_tool_result, ...) have no client-side equivalent and are left
// out. A tool_use block's item_end waits for what comes after its content_block_stop: with
// `stop_reason: max_tokens` the input was cut short (Anthropic still closes the block), so
// the call fails instead of ending. message_stop without a stop_reason is an error (the
// terminal is incomplete), as is the same answer as JSON.

import type { Usage } from '../canonical.ts'
import { anthropicThinkingOpaque } from '../reasoning.ts'
import { Emitter, Held, type DecoderOptions } from './emit.ts'
import { isObj, messagesStop, messagesUsage, providerFailure } from './common.ts'

type Block = 'text' | 'thinking' | 'redacted' | 'tool' | 'skip'

export class MessagesDecoder {
  readonly e: Emitter
  #block: Block | null = null
  #sig: Held
  #redacted = ''
  #callEnd = false
  #stop: string | null = null
  #usage: Partial<Usage> = {}

  constructor (o: DecoderOptions) {
    this.e = new Emitter(o)
    this.#sig = new Held(o.budget, 'item')
    const base = this.e.dispose.bind(this.e)
    this.e.dispose = () => {
      base()
      this.#sig.drop()
      this.#redacted = ''
    }
  }

  frame (event: string | null, data: unknown): void {
    this.e.guard(() => this.#frame(event, data))
  }

  #frame (event: string | null, data: unknown): void {
    const e = this.e
    if (e.ended) return
    if (!isObj(data)) return e.fail('provider_protocol_error', 'a Messages stream frame is not a JSON object')
    const type = event ?? (typeof data.type === 'string' ? data.type : '')
    switch (type) {
      case 'message_start': {
        const m = isObj(data.message) ? data.message : {}
        e.begin(typeof m.id === 'string' ? m.id : '', typeof m.model === 'string' ? m.model : '')
        this.#mergeUsage(m.usage)
        return
      }
      case 'content_block_start': {
        if (!e.started) return e.fail('provider_protocol_error', 'content_block_start before message_start')
        if (!this.#settleCall()) return
        if (this.#block !== null) return e.fail('provider_protocol_error', 'content_block_start inside an open block')
        const b = isObj(data.content_block) ? data.content_block : {}
        switch (b.type) {
          case 'text':
            this.#block = 'text'
            e.startItem({ kind: 'text' })
            if (typeof b.text === 'string') e.delta(b.text, true)
            return
          case 'thinking':
            this.#block = 'thinking'
            e.startItem({ kind: 'reasoning' })
            if (typeof b.thinking === 'string') e.delta(b.thinking, true)
            if (typeof b.signature === 'string') this.#sig.add(b.signature)
            return
          case 'redacted_thinking': {
            this.#block = 'redacted'
            e.startItem({ kind: 'reasoning' })
            const d = typeof b.data === 'string' ? b.data : ''
            const n = Buffer.byteLength(d)
            e.count(n)
            this.#sig.add(d, n) // charged while kept; the data itself is read from #redacted
            this.#redacted = d
            return
          }
          case 'tool_use': {
            if (typeof b.name !== 'string' || b.name === '') return e.fail('provider_protocol_error', 'a tool_use block has no name')
            this.#block = 'tool'
            e.startCall(typeof b.id === 'string' ? b.id : `toolu_${e.nextIndex}`, b.name)
            if (isObj(b.input) && Object.keys(b.input).length > 0) e.callDelta(JSON.stringify(b.input))
            return
          }
          default:
            this.#block = 'skip'
            return
        }
      }
      case 'content_block_delta': {
        const d = isObj(data.delta) ? data.delta : {}
        switch (this.#block) {
          case 'text':
            if (typeof d.text === 'string') e.delta(d.text, true)
            return
          case 'thinking':
            if (d.type === 'signature_delta') {
              if (typeof d.signature === 'string') {
                const n = Buffer.byteLength(d.signature)
                e.count(n)
                this.#sig.add(d.signature, n)
              }
            } else if (typeof d.thinking === 'string') e.delta(d.thinking, true)
            return
          case 'tool':
            if (typeof d.partial_json === 'string') e.callDelta(d.partial_json)
            return
          case 'skip': case 'redacted':
            return
          default:
            return e.fail('provider_protocol_error', 'content_block_delta outside a block')
        }
      }
      case 'content_block_stop':
        this.#stopBlock()
        return
      case 'message_delta': {
        const d = isObj(data.delta) ? data.delta : {}
        if (typeof d.stop_reason === 'string') this.#stop = d.stop_reason
        this.#mergeUsage(data.usage)
        if (this.#stop !== null && messagesStop(this.#stop) === 'length' && this.#callEnd) {
          return e.fail('provider_protocol_error', `the provider stopped for its length limit (stop_reason ${this.#stop}) inside a tool call: its input is incomplete`)
        }
        return
      }
      case 'message_stop': {
        if (!e.started) return e.fail('provider_protocol_error', 'message_stop before message_start')
        if (this.#block !== null) return e.fail('provider_protocol_error', 'message_stop inside an open content block')
        if (!this.#settleCall()) return
        // message_delta's stop_reason is part of the terminal: without it the answer is not known complete
        if (this.#stop === null) return e.fail('provider_protocol_error', 'message_stop without a stop_reason (no message_delta carried one)')
        e.finish(messagesStop(this.#stop))
        return
      }
      case 'error':
        return providerFailure(e, data.error, 'error')
      default:
        return // ping and events of newer API versions
    }
  }

  #mergeUsage (v: unknown): void {
    const u = messagesUsage(v)
    if (u === null) return
    this.#usage = { ...this.#usage, ...u }
    this.e.mergeUsage({ inputTokens: 0, outputTokens: 0, ...this.#usage })
  }

  #stopBlock (): void {
    const e = this.e
    switch (this.#block) {
      case 'text':
        e.closeText()
        break
      case 'thinking': {
        const text = e.text.take()
        const signature = this.#sig.take()
        e.endItem(signature === ''
          ? { kind: 'reasoning', text, summary: [] }
          : { kind: 'reasoning', text, summary: [], opaque: anthropicThinkingOpaque(e.issuer, { type: 'thinking', thinking: text, signature }) })
        break
      }
      case 'redacted': {
        const data = this.#redacted
        this.#redacted = ''
        this.#sig.drop()
        e.endItem({ kind: 'reasoning', text: '', summary: [], redacted: true, opaque: anthropicThinkingOpaque(e.issuer, { type: 'redacted_thinking', data }) })
        break
      }
      case 'tool':
        this.#callEnd = true // ended by what follows (see the file header)
        break
      case 'skip':
        break
      default:
        return e.fail('provider_protocol_error', 'content_block_stop outside a block')
    }
    this.#block = null
  }

  /** Ends a tool call whose block stopped; false when that failed. */
  #settleCall (): boolean {
    if (!this.#callEnd) return true
    this.#callEnd = false
    return this.e.finishCall()
  }

  end (): void {
    const e = this.e
    if (e.ended) return
    e.guard(() => e.fail('provider_protocol_error', e.call !== null
      ? 'the stream ended inside a tool call without message_stop: its input is incomplete'
      : 'the stream ended without message_stop'))
  }
}

/** A non-streaming Messages answer -> the same canonical events (through the same decoder). */
export function messagesFromJson (answer: unknown, o: DecoderOptions): void {
  const d = new MessagesDecoder(o)
  const e = d.e
  if (!isObj(answer)) return e.fail('provider_protocol_error', 'the provider answer is not a JSON object')
  if (answer.type === 'error') return providerFailure(e, answer.error, 'error')
  d.frame('message_start', { type: 'message_start', message: { id: answer.id, model: answer.model, usage: answer.usage } })
  const content = Array.isArray(answer.content) ? answer.content : []
  for (let i = 0; i < content.length && !e.ended; i++) {
    const b = content[i]
    if (!isObj(b)) continue
    if (b.type === 'tool_use') {
      d.frame('content_block_start', { type: 'content_block_start', index: i, content_block: { type: 'tool_use', id: b.id, name: b.name, input: {} } })
      d.frame('content_block_delta', { type: 'content_block_delta', index: i, delta: { type: 'input_json_delta', partial_json: JSON.stringify(b.input ?? {}) } })
    } else if (b.type === 'thinking') {
      d.frame('content_block_start', { type: 'content_block_start', index: i, content_block: { type: 'thinking', thinking: b.thinking, signature: b.signature } })
    } else d.frame('content_block_start', { type: 'content_block_start', index: i, content_block: b })
    d.frame('content_block_stop', { type: 'content_block_stop', index: i })
  }
  d.frame('message_delta', { type: 'message_delta', delta: { stop_reason: answer.stop_reason }, usage: {} })
  d.frame('message_stop', { type: 'message_stop' })
}
