// The data-plane routes. Exchange routes take the raw request: the body stays unread until
// the exchange holds a permit (queued requests keep their bodies in the socket: backpressure).

import type { FastifyInstance } from 'fastify'
import { SluiceError } from '../src/errors.ts'
import { runExchange, type ExchangeDeps, type Route } from './exchange.ts'
import { sendError } from './app.ts'

const ROUTES: Array<[string, Route]> = [
  ['/v1/chat/completions', 'chat'],
  ['/v1/responses', 'responses'],
  ['/v1/messages', 'messages'],
  ['/v1/messages/count_tokens', 'count_tokens'],
]

export function registerRoutes (fastify: FastifyInstance, deps: ExchangeDeps): void {
  void fastify.register(async (scope) => {
    // No body parsing here: every content type reaches the handler unread.
    scope.removeAllContentTypeParsers()
    scope.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined))
    for (const [path, route] of ROUTES) {
      scope.post(path, (req, reply) => {
        reply.hijack()
        const run = runExchange(deps, route, req.raw, reply.raw)
        deps.background.track(run)
        return run
      })
    }
  })

  fastify.get('/v1/models', (req, reply) => {
    let key
    try {
      key = deps.auth.authenticate(req.headers)
    } catch (err) {
      sendError(deps.ledger, reply, SluiceError.from(err))
      return reply
    }
    const data = deps.router.listModels(key).map((id) => ({ id, object: 'model', created: 0, owned_by: providerOf(deps, id) }))
    return reply.send({ object: 'list', data })
  })
}

function providerOf (deps: ExchangeDeps, model: string): string {
  try {
    return deps.router.resolve(model).config.name
  } catch {
    return 'sluice'
  }
}
