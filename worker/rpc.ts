// JSON-RPC 2.0 at POST /rpc (DESIGN.md "Sessions"): `capabilities`, `session/prompt`
// (blocking: the result is the provider's JSON answer), `session/cancel`.
//
// Every failure has one stable shape, never an unstructured internal error:
//
//   { jsonrpc: '2.0', id, error: { code, message, data: { errorKind, status, retryAfterSeconds, ...details } } }
//
// `data.errorKind` is the catalogue code (prompt_queue_full carries sessionId, limit,
// pendingCount exactly as the HTTP refusal does); the numbers are in worker/reply.ts
// (rpcErrorCode). The HTTP status of a JSON-RPC answer is 200 (it is a transport);
// `Retry-After` is still set where a retry can help. The session id is in the params, so the
// envelope is read (bounded, its bytes reserved in the exchange's scope) and parsed before
// acceptance (worker/accept.ts), which is still synchronous and before the exchange is
// counted. Streaming is not offered here (use non-blocking mode).

import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyInstance } from 'fastify'
import { capabilities } from '../src/capabilities.ts'
import { SluiceError, abortCause } from '../src/errors.ts'
import type { Route } from '../src/protocols/routes.ts'
import { VERSION } from '../src/version.ts'
import { accept } from './accept.ts'
import { newRecord, runIdentity, type ExchangeDeps } from './deps.ts'
import { readEnvelope, refusedAtTheDoor, runExchange } from './exchange.ts'
import { cancelInLane } from './lane-ticket.ts'
import { closeIfUnread, refuse, type RpcId } from './reply.ts'
import { checkSessionId } from './session-id.ts'
import { ExchangeScope } from './scope.ts'
import { CollectingSink, sinkResult, withRawMember } from './sink.ts'

export const RPC_METHODS = ['capabilities', 'session/prompt', 'session/cancel'] as const

export function registerRpc (fastify: FastifyInstance, deps: ExchangeDeps): void {
  void fastify.register(async (scope) => {
    scope.removeAllContentTypeParsers()
    scope.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined))
    scope.post('/rpc', (request, reply) => {
      reply.hijack()
      return handleRpc(deps, request.raw, reply.raw)
    })
  })
}

/** A JSON-RPC result, written as JSON text (a provider's answer is embedded unparsed). */
function sendResult (res: ServerResponse, req: IncomingMessage, id: RpcId, resultText: string): void {
  if (res.headersSent || res.destroyed) return
  const text = `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":${resultText}}`
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...closeIfUnread(req) })
  res.end(text)
}

async function handleRpc (deps: ExchangeDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const started = performance.now()
  const known: { keyName?: string | null; sessionId?: string | null; route?: Route | null } = {}
  const ac = new AbortController()
  const onClose = (): void => { if (!res.writableFinished) ac.abort() }
  res.once('close', onClose)
  let id: RpcId = null
  // The envelope's bytes are held from the first byte read; acceptance takes this scope over.
  const scope = new ExchangeScope(deps.ledger)
  let handedOff = false
  try {
    const key = deps.auth.authenticate(req.headers, req.socket)
    known.keyName = key.name
    const prepared = await readEnvelope(deps, req, scope, 'rpc', ac.signal)
    const call = prepared.envelope!.rpc!
    id = call.id
    switch (call.method) {
      case 'capabilities':
        scope.discard()
        sendResult(res, req, id, JSON.stringify(capabilities(deps.config, VERSION)))
        return
      case 'session/cancel': {
        const sessionId = checkSessionId(call.params.sessionId, 'params.sessionId')
        const eid = call.params.exchangeId
        if (eid !== undefined && (typeof eid !== 'string' || eid.length === 0)) throw new SluiceError('invalid_request', { field: 'params.exchangeId', reason: 'must be a non-empty string' })
        const n = cancelInLane(deps.ledger, key.name, sessionId, typeof eid === 'string' ? eid : null)
        scope.discard()
        sendResult(res, req, id, JSON.stringify({ sessionId, cancelled: n }))
        return
      }
      case 'session/prompt':
        break
      default:
        throw new SluiceError('not_found', { method: call.method, methods: RPC_METHODS.join(', ') }, `no JSON-RPC method ${call.method}`)
    }
    known.route = prepared.envelope?.route ?? null
    if (prepared.stream) throw new SluiceError('invalid_request', { field: 'params.body.stream', reason: 'streaming is not offered over JSON-RPC: use POST /v1/sessions/:id/exchanges' })
    const accepted = accept(deps, req, { mode: 'rpc', key, scope, sessionId: () => checkSessionId(call.params.sessionId, 'params.sessionId'), signal: ac.signal, known })
    const { exchangeId, sessionId } = accepted
    const sink = new CollectingSink({ cap: deps.config.limits.maxOutputBytes, bytes: scope, frameBytes: deps.config.limits.sseFrameBytes })
    handedOff = true
    const run = runExchange(deps, accepted, prepared.envelope!.route as Route, req, sink as unknown as ServerResponse, {
      prepared,
      signal: ac.signal,
      // The answer goes out while the exchange still holds everything (its sink's bytes too).
      deliver: (rec) => {
        const r = sinkResult(sink, rec, { exchangeId })
        if (r.ok) {
          sendResult(res, req, id, withRawMember({ exchangeId, sessionId, status: r.status, usage: rec.usage }, 'body', r.raw))
        } else {
          // The exchange's own refusal (our JSON) keeps its code and details. It was counted by
          // the exchange, unless the exchange went well and only its result did not fit here.
          refuse(deps.ledger, res, r.error, { rpcId: id, counted: rec.code !== 'ok' })
        }
        sink.dispose()
      },
    })
    deps.background.track(run)
    await run
  } catch (err) {
    if (handedOff) throw err // runExchange settles everything itself: this would be a bug
    const se = ac.signal.aborted ? abortCause(ac.signal) : SluiceError.from(err)
    // Everything goes back before the caller can see the error.
    if (!scope.isReleased) scope.discard()
    const rpcId = se.details.rpcId
    if (id === null && (typeof rpcId === 'string' || typeof rpcId === 'number')) id = rpcId
    const rec = newRecord({ exchangeId: null, runId: runIdentity(req), route: known.route ?? null, mode: 'rpc', keyName: known.keyName ?? null, sessionId: known.sessionId ?? null })
    refusedAtTheDoor(deps, req, res, rec, se, started, id)
  } finally {
    res.off('close', onClose)
  }
}
