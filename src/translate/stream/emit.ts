// What the three stream decoders share: the one open item, the budget, the caps.
//
// A decoder reads provider frames and calls this `Emitter`, which writes the canonical
// events (canonical.ts) to the sink and keeps their invariants:
//   - `start` once and first; after `finish` or `error` nothing more is emitted;
//   - at most one open item; item indexes contiguous from 0 in emission order;
//   - a tool call is only ended with complete arguments (`finishCall` validates them; a
//     call that is malformed or cut short gets `error`, never `item_end`);
//   - at most `maxOutputItems` items and `maxOutputBytes` reconstructed bytes per answer
//     (`output_too_large`);
//   - the stop is the one rule for every provider (`finish`): `end` with calls made is
//     `tool_calls`, `tool_calls` without a call of the client's (none, or only server-side
//     tools ran) is `end`, and a `length` stop right after a call is an `error` (the call may
//     have been cut: Anthropic closes a tool_use block at max_tokens, a Responses provider may
//     list the cut call), never a completed call.
// Bytes kept between frames live in `Held` buffers: charged to the TranslationBudget before
// they are kept, joined once, released as soon as the item they belong to is emitted (or
// the exchange fails: `fail` and `dispose` release everything).

import { SluiceError, type ErrorDetails } from '../../errors.ts'
import type {
  CanonicalEvent, EventSink, ItemDone, ItemStart, StopReason, ToolDef, ToolKind, TranslationBudget, Usage,
} from '../canonical.ts'
import { toolLookup as wireTable, type ToolIdentity } from '../names.ts'
import { InputUnwrapper } from './unwrap.ts'

export type { ToolIdentity }
/** Restores a provider-side function name to the client's tool (names.ts builds it). */
export type ToolLookup = (wireName: string) => ToolIdentity | undefined

export interface TranslateLimits { maxOutputItems: number; maxOutputBytes: number }
export const DEFAULT_LIMITS: TranslateLimits = { maxOutputItems: 256, maxOutputBytes: 8 * 1024 * 1024 }

export interface DecoderOptions {
  sink: EventSink
  budget: TranslationBudget
  /** `<protocol>:<provider>` of the provider this stream comes from (envelope.ts issuerOf). */
  issuer: string
  lookup: ToolLookup
  limits?: TranslateLimits
}

/** A lookup over the request's tool list (wire name -> the client's tool): names.ts's table. */
export function toolLookup (tools: readonly ToolDef[]): ToolLookup {
  const byWire = wireTable(tools)
  return w => byWire.get(w)
}

type What = 'tool_arguments' | 'item' | 'output'

/** Chunks kept between frames, charged to the budget first, joined once. */
export class Held {
  chunks: string[] = []
  bytes = 0
  readonly budget: TranslationBudget
  readonly what: What
  constructor (budget: TranslationBudget, what: What) {
    this.budget = budget
    this.what = what
  }

  add (s: string, n = Buffer.byteLength(s)): void {
    if (s.length === 0) return
    this.budget.charge(n, this.what)
    this.bytes += n
    this.chunks.push(s)
  }

  /** The kept text (joined once), everything released. */
  take (): string {
    const c = this.chunks
    const s = c.length === 0 ? '' : c.length === 1 ? c[0] : c.join('')
    this.drop()
    return s
  }

  drop (): void {
    if (this.bytes > 0) this.budget.release(this.bytes, this.what)
    this.bytes = 0
    this.chunks = []
  }
}

