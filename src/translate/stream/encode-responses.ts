// Canonical events -> an OpenAI Responses stream (and, collecting, a Responses JSON answer).
//
// The lifecycle the openai SDK's responses.stream() and Codex hold a stream to:
//   response.created (sequence_number 0), response.in_progress, then per item, in order and
//   with output_index contiguous from 0:
//     message      output_item.added, content_part.added, output_text.delta*,
//                  output_text.done, content_part.done, output_item.done
//     reasoning    output_item.added, per summary part: reasoning_summary_part.added,
//                  reasoning_summary_text.delta*, reasoning_summary_text.done,
//                  reasoning_summary_part.done; output_item.done (encrypted_content: the
//                  provider's opaque in a sluice envelope, envelope.ts)
//     function     output_item.added, function_call_arguments.delta*, .done, output_item.done
//                  (a namespaced tool: `name` plus `namespace`, as Codex sends and accepts)
//     custom       custom_tool_call: custom_tool_call_input.delta*, .done, output_item.done
//     tool search  tool_search_call (execution "client", arguments an object): added, done
//   then exactly one terminal: response.completed / response.incomplete whose `output` lists
//   every item as its output_item.done had it (same ids), or the signed response.failed.
// Each frame is written from a template with JSON.stringify on its values only (this runs
// per provider frame in the HTTP worker). Completed items are kept for the terminal's
// `output`, charged to the budget ('output') until the terminal is written.

import { responses } from '../../protocols/responses.ts'
import type { FailureRecord } from '../../sse/sign.ts'
import type { CanonicalEvent, ItemDone, ItemStart, StopReason, TranslationBudget, Usage } from '../canonical.ts'
import { wrapOpaque } from '../envelope.ts'
import { openaiErrorFields, type ErrorEvent } from './client-errors.ts'
import { Held } from './emit.ts'
import { Output, prefixedId, type EncoderOptions, type StreamEncoder } from './encoder.ts'

const J = JSON.stringify

interface Cur {
  index: number
  id: string
  kind: ItemStart['kind']
  toolKind?: string
  /** reasoning: the open summary part (-1 none) and its text. */
  part: number
  partText: Held
}

/** The client's id: the provider's (a fresh one when it sent none), `[^A-Za-z0-9_-]` -> `_`, `resp_` prefixed. */
export function responseId (providerId: string): string {
  return prefixedId('resp_', providerId)
}

export function responsesUsage (u: Usage | null): Record<string, unknown> | null {
  if (u === null) return null
  return {
    input_tokens: u.inputTokens,
    input_tokens_details: { cached_tokens: u.cachedInputTokens ?? 0 },
    output_tokens: u.outputTokens,
    output_tokens_details: { reasoning_tokens: u.reasoningTokens ?? 0 },
    total_tokens: u.inputTokens + u.outputTokens,
  }
}

/** The Responses output item for a completed canonical item (`refusal`: a text item is the refusal's). */
export function responsesItem (id: string, done: ItemDone, refusal = false): Record<string, unknown> {
  switch (done.kind) {
    case 'text': {
      const part = refusal ? { type: 'refusal', refusal: done.text } : { type: 'output_text', annotations: [], logprobs: [], text: done.text }
      return { id, type: 'message', status: 'completed', role: 'assistant', content: [part] }
    }
    case 'reasoning': {
      const parts = done.summary.length > 0 ? done.summary : done.text !== '' ? [done.text] : []
      const item: Record<string, unknown> = { id, type: 'reasoning', summary: parts.map(text => ({ type: 'summary_text', text })) }
      if (done.opaque !== undefined) item.encrypted_content = wrapOpaque(done.opaque)
      return item
    }
    case 'tool_call': {
      const c = done.call
      if (c.kind === 'custom') {
        const item: Record<string, unknown> = { id, type: 'custom_tool_call', status: 'completed', call_id: c.callId, name: c.name, input: c.arguments }
        if (c.namespace !== undefined) item.namespace = c.namespace
        return item
      }
      if (c.kind === 'tool_search') {
        return { id, type: 'tool_search_call', status: 'completed', call_id: c.callId, execution: 'client', arguments: JSON.parse(c.arguments) }
      }
      const item: Record<string, unknown> = { id, type: 'function_call', status: 'completed', arguments: c.arguments, call_id: c.callId, name: c.name }
      if (c.namespace !== undefined) item.namespace = c.namespace
      return item
    }
  }
}

