// Shared shapes of the stream-inspection layer (see index.ts for the overview).

import type { Protocol } from '../config/schema.ts'
import type { FailureRecord, TokenUsage } from '../sse/sign.ts'

export type { Protocol }

/**
 * What a frame needs, decided from bytes alone:
 *   pass       forward it; nothing in it is read (the vast majority of frames)
 *   inspect    it can carry a terminal, usage or an error: parse it with inspect()
 *   malformed  it breaks the protocol's framing (see each protocol's classify notes)
 */
export type FrameClass = 'pass' | 'inspect' | 'malformed'

export type Usage = TokenUsage

export type TerminalKind = 'completed' | 'failed' | 'incomplete' | 'done'

export interface ProviderErrorFacts {
  /** The provider's error type (`server_error`, `overloaded_error`, `response.failed`, ...). */
  type: string
  message: string
  code?: string
}

/** The few fields read from one inspected frame. */
export interface FrameFacts {
  /** The event name (`event:` line, else the payload's `type`); Chat frames have none. */
  event?: string
  /**
   * Responses: `completed` / `incomplete` / `failed` from the lifecycle terminal events;
   * Messages: `completed` on message_stop; Chat: `done` on `data: [DONE]`.
   */
  terminal?: TerminalKind
  /** Chat `finish_reason` (non-null), Messages `stop_reason` from message_delta. */
  stopReason?: string
  usage?: Usage
  error?: ProviderErrorFacts
  /** Chat completion id, Responses response id, Messages message id. */
  responseId?: string
  model?: string
  /** Responses `created_at` (seconds). */
  createdAt?: number
  /** Responses `sequence_number`. */
  sequenceNumber?: number
}

/** What a failure tail needs to look like a real event of the client's stream. */
export interface TailContext {
  /** Bytes that end a partial frame the client already has: `SseFramer#closingBytes()`. */
  closing?: string
  /** Responses: the id of the response the client is reading (from response.created). */
  responseId?: string | null
  /** Responses: the next `sequence_number` (last seen + 1). */
  sequenceNumber?: number | null
  model?: string | null
  /** Responses: `created_at` of the response (seconds). */
  createdAt?: number | null
  // Translated routes only (src/translate/stream): the fields the client acts on. A
  // same-protocol relay sets none of them and its tails are unchanged.
  /** Responses / Chat: the error `code` (Codex reads context_length_exceeded, ...); default record.code. */
  errorCode?: string
  /** Messages / Chat: the error `type` (Claude Code reads overloaded_error, ...). */
  errorType?: string
  /** Appended to the tail's message (Codex reads "Please try again in 20s." on rate_limit_exceeded). */
  messageSuffix?: string
  /** Responses: the output items the stream completed, listed by response.failed. */
  output?: unknown[]
}

export interface ProtocolInspector {
  readonly protocol: Protocol
  /** Byte checks only; never decodes. */
  classify(frame: Uint8Array): FrameClass
  /**
   * classify() of the frame f[start, end), where f is the chunk that holds it among others
   * (the relay's per-frame path: no view is made of a frame that passes).
   */
  classifyAt(f: Buffer, start: number, end: number): FrameClass
  /**
   * Parses the data payload of a frame classify() called 'inspect' and reads its fields. Run
   * it under the parse permit. Throws SluiceError `provider_protocol_error` when the payload
   * is not JSON.
   */
  inspect(frame: Uint8Array): FrameFacts
  /** The client protocol's own error event carrying the signed failure record. */
  failureTail(record: FailureRecord, signature: string, ctx?: TailContext): Buffer
  /** Usage from a whole non-streaming JSON response body (parses it: take the permit). */
  extractUsage(body: Uint8Array): Usage | null
  /** Usage from an already-parsed non-streaming response body. */
  usageFromJson(value: unknown): Usage | null
  /**
   * Responses only: the frame's `sequence_number` read from fixed byte offsets (no parse), or
   * -1 when the frame is not laid out as `{"type":"<name>","sequence_number":N`.
   */
  peekSequenceNumber?(frame: Uint8Array): number
  /** peekSequenceNumber() of the frame f[start, end). */
  peekSequenceNumberAt?(f: Buffer, start: number, end: number): number
}
