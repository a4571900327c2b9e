// The fastify application of one HTTP worker.

import diagnosticsChannel from 'node:diagnostics_channel'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import { nodeHttp } from '../src/net/node-http.ts'
import { SluiceError } from '../src/errors.ts'
import type { Ledger } from '../src/ledger/ledger.ts'
import type { Config } from '../src/config/schema.ts'
import type { Logger } from 'pino'
import { lineWriter } from '../src/log.ts'
import { Router } from '../src/routing.ts'
import { ParserPool } from '../src/json/pool.ts'
import { Admission } from './admission.ts'
import { Authenticator } from './auth.ts'
import { Signer } from '../src/sse/sign.ts'
import { directExchanges, registerRoutes } from './routes.ts'
import { registerTestHooks } from './test-hooks.ts'
import { TurnPins } from './turns.ts'
import { Background } from './background.ts'
import { Exemplars } from './exemplars.ts'
import type { ExchangeDeps } from './deps.ts'
import { registerEventStream, SessionEvents } from './event-stream.ts'
import { registerNonBlocking } from './nonblocking.ts'
import { refuseReply } from './reply.ts'
import { registerRpc } from './rpc.ts'
import { EventRing } from '../src/events/ring.ts'
import { ConversationStore } from '../src/state/store.ts'
import { VERSION } from '../src/version.ts'
import { startTracing, tracingFromEnv } from '../src/telemetry/tracing.ts'
import { Upstreams, type UpstreamHooks } from './upstream.ts'
import { RG_UPSTREAM_WAITS } from '../src/ledger/layout.ts'
import { missingHost, onCheckExpectation, onClientError } from './framing.ts'
import { MAX_SESSION_ID } from './session-id.ts'

export interface AppDeps {
  config: Config
  ledger: Ledger
  /** The session event ring's buffer (src/events/ring.ts). */
  events: SharedArrayBuffer
  /** The conversation-state store's buffer (src/state/store.ts); null when limits turn it off. */
  continuations?: SharedArrayBuffer | null
  testHooks: boolean
  simUrl: string | null
  signingKey: Buffer
  log: Logger
  /** A parser thread retired idle has exited (its memory is back with the process). */
  onParserRetired?: () => void
}

export interface App {
  fastify: FastifyInstance
  admission: Admission
  exchange: ExchangeDeps
  /** Closes what the app owns beyond fastify: upstream pools, the parser pool. */
  close (): Promise<void>
}

const KEEP_ALIVE_MS = 30_000

/** fastify's compiler factories, for a server whose routes carry no schema (see buildApp). */
function noSchemas (): (route: { method?: string, url?: string }) => never {
  return (route) => {
    throw new Error(`${route.method ?? ''} ${route.url ?? ''}: sluice's routes carry no fastify schema (worker/app.ts); parse the body on the exchange path instead`)
  }
}

/**
 * fastify's `schemaController` option for sluice's server: no ajv, no fast-json-stringify
 * (see buildApp). Exported for its test.
 */
export const NO_SCHEMAS = { compilersFactory: { buildValidator: noSchemas, buildSerializer: noSchemas } }

