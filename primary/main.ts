// The primary thread: load config (done by the caller), allocate the ledger, start the admin
// plane, the embedded simulated provider (when configured) and the HTTP workers, and own
// shutdown. It holds the permits (the ledger) and never proxies a byte.

import { createServer } from 'node:net'
import type { Server } from 'node:http'
import { Worker } from 'node:worker_threads'
import { once } from 'node:events'
import { randomBytes } from 'node:crypto'
import type { Logger } from 'pino'
import type { Config } from '../src/config/schema.ts'
import { createLedger, type Ledger } from '../src/ledger/ledger.ts'
import { createRingBuffer, EventRing } from '../src/events/ring.ts'
import { PRIMARY_ROW } from '../src/ledger/layout.ts'
import { providerSlots } from '../src/routing.ts'

/** Session-affinity slots (src/ledger/providers.ts): 64 KiB, sessions beyond it replace the oldest. */
const AFFINITY_SLOTS = 4096
import { continuationLimits, pendingCap } from '../src/config/limits.ts'
import { createStoreBuffer, StoreRepair } from '../src/state/store.ts'
import { startAdmin } from './admin.ts'
import { Supervisor } from './supervisor.ts'
import { VERSION } from '../src/version.ts'
import { createLogger } from '../src/log.ts'
import { moduleUrl } from '../src/modules.ts'
import { startIdleCollector } from '../src/idle-gc.ts'
import { MallocTrimmer } from '../src/malloc-trim.ts'
import { setLateV8Flags } from '../src/node-flags.ts'
import { niceV8Helpers } from '../src/helper-nice.ts'

/** The embedded sim's address: never another interface (it is unauthenticated). */
const SIM_HOST = '127.0.0.1'

export interface PrimaryHandle {
  readonly config: Config
  readonly ledger: Ledger
  readonly supervisor: Supervisor
  readonly log: Logger
  readonly port: number
  readonly adminPort: number
  readonly simUrl: string | null
  /** Drain (stop admitting, wait for active exchanges up to drainMs), then stop everything. */
  shutdown (reason?: string): Promise<void>
}

export interface StartOptions {
  config: Config
  log?: Logger
  /** Install SIGTERM/SIGINT handlers (the CLI does; tests usually don't). */
  signals?: boolean
  testHooks?: boolean
}

