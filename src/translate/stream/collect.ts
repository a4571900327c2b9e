// Canonical events -> the client's non-streaming JSON answer. The provider's JSON answer goes
// through the same decoder (`fromJson`) and the same events as a stream; this keeps the
// completed items (charged to the budget as 'output' until the answer is rendered) and
// renders them in the client protocol's answer shape. The answer's stop is known here, so a
// refusal's text is the client's refusal field (Responses `refusal` part, Chat
// `message.refusal`); a Chat client's custom tool is its `custom` call.

import type { CanonicalEvent, CanonicalRequest, EventSink, ItemDone, Protocol, StopReason, TranslationBudget, Usage } from '../canonical.ts'
import { wrapOpaque } from '../envelope.ts'
import type { ErrorEvent } from './client-errors.ts'
import { chatFinish, chatId, chatUsageJson } from './encode-chat.ts'
import { anthropicStop, anthropicUsage, messageId } from './encode-messages.ts'
import { doneItemId, responseId, responseObject, responsesItem } from './encode-responses.ts'

function bytesOf (d: ItemDone): number {
  switch (d.kind) {
    case 'text': return Buffer.byteLength(d.text)
    case 'reasoning': return Buffer.byteLength(d.text) + (d.opaque !== undefined ? Buffer.byteLength(d.opaque.data) : 0) + d.summary.reduce((n, s) => n + Buffer.byteLength(s), 0)
    case 'tool_call': return Buffer.byteLength(d.call.arguments) + d.call.name.length + d.call.callId.length
  }
}

export class Collector implements EventSink {
  readonly budget: TranslationBudget
  id = ''
  model = ''
  created: number | undefined
  items: ItemDone[] = []
  held = 0
  usage: Usage | null = null
  stop: StopReason | null = null
  error: ErrorEvent | null = null

  constructor (budget: TranslationBudget) { this.budget = budget }

  event (e: CanonicalEvent): void {
    switch (e.type) {
      case 'start':
        this.id = e.id
        this.model = e.model
        this.created = e.created
        return
      case 'item_end': {
        const n = bytesOf(e.item)
        this.budget.charge(n, 'output')
        this.held += n
        this.items.push(e.item)
        return
      }
      case 'usage':
        this.usage = e.usage
        return
      case 'finish':
        this.stop = e.stop
        if (e.usage !== undefined) this.usage = e.usage
        return
      case 'error':
        this.error = e
        this.dispose()
    }
  }

  dispose (): void {
    if (this.held > 0) this.budget.release(this.held, 'output')
    this.held = 0
    this.items = []
  }

  /** The client's JSON answer (after `finish`); releases what was kept. */
  render (to: Protocol, request: CanonicalRequest): Record<string, unknown> {
    const stop = this.stop ?? 'end'
    const model = this.model !== '' ? this.model : request.model
    const created = this.created ?? Math.floor(Date.now() / 1000)
    let body: Record<string, unknown>
    if (to === 'openai-responses') {
      const id = responseId(this.id)
      const base = id.slice(5)
      const status = stop === 'length' || stop === 'content_filter' ? 'incomplete' : 'completed'
      body = responseObject({ id, createdAt: created, model, status, output: this.items.map((d, i) => responsesItem(doneItemId(base, i, d), d, stop === 'refusal')), usage: this.usage, stop, request })
    } else if (to === 'anthropic') {
      const content: unknown[] = []
      for (const d of this.items) {
        if (d.kind === 'text') content.push({ type: 'text', text: d.text })
        else if (d.kind === 'reasoning') {
          const thinking = d.text !== '' ? d.text : d.summary.join('\n\n')
          if (thinking === '' && d.opaque !== undefined) content.push({ type: 'redacted_thinking', data: wrapOpaque(d.opaque) })
          else content.push({ type: 'thinking', thinking, signature: d.opaque !== undefined ? wrapOpaque(d.opaque) : '' })
        } else content.push({ type: 'tool_use', id: d.call.callId, name: d.call.name, input: JSON.parse(d.call.arguments === '' ? '{}' : d.call.arguments) })
      }
      body = { id: messageId(this.id), type: 'message', role: 'assistant', model, content, stop_reason: anthropicStop(stop), stop_sequence: null, usage: anthropicUsage(this.usage) }
    } else {
      const text: string[] = []
      const reasoning: string[] = []
      const calls: unknown[] = []
      for (const d of this.items) {
        if (d.kind === 'text') text.push(d.text)
        else if (d.kind === 'reasoning') reasoning.push(d.text !== '' ? d.text : d.summary.join('\n\n'))
        else if (d.call.kind === 'custom') calls.push({ id: d.call.callId, type: 'custom', custom: { name: d.call.name, input: d.call.arguments } })
        else calls.push({ id: d.call.callId, type: 'function', function: { name: d.call.name, arguments: d.call.arguments } })
      }
      const said = text.length > 0 ? text.join('') : null
      const refused = stop === 'refusal'
      const message: Record<string, unknown> = { role: 'assistant', content: refused ? null : said, refusal: refused ? said ?? '' : null }
      if (reasoning.length > 0) message.reasoning_content = reasoning.join('\n\n')
      if (calls.length > 0) message.tool_calls = calls
      body = { id: chatId(this.id), object: 'chat.completion', created, model, choices: [{ index: 0, message, logprobs: null, finish_reason: chatFinish(stop) }], usage: chatUsageJson(this.usage) }
    }
    this.dispose()
    return body
  }
}
