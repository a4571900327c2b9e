// A canonical `error` in the fields each client protocol's users act on (the signed failure
// tail carries the catalogue code in its record and message prefix either way):
//   Responses / Chat (Codex, the openai SDK): `error.code` — context_length_exceeded,
//     insufficient_quota, rate_limit_exceeded (Codex reads the delay from "Please try again
//     in <n>s" in the message), server_is_overloaded; else the catalogue code.
//   Messages (Claude Code, the anthropic SDK): `error.type` — rate_limit_error,
//     overloaded_error, invalid_request_error (Claude Code compacts on "prompt is too long"
//     in its message), billing_error, api_error.

import type { ErrorDetails } from '../../errors.ts'
import type { CanonicalEvent } from '../canonical.ts'

export type ErrorEvent = Extract<CanonicalEvent, { type: 'error' }>

const CONTEXT = /context[_ ]length|context window|prompt is too long|input is too long|maximum context/i

function isContext (e: ErrorEvent): boolean {
  return e.providerCode === 'context_length_exceeded' || e.providerType === 'context_length_exceeded' || CONTEXT.test(e.message)
}

function isQuota (e: ErrorEvent): boolean {
  const k = `${e.providerCode ?? ''} ${e.providerType ?? ''}`
  return k.includes('insufficient_quota') || k.includes('billing')
}

export interface OpenaiErrorFields { errorCode: string; errorType?: string; messageSuffix?: string }

export function openaiErrorFields (e: ErrorEvent): OpenaiErrorFields {
  // Codex reads the delay from "Please try again in <n>s" in the message: add it unless the
  // provider's own message (which the canonical message quotes) already says it.
  const retry = e.retryAfterSeconds !== undefined && !/try again in/i.test(e.message) ? ` Please try again in ${e.retryAfterSeconds}s.` : undefined
  let f: OpenaiErrorFields
  if (isQuota(e)) f = { errorCode: 'insufficient_quota', errorType: 'insufficient_quota' }
  else if (e.code === 'provider_rate_limited') f = { errorCode: 'rate_limit_exceeded', errorType: 'requests' }
  else if (isContext(e)) f = { errorCode: 'context_length_exceeded', errorType: 'invalid_request_error' }
  else if (e.code === 'provider_unavailable') f = { errorCode: 'server_is_overloaded', errorType: 'server_error' }
  else f = { errorCode: e.code }
  if (retry !== undefined) f.messageSuffix = retry
  return f
}

export function anthropicErrorType (e: ErrorEvent): string {
  if (e.code === 'provider_rate_limited') return 'rate_limit_error'
  if (e.code === 'provider_unavailable') return 'overloaded_error'
  if (isQuota(e)) return 'billing_error'
  if (isContext(e) || e.providerType === 'invalid_request_error') return 'invalid_request_error'
  return 'api_error'
}

/** The catalogue error's details for `error` (a refusal before any byte: a JSON answer). */
export function errorDetails (e: ErrorEvent): ErrorDetails {
  const d: ErrorDetails = { ...e.details }
  if (e.providerType !== undefined) d.providerType = e.providerType
  if (e.providerCode !== undefined) d.providerCode = e.providerCode
  if (e.retryAfterSeconds !== undefined) d.retryAfterSeconds = e.retryAfterSeconds
  return d
}