export async function startPrimary (opts: StartOptions): Promise<PrimaryHandle> {
  const log = opts.log ?? createLogger(opts.config.telemetry.logLevel, undefined, opts.config.instanceId)
  const startedAt = Date.now()

  // reusePort lets a second process bind the same port silently: probe with an exclusive
  // bind first, so a double start fails loudly instead of splitting traffic. Port 0 resolves
  // here to one free port that every worker then shares, held until they all listen on it.
  const { port, release: releasePort } = await probePort(opts.config.listen.host, opts.config.listen.port)
  const config: Config = { ...opts.config, listen: { ...opts.config.listen, port } }

  const limits = config.limits
  // The conversation store's buffer is carved out of the aggregate storage budget: the ledger
  // gets what is left, so the two together never exceed limits.storageBytes.
  const cont = continuationLimits(limits)
  const slots = providerSlots(config.providers)
  const ledger = createLedger({
    maxActive: limits.maxActiveExchanges,
    maxQueued: limits.maxQueuedExchanges,
    queueWaitMs: limits.queueWaitMs,
    parsePermits: limits.parsePermits,
    // Room for every exchange-permit holder (each waits for at most one parse at a time),
    // plus the envelope allowance: envelopes parse before any exchange permit is taken, and
    // each first takes an allowance slot (src/ledger/envelopes.ts), so they can never fill
    // the places the permit holders need.
    parseQueue: limits.maxActiveExchanges + limits.maxEnvelopeParses,
    envelopeParses: limits.maxEnvelopeParses,
    parseWaitMs: limits.parseWaitMs,
    storageBytes: limits.storageBytes - (cont?.bytes ?? 0),
    runSlots: limits.maxTrackedRuns,
    laneEntries: limits.sessionEntries,
    pendingPerSession: pendingCap(limits) ?? 0,
    activePerSession: limits.maxActivePerSession,
    threads: config.workers,
    // Provider accounts and breakers (src/ledger/providers.ts), indexed as src/routing.ts does.
    accounts: slots.accounts.length,
    breakers: slots.breakers.length,
    // Session affinity matters only where a provider has several accounts.
    affinity: slots.accounts.length > config.providers.length ? AFFINITY_SLOTS : 0,
  })
  const events = createRingBuffer(limits.sessionEventBytes)
  // The primary reads the ring's figures for /metrics only; it never locks it or writes it.
  const eventRing = new EventRing(events, PRIMARY_ROW)
  // Likewise the conversation store: figures for /metrics, and repair after a worker's death.
  const continuations = cont ? createStoreBuffer({ ...cont, rows: ledger.core.layout.dims.rows }) : null
  const storeRepair = continuations ? new StoreRepair(continuations, PRIMARY_ROW) : null

  let sim: { url: string; worker: Worker } | null = null
  // The sim checks no key: loopback only, whatever listen.host serves the gateway on.
  if (config.sim.enabled) sim = await startSimThread(SIM_HOST, config.sim.port)

  const supervisor = new Supervisor({
    config,
    ledger,
    events,
    continuations,
    log,
    simUrl: sim?.url ?? null,
    testHooks: opts.testHooks ?? process.env.SLUICE_TEST_HOOKS === '1',
    signingKey: signingKey(config, log),
  })
  // After any thread's idle collection (or a thread's exit), one malloc_trim for the process:
  // what the threads freed into malloc's arenas goes back to the kernel (src/malloc-trim.ts).
  const trimmer = new MallocTrimmer({
    onTrim: (r) => log.debug({ reasons: r.reasons, rssBeforeMb: +(r.rssBefore / 2 ** 20).toFixed(1), rssAfterMb: +(r.rssAfter / 2 ** 20).toFixed(1), ms: +r.ms.toFixed(2) }, 'malloc trimmed'),
  })
  let admin: Server
  try {
    admin = await startAdmin({ config, ledger, supervisor, counters: { refusals: () => ledger.refusals(), events: () => eventRing.snapshot(), continuations: storeRepair ? () => storeRepair.snapshot() : undefined, gauges: () => ledger.gauges(), histogram: (h) => ledger.histogram(h), providers: () => ledger.providers.snapshot(), trims: () => ({ trims: trimmer.trims, releasedBytes: trimmer.releasedBytes }) }, startedAt, version: VERSION }, config.listen.adminHost, config.listen.adminPort)
  } catch (err) {
    await sim?.worker.terminate()
    throw err
  }
  const adminPort = (admin.address() as { port: number }).port
  try {
    await supervisor.start()
  } catch (err) {
    await supervisor.stop()
    admin.close()
    await sim?.worker.terminate()
    throw err
  } finally {
    await releasePort()
  }
  log.info({ version: VERSION, port, adminPort, workers: config.workers, sim: sim?.url ?? null, startMs: Date.now() - startedAt }, 'sluice ready')
  // Not before: with it set, the threads started above would have compiled Node's built-ins
  // from source (src/node-flags.ts).
  const late = setLateV8Flags()
  if (late.length > 0) log.debug({ flags: late }, 'late V8 flags set')
  // From here, not before: the start is measured as it was (docs/benchmarks.md); from now on
  // V8's helper threads use the time the JavaScript threads leave (src/helper-nice.ts).
  const niced = niceV8Helpers(config.limits.v8HelperNice)
  if (niced.failed > 0) log.warn({ nice: config.limits.v8HelperNice, ...niced }, 'V8 helper threads could not be lowered (setpriority refused): on one vCPU they may take the core mid-turn (README, limits.v8HelperNice)')
  else log.debug({ nice: config.limits.v8HelperNice, ...niced }, 'V8 helper threads niced')
  supervisor.on('released', (w, why) => trimmer.request(`worker ${w.row}: ${why}`))
  supervisor.on('exit', (w) => trimmer.request(`worker ${w.row}: exit`))
  const stopIdleCollector = startIdleCollector({ onCollect: () => trimmer.request('primary: idle-collection') })

  let shuttingDown: Promise<void> | null = null
  const shutdown = (reason = 'shutdown'): Promise<void> => {
    shuttingDown ??= (async () => {
      stopIdleCollector()
      trimmer.close()
      const drainStarted = Date.now()
      const at = ledger.exchange.snapshot()
      log.info({ reason, active: at.active, queued: at.queued, drainMs: config.limits.drainMs }, 'draining')
      ledger.setDraining(true)
      supervisor.post({ type: 'drain' })
      const deadline = Date.now() + config.limits.drainMs
      // Each worker says 'drained' once its server is closed and every exchange it ran —
      // blocking, non-blocking (even one still queued in its session's lane) and JSON-RPC —
      // has actually released, its events are out and its traces flushed.
      while (Date.now() < deadline) {
        if (supervisor.workers.every((w) => w.drained || w.worker === null)) break
        await new Promise((r) => setTimeout(r, 25))
      }
      const left = ledger.exchange.snapshot()
      const timedOut = Date.now() >= deadline
      log[left.active + left.queued > 0 ? 'warn' : 'info']({ reason, waitedMs: Date.now() - drainStarted, timedOut, active: left.active, queued: left.queued }, 'drained')
      await supervisor.stop()
      await new Promise<void>((resolve) => admin.close(() => resolve()))
      admin.closeAllConnections()
      if (sim) await sim.worker.terminate()
      log.info({ reason, abandonedActive: left.active, abandonedQueued: left.queued }, 'stopped')
    })()
    return shuttingDown
  }

  if (opts.signals) {
    let signalled = 0
    const onSignal = (sig: NodeJS.Signals): void => {
      if (++signalled > 1) {
        log.warn({ signal: sig }, 'second signal: exiting at once')
        process.exit(1)
      }
      void shutdown(sig).then(() => process.exit(0), (err) => {
        log.error({ err }, 'shutdown failed')
        process.exit(1)
      })
    }
    process.on('SIGTERM', onSignal)
    process.on('SIGINT', onSignal)
  }

  return { config, ledger, supervisor, log, port, adminPort, simUrl: sim?.url ?? null, shutdown }
}