/** The result of completing a tool call's arguments: the canonical `arguments`, or why not. */
export function finalArguments (kind: ToolKind, raw: string, name: string): { ok: true; args: string; input?: string } | { ok: false; message: string } {
  const text = raw.trim()
  if (kind === 'custom') {
    // The provider saw a function with one `input: string` parameter (README "custom tools").
    if (text === '') return { ok: true, args: '', input: '' }
    let v: unknown
    try { v = JSON.parse(text) } catch {
      return { ok: false, message: `the arguments of tool call ${name} are not valid JSON (cut short or malformed)` }
    }
    if (typeof v === 'string') return { ok: true, args: v, input: v }
    const input = typeof v === 'object' && v !== null ? (v as Record<string, unknown>).input : undefined
    if (typeof input !== 'string') return { ok: false, message: `the arguments of custom tool call ${name} have no string "input"` }
    return { ok: true, args: input, input }
  }
  if (text === '') return { ok: true, args: '{}' }
  let v: unknown
  try { v = JSON.parse(text) } catch {
    return { ok: false, message: `the arguments of tool call ${name} are not valid JSON (cut short or malformed)` }
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    return { ok: false, message: `the arguments of tool call ${name} are not a JSON object` }
  }
  return { ok: true, args: raw }
}

interface OpenCall {
  kind: ToolKind
  callId: string
  name: string
  namespace?: string
  /** A custom call whose input arrives as itself (Responses custom_tool_call_input), not wrapped. */
  rawInput: boolean
  unwrap: InputUnwrapper | null
}

export class Emitter {
  readonly sink: EventSink
  readonly budget: TranslationBudget
  readonly issuer: string
  readonly lookup: ToolLookup
  readonly limits: TranslateLimits
  started = false
  /** finish or error emitted. */
  ended = false
  /** The index of the open item, -1 when none. */
  open = -1
  openKind: ItemStart['kind'] | null = null
  /** The kind of the last item ended (for the length-stop rule in `finish`). */
  lastKind: ItemDone['kind'] | null = null
  nextIndex = 0
  outputBytes = 0
  calls = 0
  /** The open item's text (text / reasoning / tool arguments), when the decoder keeps it. */
  readonly text: Held
  readonly args: Held
  call: OpenCall | null = null
  /** Latest usage seen (cumulative fields merged). */
  usage: Usage | null = null

  constructor (o: DecoderOptions) {
    this.sink = o.sink
    this.budget = o.budget
    this.issuer = o.issuer
    this.lookup = o.lookup
    this.limits = o.limits ?? DEFAULT_LIMITS
    this.text = new Held(o.budget, 'item')
    this.args = new Held(o.budget, 'tool_arguments')
  }

  emit (e: CanonicalEvent): void { this.sink.event(e) }

  /**
   * Runs a decoder step; a SluiceError from a cap or the budget (output_too_large,
   * storage_budget_exhausted) becomes the stream's `error` with that code, anything else
   * (a defect) `internal_error`: the client gets a truthful failure, never a torn stream.
   */
  guard (step: () => void): void {
    try {
      step()
    } catch (err) {
      if (err instanceof SluiceError) this.fail(err.code, err.message, { details: err.details })
      else this.fail('internal_error', `stream translation failed: ${err instanceof Error ? err.message : String(err)}`)
    }
  }

  begin (id: string, model: string, created?: number): void {
    if (this.started) return
    this.started = true
    const e: CanonicalEvent = { type: 'start', id, model }
    if (created !== undefined) e.created = created
    this.emit(e)
  }

  /** Counts reconstructed bytes against maxOutputBytes (throws output_too_large). */
  count (n: number): void {
    this.outputBytes += n
    if (this.outputBytes > this.limits.maxOutputBytes) {
      throw new SluiceError('output_too_large', { reason: 'bytes', limit: this.limits.maxOutputBytes }, `the translated answer is larger than limits.maxOutputBytes (${this.limits.maxOutputBytes} bytes)`)
    }
  }

  startItem (item: ItemStart): number {
    if (this.open !== -1) throw new Error('translate: an item is already open')
    if (this.nextIndex >= this.limits.maxOutputItems) {
      throw new SluiceError('output_too_large', { reason: 'items', limit: this.limits.maxOutputItems }, `the translated answer has more than limits.maxOutputItems (${this.limits.maxOutputItems}) items`)
    }
    const index = this.nextIndex++
    this.open = index
    this.openKind = item.kind
    this.emit({ type: 'item_start', index, item })
    return index
  }

