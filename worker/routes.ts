// The blocking data-plane routes: the HTTP response carries the exchange's result. Exchange
// routes take the raw request: the body stays unread until the exchange holds a permit
// (queued requests keep their bodies in the socket: backpressure).
//
//   POST /v1/chat/completions | /v1/responses | /v1/messages | /v1/messages/count_tokens
//        -> accept (worker/accept.ts) -> runExchange (worker/exchange.ts)
//   GET  /v1/models (in the caller's protocol: src/protocols/models.ts), /v1/capabilities (authenticated reads)

import { randomUUID } from 'node:crypto'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyInstance } from 'fastify'
import { capabilities } from '../src/capabilities.ts'
import { SluiceError } from '../src/errors.ts'
import { modelListStyle, renderModelList } from '../src/protocols/models.ts'
import { ROUTE_PATH, ROUTES, type Route } from '../src/protocols/routes.ts'
import { VERSION } from '../src/version.ts'
import { accept } from './accept.ts'
import { newRecord, runIdentity, type ExchangeDeps } from './deps.ts'
import { refusedAtTheDoor, runExchange } from './exchange.ts'
import { missingHost } from './framing.ts'
import { refuseReply } from './reply.ts'
import { sessionIdOf } from './session-id.ts'

export function registerRoutes (fastify: FastifyInstance, deps: ExchangeDeps): void {
  void fastify.register(async (scope) => {
    // No body parsing here: every content type reaches the handler unread.
    scope.removeAllContentTypeParsers()
    const unread = (_req: unknown, _payload: unknown, done: (err: null, body: undefined) => void): void => done(null, undefined)
    // fastify caches the parser it found per content type, except the catch-all's: with '*'
    // alone, every request parsed its content-type header anew (a ContentType object, a
    // string, four lookups). Named, the one every client sends is a cache hit.
    scope.addContentTypeParser('application/json', unread)
    scope.addContentTypeParser('*', unread)
    for (const route of ROUTES) {
      scope.post(ROUTE_PATH[route], (req, reply) => {
        reply.hijack()
        const run = serveBlocking(deps, route, req.raw, reply.raw)
        deps.background.track(run)
        return run
      })
    }
  })

  fastify.get('/v1/models', (req, reply) => {
    let key
    try {
      key = deps.auth.authenticate(req.headers, req.raw.socket)
    } catch (err) {
      refuseReply(deps.ledger, reply, SluiceError.from(err))
      return reply
    }
    // In the caller's protocol: Anthropic's list when it sends anthropic-version, else OpenAI's.
    const models = deps.router.listModels(key).map((id) => ({ id, ownedBy: providerOf(deps, id) }))
    return reply.send(renderModelList(models, modelListStyle(req.headers)))
  })

  fastify.get('/v1/capabilities', (req, reply) => {
    try {
      deps.auth.authenticate(req.headers, req.raw.socket)
    } catch (err) {
      refuseReply(deps.ledger, reply, SluiceError.from(err))
      return reply
    }
    return reply.send(capabilities(deps.config, VERSION))
  })
}

const DIRECT_ROUTE: ReadonlyMap<string, Route> = new Map(ROUTES.map((route) => [ROUTE_PATH[route], route]))
/** The media types every client sends, well formed by construction: any other (or none) goes
 *  through fastify, whose content-type step refuses a malformed one with its catalogue code. */
const DIRECT_TYPE = /^application\/json(?:[ \t]*;[ \t]*charset=(?:utf-8|"utf-8"))?$/i

/**
 * The exchange routes served straight from the HTTP server's 'request' event, ahead of
 * fastify (app.ts serverFactory): what fastify does for them (route lookup, its Request and
 * Reply, the onRequest hook, the content-type step, hijack) was ~25-35 us of a ~300-400 us
 * request path on a 1-vCPU host (docs/benchmarks.md), and none of it decides anything here. Only a request whose answer
 * fastify would not change is taken: POST, the exact path (no query string, no encoding),
 * a Host header where HTTP/1.1 needs one, and a well-formed JSON content type. It returns
 * false for every other request, which fastify then serves as before, refusals included.
 */
export function directExchanges (deps: ExchangeDeps): (req: IncomingMessage, res: ServerResponse) => boolean {
  return (req, res) => {
    if (req.method !== 'POST') return false
    const route = DIRECT_ROUTE.get(req.url ?? '')
    if (route === undefined) return false
    const type = req.headers['content-type']
    if (type === undefined || !DIRECT_TYPE.test(type) || missingHost(req) !== null) return false
    deps.background.track(serveBlocking(deps, route, req, res))
    return true
  }
}

/** One blocking exchange: accepted (or refused at the door), then run to its release. */
async function serveBlocking (deps: ExchangeDeps, route: Route, req: IncomingMessage, res: ServerResponse): Promise<unknown> {
  const started = performance.now()
  const exchangeId = randomUUID()
  const known: { keyName?: string | null; sessionId?: string | null } = {}
  let accepted
  try {
    // No abort signal: acceptance is synchronous, so the caller cannot go away during it, and
    // runExchange watches the response from its first line.
    accepted = accept(deps, req, { mode: 'blocking', exchangeId, sessionId: () => sessionIdOf(req), known })
  } catch (err) {
    const rec = newRecord({ exchangeId, runId: runIdentity(req), route, mode: 'blocking', keyName: known.keyName ?? null, sessionId: known.sessionId ?? null })
    refusedAtTheDoor(deps, req, res, rec, SluiceError.from(err), started)
    return rec
  }
  return runExchange(deps, accepted, route, req, res)
}

function providerOf (deps: ExchangeDeps, model: string): string {
  try {
    return deps.router.resolve(model).config.name
  } catch {
    return 'sluice'
  }
}