/** The failure-signing key from the environment, else a random one for this process's life. */
function signingKey (config: Config, log: Logger): string {
  const env = process.env[config.signing.keyEnv]
  if (env) return Buffer.from(env, 'utf8').toString('base64')
  log.warn({ env: config.signing.keyEnv }, 'no signing key in the environment: failure tails are signed with a random key that dies with this process')
  return randomBytes(32).toString('base64')
}

/**
 * The data port, checked: a configured port is bound exclusively once (EADDRINUSE: served
 * already) and let go at once, and `release` does nothing. Port 0 is bound with reusePort and
 * kept: between this probe and the workers' own binds (their start, ~0.5 s) a free ephemeral
 * port could be taken by anyone, an outgoing connection's local port included, and the first
 * worker would fail with EADDRINUSE. Held here, the kernel gives it to nobody else; the
 * workers join it (reusePort), and `release` closes this socket once they listen (before the
 * port is announced, so no caller has connected to it).
 */
export async function probePort (host: string, port: number): Promise<{ port: number; release: () => Promise<void> }> {
  const srv = createServer()
  // Nobody knows the port before it is announced; should anything connect, it is not served here.
  srv.on('connection', (socket) => socket.destroy())
  srv.listen(port === 0 ? { host, port, reusePort: true } : { host, port, exclusive: true })
  try {
    await once(srv, 'listening')
  } catch (err) {
    const e = err as NodeJS.ErrnoException
    if (e.code === 'EADDRINUSE') throw new Error(`port ${host}:${port} is already served (another sluice, or another program): refusing to start`)
    throw err
  }
  const bound = (srv.address() as { port: number }).port
  const close = (): Promise<void> => new Promise((resolve) => srv.close(() => resolve()))
  if (port !== 0) {
    await close()
    return { port: bound, release: async () => {} }
  }
  let released: Promise<void> | null = null
  return { port: bound, release: () => (released ??= close()) }
}

/** The embedded simulated provider runs in its own thread, so it never loads the primary. */
async function startSimThread (host: string, port: number): Promise<{ url: string; worker: Worker }> {
  const worker = new Worker(moduleUrl('./sim-thread.ts', import.meta.url), { workerData: { host, port }, name: 'sluice-sim' })
  const [msg] = await Promise.race([
    once(worker, 'message') as Promise<[{ url: string }]>,
    once(worker, 'error').then(([err]) => { throw err }),
  ])
  return { url: msg.url, worker }
}