  /** A text / reasoning delta of the open item; kept when `keep` (for its item_end). */
  delta (text: string, keep: boolean): void {
    if (text.length === 0) return
    const n = Buffer.byteLength(text)
    this.count(n)
    if (keep) this.text.add(text, n)
    this.emit({ type: 'delta', index: this.open, text })
  }

  summaryDelta (summaryIndex: number, text: string): void {
    if (text.length === 0) return
    this.count(Buffer.byteLength(text))
    this.emit({ type: 'summary_delta', index: this.open, summaryIndex, text })
  }

  endItem (item: ItemDone): void {
    const index = this.open
    this.open = -1
    this.openKind = null
    this.lastKind = item.kind
    this.emit({ type: 'item_end', index, item })
  }

  /** Opens a text item unless one is open; closes any other open item first (`closeOpen`). */
  ensureText (): void {
    if (this.openKind === 'text') return
    this.closeOpen()
    this.startItem({ kind: 'text' })
  }

  /** Closes an open text item with its kept text; reasoning items are closed by the decoder. */
  closeText (): void {
    if (this.openKind !== 'text') return
    this.endItem({ kind: 'text', text: this.text.take() })
  }

  /** Overridden by decoders that keep more state per item (reasoning signature, ...). */
  closeOpen (): void {
    if (this.openKind === 'text') this.closeText()
    else if (this.openKind !== null) throw new Error(`translate: cannot close an open ${this.openKind} item here`)
  }

  /** Restores the client's tool from a provider function name. */
  identify (wire: string): ToolIdentity {
    return this.lookup(wire) ?? { kind: 'function', name: wire }
  }

  /** Opens a tool call that streams live (Messages, Responses providers). */
  startCall (callId: string, wire: string, o: { kind?: ToolKind; rawInput?: boolean; identity?: ToolIdentity } = {}): void {
    const id = o.identity ?? this.identify(wire)
    const kind = o.kind ?? id.kind
    const rawInput = o.rawInput === true
    const call: OpenCall = { kind, callId, name: id.name, rawInput, unwrap: kind === 'custom' && !rawInput ? new InputUnwrapper() : null }
    if (id.namespace !== undefined) call.namespace = id.namespace
    this.call = call
    const start: ItemStart = { kind: 'tool_call', toolKind: kind, callId, name: id.name }
    if (id.namespace !== undefined) start.namespace = id.namespace
    this.startItem(start)
    this.calls++
  }

  /**
   * Argument bytes of the open call. Function arguments stream as they come; a custom tool's
   * wrapped `{"input": ...}` is unwrapped live (InputUnwrapper); tool_search arguments are
   * only delivered whole (the client protocols have no delta event for them).
   */
  callDelta (fragment: string): void {
    const call = this.call
    if (call === null || fragment.length === 0) return
    const n = Buffer.byteLength(fragment)
    this.count(n)
    this.args.add(fragment, n)
    if (call.kind === 'function' || call.kind === 'hosted') this.emit({ type: 'delta', index: this.open, text: fragment })
    else if (call.kind === 'custom') {
      if (call.unwrap === null) this.emit({ type: 'delta', index: this.open, text: fragment })
      else {
        const piece = call.unwrap.feed(fragment)
        if (piece.length > 0) this.emit({ type: 'delta', index: this.open, text: piece })
      }
    }
  }

