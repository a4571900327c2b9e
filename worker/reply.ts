// The one reply path: every JSON answer and every refusal of the data plane is written here.
//
// A refusal (or a failure before the first downstream byte) has one body shape on every
// route, seed 002's: `{ code, error, ...details }`, with the catalogue status and
// `Retry-After` where a retry can help (DESIGN.md "Errors"). On a blocking exchange route it
// also names the exchange (`exchangeId`, `x-sluice-exchange-id`), except for
// prompt_queue_full, which issues no id; a provider's failure carries its signed failure
// record. Over JSON-RPC the same refusal is a JSON-RPC error object (HTTP 200) whose
// `data.errorKind` is the code. Every refusal written here is counted once in the worker's
// ledger row (sluice_refusals_total{code}).
//
// A body the gateway never read (a refusal before or during the read) is not drained: the
// connection closes after the answer (`Connection: close`).

import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyReply } from 'fastify'
import type { SluiceError } from '../src/errors.ts'
import type { Ledger } from '../src/ledger/ledger.ts'
import { buildFailureRecord, type FailureRecord, type Signer } from '../src/sse/sign.ts'
import type { ExchangeRecord } from './deps.ts'

export type RpcId = string | number | null

export function sendJson (res: ServerResponse, status: number, value: unknown, extra: Record<string, string> = {}): void {
  const text = JSON.stringify(value)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...extra })
  res.end(text)
}

/** A body we never read (whole) is not drained: close the connection after the answer instead. */
export function closeIfUnread (req: IncomingMessage | null): Record<string, string> {
  return req && !req.readableEnded ? { connection: 'close' } : {}
}

export interface RefuseOptions {
  /** The request whose body may still be in the socket. */
  unread?: IncomingMessage | null
  /** Blocking exchange routes: the exchange the refusal belongs to. */
  exchange?: { rec: ExchangeRecord; signer: Signer } | null
  /** JSON-RPC: answer as a JSON-RPC error with this id. */
  rpcId?: RpcId
  /** Already counted where it happened (an exchange's own refusal, relayed as a result). */
  counted?: boolean
}

/**
 * Writes one refusal. Counted even when nothing can be written any more (the response was
 * already started or the socket is gone): then the connection is cut, never left hanging.
 */
export function refuse (ledger: Ledger, res: ServerResponse, err: SluiceError, opts: RefuseOptions = {}): void {
  if (opts.counted !== true) ledger.countRefusal(err.code)
  if (res.headersSent || res.destroyed) { if (!res.destroyed) res.destroy(); return }
  const close = closeIfUnread(opts.unread ?? null)
  if (opts.rpcId !== undefined) {
    sendJson(res, 200, rpcError(opts.rpcId, err), { ...err.headers(), ...close })
    return
  }
  const { body, headers } = refusal(err, opts.exchange ?? null)
  sendJson(res, err.status, body, { ...headers, ...close })
}

/** A refusal through fastify's reply (routes fastify answers itself: errors, not found, GETs). */
export function refuseReply (ledger: Ledger, reply: FastifyReply, err: SluiceError): void {
  ledger.countRefusal(err.code)
  if (reply.sent || reply.raw.headersSent) return
  // A body still in the socket is not drained: the connection closes after the answer.
  const close: Record<string, string> = reply.request.raw.complete ? {} : { connection: 'close' }
  const { body, headers } = refusal(err, null)
  reply.code(err.status).headers({ ...headers, ...close }).type('application/json').send(body)
}

/** The refusal's body and headers: the catalogue shape, plus the exchange's id and signed record. */
function refusal (err: SluiceError, exchange: RefuseOptions['exchange']): { body: Record<string, unknown>; headers: Record<string, string> } {
  // A session refusal issues no id (seed 002): the exchange was never accepted.
  if (exchange === null || exchange === undefined || err.code === 'prompt_queue_full') return { body: err.toBody(), headers: err.headers() }
  const { rec, signer } = exchange
  const body: Record<string, unknown> = { ...err.toBody(), exchangeId: rec.exchangeId }
  if (err.side === 'provider') {
    const record = failureRecord(err, rec)
    body.record = record
    body.signature = signer.sign(record)
  }
  return { body, headers: { ...err.headers(), 'x-sluice-exchange-id': String(rec.exchangeId) } }
}

/** The failure record of an exchange: what the signed failure tails and refusals carry. */
export function failureRecord (err: SluiceError, rec: ExchangeRecord, relayed = { frames: 0, bytes: 0 }, usage: FailureRecord['usage'] = null): FailureRecord {
  return buildFailureRecord({
    code: err.code,
    message: err.message,
    exchangeId: rec.exchangeId ?? '',
    runId: rec.runId,
    provider: rec.provider ?? '',
    model: rec.model ?? '',
    framesRelayed: relayed.frames,
    bytesRelayed: relayed.bytes,
    usage,
    partial: true,
  })
}

/**
 * JSON-RPC error numbers (DESIGN.md "Sessions", README "JSON-RPC"):
 *   -32700 parse error (invalid_json)          -32600 invalid request (the envelope)
 *   -32601 method not found (not_found)        -32602 invalid params (invalid_request in params)
 *   -32001 local capacity  -32002 caller  -32003 provider  -32603 internal_error
 */
export function rpcErrorCode (err: SluiceError): number {
  if (err.code === 'invalid_json') return -32700
  if (err.code === 'not_found') return -32601
  if (err.code === 'invalid_request') {
    const field = err.details.field
    return typeof field === 'string' && field.startsWith('params') ? -32602 : -32600
  }
  if (err.code === 'internal_error') return -32603
  return err.side === 'local' ? -32001 : err.side === 'provider' ? -32003 : -32002
}

export function rpcError (id: RpcId, err: SluiceError): Record<string, unknown> {
  const { rpcId: _rpcId, ...details } = err.details
  return {
    jsonrpc: '2.0',
    id,
    error: {
      code: rpcErrorCode(err),
      message: err.message,
      data: { errorKind: err.code, status: err.status, retryAfterSeconds: err.retryAfterSeconds, ...details },
    },
  }
}
