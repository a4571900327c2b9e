// OpenAI Responses provider -> canonical events.
//
// Responses is sequential already (one output item at a time, output_item.added ... .done), so
// every item streams live: message text (`output_text.delta`, `refusal.delta`), reasoning
// (summary parts as summary deltas, `reasoning_text.delta` as its text; `encrypted_content`
// from output_item.done becomes the opaque), function calls (`function_call_arguments.delta`;
// a custom tool exposed as a function is unwrapped live), custom tool calls
// (`custom_tool_call_input.delta`) and tool-search calls (arguments whole, from .done).
// Hosted-tool items (web_search_call, ...) have no client-side equivalent and are left out.
// Terminals: response.completed; response.incomplete (max_output_tokens -> length: a tool
// call still open then, or the last item, is an error, never ended); response.failed and
// `error` -> `error`. A call item the provider marks `status: "incomplete"` is an error too.
// A refusal (`refusal.delta`, a refusal content part) makes the stop `refusal`.

import type { ToolKind } from '../canonical.ts'
import { openaiReasoningOpaque } from '../reasoning.ts'
import { Emitter, type DecoderOptions } from './emit.ts'
import { isObj, providerFailure, responsesUsage } from './common.ts'

type Current = 'message' | 'reasoning' | 'call' | 'skip'

export class ResponsesDecoder {
  readonly e: Emitter
  #cur: Current | null = null
  #refusal = false

  constructor (o: DecoderOptions) {
    this.e = new Emitter(o)
  }

