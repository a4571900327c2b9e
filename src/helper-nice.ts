// V8's platform threads at a lower scheduling priority than the threads that run JavaScript.
//
// Every Node process has a few V8 platform threads ("V8Worker", four by default) shared by all
// its isolates: they run concurrent marking, concurrent sweeping and the optimizing compilers.
// On the one vCPU sluice is sized for they take turns with the HTTP worker on the same core, and
// the kernel's scheduler gives a thread it wakes the core at once when its deadline is the
// earliest, which at the same weight it usually is (it has not run for a while): V8 wakes them
// in the middle of a turn of the event loop (at the start of a full GC's marking, at the end of
// one to sweep) and the worker's turn waits until they yield, several ms later.
// Measured with --trace-gc-nvp at 96 streams in flight, pinned to one core: a full GC's pause
// 8.0 ms, of which 4.2 ms in `sweep.start_jobs` (posting the sweeper's job), and an incremental
// marking step of 20.2 ms: wall time in which the worker did not run. With a lower weight
// (nice 10: 110 against the worker's 1024) a helper woken mid-turn no longer has the earliest
// deadline (Linux's EEVDF scheduler), so it waits for the JavaScript threads to wait, or for its
// turn of ~10 % of the core when they do not; when V8 needs their work finished it joins the job
// and does the rest on the calling thread, so nothing waits on them. Measured (docs/benchmarks.md,
// three alternated rounds, pinned to one core): at 96 streams in flight TTFB p99 28.4-29.6 ms and
// the slowest 33-37 against 29.5-45.2 and 58-68 at nice 0. The cost was memory at saturation (8
// streams of 2000 events): peak RSS 145-163 MB against 123-133 at nice 0 (CPU within the noise),
// in glibc's heap, and most of it TurboFan compile jobs left waiting on the lowered helpers:
// --no-concurrent-recompilation keeps those off them (128-134 MB at nice 10 with it, in that
// spell; not in the launchers' flags for its relay CPU, src/node-flags.ts); in a later spell it
// was smaller (122-135 MB at nice 10 with or without it; the bench's throughput peak 140 MB
// without it, 121-125 with it). Nice 19 (weight 15, ~1.5 % of a busy core) starves them there:
// CPU per exchange 2.80-2.98 ms against 2.24-2.36, and in one exchange bench run the relay
// figure 2.02x the pass-through's and the RSS peak 153 MB (127-131 in every run before); why, in
// V8's terms, not measured.
//
// Linux only (a thread's nice value through setpriority(PRIO_PROCESS, tid), which on Linux acts
// on the one thread): elsewhere nothing is changed and the result says why. A priority is only
// ever lowered: a thread already at or above `nice` is left as it is (raising it back would need
// CAP_SYS_NICE, and an operator's own `nice` on the whole process stands).

import { readdirSync, readFileSync } from 'node:fs'
import { getPriority, setPriority } from 'node:os'

/** The name (comm) Node gives its V8 platform threads. */
export const V8_HELPER_NAME = 'V8Worker'

export interface HelperNice {
  /** Threads set to `nice`. */
  lowered: number
  /** Helper threads left alone: already at `nice` or lower in priority. */
  already: number
  /** Helper threads the kernel refused to change (a seccomp filter without setpriority, say). */
  failed: number
  /** The first refusal's code (EPERM, ...), or null. */
  error: string | null
  /** Why nothing was looked at (no /proc, nice 0), or null. */
  skipped: string | null
}

/**
 * Sets every V8 platform thread of this process (`/proc/self/task/<tid>/comm` is
 * V8_HELPER_NAME) to `nice` (1-19; 0 leaves them alone; sluice's default 10). Call it once:
 * Node starts these threads with the process and never more.
 */
export function niceV8Helpers (nice: number, tasks = '/proc/self/task'): HelperNice {
  const out: HelperNice = { lowered: 0, already: 0, failed: 0, error: null, skipped: null }
  if (nice === 0) { out.skipped = 'nice 0'; return out }
  let tids: string[]
  try {
    tids = readdirSync(tasks)
  } catch {
    out.skipped = `no ${tasks}`
    return out
  }
  for (const tid of tids) {
    try {
      if (readFileSync(`${tasks}/${tid}/comm`, 'utf8').trimEnd() !== V8_HELPER_NAME) continue
      const id = Number(tid)
      if (getPriority(id) >= nice) { out.already++; continue }
      setPriority(id, nice)
      out.lowered++
    } catch (err) {
      // A thread that ended between the listing and the read: nothing to do. Anything else
      // (EPERM from a seccomp filter, ...) is counted, for the caller to say.
      const code = (err as { code?: string; info?: { code?: string } }).info?.code ?? (err as { code?: string }).code ?? 'error'
      if (code === 'ENOENT' || code === 'ESRCH') continue
      out.failed++
      out.error ??= code
    }
  }
  return out
}
