// JSON-RPC 2.0 at POST /rpc (DESIGN.md "Sessions"): `capabilities`, `session/prompt`
// (blocking: the result is the provider's JSON answer), `session/cancel`.
//
// Every failure has one stable shape, never an unstructured internal error:
//
//   { jsonrpc: '2.0', id, error: { code, message, data: { errorKind, status, retryAfterSeconds, ...details } } }
//
// `data.errorKind` is the catalogue code (prompt_queue_full carries sessionId, limit,
// pendingCount exactly as the HTTP refusal does). `code` is the JSON-RPC number:
//   -32700 parse error (invalid_json)          -32600 invalid request (the envelope)
//   -32601 method not found (not_found)        -32602 invalid params (invalid_request in params)
//   -32001 local capacity  -32002 caller  -32003 provider  -32603 internal_error
// The HTTP status of a JSON-RPC answer is 200 (it is a transport); `Retry-After` is still set
// where a retry can help. The session id is in the params, so the lane check follows the
// bounded read and parse of the envelope (its bytes reserved); it is still synchronous and
// before the exchange is counted. Streaming is not offered here (use non-blocking mode).

import type { IncomingMessage, ServerResponse } from 'node:http'
import { randomUUID } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { capabilities } from '../src/capabilities.ts'
import { SluiceError, abortCause, catalogue } from '../src/errors.ts'
import type { RpcCall } from '../src/json/prepare.ts'
import { VERSION } from '../src/version.ts'
import { runExchange, runIdentity, type Route } from './exchange.ts'
import { Holdings } from './holdings.ts'
import { logRefused, readEnvelope, type SessionDeps } from './session-routes.ts'
import { closeIfUnread, sendJson } from './reply.ts'
import { checkSessionId, type LaneTicket } from './sessions.ts'
import { CollectingSink, sinkResult } from './sink.ts'
import type { TurnTicket } from './turns.ts'

export const RPC_METHODS = ['capabilities', 'session/prompt', 'session/cancel'] as const

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

export function rpcError (id: RpcCall['id'], err: SluiceError): Record<string, unknown> {
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

export function registerRpc (fastify: FastifyInstance, deps: SessionDeps): void {
  void fastify.register(async (scope) => {
    scope.removeAllContentTypeParsers()
    scope.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined))
    scope.post('/rpc', (request, reply) => {
      reply.hijack()
      return handleRpc(deps, request.raw, reply.raw)
    })
  })
}

async function handleRpc (deps: SessionDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const started = performance.now()
  const known: { keyName?: string; sessionId?: string; route?: string } = {}
  const ac = new AbortController()
  const onClose = (): void => { if (!res.writableFinished) ac.abort() }
  res.once('close', onClose)
  let id: RpcCall['id'] = null
  let holdings: Holdings | null = null
  let lane: LaneTicket | null = null
  let turn: TurnTicket | null = null
  let handedOff = false
  const answer = (value: Record<string, unknown>, err?: SluiceError): void => {
    if (res.headersSent || res.destroyed) return
    if (err) deps.ledger.countRefusal(err.code)
    // A call refused before its body was read to the end (too large, a hang-up) leaves the
    // rest in the socket: close the connection after the answer, as every HTTP refusal does.
    sendJson(res, 200, value, err ? { ...err.headers(), ...closeIfUnread(req) } : {})
  }
  try {
    const key = deps.auth.authenticate(req.headers)
    known.keyName = key.name
    holdings = new Holdings(deps.ledger, ['processing', 'upstream', 'http'])
    const prepared = await readEnvelope(deps, req, holdings, 'rpc', ac.signal)
    const call = prepared.envelope!.rpc!
    id = call.id
    switch (call.method) {
      case 'capabilities':
        answer({ jsonrpc: '2.0', id, result: capabilities(deps.config, VERSION) })
        return
      case 'session/cancel': {
        const sessionId = checkSessionId(call.params.sessionId, 'params.sessionId')
        const eid = call.params.exchangeId
        if (eid !== undefined && (typeof eid !== 'string' || eid.length === 0)) throw new SluiceError('invalid_request', { field: 'params.exchangeId', reason: 'must be a non-empty string' })
        const n = deps.sessions.cancel(key.name, sessionId, typeof eid === 'string' ? eid : null)
        answer({ jsonrpc: '2.0', id, result: { sessionId, cancelled: n } })
        return
      }
      case 'session/prompt':
        break
      default:
        throw new SluiceError('not_found', { method: call.method, methods: RPC_METHODS.join(', ') }, `no JSON-RPC method ${call.method}`)
    }
    const sessionId = checkSessionId(call.params.sessionId, 'params.sessionId')
    known.sessionId = sessionId
    known.route = prepared.envelope?.route
    if (prepared.stream) throw new SluiceError('invalid_request', { field: 'params.body.stream', reason: 'streaming is not offered over JSON-RPC: use POST /v1/sessions/:id/exchanges' })
    if (deps.ledger.draining) throw new SluiceError('shutting_down')
    const exchangeId = randomUUID()
    if (ac.signal.aborted) throw abortCause(ac.signal)
    lane = deps.sessions.enter(key.name, sessionId, exchangeId)
    turn = deps.turns.take(key, runIdentity(req))
    const sink = new CollectingSink({ cap: deps.config.limits.maxOutputBytes, storage: deps.ledger.storage, frameBytes: deps.config.limits.sseFrameBytes })
    handedOff = true
    try {
      const run = runExchange(deps, prepared.envelope!.route as Route, req, sink as unknown as ServerResponse, {
        exchangeId, mode: 'rpc', key, sessionId, lane, turn, holdings, prepared, signal: ac.signal,
      })
      deps.background.track(run)
      const rec = await run
      const r = await sinkResult(sink, rec, deps.ledger.parse, { exchangeId }, ac.signal)
      if (r.ok) {
        answer({ jsonrpc: '2.0', id, result: { exchangeId, sessionId, status: r.status, body: r.body, usage: rec.usage } })
        return
      }
      // The exchange's own refusal (our JSON) keeps its code and details. It was counted by
      // the exchange, unless the exchange went well and only its result did not fit here.
      const err = r.error
      if (rec.code === 'ok') deps.ledger.countRefusal(err.code)
      if (!res.headersSent && !res.destroyed) sendJson(res, 200, rpcError(id, err), err.headers())
    } finally {
      sink.dispose()
    }
  } catch (err) {
    if (!handedOff) lane?.release() // before the caller can see the error
    const se = ac.signal.aborted ? abortCause(ac.signal) : SluiceError.from(err)
    const rpcId = se.details.rpcId
    if (id === null && (typeof rpcId === 'string' || typeof rpcId === 'number')) id = rpcId
    answer(rpcError(id, se), se)
    // A call refused before its exchange started has no exchange line of its own.
    if (!handedOff) logRefused(deps, req, 'rpc', se, started, known)
  } finally {
    res.off('close', onClose)
    if (!handedOff) {
      turn?.giveBack()
      lane?.release()
      if (holdings) { holdings.settle('processing'); holdings.settle('upstream'); holdings.settle('http') }
    }
  }
}

/** For the README and tests: the JSON-RPC number of each catalogue code. */
export function rpcCodeTable (): Record<string, number> {
  const out: Record<string, number> = {}
  for (const code of Object.keys(catalogue) as Array<keyof typeof catalogue>) out[code] = rpcErrorCode(new SluiceError(code))
  return out
}