  frame (event: string | null, data: unknown): void {
    this.e.guard(() => this.#frame(event, data))
  }

  #frame (event: string | null, data: unknown): void {
    const e = this.e
    if (e.ended) return
    if (!isObj(data)) return e.fail('provider_protocol_error', 'a Responses stream frame is not a JSON object')
    const type = event ?? (typeof data.type === 'string' ? data.type : '')
    switch (type) {
      case 'response.created': case 'response.in_progress': case 'response.queued': {
        const r = isObj(data.response) ? data.response : {}
        e.begin(typeof r.id === 'string' ? r.id : '', typeof r.model === 'string' ? r.model : '', typeof r.created_at === 'number' ? r.created_at : undefined)
        return
      }
      case 'response.output_item.added':
        if (!e.started) return e.fail('provider_protocol_error', 'response.output_item.added before response.created')
        if (this.#cur !== null) return e.fail('provider_protocol_error', 'response.output_item.added while another output item is open')
        return this.#added(isObj(data.item) ? data.item : {})
      case 'response.output_text.delta': case 'response.refusal.delta':
        if (this.#cur === 'message' && typeof data.delta === 'string') {
          if (type === 'response.refusal.delta' && data.delta !== '') this.#refusal = true
          e.delta(data.delta, true)
        }
        return
      case 'response.reasoning_summary_text.delta':
        if (this.#cur === 'reasoning' && typeof data.delta === 'string') e.summaryDelta(typeof data.summary_index === 'number' ? data.summary_index : 0, data.delta)
        return
      case 'response.reasoning_text.delta':
        if (this.#cur === 'reasoning' && typeof data.delta === 'string') e.delta(data.delta, true)
        return
      case 'response.function_call_arguments.delta': case 'response.custom_tool_call_input.delta':
        if (this.#cur === 'call' && typeof data.delta === 'string') e.callDelta(data.delta)
        return
      case 'response.output_item.done':
        return this.#done(isObj(data.item) ? data.item : {})
      case 'response.completed': case 'response.incomplete': {
        const r = isObj(data.response) ? data.response : {}
        const u = responsesUsage(r.usage)
        if (u !== null) e.mergeUsage(u)
        if (type === 'response.completed') {
          if (this.#cur !== null && this.#cur !== 'skip') return e.fail('provider_protocol_error', 'response.completed while an output item is still open')
          this.#cur = null
          return e.finish(this.#refusal ? 'refusal' : 'end')
        }
        const reason = isObj(r.incomplete_details) && typeof r.incomplete_details.reason === 'string' ? r.incomplete_details.reason : 'max_output_tokens'
        if (this.#cur === 'call') return e.fail('provider_protocol_error', `the response is incomplete (${reason}) inside a tool call: its arguments are incomplete`)
        if (this.#cur === 'message') e.closeText()
        else if (this.#cur === 'reasoning') e.endItem({ kind: 'reasoning', text: e.text.take(), summary: [] })
        this.#cur = null
        return e.finish(reason === 'content_filter' ? 'content_filter' : 'length')
      }
      case 'response.failed': {
        const r = isObj(data.response) ? data.response : {}
        return providerFailure(e, r.error, 'response.failed')
      }
      case 'error':
        return providerFailure(e, isObj(data.error) ? data.error : data, 'error')
      default:
        return
    }
  }

  #added (item: Record<string, unknown>): void {
    const e = this.e
    switch (item.type) {
      case 'message':
        this.#cur = 'message'
        e.startItem({ kind: 'text' })
        return
      case 'reasoning':
        this.#cur = 'reasoning'
        e.startItem(typeof item.id === 'string' ? { kind: 'reasoning', id: item.id } : { kind: 'reasoning' })
        return
      case 'function_call': case 'custom_tool_call': case 'tool_search_call': {
        const callId = typeof item.call_id === 'string' ? item.call_id : typeof item.id === 'string' ? item.id : `call_${e.nextIndex}`
        this.#cur = 'call'
        if (item.type === 'function_call') {
          const name = typeof item.name === 'string' ? item.name : ''
          if (name === '') return e.fail('provider_protocol_error', 'a function_call item has no name')
          // A Responses provider may keep the namespace itself (the request encoder sent it natively).
          const known = e.lookup(name)
          if (typeof item.namespace === 'string' && known === undefined) e.startCall(callId, name, { identity: { kind: 'function', name, namespace: item.namespace } })
          else e.startCall(callId, name)
        } else if (item.type === 'custom_tool_call') {
          e.startCall(callId, typeof item.name === 'string' ? item.name : 'custom', { kind: 'custom', rawInput: true })
        } else e.startCall(callId, 'tool_search', { kind: 'tool_search' as ToolKind })
        return
      }
      default:
        this.#cur = 'skip'
    }
  }

  #done (item: Record<string, unknown>): void {
    const e = this.e
    const cur = this.#cur
    this.#cur = null
    switch (cur) {
      case 'message':
        if (e.text.bytes === 0 && Array.isArray(item.content)) {
          for (const p of item.content) if (isObj(p) && typeof p.text === 'string') e.delta(p.text, true)
          for (const p of item.content) {
            if (isObj(p) && typeof p.refusal === 'string') {
              if (p.refusal !== '') this.#refusal = true
              e.delta(p.refusal, true)
            }
          }
        }
        return e.closeText()
      case 'reasoning': {
        const summary: string[] = []
        if (Array.isArray(item.summary)) for (const s of item.summary) if (isObj(s) && typeof s.text === 'string') summary.push(s.text)
        if (e.text.bytes === 0 && Array.isArray(item.content)) {
          for (const p of item.content) if (isObj(p) && typeof p.text === 'string') e.delta(p.text, true)
        }
        const id = typeof item.id === 'string' ? item.id : undefined
        const done: { kind: 'reasoning'; text: string; summary: string[]; id?: string; opaque?: { issuer: string; data: string } } = { kind: 'reasoning', text: e.text.take(), summary }
        if (id !== undefined) done.id = id
        if (typeof item.encrypted_content === 'string' && item.encrypted_content !== '') {
          done.opaque = openaiReasoningOpaque(e.issuer, id === undefined || id === null ? { encrypted_content: item.encrypted_content } : { id, encrypted_content: item.encrypted_content })
        }
        return e.endItem(done)
      }
      case 'call': {
        if (item.status === 'incomplete') {
          return e.fail('provider_protocol_error', `tool call ${e.call?.name ?? ''} is marked incomplete by the provider: its arguments are incomplete`)
        }
        if (e.args.bytes === 0) {
          if (typeof item.arguments === 'string') e.callDelta(item.arguments)
          else if (isObj(item.arguments)) e.callDelta(JSON.stringify(item.arguments))
          else if (typeof item.input === 'string') e.callDelta(item.input)
        }
        e.finishCall(typeof item.id === 'string' ? item.id : undefined)
        return
      }
      case 'skip':
        return
      default:
        return e.fail('provider_protocol_error', 'response.output_item.done without output_item.added')
    }
  }

  end (): void {
    const e = this.e
    if (e.ended) return
    e.guard(() => e.fail('provider_protocol_error', this.#cur === 'call'
      ? 'the stream ended inside a tool call without a terminal: its arguments are incomplete'
      : 'the stream ended without a terminal (response.completed / incomplete / failed)'))
  }
}

/** A non-streaming Responses answer -> the same canonical events (through the same decoder). */
export function responsesFromJson (answer: unknown, o: DecoderOptions): void {
  const d = new ResponsesDecoder(o)
  const e = d.e
  if (!isObj(answer)) return e.fail('provider_protocol_error', 'the provider answer is not a JSON object')
  const head = { id: answer.id, model: answer.model, created_at: answer.created_at }
  d.frame('response.created', { type: 'response.created', response: head })
  if (answer.status === 'failed' || (answer.error !== undefined && answer.error !== null)) {
    return d.frame('response.failed', { type: 'response.failed', response: { ...head, error: answer.error } })
  }
  const output = Array.isArray(answer.output) ? answer.output : []
  for (const item of output) {
    if (e.ended || !isObj(item)) continue
    d.frame('response.output_item.added', { type: 'response.output_item.added', item })
    d.frame('response.output_item.done', { type: 'response.output_item.done', item })
  }
  if (e.ended) return
  // Only a completed or incomplete response is an answer (in_progress, queued, a missing
  // status: its terminal never came).
  if (answer.status !== 'completed' && answer.status !== 'incomplete') {
    return e.fail('provider_protocol_error', `the provider answer is not complete (status ${typeof answer.status === 'string' ? answer.status.slice(0, 20) : String(answer.status)})`)
  }
  const terminal = `response.${answer.status}`
  d.frame(terminal, { type: terminal, response: { ...head, usage: answer.usage, incomplete_details: answer.incomplete_details } })
}
