// The supervisor: starts the HTTP workers, restarts the ones that die (with backoff), and
// reclaims each dead worker's ledger holdings exactly once, in the worker's `exit` handler.
//
// Each worker owns one ledger row for its whole life; a restarted worker gets the same row
// with a new generation, only after the previous life's holdings were reclaimed.

import { EventEmitter } from 'node:events'
import { Worker } from 'node:worker_threads'
import type { Config } from '../src/config/schema.ts'
import type { PrimaryToWorker, WorkerBoot, WorkerToPrimary } from '../src/control.ts'
import type { Ledger, Reclaimed } from '../src/ledger/ledger.ts'
import { EventRing, repairRing } from '../src/events/ring.ts'
import { StoreRepair } from '../src/state/store.ts'
import { eventText } from '../src/events/text.ts'
import type { LostEntry } from '../src/ledger/lanes.ts'
import { PRIMARY_ROW } from '../src/ledger/layout.ts'
import { SluiceError } from '../src/errors.ts'
import { moduleUrl } from '../src/modules.ts'
import type { Logger } from 'pino'

const WORKER_MAIN = moduleUrl('../worker/boot.ts', import.meta.url)
const BACKOFF_MIN_MS = 100
const BACKOFF_MAX_MS = 5_000
/** A worker that lived this long resets the backoff. */
const HEALTHY_AFTER_MS = 30_000

export interface WorkerState {
  readonly row: number
  worker: Worker | null
  generation: number
  listening: boolean
  /** The worker said 'drained': its server is closed, its exchanges released, its tracer flushed. */
  drained: boolean
  startedAt: number
  restarts: number
  backoffMs: number
  lastExit: { code: number; error: string | null; reclaimed: Reclaimed } | null
}

export interface SupervisorEvents {
  exit: [WorkerState, Reclaimed]
  listening: [WorkerState]
  /** The worker gave memory back (idle collection, parser thread retired). */
  released: [WorkerState, string]
}

export class Supervisor extends EventEmitter<SupervisorEvents> {
  readonly workers: WorkerState[] = []
  /** Rows whose thread's exit was observed and whose reclaim has not finished. */
  private readonly dead = new Set<number>()
  /** Per row: settles once the last life's exit has been fully handled (reclaim included). */
  private readonly exitHandled = new Map<number, Promise<void>>()
  private readonly config: Config
  private readonly ledger: Ledger
  private readonly events: SharedArrayBuffer
  private readonly ring: EventRing
  private readonly continuations: SharedArrayBuffer | null
  private readonly store: StoreRepair | null
  private readonly log: Logger
  private readonly simUrl: string | null
  private readonly testHooks: boolean
  private readonly signingKey: string
  private stopping = false

  constructor (opts: { config: Config; ledger: Ledger; events: SharedArrayBuffer; continuations?: SharedArrayBuffer | null; log: Logger; simUrl: string | null; testHooks: boolean; signingKey: string }) {
    super()
    this.config = opts.config
    this.ledger = opts.ledger
    this.events = opts.events
    this.ring = new EventRing(opts.events, PRIMARY_ROW)
    this.continuations = opts.continuations ?? null
    this.store = this.continuations ? new StoreRepair(this.continuations, PRIMARY_ROW) : null
    this.log = opts.log
    this.simUrl = opts.simUrl
    this.testHooks = opts.testHooks
    this.signingKey = opts.signingKey
    for (let i = 0; i < this.config.workers; i++) {
      this.workers.push({ row: i + 1, worker: null, generation: 0, listening: false, drained: false, startedAt: 0, restarts: 0, backoffMs: BACKOFF_MIN_MS, lastExit: null })
    }
  }

  /** Starts every worker; resolves when all listen, rejects on the first start-up failure. */
  start (): Promise<void> {
    return new Promise((resolve, reject) => {
      let pending = this.workers.length
      for (const w of this.workers) {
        this.spawn(w, (err) => {
          if (err) { reject(err); return }
          if (--pending === 0) resolve()
        })
      }
    })
  }

