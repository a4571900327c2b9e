// StreamTracker: what one exchange's provider stream has shown so far.
//
// The relay feeds it every frame the framer reports, in order, with the frame's class:
//
//   const cls = inspector.classify(frame)
//   if (tracker.frame(frame, cls)) {            // true only for an admitted 'inspect' frame
//     let facts
//     try { facts = await withParsePermit(() => inspector.inspect(frame)) }   // the parse step
//     catch (err) { tracker.inspectFailed(err) }
//     if (facts) tracker.apply(facts)
//   }
//   ...framer.onOversize -> tracker.oversize(bytes)
//   at EOF: const verdict = tracker.end({ trailingBytes: framer.end()?.length ?? 0 })
//
// Rules (seed 001, DESIGN "The exchange lifecycle" 7-8):
//   - The first fatal wins and is final: a malformed frame, an oversize frame (both
//     provider_protocol_error), a payload that does not parse, a provider error event
//     (provider_error / _rate_limited / _unavailable, `inBand`: the client already has the
//     provider's own error event), a broken terminal sequence, or the end of the stream
//     without a terminal. After it no frame is admitted and no field is read: later usage
//     earns no credit, a later terminal validates nothing.
//   - Usage is read only from admitted frames; fields only grow (usage is cumulative in all
//     three protocols); a later, lower figure is a conflict, counted and ignored.
//   - A validated terminal: Chat a non-null finish_reason then [DONE]; Responses
//     response.created then response.completed / response.incomplete of the same id;
//     Messages message_start then message_stop. `ok` in the verdict = validated terminal, no
//     fatal, and a clean end (no trailing partial frame): evidence of provider transport
//     availability, nothing more.
//   - Frames after the terminal are counted (`framesAfterTerminal`), not judged.

import type { ErrorCode } from '../errors.ts'
import { SluiceError } from '../errors.ts'
import { asBuffer } from './bytes.ts'
import { chat } from './chat.ts'
import { messages } from './messages.ts'
import { streamErrorCode } from './provider-error.ts'
import { responses } from './responses.ts'
import type { FrameClass, FrameFacts, Protocol, ProtocolInspector, ProviderErrorFacts, TailContext, Usage } from './types.ts'

export type StreamTerminal = 'completed' | 'incomplete' | 'failed'

export interface StreamFailure {
  code: ErrorCode
  message: string
  /** The provider's own error event is already in the client's stream. */
  inBand: boolean
  /** 0-based index of the frame that caused it; -1 when the end of the stream did. */
  frame: number
  providerError?: ProviderErrorFacts
}

export interface StreamVerdict {
  /** Validated terminal, no fatal, clean end. */
  ok: boolean
  terminal: StreamTerminal | null
  failure: StreamFailure | null
  usage: Usage | null
  /** The usage is not final (anything but `ok`). */
  partial: boolean
  framesSeen: number
  framesAdmitted: number
  bytesAdmitted: number
}

const INSPECTORS: Record<Protocol, ProtocolInspector> = {
  'openai-chat': chat,
  'openai-responses': responses,
  anthropic: messages,
}

export class StreamTracker {
  readonly inspector: ProtocolInspector
  readonly protocol: Protocol

  #seen = 0
  #admitted = 0
  #bytes = 0
  #failure: StreamFailure | null = null
  #terminal: StreamTerminal | null = null
  /** A stream-ending frame reached the client ([DONE], a lifecycle terminal, message_stop). */
  #closed = false
  #afterTerminal = 0
  #started = false
  #stopReason: string | null = null
  #usage: Usage | null = null
  #usageConflicts = 0
  #responseId: string | null = null
  #model: string | null = null
  #createdAt: number | null = null
  #lastSeq = -1
  #oversize = 0
  /** Index of the frame whose facts are expected next (set by frame() for inspect frames). */
  #inspecting = -1
  #inspectingBytes = 0

  constructor (protocol: Protocol | ProtocolInspector) {
    this.inspector = typeof protocol === 'string' ? INSPECTORS[protocol] : protocol
    this.protocol = this.inspector.protocol
  }

  /**
   * One frame, as classified. Returns true when the caller should inspect() it (under the
   * parse permit) and pass the facts to apply().
   */
  frame (frame: Uint8Array, cls: FrameClass): boolean {
    const f = asBuffer(frame)
    return this.frameAt(f, 0, f.length, cls)
  }

