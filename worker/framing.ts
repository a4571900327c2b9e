// HTTP framing refusals: what Node's HTTP parser (or the server around it) refuses before any
// route runs. Node and fastify would answer these in their own shapes (`{"error","message",
// "statusCode"}`) or with an empty 400/417; here every one gets the catalogue's shape
// `{ code, error, ...details }`, a Content-Length, and `Connection: close`.
//
// None of them has authenticated anything, so none says anything about keys, routes or
// exchanges: the code, the fixed message and, for a parser fault, Node's fixed parser code.
//
// - 'clientError' (the parser refused the bytes; there is no request object): the answer is
//   written raw on the socket, then the socket is destroyed. When a response of that socket
//   has already sent its headers (a fault later in a pipelined or keep-alive stream), nothing
//   can be written that the client would read as an answer: the socket is only destroyed.
//   A request whose body was being read (a bad chunk mid-body) loses its socket, so its
//   exchange is released as a hang-up.
// - 'checkExpectation' (an Expect other than 100-continue): 417, instead of Node's empty one.
// - a missing Host on HTTP/1.1: Node's own check (requireHostHeader) answers an empty 400, so
//   it is switched off and done in an onRequest hook instead (`missingHost`).

import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { SluiceError } from '../src/errors.ts'
import type { Ledger } from '../src/ledger/ledger.ts'
import { sendJson } from './reply.ts'

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  408: 'Request Timeout',
  417: 'Expectation Failed',
  431: 'Request Header Fields Too Large',
}

/** The catalogue refusal for a parser error, or null when there is nobody to answer. */
export function clientErrorRefusal (err: { code?: unknown }, limits: { headersTimeoutMs: number; maxHeaderBytes: number }): SluiceError | null {
  const code = typeof err.code === 'string' ? err.code : ''
  if (code === 'ECONNRESET' || code === 'EPIPE') return null
  if (code === 'HPE_HEADER_OVERFLOW') return new SluiceError('http_headers_too_large', { limit: limits.maxHeaderBytes })
  // requestTimeout is 0 (off), so Node's only request timer is headersTimeout.
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') return new SluiceError('http_headers_timeout', { limitMs: limits.headersTimeoutMs })
  // llhttp's codes are fixed names (HPE_INVALID_CONTENT_LENGTH, ...): safe to name.
  return new SluiceError('http_malformed', /^HPE_[A-Z_]{1,40}$/.test(code) ? { reason: code } : {})
}

/** The raw HTTP/1.1 response for a refusal written straight to a socket. */
export function rawResponse (err: SluiceError): string {
  const body = JSON.stringify(err.toBody())
  return `HTTP/1.1 ${err.status} ${STATUS_TEXT[err.status] ?? 'Error'}\r\n` +
    'content-type: application/json\r\n' +
    `content-length: ${Buffer.byteLength(body)}\r\n` +
    'connection: close\r\n\r\n' + body
}

/** fastify's clientErrorHandler. */
export function onClientError (ledger: Ledger, limits: { headersTimeoutMs: number; maxHeaderBytes: number }, err: { code?: unknown }, socket: Socket): void {
  const refusal = socket.destroyed ? null : clientErrorRefusal(err, limits)
  if (refusal !== null) {
    ledger.countRefusal(refusal.code)
    // Node's own rule (lib/_http_server.js socketOnError): answer only if no response of this
    // socket has started, else the client would read our bytes as part of that one.
    const inFlight = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage
    if (socket.writable && !(inFlight?.headersSent ?? false)) socket.write(rawResponse(refusal))
  }
  socket.destroy()
}

/** The server's 'checkExpectation' listener: an Expect Node does not handle. */
export function onCheckExpectation (ledger: Ledger, _req: IncomingMessage, res: ServerResponse): void {
  const err = new SluiceError('http_expectation_failed')
  ledger.countRefusal(err.code)
  sendJson(res, err.status, err.toBody(), { connection: 'close' })
}

/** RFC 9112 3.2: an HTTP/1.1 request without Host is a 400. Null when it has one. */
export function missingHost (req: IncomingMessage): SluiceError | null {
  if (req.httpVersionMajor !== 1 || req.httpVersionMinor < 1 || req.headers.host !== undefined) return null
  return new SluiceError('http_malformed', { reason: 'missing Host header' })
}
