// The session event stream (`GET /v1/sessions/:id/events`) as typed objects.
//
// Each SSE event carries `id: <decimal sequence>`, `event: <type>` and `data: <one-line JSON>`.
// readEvents() decodes a Response body with SseParser and turns each event into a
// SessionEvent: the JSON object's fields, plus `type` (the SSE event name) and `id` (the SSE
// id, kept as a string: it is what `Last-Event-ID` sends back). Known types are typed; any
// other type is passed on as `{ type: 'unknown', event, id, data }` so a newer server never
// breaks an older SDK. Data that is not a JSON object is a parse failure
// (SluiceResponseError): the stream is not what the gateway promises, so nothing after it is
// trusted.
//
// The body reader is released when the consumer stops (break, throw, return) or the stream
// ends: the generator's finally cancels it.

import { SluiceResponseError } from './errors.ts'
import { SseParser } from './sse.ts'

/** The exchange holds its lane turn and an exchange permit (the gateway adds `route` and `model`). */
export interface TurnStartedEvent { type: 'turn_started'; id: string | null; exchangeId: string; route?: string; model?: string; [field: string]: unknown }
/**
 * One provider SSE frame of a streaming exchange: its event name (null when it had none) and
 * data string (null, with `dropped` saying why, when the frame was larger than the ring takes).
 */
export interface TurnProgressEvent { type: 'turn_progress'; id: string | null; exchangeId: string; event: string | null; data: string | null; dropped?: string }
/** `body`: the provider's JSON for a non-streaming request; null for a stream. */
export interface TurnCompleteEvent { type: 'turn_complete'; id: string | null; exchangeId: string; status: number; body: unknown; usage?: unknown; [field: string]: unknown }
/** The catalogue refusal or failure that ended the exchange, e.g. `exchange_cancelled`. */
export interface TurnErrorEvent { type: 'turn_error'; id: string | null; exchangeId: string; code: string; error: string; status?: number; [detail: string]: unknown }
/** Events after `after` were evicted from the server's ring before this reader asked; `oldest` is the oldest kept. */
export interface ReplayGapEvent { type: 'replay_gap'; id: string | null; after: string | number | null; oldest: string | number | null }
/** The server ends this stream (e.g. `storage_budget_exhausted`); resume from `lastEventId`. */
export interface StreamErrorEvent { type: 'stream_error'; id: string | null; code: string; error: string; lastEventId?: number | string; [detail: string]: unknown }
export interface UnknownSessionEvent { type: 'unknown'; id: string | null; event: string; data: unknown }

export type SessionEvent = TurnStartedEvent | TurnProgressEvent | TurnCompleteEvent | TurnErrorEvent | ReplayGapEvent | StreamErrorEvent | UnknownSessionEvent

const KNOWN = new Set(['turn_started', 'turn_progress', 'turn_complete', 'turn_error', 'replay_gap', 'stream_error'])

export function toSessionEvent (status: number, id: string | null, event: string, data: string): SessionEvent {
  let value: unknown
  try {
    value = JSON.parse(data)
  } catch (err) {
    throw new SluiceResponseError(status, `session event ${JSON.stringify(event)} (id ${id}) has data that is not JSON`, err)
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new SluiceResponseError(status, `session event ${JSON.stringify(event)} (id ${id}) has data that is not a JSON object`)
  }
  if (!KNOWN.has(event)) return { type: 'unknown', id, event, data: value }
  const e = { ...value, type: event, id } as SessionEvent
  if (e.type !== 'replay_gap' && e.type !== 'stream_error' && typeof (e as { exchangeId?: unknown }).exchangeId !== 'string') {
    throw new SluiceResponseError(status, `session event ${event} (id ${id}) has no exchangeId`)
  }
  return e
}

export function isEventStream (res: Response): boolean {
  return /^\s*text\/event-stream\b/i.test(res.headers.get('content-type') ?? '')
}

export async function * readEvents (res: Response): AsyncGenerator<SessionEvent, void, undefined> {
  if (res.body === null) return
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader()
  const parser = new SseParser()
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      for (const m of parser.push(value)) yield toSessionEvent(res.status, m.id, m.event, m.data)
    }
    parser.end()
  } finally {
    reader.cancel().catch(() => {})
  }
}
