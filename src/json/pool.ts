// The parser pool: request preparation (src/json/prepare.ts) and the reading of providers'
// non-streaming answers (src/json/answer.ts) in heap-limited piscina threads, so a hostile
// body or answer that survives the byte, depth and node caps can still only exhaust a
// parser thread's heap, never the HTTP worker's.
//
// Design
//   threads     maxThreads = `threads`. Always warm (minThreads = `threads`, never retired)
//               unless `idleMs` is given (the default config does): then a thread starts with
//               the first task that needs it, or ahead of it with warm(), and is retired after
//               `idleMs` without a task (minThreads 0), so an idle worker carries no parser
//               thread (~13 MB RSS each, docs/benchmarks.md). Such a pool does not even load
//               piscina at construction: load() (an HTTP worker calls it once it listens) or
//               the first task does, so the start does not pay for it.
//               Concurrency is bounded upstream by the ledger's parse gate (the caller holds a
//               parse permit for the whole call), so the piscina queue stays short.
//   retire      piscina retires an idle thread with a timer it sets when the thread goes idle.
//               piscina 5.3 can lose that timer: a task posted while the thread was busy
//               clears it in a microtask (piscina PR 828), and when that task is done in the
//               same turn as the one before it (piscina drains finished tasks synchronously),
//               the timer set for it is cleared afterwards: the thread never retires. Measured:
//               warm() then a small answer, 2 of 30 cold starts. So once this pool has had no
//               task for 2 * idleMs and a thread is still up, it runs one empty task, whose end
//               sets the timer anew (stats().retireNudges).
//   lost        a thread counts as lost (stats().threadsLost) when it failed — it emitted
//               'error' (out of memory, an uncaught error), exited while piscina still listed
//               it (process.exit in a task), or was let go of by piscina during a call that
//               failed (an abort terminates it) — never when piscina retired it idle.
//   heap        resourceLimits sets BOTH maxOldGenerationSizeMb and maxYoungGenerationSizeMb:
//               with the old-generation limit alone, a huge JSON.parse on Node 24 can take the
//               whole process down (FATAL, exit 134) instead of failing the thread
//               (PLATFORM.md "Node").
//   flags       module preloads (--import, --require) are not inherited: see withoutPreloads;
//               nor V8's flags and per-process options, which a worker refuses: parserExecArgv.
//   transfer    the body's ArrayBuffer is transferred in and the result's transferred back
//               (src/json/task.ts): no copy of up to 16 MiB each way. A body that does not own
//               its whole, transferable ArrayBuffer (a pooled Buffer slice, a view into a larger
//               buffer, shared memory) is copied once first, because transferring it would
//               detach memory that is not the caller's to give.
//
// Invariant: a failed call settles only after the thread it ran on has exited
//   DESIGN.md step 5: "A parse that fails by crashing its worker keeps the permit until that
//   worker's exit is observed". Piscina does not promise that order: it rejects a task from
//   the thread's 'error' event (an uncaught error arrives as a message, long before the
//   thread has stopped), and on an abort it rejects first and terminates the thread after.
//   It does one thing in a fixed order, though: it removes a failing thread from
//   `piscina.threads` synchronously BEFORE rejecting that thread's tasks. So:
//     - every thread is tracked from birth to its observed 'exit' (diagnostics_channel
//       'worker_threads' fires synchronously inside `new Worker`, before piscina can post a
//       task to it; threads that are not this pool's are dropped a microtask later);
//     - on any rejection, prepare() waits for the exit of every tracked thread that piscina
//       has already let go of (tracked, exit not yet seen, no longer in `piscina.threads`).
//       The failed task's own thread is among them; a thread let go of for another reason
//       at the same moment only makes the wait longer, never shorter.
//   (On Node 24 an out-of-memory death emits 'error' and 'exit' in one synchronous block, so
//   the wait is usually already over; an uncaught error or an abort makes it real. Both
//   orders are tested in test/unit/json/pool.test.ts.)
//
// Recovery: piscina starts a replacement thread as soon as one fails; the next task runs on
// it. A thread that dies with no task (nothing here does that) is counted, not thrown.

import dc from 'node:diagnostics_channel'
import { createRequire } from 'node:module'
import { isMarkedAsUntransferable, Worker } from 'node:worker_threads'
import type { Piscina } from 'piscina'
import { SluiceError, isErrorCode } from '../errors.ts'
import { moduleUrl } from '../modules.ts'
import type { AnswerResult, AnswerTask } from './answer.ts'
import type { PrepareResult, PrepareTask } from './prepare.ts'
import type { ParserTask } from './task.ts'

