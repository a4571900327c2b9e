// An idle thread gives its garbage back. After a burst of exchanges a thread's V8 heap stays at
// the size the burst grew it to (measured: V8's memory reducer did not shrink it within 20 s);
// one full collection once the thread has gone idle returns it: ~15 MB of RSS for the primary
// and one HTTP worker after a warm-up (docs/benchmarks.md). Once per idle period: a thread
// that stays idle is not collected again until it has been busy.
//
// Idle = the event loop's utilisation over the last window (performance.eventLoopUtilization)
// below a threshold, nothing in flight and, where the thread counts its work (`activity`: an
// HTTP worker counts its exchanges), no new work since the previous window; and, with
// `quietMs`, that for at least so long (an HTTP worker: limits.workerIdleCollectMs). Why the
// quiet period: a full collection with no exchange alive clears the hidden-class transitions
// and the optimized code that Node's sockets and streams and undici were using, and the burst
// after it re-learns them (worker/exemplars.ts keeps most of them). Measured with one worker
// on one core at 96 staggered streams, in blocks 7 s apart (docs/benchmarks.md): the way to
// the provider p50 0.85-1.48 ms after each idle collection against 0.72-1.04 with blocks
// 0.3 s apart, the bare pass-through 0.62-0.83 either way; in the exchange bench (one stream
// at a time kept the worker under 2 % busy, so it collected again and again) the CPU share at
// 96 streams went from 1.19-1.31x the pass-through's to 1.05-1.17x. So a worker whose callers
// pause for seconds (tools running, a human reading) keeps its heap warm between their
// exchanges, and gives the memory back once it has been quiet for the whole period.
// The collection is the inspector protocol's HeapProfiler.collectGarbage on
// an in-process session (no port, no debugger: node:inspector's Session), the one documented
// way to ask V8 for a full GC without --expose-gc. Where node:inspector is absent (a Node built
// without it) nothing is collected.

import { performance } from 'node:perf_hooks'

/** The decision alone (no clock, no GC): tick() once per window with its utilisation. */
export class IdleDecider {
  readonly #idleBelow: number
  readonly #quietMs: number
  /** Busy since the last collection (a fresh thread has just been busy starting). */
  #dirty = true
  /** The activity count at the previous tick. */
  #activity = 0
  /** When a tick last saw work (`now` of that tick); the quiet period runs from there. */
  #busyAt = 0

  /** `quietMs`: how long the thread must have been idle before a collection (0: the first idle window). */
  constructor (idleBelow: number, quietMs = 0) {
    this.#idleBelow = idleBelow
    this.#quietMs = quietMs
  }

  /**
   * True when this window is idle, the thread has been idle for the quiet period, and it was
   * busy since the last collection. `inFlight`: work is under way that a full collection would
   * stall (an exchange streaming at a utilisation under the threshold): the window counts as
   * busy. `activity`: a count of the thread's work (exchanges started); a window in which it
   * moved counts as busy, however little time that work took. `now`: the tick's time, ms.
   */
  tick (utilization: number, inFlight = false, activity = 0, now = 0): boolean {
    const moved = activity !== this.#activity
    this.#activity = activity
    if (inFlight || moved || utilization >= this.#idleBelow) { this.#dirty = true; this.#busyAt = now; return false }
    if (!this.#dirty || now - this.#busyAt < this.#quietMs) return false
    this.#dirty = false
    return true
  }
}

export interface IdleCollectorOptions {
  /** The window, ms (default 5000). */
  everyMs?: number
  /** Utilisation below which a window is idle (default 0.02). */
  idleBelow?: number
  /** Called after each collection (logs, tests). */
  onCollect?: () => void
  /**
   * Whether work is in flight now (an HTTP worker: an exchange holding its permit). A window
   * is idle only when nothing is: a full collection (~35-75 ms, measured) never lands in the
   * middle of a stream that keeps the thread's utilisation under the threshold (one stream
   * at a time is ~1 %).
   */
  inFlight?: () => boolean
  /** The collection (tests); default collectGarbage. */
  collect?: () => Promise<void>
  /** A count of the thread's work (an HTTP worker: the exchanges it has started): a window in
   *  which it moved is busy. Default: none. */
  activity?: () => number
  /** How long the thread must have been idle (no busy window) before it collects, ms (default 0:
   *  the first idle window). Checked at each window, so a collection comes up to one window later. */
  quietMs?: number
}

/**
 * Starts the collector in this thread; returns a stop function. Its timer never keeps the thread alive.
 *
 * The collection's own time is not counted in a window: the window after one starts when it
 * has finished. (Counted, a full GC of ~35-75 ms made the next 5 s window "busy" at ~3 %
 * utilisation, so an idle thread collected again, and again, until a collection took less than
 * the threshold: three full GCs after one burst, measured.)
 */
export function startIdleCollector (opts: IdleCollectorOptions = {}): () => void {
  const decider = new IdleDecider(opts.idleBelow ?? 0.02, opts.quietMs ?? 0)
  const activity = opts.activity ?? (() => 0)
  const collect = opts.collect ?? collectGarbage
  const everyMs = opts.everyMs ?? 5000
  let last = performance.eventLoopUtilization()
  let collecting = false
  let stopped = false
  const timer = setInterval(() => {
    if (collecting) return
    const now = performance.eventLoopUtilization()
    const window = performance.eventLoopUtilization(now, last)
    // A window cut short (the tick after a collection, overdue behind it) is not judged on its
    // own: its time is added to the next one. (idle + active is the window's length, ms.)
    if (window.idle + window.active < everyMs / 2) return
    last = now
    if (!decider.tick(window.utilization, opts.inFlight?.() ?? false, activity(), performance.now())) return
    collecting = true
    void collect().finally(() => {
      collecting = false
      last = performance.eventLoopUtilization()
      if (!stopped) opts.onCollect?.()
    })
  }, everyMs)
  timer.unref()
  return () => { stopped = true; clearInterval(timer) }
}

/** One full collection of this thread's heap, now (the inspector's HeapProfiler.collectGarbage). */
export async function collectGarbage (): Promise<void> {
  let inspector: typeof import('node:inspector')
  try { inspector = await import('node:inspector') } catch { return }
  const session = new inspector.Session()
  try {
    session.connect()
    await new Promise<void>((resolve) => session.post('HeapProfiler.collectGarbage', () => resolve()))
  } catch {
    // an inspector that cannot be used here: nothing collected
  } finally {
    try { session.disconnect() } catch {}
  }
}
