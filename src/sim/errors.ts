// Error bodies in each provider family's own format, so SDKs raise their usual error classes.

export type SimErrorKind =
  | 'unauthorized'
  | 'rate_limited'
  | 'unavailable'
  | 'server_error'
  | 'invalid_request'
  | 'not_found'
  | 'too_large'
  | 'method_not_allowed'

export type ErrorFamily = 'openai' | 'anthropic'

interface Row {
  readonly status: number
  readonly openaiType: string
  readonly openaiCode: string | null
  readonly anthropicType: string
  readonly message: string
}

export const SIM_ERRORS: Readonly<Record<SimErrorKind, Row>> = Object.freeze({
  unauthorized: { status: 401, openaiType: 'invalid_request_error', openaiCode: 'invalid_api_key', anthropicType: 'authentication_error', message: 'sim: missing or wrong API key' },
  rate_limited: { status: 429, openaiType: 'requests', openaiCode: 'rate_limit_exceeded', anthropicType: 'rate_limit_error', message: 'sim: rate limit reached (simulated)' },
  unavailable: { status: 503, openaiType: 'server_error', openaiCode: 'service_unavailable', anthropicType: 'overloaded_error', message: 'sim: the model is overloaded (simulated)' },
  server_error: { status: 500, openaiType: 'server_error', openaiCode: 'server_error', anthropicType: 'api_error', message: 'sim: internal error (simulated)' },
  invalid_request: { status: 400, openaiType: 'invalid_request_error', openaiCode: null, anthropicType: 'invalid_request_error', message: 'sim: the request body is not a JSON object' },
  not_found: { status: 404, openaiType: 'invalid_request_error', openaiCode: 'unknown_url', anthropicType: 'not_found_error', message: 'sim: no such route' },
  too_large: { status: 413, openaiType: 'invalid_request_error', openaiCode: 'request_too_large', anthropicType: 'request_too_large', message: 'sim: request body too large' },
  method_not_allowed: { status: 405, openaiType: 'invalid_request_error', openaiCode: 'method_not_allowed', anthropicType: 'invalid_request_error', message: 'sim: method not allowed' },
})

export function errorBody(family: ErrorFamily, kind: SimErrorKind): string {
  const row = SIM_ERRORS[kind]
  if (family === 'anthropic') {
    return JSON.stringify({ type: 'error', error: { type: row.anthropicType, message: row.message } })
  }
  return JSON.stringify({ error: { message: row.message, type: row.openaiType, param: null, code: row.openaiCode } })
}
