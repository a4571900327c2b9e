// The errors the client SDK throws, one class per way a call can fail. Callers match on
// `code` (stable strings, the same as the gateway's catalogue where the gateway said it), or
// on the class when they need the fields.
//
//   PendingPromptLimitError  the SDK's own per-session count is full: NOTHING was sent.
//                            code 'prompt_queue_full', local = true.
//   SluiceRequestError       the gateway answered with a refusal (non-2xx) in its one body
//                            shape `{ code, error, ...details }`; `status`, `retryAfterSeconds`
//                            (from `Retry-After`, else the body), `body` as the server sent it.
//                            A server-side prompt_queue_full arrives as this class (local is
//                            false: the server is the authority, the SDK's count only guards).
//   SluiceTurnError          a submitted exchange ended with `turn_error` on the event stream
//                            (`{ exchangeId, code, error, ...details }`).
//   SluiceStreamError        the SDK lost sight of a submitted exchange: the session's event
//                            stream ended or failed and could not be resumed, or the server
//                            reported a replay gap. The exchange's outcome is unknown.
//   SluiceResponseError      a 2xx answer the SDK could not read (not JSON, wrong shape, not an
//                            event stream): a parse failure.
//
// A caller's abort rejects with the signal's reason (an AbortError DOMException by default),
// exactly as fetch() does.

/** The gateway's refusal body: `{ code, error, ...details }`. */
export interface SluiceErrorBody {
  code: string
  error: string
  [detail: string]: unknown
}

export class PendingPromptLimitError extends Error {
  readonly code = 'prompt_queue_full'
  /** Refused by the SDK's own count: no request was sent. */
  readonly local = true
  readonly sessionId: string
  readonly limit: number
  /** Pending exchanges of the session (as the SDK counts them) when this one was refused. */
  readonly pendingCount: number

  constructor (sessionId: string, limit: number, pendingCount: number) {
    super(`session ${JSON.stringify(sessionId)} already has ${pendingCount} pending prompts (limit ${limit}); nothing was sent`)
    this.name = 'PendingPromptLimitError'
    this.sessionId = sessionId
    this.limit = limit
    this.pendingCount = pendingCount
  }
}

export class SluiceRequestError extends Error {
  readonly code: string
  readonly status: number
  /** Seconds after which a retry may help (the `Retry-After` header, else the body's `retryAfterSeconds`); null when none was given. */
  readonly retryAfterSeconds: number | null
  /** The server's JSON body; for a body that was not the gateway's shape, `{ code: 'http_<status>', error: <text> }`. */
  readonly body: SluiceErrorBody
  readonly local = false

  constructor (status: number, body: SluiceErrorBody, retryAfterSeconds: number | null) {
    super(`${body.error} (${body.code}, HTTP ${status})`)
    this.name = 'SluiceRequestError'
    this.code = body.code
    this.status = status
    this.retryAfterSeconds = retryAfterSeconds
    this.body = body
  }
}

export class SluiceTurnError extends Error {
  readonly code: string
  readonly exchangeId: string
  /** The `turn_error` event's data: `{ exchangeId, code, error, ...details }`. */
  readonly body: SluiceErrorBody & { exchangeId: string }

  constructor (body: SluiceErrorBody & { exchangeId: string }) {
    super(`${body.error} (${body.code}, exchange ${body.exchangeId})`)
    this.name = 'SluiceTurnError'
    this.code = body.code
    this.exchangeId = body.exchangeId
    this.body = body
  }
}

export type StreamErrorCode = 'event_stream_ended' | 'event_stream_failed' | 'event_replay_gap'

export class SluiceStreamError extends Error {
  readonly code: StreamErrorCode
  /** The exchange whose outcome is unknown, when the error is about one exchange. */
  readonly exchangeId: string | null

  constructor (code: StreamErrorCode, message: string, exchangeId: string | null = null, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause })
    this.name = 'SluiceStreamError'
    this.code = code
    this.exchangeId = exchangeId
  }
}

export class SluiceResponseError extends Error {
  readonly code = 'invalid_response'
  readonly status: number

  constructor (status: number, message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause })
    this.name = 'SluiceResponseError'
    this.status = status
  }
}
