// An HTTP worker thread: attaches to the ledger with its row, serves the data plane on the
// shared port (reusePort), reports its heap, drains on request.

import { parentPort, workerData } from 'node:worker_threads'
import type { PrimaryToWorker, WorkerBoot, WorkerToPrimary } from '../src/control.ts'
import { attachLedger } from '../src/ledger/ledger.ts'
import { createThreadLogger } from '../src/log.ts'
import { buildApp } from './app.ts'
import { SluiceError } from '../src/errors.ts'
import { heapFigures } from './admission.ts'
import { startIdleCollector } from '../src/idle-gc.ts'

/** How long before the primary's drain deadline the worker cuts what is still running. */
const DRAIN_CUT_MARGIN_MS = 250

const boot = workerData as WorkerBoot
const port = parentPort!
const send = (msg: WorkerToPrimary): void => port.postMessage(msg)

const ledger = attachLedger(boot.ledger, boot.row)
const log = createThreadLogger(boot.config.telemetry.logLevel, boot.config.instanceId).child({ worker: boot.row, generation: boot.generation })
const app = await buildApp({
  config: boot.config,
  ledger,
  events: boot.events,
  continuations: boot.continuations,
  testHooks: boot.testHooks,
  simUrl: boot.simUrl,
  signingKey: Buffer.from(boot.signingKey, 'base64'),
  log,
  onParserRetired: () => send({ type: 'released', why: 'parser-retired' }),
})

const reportHeap = (): void => {
  const h = heapFigures()
  ledger.reportHeap(h.used, h.limit, h.external)
}
reportHeap()
setInterval(reportHeap, 1000).unref()

port.on('message', (msg: PrimaryToWorker) => {
  if (msg.type === 'drain') {
    // Just before the primary's drain deadline, what is still running is cut with an honest
    // ending (signed failure tail or refusal) rather than a socket torn down with the thread.
    const cutAt = Math.max(0, boot.config.limits.drainMs - DRAIN_CUT_MARGIN_MS)
    setTimeout(() => {
      const n = app.exchange.background.cutAll(new SluiceError('shutting_down', { phase: 'drain deadline', drainMs: boot.config.limits.drainMs }))
      if (n > 0) log.warn({ exchanges: n, drainMs: boot.config.limits.drainMs }, 'drain deadline: exchanges cut')
    }, cutAt).unref()
    // Stop accepting; in-flight exchanges finish (fastify close waits for them).
    void app.fastify.close().then(() => app.close()).then(() => {
      log.flush()
      send({ type: 'drained' })
    })
  }
})

try {
  // fastify 5 passes reusePort through to net.Server.listen, but its types lack it.
  await app.fastify.listen({ host: boot.config.listen.host, port: boot.config.listen.port, reusePort: true } as unknown as Parameters<typeof app.fastify.listen>[0])
  const addr = app.fastify.server.address()
  send({ type: 'listening', port: typeof addr === 'object' && addr ? addr.port : boot.config.listen.port })
  // What the start does not need is loaded now that the worker serves: piscina, for the parser
  // pool's first thread (src/json/pool.ts load()).
  setImmediate(() => { app.exchange.parser.load() })
  // Once quiet for limits.workerIdleCollectMs after a burst (not sooner: a collection with no
  // exchange alive costs the next ones), one full GC gives the heap the burst grew back
  // (src/idle-gc.ts); then the primary trims malloc's arenas (src/malloc-trim.ts) for what the GC freed there.
  const quietMs = boot.config.limits.workerIdleCollectMs
  const background = app.exchange.background
  if (quietMs > 0) startIdleCollector({ quietMs, everyMs: Math.min(5000, quietMs), activity: () => background.started, inFlight: () => ledger.exchange.heldByMe > 0, onCollect: () => send({ type: 'released', why: 'idle-collection' }) })
} catch (err) {
  send({ type: 'fatal', error: (err as Error).message })
  process.exit(1)
}