  get allListening (): boolean { return this.workers.every((w) => w.listening) }

  post (msg: PrimaryToWorker): void {
    for (const w of this.workers) w.worker?.postMessage(msg)
  }

  /** Stops restarting and terminates every worker; resolves once all have exited. */
  async stop (): Promise<void> {
    this.stopping = true
    await Promise.all(this.workers.map((w) => this.terminate(w)))
  }

  /** Terminates one worker (tests, or a stuck worker); resolves once its holdings are reclaimed. */
  async terminate (w: WorkerState): Promise<void> {
    const worker = w.worker
    if (worker) {
      await new Promise<void>((resolve) => {
        worker.once('exit', () => resolve())
        void worker.terminate()
      })
    }
    await this.exitHandled.get(w.row)
  }

  private spawn (w: WorkerState, onStarted?: (err?: Error) => void): void {
    const generation = this.ledger.assignRow(w.row)
    w.generation = generation
    w.listening = false
    w.startedAt = Date.now()
    const boot: WorkerBoot = {
      ledger: this.ledger.init,
      events: this.events,
      continuations: this.continuations,
      row: w.row,
      generation,
      config: this.config,
      simUrl: this.simUrl,
      testHooks: this.testHooks,
      signingKey: this.signingKey,
    }
    const worker = new Worker(WORKER_MAIN, {
      workerData: boot,
      name: `sluice-http-${w.row}`,
      resourceLimits: {
        // Both limits, on purpose: with only the old-generation limit a worker that blows its
        // heap can take the whole process down on Node 24 (PLATFORM.md).
        maxOldGenerationSizeMb: this.config.limits.workerHeapMb,
        maxYoungGenerationSizeMb: this.config.limits.workerYoungGenMb,
      },
      stdout: false,
      stderr: false,
    })
    w.worker = worker
    this.ledger.setThreadId(w.row, worker.threadId)
    this.log.info({ worker: w.row, generation, threadId: worker.threadId, restarts: w.restarts }, 'worker started')
    let error: string | null = null
    worker.on('message', (msg: WorkerToPrimary) => {
      if (msg.type === 'listening') {
        w.listening = true
        this.log.info({ worker: w.row, generation, port: msg.port }, 'worker listening')
        this.emit('listening', w)
        onStarted?.()
        onStarted = undefined
      } else if (msg.type === 'drained') {
        w.drained = true
        this.log.info({ worker: w.row, generation }, 'worker drained')
      } else if (msg.type === 'released') {
        this.emit('released', w, msg.why)
      } else if (msg.type === 'fatal') {
        error = msg.error
        this.log.error({ worker: w.row, generation, err: msg.error }, 'worker failed')
      }
    })
    worker.on('error', (err: Error & { code?: string }) => {
      error = err.code ?? err.message
      this.log.error({ worker: w.row, generation, err: err.message, code: err.code }, 'worker error')
    })
    let handled!: () => void
    this.exitHandled.set(w.row, new Promise<void>((resolve) => { handled = resolve }))
    worker.once('exit', (code) => {
      this.dead.add(w.row)
      // The one place a dead worker's holdings return: exactly once per life, because the
      // row is zeroed under the ledger lock and a later call finds nothing. It never parks
      // the primary: if another dead worker holds the ledger lock, this waits for that
      // worker's own exit handler (which may steal the lock) on a later turn.
      void this.ledger.reclaimRow(w.row, (r) => this.dead.has(r), generation).then(async (reclaimed) => {
        // A worker that died holding the event ring's lock leaves it held: clear it. Then
        // its non-blocking exchanges, which will never report their end, get one now.
        repairRing(this.events, w.row)
        // Its conversation-store pins return once (and the store is rebuilt if it died
        // holding the store's lock), before the row can be given to a new worker; a live
        // holder is waited for on later turns, never parked on.
        await this.reclaimStore(w.row)
        if (reclaimed.lost) void this.reportLost(reclaimed.lost)
        this.dead.delete(w.row)
        this.afterExit(w, generation, code, error, reclaimed, onStarted)
        onStarted = undefined
        handled()
      })
    })
  }

