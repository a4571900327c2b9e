// V8's platform threads at a lower scheduling priority than the threads that run JavaScript.
//
// Every Node process has a few V8 platform threads ("V8Worker", four by default) shared by all
// its isolates: they run concurrent marking, concurrent sweeping and the optimizing compilers.
// On the one vCPU sluice is sized for they take turns with the HTTP worker on the same core, and
// the kernel's scheduler gives a thread it wakes the core at once (its run time is the lowest):
// V8 wakes them in the middle of a turn of the event loop (at the start of a full GC's marking,
// at the end of one to sweep) and the worker's turn waits until they yield, several ms later.
// Measured with --trace-gc-nvp at 96 streams in flight, pinned to one core: a full GC's pause
// 8.0 ms, of which 4.2 ms in `sweep.start_jobs` (posting the sweeper's job), and an incremental
// marking step of 20.2 ms: wall time in which the worker did not run. At nice 19 (weight 15
// against the worker's 1024) they run when the JavaScript threads wait, and when V8 needs their
// work done it joins the job and does the rest on the calling thread, so nothing waits on them.
// Measured (docs/benchmarks.md, four alternated pairs, 96 streams in flight, one core): TTFB p99
// 27.2-29.1 ms against 32.0-35.9, max 31-36 against 40-64, CPU per exchange the same.
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
  /** Why nothing was looked at (no /proc, nice 0), or null. */
  skipped: string | null
}

/**
 * Sets every V8 platform thread of this process (`/proc/self/task/<tid>/comm` is
 * V8_HELPER_NAME) to `nice` (1-19; 0 leaves them alone). Call it once: Node starts these threads
 * with the process and never more.
 */
export function niceV8Helpers (nice: number, tasks = '/proc/self/task'): HelperNice {
  const out: HelperNice = { lowered: 0, already: 0, skipped: null }
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
    } catch {
      // The thread ended between the listing and the read: nothing to do.
    }
  }
  return out
}
