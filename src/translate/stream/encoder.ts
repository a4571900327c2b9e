// What the three client encoders share: the output queue, the retained-bytes accounting, the
// failure handover to the worker.
//
// An encoder is an EventSink: canonical events in, the client protocol's SSE text out
// (queued; `take()` hands it over as one Buffer per call). After an `error` event it writes
// nothing: the worker builds the signed failure record (it has the exchange's identity and
// the signing key), and `failureTail(record, signature)` renders it as the client protocol's
// own error event, with the fields that client acts on (client-errors.ts).

import { randomUUID } from 'node:crypto'
import type { FailureRecord } from '../../sse/sign.ts'
import type { CanonicalEvent, CanonicalRequest, EventSink, TranslationBudget, Usage } from '../canonical.ts'
import type { ErrorEvent } from './client-errors.ts'

export interface EncoderOptions {
  request: CanonicalRequest
  budget: TranslationBudget
  /** Chat clients: `stream_options.include_usage` (a usage chunk before [DONE]). */
  includeUsage?: boolean
  /**
   * Responses clients, with the gateway's conversation store (worker/continuation.ts): the
   * response objects echo `previous_response_id` and `store`; with `keep`, the terminal's id
   * and `output` are kept for takeKept().
   */
  state?: { previousResponseId: string | null, store: boolean, keep: boolean, idSuffix?: string }
}

export interface StreamEncoder extends EventSink {
  /** The client bytes written since the last call (one Buffer, or none). */
  take (): Buffer[]
  /** The stream's `error` event, once one came. */
  readonly error: ErrorEvent | null
  /** True once `finish` was rendered (the client's terminal went out). */
  readonly finished: boolean
  /** Usage seen so far (for the failure record). */
  readonly usage: Usage | null
  /** The client protocol's failure event for `error` (call once, after it came). */
  failureTail (record: FailureRecord, signature: string): Buffer
  /** Releases every byte the encoder holds (after a failure or an abort). */
  dispose (): void
  /**
   * Responses with `state.keep`, once `finished`: the response id the client saw and the
   * terminal's `output` (a JSON array text); once, then null. Its bytes are charged to the
   * budget ('output') from the terminal until taken or disposed.
   */
  takeKept? (): { id: string, output: string } | null
}

/**
 * The provider's answer id for the client's id (each encoder adds its protocol's prefix), or a
 * fresh one (32 hex characters) when the provider sent none: two answers never share an id.
 */
export function answerBase (providerId: string): string {
  return providerId !== '' ? providerId : randomUUID().replaceAll('-', '')
}

/** A Responses / Messages id: answerBase, characters outside [A-Za-z0-9_-] -> `_`, `prefix` unless it has it. */
export function prefixedId (prefix: 'resp_' | 'msg_', providerId: string): string {
  const clean = answerBase(providerId).replace(/[^A-Za-z0-9_-]/g, '_')
  return clean.startsWith(prefix) ? clean : prefix + clean
}

export class Output {
  parts: string[] = []
  push (s: string): void { this.parts.push(s) }
  take (): Buffer[] {
    const p = this.parts
    if (p.length === 0) return []
    this.parts = []
    return [Buffer.from(p.length === 1 ? p[0] : p.join(''), 'utf8')]
  }
}

export type { CanonicalEvent }
