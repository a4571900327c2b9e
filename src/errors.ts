// The error catalogue: every refusal and failure sluice can report, one row each.
//
// A code is stable forever and never reused. The same code appears in the HTTP body
// (`{ code, error, ...details }`), the JSON-RPC `error.data.errorKind`, the signed failure
// tail, logs, trace attributes and the `code` label of `sluice_refusals_total`.
// Callers match on `code`, never on `instanceof` (errors cross thread boundaries as plain
// objects). `test/unit/errors.test.ts` pins this table against README.md.
//
// side:
//   local    — a local capacity ran out; grants no provider-recovery authority: it must
//              never be reported as the provider being down.
//   caller   — the request itself is refused (auth, shape, limits a retry can't fix).
//   provider — the upstream failed or refused; signed by the gateway.

export type Side = 'local' | 'caller' | 'provider'

export interface CatalogueEntry {
  readonly status: number
  readonly side: Side
  /** Seconds after which a retry may help; null when a retry of the same request won't. */
  readonly retryAfterSeconds: number | null
  readonly message: string
}

export const catalogue = {
  // local capacity
  capacity_exhausted: { status: 503, side: 'local', retryAfterSeconds: 1, message: 'local model capacity is full: every exchange permit is in use and the wait queue is full' },
  capacity_timeout: { status: 503, side: 'local', retryAfterSeconds: 1, message: 'local model capacity: waited the whole queue deadline without an exchange permit' },
  parse_capacity_exhausted: { status: 503, side: 'local', retryAfterSeconds: 1, message: 'local parse capacity is full: the parse permit queue is full' },
  parse_capacity_timeout: { status: 503, side: 'local', retryAfterSeconds: 1, message: 'local parse capacity: waited the whole deadline without the parse permit' },
  prompt_queue_full: { status: 503, side: 'local', retryAfterSeconds: 5, message: 'this session already has the maximum number of pending exchanges' },
  storage_budget_exhausted: { status: 503, side: 'local', retryAfterSeconds: 1, message: 'the aggregate storage budget has no room for this request' },
  worker_heap_exhausted: { status: 503, side: 'local', retryAfterSeconds: 1, message: 'a worker thread heap (HTTP worker or parser) is at its limit' },
  worker_lost: { status: 503, side: 'local', retryAfterSeconds: 1, message: 'the worker handling this exchange stopped' },
  shutting_down: { status: 503, side: 'local', retryAfterSeconds: 5, message: 'the gateway is draining for shutdown and admits no new exchanges' },
  // caller
  unauthorized: { status: 401, side: 'caller', retryAfterSeconds: null, message: 'missing or unknown gateway key' },
  model_not_allowed: { status: 403, side: 'caller', retryAfterSeconds: null, message: 'this key may not use the requested model' },
  model_not_found: { status: 404, side: 'caller', retryAfterSeconds: null, message: 'no configured provider serves the requested model' },
  turn_limit: { status: 429, side: 'caller', retryAfterSeconds: null, message: 'this run has used its maximum number of exchanges' },
  payload_too_large: { status: 413, side: 'caller', retryAfterSeconds: null, message: 'the request body is larger than the configured cap' },
  storage_request_too_large: { status: 413, side: 'caller', retryAfterSeconds: null, message: 'the request needs more bytes than the whole storage budget' },
  invalid_json: { status: 400, side: 'caller', retryAfterSeconds: null, message: 'the request body is not valid JSON' },
  json_too_deep: { status: 400, side: 'caller', retryAfterSeconds: null, message: 'the request body nests deeper than the configured cap' },
  json_too_many_nodes: { status: 400, side: 'caller', retryAfterSeconds: null, message: 'the request body has more JSON values than the configured cap' },
  invalid_request: { status: 400, side: 'caller', retryAfterSeconds: null, message: 'the request is not a valid exchange for this route' },
  continuation_not_found: { status: 400, side: 'caller', retryAfterSeconds: null, message: 'previous_response_id names no stored response of this key' },
  continuation_expired: { status: 400, side: 'caller', retryAfterSeconds: null, message: 'previous_response_id (or one of its ancestors) was evicted, expired or never continuable: the conversation cannot be continued whole; resend the full input' },
  protocol_mismatch: { status: 400, side: 'caller', retryAfterSeconds: null, message: 'the route and the model\'s provider speak different protocols' },
  not_found: { status: 404, side: 'caller', retryAfterSeconds: null, message: 'no such route' },
  client_closed: { status: 499, side: 'caller', retryAfterSeconds: null, message: 'the caller closed the connection' },
  exchange_cancelled: { status: 499, side: 'caller', retryAfterSeconds: null, message: 'the exchange was cancelled by a cancel request' },
  client_stalled: { status: 408, side: 'caller', retryAfterSeconds: null, message: 'the caller stopped reading the response for longer than the stall limit' },
  // HTTP framing, refused by Node's parser before any route runs (worker/framing.ts)
  http_malformed: { status: 400, side: 'caller', retryAfterSeconds: null, message: 'the request is not well-formed HTTP/1.1 (request line, Host, Content-Length, Transfer-Encoding or chunk framing)' },
  http_headers_too_large: { status: 431, side: 'caller', retryAfterSeconds: null, message: 'the request line and headers are larger than the server accepts' },
  http_headers_timeout: { status: 408, side: 'caller', retryAfterSeconds: null, message: 'the request headers did not arrive in time' },
  http_expectation_failed: { status: 417, side: 'caller', retryAfterSeconds: null, message: 'the Expect header asks for something other than 100-continue' },
  method_not_allowed: { status: 405, side: 'caller', retryAfterSeconds: null, message: 'this route does not take that method' },
  body_timeout: { status: 408, side: 'caller', retryAfterSeconds: null, message: 'the request body stopped arriving (limits.bodyIdleMs) or was not complete in time (limits.bodyReadMs)' },
  // provider
  provider_unavailable: { status: 502, side: 'provider', retryAfterSeconds: 5, message: 'the provider could not be reached or failed' },
  provider_timeout: { status: 504, side: 'provider', retryAfterSeconds: 5, message: 'the provider did not answer in time' },
  provider_rate_limited: { status: 429, side: 'provider', retryAfterSeconds: 10, message: 'the provider refused the request for its rate limit' },
  provider_error: { status: 502, side: 'provider', retryAfterSeconds: null, message: 'the provider answered with an error' },
  provider_protocol_error: { status: 502, side: 'provider', retryAfterSeconds: null, message: 'the provider stream broke its protocol (malformed or oversize frame, missing terminal)' },
  output_too_large: { status: 502, side: 'local', retryAfterSeconds: null, message: 'the provider\'s answer is larger than this gateway delivers as one event or JSON-RPC result (limits.maxOutputBytes, limits.sessionEventBytes)' },
  // internal
  internal_error: { status: 500, side: 'local', retryAfterSeconds: null, message: 'an unexpected internal error' },
} as const satisfies Record<string, CatalogueEntry>