const PREFIX = { text: 'msg', reasoning: 'rs', function: 'fc', custom: 'ctc', tool_search: 'tsc', hosted: 'fc' } as const

export function itemId (base: string, index: number, item: ItemStart): string {
  const p = item.kind === 'tool_call' ? PREFIX[item.toolKind] : PREFIX[item.kind]
  return `${p}_${base}_${index}`
}

/** The same id from the completed item (JSON answers). */
export function doneItemId (base: string, index: number, done: ItemDone): string {
  const p = done.kind === 'tool_call' ? PREFIX[done.call.kind] : PREFIX[done.kind]
  return `${p}_${base}_${index}`
}

export function responseObject (o: { id: string; createdAt: number; model: string; status: string; output: unknown[]; usage: Usage | null; stop?: StopReason; request: EncoderOptions['request'] }): Record<string, unknown> {
  const incomplete = o.status === 'incomplete' ? { reason: o.stop === 'content_filter' ? 'content_filter' : 'max_output_tokens' } : null
  return {
    id: o.id,
    object: 'response',
    created_at: o.createdAt,
    status: o.status,
    background: false,
    error: null,
    incomplete_details: incomplete,
    instructions: null,
    max_output_tokens: o.request.maxOutputTokens ?? null,
    model: o.model,
    output: o.output,
    parallel_tool_calls: o.request.parallelToolCalls ?? true,
    previous_response_id: null,
    reasoning: { effort: o.request.reasoning?.effort ?? null, summary: o.request.reasoning?.summary ?? null },
    store: false,
    temperature: o.request.temperature ?? 1,
    text: { format: { type: 'text' } },
    tool_choice: 'auto',
    tools: [],
    top_p: o.request.topP ?? 1,
    truncation: 'disabled',
    usage: responsesUsage(o.usage),
    user: null,
    metadata: {},
  }
}

export class ResponsesEncoder implements StreamEncoder {
  readonly #o: EncoderOptions
  readonly #budget: TranslationBudget
  readonly #out = new Output()
  #seq = 0
  #id = ''
  #base = ''
  #model = ''
  #createdAt = 0
  #cur: Cur | null = null
  /** Completed items for the terminal, and the bytes they were charged. */
  #items: Array<Record<string, unknown>> = []
  #itemBytes = 0
  /** The terminal's id and output for the conversation store (EncoderOptions.state.keep). */
  #kept: { id: string, output: string } | null = null
  #keptBytes = 0
  error: ErrorEvent | null = null
  finished = false
  usage: Usage | null = null

  constructor (o: EncoderOptions) {
    this.#o = o
    this.#budget = o.budget
  }

  take (): Buffer[] { return this.#out.take() }

  #frame (type: string, body: string): void {
    this.#out.push(`event: ${type}\ndata: {"type":"${type}","sequence_number":${this.#seq++}${body}}\n\n`)
  }