export interface ParserPoolOptions {
  /** Pool threads (config limits.parserThreads). */
  threads: number
  /** Old-generation heap per thread, MiB (limits.parserHeapMb). */
  heapMb: number
  /** Young-generation heap per thread, MiB (limits.parserYoungGenMb). */
  youngGenMb: number
  /** Retire a thread after this long without a task (ms); absent or 0: always warm. */
  idleMs?: number
  /** Tests only: another task file with the same contract as ./task.ts. */
  filename?: string
  /** Tests only: the threads' execArgv as given (else parserExecArgv()). */
  execArgv?: string[]
  /** Called when a thread retired idle has exited (its memory is back with the process). */
  onRetired?: () => void
}

export interface ParserPoolStats {
  /** Threads started and whose exit has not been observed (a dying thread still counts). */
  threadsAlive: number
  /** Threads that failed while the pool was open (crashed, or were cancelled with their task). */
  threadsLost: number
  /** Threads retired after idleMs without a task (on-demand pools only). */
  threadsRetired: number
  /** Tasks waiting for a thread. */
  queued: number
  /** Calls that returned a result, `ok` or a refusal. */
  completed: number
  /** Calls that rejected: the thread died, the call was aborted, or the pool closed. */
  failed: number
  /** Empty tasks run because an idle thread outlived 2 * idleMs (see "retire" above). */
  retireNudges: number
}

const TASK_FILE = moduleUrl('./task.ts', import.meta.url).href

/**
 * piscina, required on first use: an on-demand pool (the default) starts no thread until its
 * first task, so an HTTP worker need not load piscina (~15 CJS files, perf_hooks, async_hooks:
 * ~25-30 ms of its start under one vCPU) before it listens. load() brings it in after.
 */
let piscinaClass: typeof Piscina | null = null
const requirePiscina = (): typeof Piscina => (piscinaClass ??= (createRequire(import.meta.url)('piscina') as typeof import('piscina')).Piscina)

interface Tracked {
  exited: Promise<void>
  onExit: () => void
  /** It failed: 'error', an exit piscina did not ask for, or let go of during a failed call. */
  failed: boolean
}

type PiscinaOptions = NonNullable<ConstructorParameters<typeof Piscina>[0]>

export class ParserPool {
  /** Created at construction for an always-warm pool, else by load() or the first task. */
  #piscina: Piscina<ParserTask, PrepareResult | AnswerResult> | null = null
  readonly #piscinaOptions: PiscinaOptions
  /** Every thread of this pool from its creation until its 'exit' has been observed. */
  readonly #threads = new Map<Worker, Tracked>()
  readonly #onWorker = (message: unknown): void => { this.#track((message as { worker: Worker }).worker) }
  #completed = 0
  #failed = 0
  #lost = 0
  #retired = 0
  #closing: Promise<void> | null = null
  readonly #onDemand: boolean
  #warming: Promise<void> | null = null

  readonly #onRetired: (() => void) | undefined
  readonly #idleMs: number
  /** Tasks of this pool in piscina (warm-ups and nudges included). */
  #inFlight = 0
  /** On-demand pools: armed when the last task settles (see "retire" above). */
  #retireCheck: NodeJS.Timeout | null = null
  #retireNudges = 0

  constructor ({ threads, heapMb, youngGenMb, idleMs = 0, filename = TASK_FILE, onRetired, execArgv: givenArgv }: ParserPoolOptions) {
    this.#onRetired = onRetired
    this.#idleMs = idleMs
    if (!Number.isInteger(idleMs) || idleMs < 0) throw new TypeError(`ParserPool: idleMs must be a non-negative integer, got ${idleMs}`)
    for (const [key, value] of [['threads', threads], ['heapMb', heapMb], ['youngGenMb', youngGenMb]] as const) {
      if (!Number.isInteger(value) || value < 1) throw new TypeError(`ParserPool: ${key} must be a positive integer, got ${value}`)
    }
    this.#onDemand = idleMs > 0
    const execArgv = givenArgv ?? parserExecArgv() // its probe is a `new Worker` too: before the subscription
    this.#piscinaOptions = {
      filename,
      minThreads: idleMs > 0 ? 0 : threads,
      maxThreads: threads,
      idleTimeout: idleMs > 0 ? idleMs : Infinity,
      resourceLimits: { maxOldGenerationSizeMb: heapMb, maxYoungGenerationSizeMb: youngGenMb },
      execArgv,
    }
    // An always-warm pool starts its threads now; an on-demand one has nothing to start.
    if (!this.#onDemand) this.#pool()
  }