  /**
   * Completes the open call: validates its arguments, emits what was not streamed, then
   * item_end. Returns false (and emits `error`) when the arguments are not complete.
   */
  finishCall (itemId?: string): boolean {
    const call = this.call
    if (call === null) return true
    const raw = this.args.take()
    this.call = null
    let args: string
    if (call.rawInput) args = raw
    else {
      const r = finalArguments(call.kind, raw, call.name)
      if (!r.ok) {
        this.fail('provider_protocol_error', r.message)
        return false
      }
      args = r.args
      if (call.unwrap !== null && call.unwrap.emitted && call.unwrap.length !== args.length) {
        // e.g. a second "input" key: what went out live is not the input JSON.parse reads
        this.fail('provider_protocol_error', `the arguments of custom tool call ${call.name} are ambiguous (the streamed input differs from the parsed one)`)
        return false
      }
      if (call.kind === 'custom' && call.unwrap !== null && !call.unwrap.emitted && args.length > 0) {
        this.emit({ type: 'delta', index: this.open, text: args })
      } else if (call.kind === 'tool_search' && args.length > 0) {
        this.emit({ type: 'delta', index: this.open, text: args })
      } else if ((call.kind === 'function' || call.kind === 'hosted') && raw.trim() === '') {
        this.emit({ type: 'delta', index: this.open, text: args })
      }
    }
    const done: ItemDone = { kind: 'tool_call', call: { kind: call.kind, callId: call.callId, name: call.name, arguments: args } }
    if (call.namespace !== undefined) done.call.namespace = call.namespace
    if (itemId !== undefined) done.call.itemId = itemId
    this.endItem(done)
    return true
  }

  /** A complete call in one piece (Chat calls, buffered; JSON answers). */
  wholeCall (callId: string, wire: string, raw: string, itemId?: string): boolean {
    const id = this.identify(wire)
    const r = finalArguments(id.kind, raw, id.name)
    if (!r.ok) {
      this.fail('provider_protocol_error', r.message)
      return false
    }
    const start: ItemStart = { kind: 'tool_call', toolKind: id.kind, callId, name: id.name }
    if (id.namespace !== undefined) start.namespace = id.namespace
    this.startItem(start)
    this.calls++
    if (r.args.length > 0) this.emit({ type: 'delta', index: this.open, text: r.args })
    const done: ItemDone = { kind: 'tool_call', call: { kind: id.kind, callId, name: id.name, arguments: r.args } }
    if (id.namespace !== undefined) done.call.namespace = id.namespace
    if (itemId !== undefined) done.call.itemId = itemId
    this.endItem(done)
    return true
  }

  mergeUsage (u: Usage | null): void {
    if (u === null) return
    this.usage = this.usage === null ? u : { ...this.usage, ...u }
  }

  finish (stop: StopReason): void {
    if (this.ended) return
    if (this.open !== -1) throw new Error('translate: finish with an open item')
    if (stop === 'length' && this.lastKind === 'tool_call') {
      return this.fail('provider_protocol_error', 'the provider stopped for its length limit right after a tool call: its arguments may be incomplete')
    }
    if (stop === 'end' && this.calls > 0) stop = 'tool_calls'
    else if (stop === 'tool_calls' && this.calls === 0) stop = 'end'
    this.ended = true
    const e: CanonicalEvent = { type: 'finish', stop }
    if (this.usage !== null) e.usage = this.usage
    this.dispose()
    this.emit(e)
  }

  /** Emits `error` (last event) and releases everything held. */
  fail (code: string, message: string, extra: { providerType?: string; providerCode?: string; retryAfterSeconds?: number; details?: ErrorDetails } = {}): void {
    if (this.ended) return
    this.ended = true
    this.dispose()
    const e: CanonicalEvent = { type: 'error', code, message }
    if (extra.providerType !== undefined) e.providerType = extra.providerType
    if (extra.providerCode !== undefined) e.providerCode = extra.providerCode
    if (extra.retryAfterSeconds !== undefined) e.retryAfterSeconds = extra.retryAfterSeconds
    if (extra.details !== undefined && Object.keys(extra.details).length > 0) e.details = extra.details
    this.emit(e)
  }

  /** Releases every byte held (the decoders add their own buffers by overriding). */
  dispose (): void {
    this.text.drop()
    this.args.drop()
    this.call = null
  }
}
