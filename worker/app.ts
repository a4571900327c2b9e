// The fastify application of one HTTP worker.

import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import { SluiceError } from '../src/errors.ts'
import type { Ledger } from '../src/ledger/ledger.ts'
import type { Config } from '../src/config/schema.ts'
import type { Logger } from 'pino'
import { Router } from '../src/routing.ts'
import { ParserPool } from '../src/json/pool.ts'
import { Admission } from './admission.ts'
import { Authenticator } from './auth.ts'
import { Signer } from './relay.ts'
import { registerRoutes } from './routes.ts'
import { registerTestHooks } from './test-hooks.ts'
import { TurnPins } from './turns.ts'
import { SessionLanes } from './sessions.ts'
import { Background, registerSessionRoutes, type SessionDeps } from './session-routes.ts'
import { registerRpc } from './rpc.ts'
import { EventRing } from '../src/events/ring.ts'
import { capabilities } from '../src/capabilities.ts'
import { VERSION } from '../src/version.ts'
import { startTracing, tracingFromEnv } from '../src/telemetry/tracing.ts'
import { Upstreams } from './upstream.ts'

export interface AppDeps {
  config: Config
  ledger: Ledger
  /** The session event ring's buffer (src/events/ring.ts). */
  events: SharedArrayBuffer
  testHooks: boolean
  simUrl: string | null
  signingKey: Buffer
  log: Logger
}

export interface App {
  fastify: FastifyInstance
  admission: Admission
  exchange: SessionDeps
  /** Closes what the app owns beyond fastify: upstream pools, the parser pool. */
  close (): Promise<void>
}

export async function buildApp (deps: AppDeps): Promise<App> {
  // Traces: only when the OTEL_* variables configure an exporter (validated by the primary).
  const traceConfig = tracingFromEnv(process.env, deps.config.telemetry.serviceName)
  const tracing = traceConfig ? await startTracing(traceConfig, { 'service.version': VERSION, 'service.instance.id': deps.config.instanceId, 'sluice.worker': deps.ledger.row }) : null
  const fastify = Fastify({
    logger: false,
    // The gate, not the HTTP server, bounds concurrency; keep the server's own timeouts out
    // of the way of long streams, but drop idle keep-alive sockets.
    keepAliveTimeout: 30_000,
    requestTimeout: 0,
    bodyLimit: deps.config.limits.maxBodyBytes,
    // While closing, requests still reach the routes, which refuse with the catalogue's
    // shutting_down (fastify's own 503 would carry no code).
    return503OnClosing: false,
    // On close every connection is cut, but only after the preClose hook: by then every
    // exchange has actually released (Background.close) and every event stream has ended, so
    // what is left is idle keep-alive sockets (or a stray GET) that must not hold the drain.
    forceCloseConnections: true,
  })
  const admission = new Admission(deps.ledger, deps.config.limits)
  const limits = deps.config.limits
  const exchange: SessionDeps = {
    config: deps.config,
    ledger: deps.ledger,
    admission,
    auth: new Authenticator(deps.config.keys),
    router: new Router(deps.config.providers, deps.simUrl, process.env),
    upstreams: new Upstreams(deps.config.upstream),
    parser: new ParserPool({ threads: limits.parserThreads, heapMb: limits.parserHeapMb, youngGenMb: limits.parserYoungGenMb }),
    turns: new TurnPins(deps.ledger),
    sessions: new SessionLanes(deps.ledger),
    ring: new EventRing(deps.events, deps.ledger.row),
    background: new Background(),
    tracing,
    signer: new Signer(deps.signingKey),
    log: (rec) => deps.log.info(rec, 'exchange'),
  }

  fastify.setErrorHandler((err: unknown, _req: FastifyRequest, reply: FastifyReply) => {
    const e = err as { code?: unknown; statusCode?: number }
    const se = err instanceof SluiceError
      ? err
      : e.code === 'FST_ERR_CTP_BODY_TOO_LARGE'
        ? new SluiceError('payload_too_large', { limit: deps.config.limits.maxBodyBytes })
        : e.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || e.code === 'FST_ERR_CTP_EMPTY_JSON_BODY'
          ? new SluiceError('invalid_json')
          : SluiceError.from(err)
    sendError(deps.ledger, reply, se)
  })
  fastify.setNotFoundHandler((_req, reply) => {
    sendError(deps.ledger, reply, new SluiceError('not_found'))
  })

  registerRoutes(fastify, exchange)
  registerSessionRoutes(fastify, exchange)
  registerRpc(fastify, exchange)
  fastify.get('/v1/capabilities', (req, reply) => {
    try {
      exchange.auth.authenticate(req.headers)
    } catch (err) {
      sendError(deps.ledger, reply, SluiceError.from(err))
      return reply
    }
    return reply.send(capabilities(deps.config, VERSION))
  })
  // Background exchanges finish (their events still reach subscribers), then the long-lived
  // event streams end: closing the server would otherwise wait for them forever.
  fastify.addHook('preClose', async () => { await exchange.background.close() })
  if (deps.testHooks) registerTestHooks(fastify, deps.ledger, admission, exchange.background)
  return {
    fastify,
    admission,
    exchange,
    async close () {
      // Background (non-blocking) exchanges still use the pools: they finish first.
      await exchange.background.close()
      await Promise.all([exchange.upstreams.close(), exchange.parser.close(), tracing?.shutdown()])
    },
  }
}

/** The one refusal path: catalogue status, `Retry-After` where a retry can help, counted. */
export function sendError (ledger: Ledger, reply: FastifyReply, err: SluiceError): void {
  ledger.countRefusal(err.code)
  if (reply.sent || reply.raw.headersSent) return
  reply.code(err.status).headers(err.headers()).type('application/json').send(err.toBody())
}
