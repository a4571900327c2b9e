// Provider refusals and failures, mapped onto the catalogue.
//
// Two sources:
//   - an HTTP error response before any byte reached the client (status + JSON body in the
//     provider family's format: OpenAI `{"error":{"message","type","param","code"}}`,
//     Anthropic `{"type":"error","error":{"type","message"}}`);
//   - an error event inside a stream (FrameFacts.error).
// Both keep the provider's own status, type, code and message as details: the caller sees
// who failed (side `provider`) and why, and a provider refusal is never reported as a local
// capacity failure or the other way round. The provider's strings are scrubbed of credentials
// and capped first (./scrub.ts); a provider's Retry-After is clamped to MAX_RETRY_AFTER_SECONDS.

import { SluiceError, type ErrorCode } from '../errors.ts'
import { asBuffer, isRecord, str } from './bytes.ts'
import type { ProviderErrorFacts } from './types.ts'
import { DEFAULT_SCRUBBER, PROVIDER_FIELD_CAP, PROVIDER_MESSAGE_CAP, type Scrubber } from './scrub.ts'

export interface ProviderErrorInfo {
  code: ErrorCode
  /** The provider's HTTP status (0 for an in-stream error). */
  providerStatus: number
  providerType: string | null
  providerCode: string | null
  providerMessage: string | null
  /** From the provider's Retry-After header, when it sent one. */
  retryAfterSeconds: number | null
}

/** The longest Retry-After relayed from a provider (an hour): a hint past that is no hint. */
export const MAX_RETRY_AFTER_SECONDS = 3600

/** Parses an error body (take the parse permit); undefined when it is not JSON. */
export function parseErrorBody (body: Uint8Array | null): unknown {
  if (body === null || body.length === 0) return undefined
  try {
    return JSON.parse(asBuffer(body).toString('utf8'))
  } catch {
    return undefined
  }
}

/**
 * Retry-After as seconds (delta-seconds or an HTTP date), clamped to 0..MAX_RETRY_AFTER_SECONDS;
 * null when absent or unreadable.
 */
export function retryAfterSeconds (value: string | null | undefined, now = Date.now()): number | null {
  if (value === null || value === undefined) return null
  const v = value.trim()
  if (/^\d+$/.test(v)) return Math.min(MAX_RETRY_AFTER_SECONDS, Number(v))
  // Only an HTTP date (IMF-fixdate and the obsolete forms all name a weekday or a month).
  if (!/[A-Za-z]{3}/.test(v)) return null
  const at = Date.parse(v)
  if (Number.isNaN(at)) return null
  return Math.min(MAX_RETRY_AFTER_SECONDS, Math.max(0, Math.ceil((at - now) / 1000)))
}

function has (s: string | null, ...needles: string[]): boolean {
  return s !== null && needles.some(n => s.includes(n))
}

/** The catalogue code for a provider's error, from its status and its type/code strings. */
export function providerErrorCode (status: number, type: string | null, code: string | null): ErrorCode {
  const kind = `${type ?? ''} ${code ?? ''}`.toLowerCase()
  if (has(kind, 'insufficient_quota', 'billing')) return 'provider_error'
  if (status === 429 || has(kind, 'rate_limit')) return 'provider_rate_limited'
  if (status === 408 || status === 504 || has(kind, 'timeout')) return 'provider_timeout'
  if (status === 529 || status === 503 || has(kind, 'overloaded', 'service_unavailable')) return 'provider_unavailable'
  if (status >= 500) return 'provider_unavailable'
  return 'provider_error'
}

/** Maps a provider's HTTP error (its body already parsed with parseErrorBody); its strings scrubbed and capped. */
export function mapProviderError (status: number, body: unknown, retryAfter?: string | null, scrub: Scrubber = DEFAULT_SCRUBBER): ProviderErrorInfo {
  let type: string | null = null
  let code: string | null = null
  let message: string | null = null
  if (isRecord(body)) {
    const err = body.error
    if (isRecord(err)) {
      type = str(err.type) ?? null
      code = typeof err.code === 'string' ? err.code : typeof err.code === 'number' ? String(err.code) : null
      message = str(err.message) ?? null
    } else if (typeof err === 'string') message = err
    else message = str(body.message) ?? null
  }
  const mapped = providerErrorCode(status, type, code)
  return {
    code: mapped,
    providerStatus: status,
    providerType: scrub.text(type, PROVIDER_FIELD_CAP),
    providerCode: scrub.text(code, PROVIDER_FIELD_CAP),
    providerMessage: scrub.text(message, PROVIDER_MESSAGE_CAP),
    retryAfterSeconds: retryAfterSeconds(retryAfter),
  }
}

/** parseErrorBody + mapProviderError. Parses: take the parse permit. */
export function providerErrorFromResponse (status: number, body: Uint8Array | null, retryAfter?: string | null, scrub: Scrubber = DEFAULT_SCRUBBER): ProviderErrorInfo {
  return mapProviderError(status, parseErrorBody(body), retryAfter, scrub)
}

/** The catalogue code for an error event inside a stream. */
export function streamErrorCode (e: ProviderErrorFacts): ErrorCode {
  return providerErrorCode(0, e.type, e.code ?? null)
}

/** A SluiceError carrying the provider's details (HTTP body `{ code, error, providerStatus, ... }`). */
export function providerSluiceError (info: ProviderErrorInfo): SluiceError {
  const details: Record<string, string | number | null> = {
    providerStatus: info.providerStatus,
    providerType: info.providerType,
    providerCode: info.providerCode,
    providerMessage: info.providerMessage,
  }
  if (info.retryAfterSeconds !== null) details.retryAfterSeconds = info.retryAfterSeconds
  return new SluiceError(info.code, details)
}