  /** frame() for the frame f[start, end) (f: the chunk that holds it among others). */
  frameAt (f: Buffer, start: number, end: number, cls: FrameClass): boolean {
    const index = this.#seen++
    if (this.#closed) this.#afterTerminal++
    if (this.#failure !== null) return false
    if (cls === 'malformed') {
      this.#fail('provider_protocol_error', `frame ${index} is malformed (its data is not a JSON object)`, false, index)
      return false
    }
    this.#admitted++
    const bytes = end - start
    this.#bytes += bytes
    const peek = this.inspector.peekSequenceNumberAt
    if (peek !== undefined) {
      const seq = peek(f, start, end)
      if (seq > this.#lastSeq) this.#lastSeq = seq
    }
    if (cls !== 'inspect' || this.#closed) return false
    this.#inspecting = index
    this.#inspectingBytes = bytes
    return true
  }

  /** The facts inspect() read from the frame frame() last asked to inspect. */
  apply (facts: FrameFacts): void {
    const index = this.#inspecting
    this.#inspecting = -1
    if (this.#failure !== null) return
    if (facts.sequenceNumber !== undefined && facts.sequenceNumber > this.#lastSeq) this.#lastSeq = facts.sequenceNumber
    if (facts.model !== undefined && this.#model === null) this.#model = facts.model
    if (facts.createdAt !== undefined && this.#createdAt === null) this.#createdAt = facts.createdAt
    if (facts.responseId !== undefined) {
      if (this.#responseId === null) this.#responseId = facts.responseId
      else if (this.protocol === 'openai-responses' && facts.responseId !== this.#responseId) {
        this.#fail('provider_protocol_error', `frame ${index} names response ${facts.responseId}, not ${this.#responseId}`, false, index)
        return
      }
    }
    if (facts.usage !== undefined) this.#mergeUsage(facts.usage)
    if (facts.error !== undefined) {
      if (facts.terminal === 'failed') {
        this.#terminal = 'failed'
        this.#closed = true
      }
      this.#fail(streamErrorCode(facts.error), `the provider reported an error in the stream (${facts.error.type}${facts.error.code ? ' ' + facts.error.code : ''})`, true, index, facts.error)
      return
    }
    if (facts.stopReason !== undefined && this.#stopReason === null) this.#stopReason = facts.stopReason
    switch (this.protocol) {
      case 'openai-chat':
        if (facts.terminal === 'done') {
          this.#closed = true
          if (this.#stopReason === null) {
            this.#fail('provider_protocol_error', 'the stream sent [DONE] without a finish_reason', false, index)
            return
          }
          this.#terminal = this.#stopReason === 'length' ? 'incomplete' : 'completed'
        }
        break
      case 'openai-responses':
        if (facts.event === 'response.created') this.#started = true
        if (facts.terminal === 'completed' || facts.terminal === 'incomplete') {
          this.#closed = true
          if (!this.#started) {
            this.#fail('provider_protocol_error', `the stream sent response.${facts.terminal} without response.created`, false, index)
            return
          }
          this.#terminal = facts.terminal
        }
        break
      case 'anthropic':
        if (facts.event === 'message_start') {
          if (this.#started) {
            this.#fail('provider_protocol_error', `frame ${index} is a second message_start`, false, index)
            return
          }
          this.#started = true
        }
        if (facts.terminal === 'completed') {
          this.#closed = true
          if (!this.#started) {
            this.#fail('provider_protocol_error', 'the stream sent message_stop without message_start', false, index)
            return
          }
          this.#terminal = this.#stopReason === 'max_tokens' ? 'incomplete' : 'completed'
        }
        break
    }
  }

  /** inspect() threw for the frame frame() last asked to inspect. */
  inspectFailed (err: unknown): void {
    const index = this.#inspecting
    this.#inspecting = -1
    if (this.#failure !== null) return
    if (index >= 0) {
      this.#admitted--
      this.#bytes -= this.#inspectingBytes
    }
    const e = SluiceError.from(err)
    const reason = typeof e.details.reason === 'string' ? e.details.reason : e.message
    this.#fail(e.code === 'internal_error' ? 'provider_protocol_error' : e.code, `frame ${index} could not be read: ${reason}`, false, index)
  }

  /** The framer skipped a frame larger than the cap. */
  oversize (bytes: number): void {
    const index = this.#seen++
    this.#oversize++
    if (this.#failure !== null) return
    this.#fail('provider_protocol_error', `frame ${index} is larger than the frame cap (${bytes} bytes seen)`, false, index)
  }

  /** A failure decided outside the stream (budget, client, transport); first fatal wins. */
  fail (code: ErrorCode, message: string): void {
    if (this.#failure === null) this.#fail(code, message, false, -1)
  }

  /**
   * The upstream ended. `trailingBytes`: an unterminated frame's size (SseFramer#end());
   * `error`: the transport failure that ended it, if any.
   */
  end (opts: { trailingBytes?: number; error?: { code: ErrorCode; message: string } } = {}): StreamVerdict {
    const trailing = opts.trailingBytes ?? 0
    if (this.#failure === null) {
      if (opts.error !== undefined) this.#fail(opts.error.code, opts.error.message, false, -1)
      else if (trailing > 0) this.#fail('provider_protocol_error', `the stream ended inside a frame (${trailing} bytes after the last frame)`, false, -1)
      else if (this.#terminal === null) this.#fail('provider_protocol_error', 'the stream ended without a terminal event', false, -1)
    }
    return this.verdict()
  }

  verdict (): StreamVerdict {
    const ok = this.#failure === null && this.#terminal !== null && this.#terminal !== 'failed'
    return {
      ok,
      terminal: this.#terminal,
      failure: this.#failure,
      usage: this.usage,
      partial: !ok,
      framesSeen: this.#seen,
      framesAdmitted: this.#admitted,
      bytesAdmitted: this.#bytes,
    }
  }

  /** A validated terminal so far, with no fatal before it. */
  get validTerminal (): boolean { return this.#failure === null && this.#terminal !== null && this.#terminal !== 'failed' }
  get terminal (): StreamTerminal | null { return this.#terminal }
  /** A stream-ending frame has been relayed: a failure tail after it would not be read. */
  get closed (): boolean { return this.#closed }
  get failure (): StreamFailure | null { return this.#failure }
  get framesSeen (): number { return this.#seen }
  get framesAdmitted (): number { return this.#admitted }
  get bytesAdmitted (): number { return this.#bytes }
  get framesAfterTerminal (): number { return this.#afterTerminal }
  get oversizeFrames (): number { return this.#oversize }
  get usageConflicts (): number { return this.#usageConflicts }
  get stopReason (): string | null { return this.#stopReason }
  get responseId (): string | null { return this.#responseId }
  get model (): string | null { return this.#model }
  get createdAt (): number | null { return this.#createdAt }
  /** The highest sequence_number seen (Responses), -1 when none. */
  get lastSequenceNumber (): number { return this.#lastSeq }
  /** The sequence_number a tail should carry: after every seen number and every seen frame. */
  get nextSequenceNumber (): number { return Math.max(this.#lastSeq + 1, this.#seen) }

  /** Usage from admitted frames (total computed when the provider gives only the parts). */
  get usage (): Usage | null {
    const u = this.#usage
    if (u === null) return null
    if (u.totalTokens === undefined && u.inputTokens !== undefined && u.outputTokens !== undefined) {
      return { ...u, totalTokens: u.inputTokens + u.outputTokens }
    }
    return { ...u }
  }

  /** Whether usage is partial: the stream has not (yet) ended validated. */
  get usagePartial (): boolean { return !this.validTerminal }

  tailContext (closing?: string): TailContext {
    const ctx: TailContext = {
      responseId: this.#responseId,
      sequenceNumber: this.nextSequenceNumber,
      model: this.#model,
      createdAt: this.#createdAt,
    }
    if (closing !== undefined) ctx.closing = closing
    return ctx
  }

  #mergeUsage (next: Usage): void {
    const u = this.#usage ?? (this.#usage = {})
    for (const key of ['inputTokens', 'outputTokens', 'totalTokens'] as const) {
      const v = next[key]
      if (v === undefined) continue
      const old = u[key]
      if (old === undefined || v >= old) u[key] = v
      else this.#usageConflicts++
    }
  }

  #fail (code: ErrorCode, message: string, inBand: boolean, frame: number, providerError?: ProviderErrorFacts): void {
    const f: StreamFailure = { code, message, inBand, frame }
    if (providerError !== undefined) f.providerError = providerError
    this.#failure = f
  }
}