  private async reclaimStore (row: number): Promise<void> {
    if (!this.store) return
    for (;;) {
      const r = this.store.reclaimRow(row, (token) => this.dead.has(token - 1))
      if (r !== 'busy') {
        if (r.pins > 0 || r.rebuilt) this.log.warn({ worker: row, pins: r.pins, rebuilt: r.rebuilt }, 'conversation store reclaimed')
        return
      }
      await new Promise((resolve) => setImmediate(resolve))
    }
  }

  /** A turn_error worker_lost event for each non-blocking exchange a dead worker left. */
  private async reportLost (lost: LostEntry[]): Promise<void> {
    for (const e of lost) {
      if (!e.events) continue
      const err = new SluiceError('worker_lost', { exchangeId: e.exchangeId, phase: e.active ? 'running' : 'queued' })
      const payload = eventText('turn_error', JSON.stringify({ ...err.toBody(), exchangeId: e.exchangeId, status: err.status }))
      while (this.ring.tryAppend(e.session, payload) === -1) await new Promise((resolve) => setImmediate(resolve))
    }
  }

  private afterExit (w: WorkerState, generation: number, code: number, error: string | null, reclaimed: Reclaimed, onStarted: ((err?: Error) => void) | undefined): void {
    w.worker = null
    w.listening = false
    w.lastExit = { code, error, reclaimed }
    const lived = Date.now() - w.startedAt
    // Expected while stopping; otherwise a worker never exits on its own: a non-zero code is
    // a death (error), a zero one still a worker gone (warn).
    const level = this.stopping ? 'info' : code !== 0 ? 'error' : 'warn'
    this.log[level]({ worker: w.row, generation, code, error, livedMs: lived, reclaimed: reclaimedFields(reclaimed) }, 'worker exited')
    this.emit('exit', w, reclaimed)
    if (onStarted) {
      onStarted(new Error(`worker ${w.row} exited during start-up (code ${code}${error ? `, ${error}` : ''})`))
      return
    }
    if (this.stopping) return
    if (lived > HEALTHY_AFTER_MS) w.backoffMs = BACKOFF_MIN_MS
    const delay = w.backoffMs
    w.backoffMs = Math.min(BACKOFF_MAX_MS, w.backoffMs * 2)
    w.restarts++
    this.log.info({ worker: w.row, generation, backoffMs: delay, restarts: w.restarts }, 'worker restart scheduled')
    setTimeout(() => { if (!this.stopping) this.spawn(w) }, delay).unref()
  }
}

/** Lost exchanges named in a log line; the rest are counted. */
const LOST_LOGGED = 32

/**
 * A dead worker's reclaimed holdings for its exit line. `lost`, when there are any: the
 * exchanges it left in session lanes (they never logged their own end), by id, at most
 * LOST_LOGGED of them, without their session keys.
 */
function reclaimedFields (r: Reclaimed): Record<string, unknown> {
  const out: Record<string, unknown> = { exchange: r.exchange, parse: r.parse, bytes: r.bytes, lanes: r.lanes, lockStolen: r.lockStolen }
  const lost: LostEntry[] = r.lost ?? []
  if (lost.length > 0) {
    out.lost = lost.slice(0, LOST_LOGGED).map((e) => ({ exchangeId: e.exchangeId, mode: e.events ? 'events' : 'blocking', phase: e.active ? 'running' : 'queued' }))
    if (lost.length > LOST_LOGGED) out.lostNotListed = lost.length - LOST_LOGGED
  }
  return out
}
