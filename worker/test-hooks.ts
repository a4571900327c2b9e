// Test-only routes, registered only when the primary was started with SLUICE_TEST_HOOKS=1.
// They drive the real admission path and the real ledger so tests can hold permits and
// bytes in a worker, then make that worker busy-loop, run out of heap, or exit.

import diagnosticsChannel from 'node:diagnostics_channel'
import type { FastifyInstance } from 'fastify'
import { getHeapSnapshot } from 'node:v8'
import type { ParserPool } from '../src/json/pool.ts'
import type { Ledger } from '../src/ledger/ledger.ts'
import type { Admission } from './admission.ts'
import { SluiceError } from '../src/errors.ts'
import { refuseReply } from './reply.ts'
import { ExchangeScope } from './scope.ts'
import type { Exemplars } from './exemplars.ts'

export function registerTestHooks (fastify: FastifyInstance, ledger: Ledger, admission: Admission, background: { track (p: Promise<unknown>): void }, parser: ParserPool, exemplars: Exemplars): void {
  // Admit one exchange, reserve `bytes`, stream one line, then hold everything until the
  // client goes away or `ms` passes. The holdings are released when the response closes.
  fastify.get<{ Querystring: { bytes?: string; ms?: string } }>('/_test/hold', async (req, reply) => {
    const ac = new AbortController()
    const res = reply.raw
    const onClose = (): void => ac.abort()
    res.once('close', onClose)
    const holdings = new ExchangeScope(ledger, ['processing', 'http'])
    try {
      await admission.admit(holdings, ac.signal)
    } catch (err) {
      res.off('close', onClose)
      holdings.discard()
      refuseReply(ledger, reply, SluiceError.from(err))
      return reply
    }
    holdings.settleOnClose(res)
    // Like an exchange, a hold is waited for by a drain (connections are cut after it).
    background.track(new Promise<void>((resolve) => holdings.onRelease(resolve)))
    try {
      holdings.reserve(Number(req.query.bytes ?? 0))
    } catch (err) {
      holdings.settle('processing')
      refuseReply(ledger, reply, SluiceError.from(err))
      return reply
    }
    reply.hijack()
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.write(`held row=${ledger.row} bytes=${holdings.heldBytes}\n`)
    const ms = Number(req.query.ms ?? 60_000)
    const timer = setTimeout(() => res.end('released\n'), ms)
    res.once('close', () => clearTimeout(timer))
    holdings.settle('processing')
    return reply
  })

  // Take the parse permit (waiting for it like any exchange) and hold it for `ms`: exchanges
  // in every worker then find it taken and wait (the relays' waiting paths).
  fastify.get<{ Querystring: { ms?: string } }>('/_test/hold-parse', async (req, reply) => {
    await ledger.parse.acquire({})
    const ms = Number(req.query.ms ?? 50)
    setTimeout(() => ledger.parse.release(), ms)
    return reply.send({ row: ledger.row, heldMs: ms })
  })

  // Block this worker's event loop for `ms` (a stuck worker).
  fastify.get<{ Querystring: { ms?: string } }>('/_test/busy', (req, reply) => {
    reply.send({ row: ledger.row, busyMs: Number(req.query.ms ?? 1000) })
    setImmediate(() => {
      const end = Date.now() + Number(req.query.ms ?? 1000)
      while (Date.now() < end) { /* spin */ }
    })
  })

  // Grow the JS heap until the worker dies of its heap limit.
  // Each dies only once its own reply has gone out.
  fastify.get('/_test/oom', (_req, reply) => {
    reply.raw.once('finish', () => setImmediate(() => {
      const keep: unknown[] = []
      for (;;) keep.push({ a: new Array(1024).fill(keep.length), s: 'x'.repeat(64) + keep.length })
    }))
    reply.send({ row: ledger.row, dying: 'oom' })
  })

  // Exit the worker thread outright.
  fastify.get('/_test/exit', (_req, reply) => {
    reply.raw.once('finish', () => setImmediate(() => process.exit(3)))
    reply.send({ row: ledger.row, dying: 'exit' })
  })

  // This worker's parser pool: which bodies hopped to a parser thread (limits.inWorkerParseBytes).
  fastify.get('/_test/parser', async () => ({ row: ledger.row, ...parser.stats(), loaded: parser.loaded }))

  // What the exemplars hold (worker/exemplars.ts): the kept request's authorization header as
  // it is now (scrubbed), whether a provider's answer and socket are kept.
  fastify.get('/_test/exemplars', async () => {
    const k = exemplars.kept
    return { row: ledger.row, exchange: k.exchange !== null, authorization: k.exchange?.req.headers.authorization ?? null, upstream: k.upstream !== null, upstreamSocket: k.upstreamSocket !== null }
  })

  // This worker's heap snapshot (v8.getHeapSnapshot), streamed: a test searches it for secrets.
  fastify.get('/_test/heap-snapshot', (_req, reply) => {
    reply.header('content-type', 'application/json').send(getHeapSnapshot())
  })

  // How many requests fastify's router has handed to a route handler (its tracing channel):
  // a test tells an exchange served ahead of fastify (routes.ts directExchanges) from one
  // fastify served. Subscribed only here, so the data path publishes to nobody.
  let fastifyHandled = 0
  diagnosticsChannel.subscribe('tracing:fastify.request.handler:start', () => { fastifyHandled++ })
  fastify.get('/_test/fastify-handled', async () => ({ count: fastifyHandled }))

  // The Node builtins this thread has loaded (process.moduleLoadList): a test checks that the
  // compiled worker keeps out what it never uses (node:http2, node:https, tls).
  fastify.get('/_test/builtins', async () => ({ row: ledger.row, builtins: (process as unknown as { moduleLoadList: string[] }).moduleLoadList.filter((m) => m.startsWith('NativeModule ')).map((m) => m.slice('NativeModule '.length)) }))

  fastify.get('/_test/whoami', async () => ({ row: ledger.row, held: ledger.exchange.heldByMe, bytes: ledger.storage.heldByMe }))
}