export async function buildApp (deps: AppDeps): Promise<App> {
  // Traces: only when the OTEL_* variables configure an exporter (validated by the primary).
  const traceConfig = tracingFromEnv(process.env, deps.config.telemetry.serviceName)
  const tracing = traceConfig ? await startTracing(traceConfig, { 'service.version': VERSION, 'service.instance.id': deps.config.instanceId, 'sluice.worker': deps.ledger.row }) : null
  // The HTTP server's options. Fastify is given the server (serverFactory below), so they are
  // passed to node:http here, not through fastify's `http` option.
  const http = {
    // Node's empty 400 for a missing Host is replaced by the catalogue's (onRequest below).
    requireHostHeader: false,
    // Node refuses a headersTimeout above requestTimeout (300 s by default) at creation;
    // requestTimeout is 0 (off) anyway, as on fastify below.
    requestTimeout: 0,
    headersTimeout: deps.config.limits.headersTimeoutMs,
    // Node checks its request timers on this interval (30 s by default).
    connectionsCheckingInterval: Math.max(50, Math.min(30_000, Math.ceil(deps.config.limits.headersTimeoutMs / 4))),
  }
  // The exchange routes are served from the server's 'request' event ahead of fastify, once the
  // exchange deps exist (routes.ts directExchanges); every other request, and any exchange
  // request fastify must judge, goes to fastify's handler.
  let direct: ((req: IncomingMessage, res: ServerResponse) => boolean) | null = null
  const fastify = Fastify({
    serverFactory: (handler) => {
      const server = nodeHttp.createServer(http, (req, res) => { if (direct === null || !direct(req, res)) handler(req, res) })
      // What fastify sets on a server it makes itself (lib/server.js getServerInstance).
      server.keepAliveTimeout = KEEP_ALIVE_MS
      server.requestTimeout = 0
      server.setTimeout(0)
      return server
    },
    logger: false,
    // No route has a fastify schema: a body is read and parsed by the exchange path under the
    // parse permit (worker/exchange.ts), a reply is serialised by the route. Left default,
    // fastify builds its ajv and fast-json-stringify compilers at creation (ajv, ajv-formats,
    // fast-uri, ...: ~50 ms of an unbundled start under one vCPU and ~3.5 MB of heap, for
    // nothing); a route given a schema now fails at registration, naming it.
    schemaController: NO_SCHEMAS,
    // The gate, not the HTTP server, bounds concurrency; keep the server's own timeouts out
    // of the way of long streams, but drop idle keep-alive sockets.
    keepAliveTimeout: KEEP_ALIVE_MS,
    requestTimeout: 0,
    bodyLimit: deps.config.limits.maxBodyBytes,
    // While closing, requests still reach the routes, which refuse with the catalogue's
    // shutting_down (fastify's own 503 would carry no code).
    return503OnClosing: false,
    // On close every connection is cut, but only after the preClose hook: by then every
    // exchange has actually released (Background.close) and every event stream has ended, so
    // what is left is idle keep-alive sockets (or a stray GET) that must not hold the drain.
    forceCloseConnections: true,
    // A path parameter is a session id (or an exchange id): as long as the header accepts
    // (decoded length). Longer ones come to frameworkErrors and are refused as invalid_request.
    routerOptions: { maxParamLength: MAX_SESSION_ID },
    frameworkErrors: (err, req, reply) => {
      const code = (err as { code?: unknown }).code
      const se = code === 'FST_ERR_BAD_URL'
        ? new SluiceError('invalid_request', { field: 'path', reason: 'the path is not a valid percent-encoding' }, 'the request path is not valid')
        : code === 'FST_ERR_MAX_PARAM_LENGTH'
          ? new SluiceError('invalid_request', { field: 'path', reason: `a session id is 1 to ${MAX_SESSION_ID} printable characters` }, 'invalid session id in path')
          : SluiceError.from(err)
      refuseReply(deps.ledger, reply, se)
    },
    clientErrorHandler: (err, socket) => onClientError(deps.ledger, { headersTimeoutMs: deps.config.limits.headersTimeoutMs, maxHeaderBytes: nodeHttp.maxHeaderSize }, err, socket),
  })
  fastify.server.on('checkExpectation', (req, res) => onCheckExpectation(deps.ledger, req, res))
  fastify.addHook('onRequest', (req, reply, done) => {
    const err = missingHost(req.raw)
    if (err === null) { done(); return }
    reply.header('connection', 'close')
    refuseReply(deps.ledger, reply, err)
  })
  const admission = new Admission(deps.ledger, deps.config.limits)
  const limits = deps.config.limits
  // The provider sockets undici opens: the last one is kept as an exemplar (worker/exemplars.ts).
  const exemplars = new Exemplars()
  const connected = diagnosticsChannel.channel('undici:client:connected')
  const onConnected = (msg: unknown): void => { exemplars.keepUpstreamSocket((msg as { socket: Socket }).socket) }
  connected.subscribe(onConnected)
  fastify.addHook('onClose', (_instance, done) => { connected.unsubscribe(onConnected); done() })
  const exchange: ExchangeDeps = {
    config: deps.config,
    ledger: deps.ledger,
    admission,
    auth: new Authenticator(deps.config.keys),
    router: new Router(deps.config.providers, deps.simUrl, process.env),
    upstreams: new Upstreams(deps.config.upstream, { providers: deps.ledger.providers, log: (fields, msg) => deps.log.info(fields, msg), onConnectionWait: connectionWaitReporter(deps) }),
    parser: new ParserPool({ threads: limits.parserThreads, heapMb: limits.parserHeapMb, youngGenMb: limits.parserYoungGenMb, idleMs: limits.parserIdleMs, onRetired: deps.onParserRetired }),
    turns: new TurnPins(deps.ledger),
    ring: new EventRing(deps.events, deps.ledger.row),
    continuations: deps.continuations ? new ConversationStore(deps.continuations, deps.ledger.row) : null,
    background: new Background(),
    tracing,
    signer: new Signer(deps.signingKey),
    log: lineWriter(deps.log, 'exchange'),
    exemplars,
  }

  fastify.setErrorHandler((err: unknown, _req: FastifyRequest, reply: FastifyReply) => {
    const e = err as { code?: unknown; statusCode?: number }
    const se = err instanceof SluiceError
      ? err
      : e.code === 'FST_ERR_CTP_BODY_TOO_LARGE'
        ? new SluiceError('payload_too_large', { limit: deps.config.limits.maxBodyBytes })
        : e.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || e.code === 'FST_ERR_CTP_EMPTY_JSON_BODY'
          ? new SluiceError('invalid_json')
          // Every route takes any well-formed media type (the body is read as JSON whatever
          // it says); a header that is not one (`a`, empty, a list, `;`) is the caller's.
          : e.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE'
            ? new SluiceError('invalid_request', { header: 'content-type', reason: 'not a media type (type/subtype)' }, 'the Content-Type header is malformed')
            : SluiceError.from(err)
    refuseReply(deps.ledger, reply, se)
  })
  fastify.setNotFoundHandler((_req, reply) => {
    refuseReply(deps.ledger, reply, new SluiceError('not_found'))
  })

  registerRoutes(fastify, exchange)
  direct = directExchanges(exchange)
  registerNonBlocking(fastify, exchange, new SessionEvents(exchange.ring))
  registerEventStream(fastify, exchange)
  registerRpc(fastify, exchange)
  // Background exchanges finish (their events still reach subscribers), then the long-lived
  // event streams end: closing the server would otherwise wait for them forever.
  fastify.addHook('preClose', async () => { await exchange.background.close() })
  if (deps.testHooks) registerTestHooks(fastify, deps.ledger, admission, exchange.background, exchange.parser, exemplars)
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

/**
 * Every wait for a provider connection is counted (sluice_upstream_connection_waits_total) and
 * logged, at most one warning per second per origin with the count since the last one.
 */
function connectionWaitReporter (deps: { ledger: Ledger; log: Logger }): NonNullable<UpstreamHooks['onConnectionWait']> {
  const last = new Map<string, { at: number; since: number }>()
  return (origin, stats) => {
    deps.ledger.gauge(RG_UPSTREAM_WAITS, 1)
    const now = Date.now()
    const l = last.get(origin) ?? { at: 0, since: 0 }
    l.since++
    if (now - l.at >= 1000) {
      deps.log.warn({ origin, ...stats, waitsSinceLastWarning: l.since }, 'waiting for a provider connection: the pool has none free (upstream.connections)')
      l.at = now
      l.since = 0
    }
    last.set(origin, l)
  }
}