  event (e: CanonicalEvent): void {
    if (this.error !== null || this.finished) return
    switch (e.type) {
      case 'start': {
        // A kept turn's id is the store's key: a suffix of the gateway's own makes it unique
        // even for a provider that repeats its ids (worker/continuation.ts).
        this.#id = responseId(e.id) + (this.#o.state?.idSuffix ?? '')
        this.#base = this.#id.slice(5)
        this.#model = e.model !== '' ? e.model : this.#o.request.model
        this.#createdAt = e.created ?? Math.floor(Date.now() / 1000)
        const r = J(this.#response('in_progress', [], null))
        this.#frame('response.created', `,"response":${r}`)
        this.#frame('response.in_progress', `,"response":${r}`)
        return
      }
      case 'item_start':
        return this.#start(e.index, e.item)
      case 'delta':
        return this.#delta(e.text)
      case 'summary_delta':
        return this.#summary(e.summaryIndex, e.text)
      case 'item_end':
        return this.#end(e.item)
      case 'usage':
        this.usage = e.usage
        return
      case 'finish': {
        if (e.usage !== undefined) this.usage = e.usage
        const status = e.stop === 'length' || e.stop === 'content_filter' ? 'incomplete' : 'completed'
        const r = J(this.#response(status, this.#items, e.stop))
        if (this.#o.state?.keep === true) {
          const output = J(this.#items)
          this.#keptBytes = Buffer.byteLength(output)
          this.#budget.charge(this.#keptBytes, 'output')
          this.#kept = { id: this.#id, output }
        }
        this.#frame(status === 'completed' ? 'response.completed' : 'response.incomplete', `,"response":${r}`)
        this.finished = true
        this.#dropItems()
        return
      }
      case 'error':
        this.error = e
    }
  }

  #response (status: string, output: unknown[], stop: StopReason | null): Record<string, unknown> {
    const o: Parameters<typeof responseObject>[0] = { id: this.#id, createdAt: this.#createdAt, model: this.#model, status, output, usage: status === 'in_progress' ? null : this.usage, request: this.#o.request }
    if (stop !== null) o.stop = stop
    const r = responseObject(o)
    const st = this.#o.state
    if (st !== undefined) {
      r.previous_response_id = st.previousResponseId
      r.store = st.store
    }
    return r
  }

  takeKept (): { id: string, output: string } | null {
    const k = this.#kept
    this.#kept = null
    this.#releaseKept()
    return k
  }

  #releaseKept (): void {
    if (this.#keptBytes > 0) this.#budget.release(this.#keptBytes, 'output')
    this.#keptBytes = 0
    this.#kept = null
  }

  #start (index: number, item: ItemStart): void {
    const id = itemId(this.#base, index, item)
    const cur: Cur = { index, id, kind: item.kind, part: -1, partText: new Held(this.#budget, 'item') }
    this.#cur = cur
    const head = `,"output_index":${index}`
    switch (item.kind) {
      case 'text':
        this.#frame('response.output_item.added', `${head},"item":{"id":"${id}","type":"message","status":"in_progress","role":"assistant","content":[]}`)
        this.#frame('response.content_part.added', `,"item_id":"${id}"${head},"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}`)
        return
      case 'reasoning':
        this.#frame('response.output_item.added', `${head},"item":{"id":"${id}","type":"reasoning","summary":[]}`)
        return
      case 'tool_call': {
        cur.toolKind = item.toolKind
        const ns = item.namespace !== undefined ? `,"namespace":${J(item.namespace)}` : ''
        if (item.toolKind === 'custom') {
          this.#frame('response.output_item.added', `${head},"item":{"id":"${id}","type":"custom_tool_call","status":"in_progress","call_id":${J(item.callId)},"name":${J(item.name)}${ns},"input":""}`)
        } else if (item.toolKind === 'tool_search') {
          this.#frame('response.output_item.added', `${head},"item":{"id":"${id}","type":"tool_search_call","status":"in_progress","call_id":${J(item.callId)},"execution":"client","arguments":{}}`)
        } else {
          this.#frame('response.output_item.added', `${head},"item":{"id":"${id}","type":"function_call","status":"in_progress","arguments":"","call_id":${J(item.callId)},"name":${J(item.name)}${ns}}`)
        }
      }
    }
  }

  #delta (text: string): void {
    const c = this.#cur
    if (c === null) return
    switch (c.kind) {
      case 'text':
        this.#frame('response.output_text.delta', `,"item_id":"${c.id}","output_index":${c.index},"content_index":0,"delta":${J(text)},"logprobs":[]`)
        return
      case 'reasoning':
        return this.#summary(c.part === -1 ? 0 : c.part, text)
      case 'tool_call':
        if (c.toolKind === 'custom') this.#frame('response.custom_tool_call_input.delta', `,"item_id":"${c.id}","output_index":${c.index},"delta":${J(text)}`)
        else if (c.toolKind !== 'tool_search') this.#frame('response.function_call_arguments.delta', `,"item_id":"${c.id}","output_index":${c.index},"delta":${J(text)}`)
    }
  }

  #summary (part: number, text: string): void {
    const c = this.#cur
    if (c === null || c.kind !== 'reasoning') return
    if (part !== c.part) {
      this.#closePart(c)
      c.part = part
      this.#frame('response.reasoning_summary_part.added', `,"item_id":"${c.id}","output_index":${c.index},"summary_index":${part},"part":{"type":"summary_text","text":""}`)
    }
    c.partText.add(text)
    this.#frame('response.reasoning_summary_text.delta', `,"item_id":"${c.id}","output_index":${c.index},"summary_index":${part},"delta":${J(text)}`)
  }

  #closePart (c: Cur): void {
    if (c.part === -1) return
    const t = J(c.partText.take())
    this.#frame('response.reasoning_summary_text.done', `,"item_id":"${c.id}","output_index":${c.index},"summary_index":${c.part},"text":${t}`)
    this.#frame('response.reasoning_summary_part.done', `,"item_id":"${c.id}","output_index":${c.index},"summary_index":${c.part},"part":{"type":"summary_text","text":${t}}`)
    c.part = -1
  }

  #end (done: ItemDone): void {
    const c = this.#cur
    if (c === null) return
    this.#cur = null
    const at = `,"item_id":"${c.id}","output_index":${c.index}`
    if (done.kind === 'text') {
      const t = J(done.text)
      this.#frame('response.output_text.done', `${at},"content_index":0,"text":${t},"logprobs":[]`)
      this.#frame('response.content_part.done', `${at},"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":${t}}`)
    } else if (done.kind === 'reasoning') {
      this.#closePart(c)
    } else if (done.call.kind === 'custom') {
      this.#frame('response.custom_tool_call_input.done', `${at},"input":${J(done.call.arguments)}`)
    } else if (done.call.kind !== 'tool_search') {
      this.#frame('response.function_call_arguments.done', `${at},"arguments":${J(done.call.arguments)}`)
    }
    const item = responsesItem(c.id, done)
    const json = J(item)
    // Kept for the terminal's `output` until it is written.
    const n = Buffer.byteLength(json)
    this.#budget.charge(n, 'output')
    this.#itemBytes += n
    this.#items.push(item)
    this.#frame('response.output_item.done', `,"output_index":${c.index},"item":${json}`)
  }

  failureTail (record: FailureRecord, signature: string): Buffer {
    const e = this.error
    const f = e !== null ? openaiErrorFields(e) : undefined
    const ctx: Parameters<typeof responses.failureTail>[2] = { sequenceNumber: this.#seq++, model: this.#model, createdAt: this.#createdAt, output: this.#items }
    if (this.#id !== '') ctx.responseId = this.#id
    if (f !== undefined) {
      ctx.errorCode = f.errorCode
      if (f.messageSuffix !== undefined) ctx.messageSuffix = f.messageSuffix
    }
    const tail = responses.failureTail(record, signature, ctx)
    this.dispose()
    return tail
  }

  dispose (): void {
    this.#dropItems()
    this.#releaseKept()
  }

  #dropItems (): void {
    if (this.#itemBytes > 0) this.#budget.release(this.#itemBytes, 'output')
    this.#itemBytes = 0
    this.#items = []
    if (this.#cur !== null) this.#cur.partText.drop()
    this.#cur = null
  }
}