  /** The piscina pool, created (and subscribed to) on first use. */
  #pool (): Piscina<ParserTask, PrepareResult | AnswerResult> {
    if (this.#piscina !== null) return this.#piscina
    if (this.#closing !== null) throw new SluiceError('shutting_down', { pool: 'parser' })
    const PiscinaClass = requirePiscina()
    // Subscribe before the first `new Worker` (piscina starts minThreads in its constructor).
    dc.subscribe('worker_threads', this.#onWorker)
    let pool: Piscina<ParserTask, PrepareResult | AnswerResult>
    try {
      pool = new PiscinaClass(this.#piscinaOptions)
    } catch (err) {
      dc.unsubscribe('worker_threads', this.#onWorker)
      throw err
    }
    // Piscina emits 'error' when a thread with no task fails; without a listener that would
    // throw in this (HTTP worker) thread. The thread is replaced and counted in threadsLost.
    pool.on('error', () => {})
    this.#piscina = pool
    return pool
  }

  /**
   * Load piscina and create the pool now, without starting a thread, so that the first task
   * does not pay for it: an HTTP worker calls this once it listens. A no-op once created or
   * closing; a failure to load is left for the first task to report.
   */
  load (): void {
    if (this.#piscina !== null || this.#closing !== null) return
    try { this.#pool() } catch {}
  }

  /** Whether piscina's pool exists yet (tests). */
  get loaded (): boolean { return this.#piscina !== null }

  /**
   * On-demand pools (idleMs > 0): when no thread is running, start one now, in the background,
   * with an empty task, so that a parse arriving a moment later (a large body still being
   * read, a provider's JSON answer) finds it up instead of waiting for it while holding the
   * parse permit. A no-op when a thread is running or starting, and for always-warm pools.
   * Its outcome is nobody's: a thread that fails here is counted (threadsLost) and replaced
   * like any other. The promise (which never rejects) settles when that empty task has; at
   * once when there was nothing to start. Nobody needs to wait for it (tests do).
   */
  warm (): Promise<void> {
    if (this.#warming !== null) return this.#warming
    if (!this.#onDemand || this.#closing !== null || this.#threads.size > 0) return Promise.resolve()
    const done = (): void => { this.#warming = null }
    this.#warming = this.#task({ kind: 'warm' }).then(done, done)
    return this.#warming
  }

  /** Every task goes to piscina through here, counted, so the pool knows when it went idle. */
  #task (task: ParserTask, options?: Parameters<Piscina['run']>[1]): Promise<PrepareResult | AnswerResult> {
    this.#inFlight++
    const settled = (): void => { this.#inFlight--; this.#armRetireCheck() }
    let p: Promise<PrepareResult | AnswerResult>
    // piscina starts a thread inside run(): a `new Worker` that throws (ERR_WORKER_INVALID_EXEC_ARGV)
    // throws out of run() itself, and the first task may be the one that loads piscina. A
    // rejection like any other failure, so callers map it (and warm(), which runs in the middle
    // of an exchange, never throws).
    try { p = this.#pool().run(task, options) } catch (err) { p = Promise.reject(err) }
    p.then(settled, settled)
    return p
  }

  #armRetireCheck (): void {
    if (!this.#onDemand || this.#inFlight > 0 || this.#closing !== null) return
    if (this.#retireCheck !== null) clearTimeout(this.#retireCheck)
    this.#retireCheck = setTimeout(() => {
      this.#retireCheck = null
      if (this.#inFlight > 0 || this.#closing !== null || (this.#piscina?.threads.length ?? 0) === 0) return
      this.#retireNudges++
      this.#task({ kind: 'warm' }).catch(() => {})
    }, 2 * this.#idleMs)
    this.#retireCheck.unref()
  }

  /**
   * Prepare one request body in a pool thread. `task.body`'s ArrayBuffer is transferred
   * (detached here) when it owns all of it, copied once otherwise; either way the caller
   * must not use it again. Resolves with the result, refusals included (`ok: false`).
   * Rejects with a SluiceError, only after the thread that ran the task has exited:
   *   worker_heap_exhausted { pool: 'parser' }  the thread ran out of heap on this body
   *   worker_lost { pool: 'parser' }            the thread died some other way
   *   client_closed { pool: 'parser' }          `signal` aborted (a catalogue-coded reason is kept)
   *   shutting_down { pool: 'parser' }          close() was called
   */
  async prepare (task: PrepareTask, opts: { signal?: AbortSignal } = {}): Promise<PrepareResult> {
    if (this.#closing !== null) throw new SluiceError('shutting_down', { pool: 'parser' })
    const body = transferable(task.body)
    const t: PrepareTask = { body, route: task.route, limits: task.limits, aliases: task.aliases, envelope: task.envelope }
    if (task.translate !== undefined) t.translate = task.translate
    // A continuation's history goes over by transfer too (the caller reserved it and gives it up).
    const extra: ArrayBuffer[] = []
    if (task.continuation !== undefined) {
      t.continuation = { ...task.continuation }
      if (task.continuation.history !== undefined) {
        const h = transferable(task.continuation.history)
        t.continuation.history = h
        extra.push(h.buffer)
      }
    }
    return await this.#run(t, body, 'this request body', opts, extra) as PrepareResult
  }

  /**
   * Read one provider answer in a pool thread (src/json/answer.ts): bounded JSON checks, then
   * JSON.parse, then its usage; the parsed object stays in the thread. `task.body` is handed
   * over as in prepare() and comes back, untouched, in the result (`ok: true`), or, with
   * `task.translate`, the client's translated answer comes back in its place. Refusals
   * (`ok: false`) and rejections as in prepare().
   */
  async readAnswer (task: AnswerTask, opts: { signal?: AbortSignal } = {}): Promise<AnswerResult> {
    if (this.#closing !== null) throw new SluiceError('shutting_down', { pool: 'parser' })
    const body = transferable(task.body)
    const t: AnswerTask = { kind: 'answer', body, protocol: task.protocol, limits: task.limits }
    if (task.translate !== undefined) t.translate = task.translate
    return await this.#run(t, body, 'this provider answer', opts) as AnswerResult
  }

  async #run (task: ParserTask, body: Uint8Array<ArrayBuffer>, what: string, opts: { signal?: AbortSignal }, extra: ArrayBuffer[] = []): Promise<PrepareResult | AnswerResult> {
    const lostBefore = this.#lost
    let result: PrepareResult | AnswerResult
    try {
      result = await this.#task(task, { transferList: [body.buffer, ...extra], signal: opts.signal ?? null })
    } catch (err) {
      this.#failed++
      // The caller holds the parse permit until this settles: wait for the dead thread.
      const departed = this.#departed()
      for (const d of departed) d.failed = true
      await Promise.all(departed.map((d) => d.exited))
      throw this.#failure(err, departed.length > 0 || this.#lost > lostBefore, what, opts.signal)
    }
    this.#completed++
    return result
  }

  stats (): ParserPoolStats {
    return {
      threadsAlive: this.#threads.size,
      threadsLost: this.#lost,
      threadsRetired: this.#retired,
      queued: this.#piscina?.queueSize ?? 0,
      completed: this.#completed,
      failed: this.#failed,
      retireNudges: this.#retireNudges,
    }
  }

  /** Finish running tasks, stop every thread, and resolve once each thread's exit is observed. */
  close (): Promise<void> {
    if (this.#retireCheck !== null) { clearTimeout(this.#retireCheck); this.#retireCheck = null }
    this.#closing ??= (async () => {
      if (this.#piscina === null) return
      await this.#piscina.close()
      await Promise.all([...this.#threads.values()].map((t) => t.exited))
      dc.unsubscribe('worker_threads', this.#onWorker)
    })()
    return this.#closing
  }

  #track (worker: Worker): void {
    const { promise, resolve } = Promise.withResolvers<void>()
    const tracked: Tracked = { exited: promise, onExit: () => {}, failed: false }
    const onError = (): void => { tracked.failed = true }
    const onExit = (): void => {
      worker.off('error', onError)
      this.#threads.delete(worker)
      if (this.#closing === null) {
        // Still listed: piscina did not retire or terminate it, it just stopped.
        if (tracked.failed || this.#piscina?.threads.includes(worker)) this.#lost++
        else { this.#retired++; this.#onRetired?.() }
      }
      resolve()
    }
    tracked.onExit = onExit
    this.#threads.set(worker, tracked)
    worker.once('exit', onExit)
    worker.on('error', onError)
    // Published inside `new Worker`, before piscina has added it to its list: look a
    // microtask later and drop threads that belong to someone else.
    queueMicrotask(() => {
      if (!this.#piscina?.threads.includes(worker) && this.#threads.get(worker)?.onExit === onExit) {
        worker.off('exit', onExit)
        worker.off('error', onError)
        this.#threads.delete(worker)
      }
    })
  }

  /** The threads piscina has let go of whose exit has not been observed yet. */
  #departed (): Tracked[] {
    const current = new Set(this.#piscina?.threads)
    const out: Tracked[] = []
    for (const [worker, t] of this.#threads) if (!current.has(worker)) out.push(t)
    return out
  }

  #failure (err: unknown, threadLost: boolean, what: string, signal: AbortSignal | undefined): SluiceError {
    if (signal?.aborted) {
      const reason = signal.reason as { code?: unknown } | undefined
      return reason && isErrorCode(reason.code) ? SluiceError.from(reason) : new SluiceError('client_closed', { pool: 'parser' })
    }
    if (this.#closing !== null) return new SluiceError('shutting_down', { pool: 'parser' })
    if ((err as { code?: unknown } | null)?.code === 'ERR_WORKER_OUT_OF_MEMORY') {
      return new SluiceError('worker_heap_exhausted', { pool: 'parser' }, `a parser thread ran out of heap on ${what}`)
    }
    if (threadLost) return new SluiceError('worker_lost', { pool: 'parser' }, `a parser thread stopped while reading ${what}`)
    return new SluiceError('internal_error', { pool: 'parser' }, `parser pool: ${err instanceof Error ? err.message : String(err)}`)
  }
}

const PRELOAD_FLAGS = new Set(['--import', '--require', '-r', '--loader', '--experimental-loader'])

/**
 * The parent's flags minus module preloads. A worker inherits execArgv by default, and a
 * preload (a test runner's hooks, telemetry auto-instrumentation) would run in every parser
 * thread and eat its small heap: measured under tap, a 16 MiB thread died of heap before its
 * first task. A parser thread needs nothing but its task file. Other flags (profilers) stay.
 */
export function withoutPreloads (execArgv: readonly string[]): string[] {
  const out: string[] = []
  for (let i = 0; i < execArgv.length; i++) {
    const arg = execArgv[i]
    const eq = arg.indexOf('=')
    if (PRELOAD_FLAGS.has(eq === -1 ? arg : arg.slice(0, eq))) {
      if (eq === -1) i++ // `--import x`: skip the value too
      continue
    }
    out.push(arg)
  }
  return out
}

/** A flag no Node knows: the first of a probe's execArgv, so the probe always throws. */
const PROBE_FLAG = '--sluice-execargv-probe'
let parserArgv: { from: readonly string[]; argv: string[] } | null = null

/**
 * A parser thread's execArgv: the parent's flags minus module preloads (withoutPreloads) and
 * minus those Node refuses in a worker's execArgv: V8's flags (`--max-old-space-size`, the
 * launchers' `--no-parallel-scavenge`, src/node-flags.ts) and per-process options (`--title`).
 * Given one of those, `new Worker` throws ERR_WORKER_INVALID_EXEC_ARGV, so every parse would
 * fail; they are process-wide, so the thread runs with them anyway. Node's own check decides:
 * a probe Worker given an unknown flag first, then the rest, throws before any thread starts
 * and names every flag it refused (a flag's separate value, `--stack-trace-limit 20`, goes
 * with it). Computed once per execArgv.
 */
export function parserExecArgv (execArgv: readonly string[] = process.execArgv): string[] {
  if (parserArgv?.from === execArgv) return parserArgv.argv
  const kept = withoutPreloads(execArgv)
  let refused: Set<string> = new Set()
  try {
    const w = new Worker('', { eval: true, execArgv: [PROBE_FLAG, ...kept], stdout: true, stderr: true })
    void w.terminate() // not reached while Node refuses the probe flag; never leave a thread behind
  } catch (err) {
    const m = (err as { code?: unknown }).code === 'ERR_WORKER_INVALID_EXEC_ARGV'
      ? /invalid execArgv flags: (.*)$/s.exec((err as Error).message)
      : null
    if (m !== null) refused = new Set(m[1].split(', '))
  }
  const argv: string[] = []
  for (let i = 0; i < kept.length; i++) {
    if (!refused.has(kept[i])) { argv.push(kept[i]); continue }
    if (!kept[i].includes('=') && i + 1 < kept.length && !kept[i + 1].startsWith('-')) i++
  }
  parserArgv = { from: execArgv, argv }
  return argv
}

/** `body` if it owns its whole ArrayBuffer and that buffer may be transferred, else a copy. */
function transferable (body: Uint8Array): Uint8Array<ArrayBuffer> {
  const buffer = body.buffer
  if (buffer instanceof ArrayBuffer && buffer.detached) {
    throw new SluiceError('internal_error', { pool: 'parser' }, 'parser pool: the body was already transferred')
  }
  if (buffer instanceof ArrayBuffer && body.byteOffset === 0 && body.byteLength === buffer.byteLength &&
    !isMarkedAsUntransferable(buffer)) {
    return body as Uint8Array<ArrayBuffer>
  }
  return new Uint8Array(body)
}