export type ErrorCode = keyof typeof catalogue

export const errorCodes = Object.keys(catalogue) as ErrorCode[]

export function isErrorCode (code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.hasOwn(catalogue, code)
}

export type ErrorDetails = Record<string, string | number | boolean | null>

/**
 * The one error class. Carries a catalogue code and details; `toBody()` gives the HTTP
 * body shape shared by every route. Across threads, send `toJSON()` and rebuild with
 * `SluiceError.from()`: never rely on `instanceof` after a postMessage.
 */
export class SluiceError extends Error {
  readonly code: ErrorCode
  readonly details: ErrorDetails
  private statusOverride: number | null = null

  constructor (code: ErrorCode, details: ErrorDetails = {}, message?: string) {
    super(message ?? catalogue[code].message)
    this.name = 'SluiceError'
    this.code = code
    this.details = details
  }

  get status (): number { return this.statusOverride ?? catalogue[this.code].status }

  /** A provider's own 4xx passed through as the status (provider_error only). */
  withStatus (status: number): this {
    this.statusOverride = status
    return this
  }
  get side (): Side { return catalogue[this.code].side }
  get retryAfterSeconds (): number | null {
    const d = this.details.retryAfterSeconds
    return typeof d === 'number' ? d : catalogue[this.code].retryAfterSeconds
  }

  /** `{ code, error, ...details }` — the single refusal body shape (DESIGN.md "Errors"). */
  toBody (): Record<string, unknown> {
    return { code: this.code, error: this.message, ...this.details }
  }

  /** HTTP headers that go with the refusal (`Retry-After` where a retry can help). */
  headers (): Record<string, string> {
    const s = this.retryAfterSeconds
    return s === null ? {} : { 'retry-after': String(s) }
  }

  toJSON (): { code: ErrorCode; message: string; details: ErrorDetails } {
    return { code: this.code, message: this.message, details: this.details }
  }

  static from (value: unknown): SluiceError {
    if (value instanceof SluiceError) return value
    const v = value as { code?: unknown; message?: unknown; details?: unknown } | null
    if (v && isErrorCode(v.code)) {
      return new SluiceError(v.code, (v.details ?? {}) as ErrorDetails, typeof v.message === 'string' ? v.message : undefined)
    }
    const err = new SluiceError('internal_error', {}, value instanceof Error ? value.message : String(value))
    return err
  }
}

/**
 * The error an aborted operation reports: the abort's own reason when it is a SluiceError
 * (e.g. exchange_cancelled from a cancel request), else client_closed (the caller went away).
 */
export function abortCause (signal: AbortSignal): SluiceError {
  return signal.reason instanceof SluiceError ? signal.reason : new SluiceError('client_closed')
}
