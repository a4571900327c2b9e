// The process gives back the memory glibc's malloc kept after a burst. What a burst freed
// (read buffers, ArrayBuffer backing stores, V8's compiler zones, a retired parser thread's
// isolate) goes back to malloc's arenas, and glibc returns only the top of an arena to the
// kernel on free: the free pages in the middle stay resident until malloc_trim(3) is called.
// Measured (docs/benchmarks.md): ~10-17 MB of RSS after a 96-stream run, idle, after every
// thread's own idle collection (src/idle-gc.ts).
//
// malloc_trim is process-wide (every arena), so the primary calls it, once, a moment after a
// thread says it has given memory back: its own idle collection, an HTTP worker's, an HTTP
// worker's parser thread retired. The call goes through koffi (src/libc.ts: glibc bound on a
// thread's first use). Where there is no glibc (musl, macOS) or koffi cannot load, nothing is
// trimmed and nothing fails.

import { glibc } from './libc.ts'

interface Trim {
  (pad: number): number
  /** The same call on a libuv thread-pool thread (the caller's thread is not held). */
  async(pad: number, cb: (err: unknown, result: number) => void): void
}

let bound: Trim | null | undefined

/** glibc's malloc_trim, bound on first use; null where it is not available. */
function binding (): Trim | null {
  if (bound !== undefined) return bound
  try {
    bound = glibc()?.func<Trim>('int malloc_trim(size_t pad)') ?? null
  } catch {
    bound = null
  }
  return bound
}

/**
 * Returns the free pages of every malloc arena to the kernel. The call runs on a libuv
 * thread-pool thread (measured: ~6 ms for ~10 MB released; the primary's loop is not held).
 * Resolves true when malloc_trim ran (whether or not it found anything to release), false
 * where it is not available or failed.
 */
export function trimMalloc (): Promise<boolean> {
  const trim = binding()
  if (trim === null) return Promise.resolve(false)
  return new Promise((resolve) => trim.async(0, (err) => resolve(err == null)))
}

export interface TrimResult {
  /** RSS before and after, bytes. */
  readonly rssBefore: number
  readonly rssAfter: number
  readonly ms: number
  /** Why it ran: the requests it answered, in order, each once. */
  readonly reasons: readonly string[]
}

/**
 * Coalesces requests: the first request arms one timer, and one trim runs when it fires, after
 * `delayMs` (a thread that reported its collection may still be tearing down; several threads
 * going idle together cost one trim). Requests during the wait join it; a request while a trim
 * runs arms the next one after it. The timer never keeps the process alive.
 */
export class MallocTrimmer {
  readonly #delayMs: number
  readonly #trim: () => Promise<boolean>
  readonly #onTrim: ((r: TrimResult) => void) | undefined
  #timer: NodeJS.Timeout | null = null
  #reasons = new Set<string>()
  #closed = false
  #trims = 0
  #releasedBytes = 0

  /** A trim in progress. */
  #running = false

  constructor (opts: { delayMs?: number, trim?: () => Promise<boolean>, onTrim?: (r: TrimResult) => void } = {}) {
    this.#delayMs = opts.delayMs ?? 1000
    this.#trim = opts.trim ?? trimMalloc
    this.#onTrim = opts.onTrim
  }

  /** How many trims have run. */
  get trims (): number { return this.#trims }

  /** The RSS they gave back, in all (each trim's fall, never negative), bytes. */
  get releasedBytes (): number { return this.#releasedBytes }

  request (reason = 'requested'): void {
    if (this.#closed) return
    this.#reasons.add(reason)
    if (this.#timer === null && !this.#running) this.#arm()
  }

  #arm (): void {
    this.#timer = setTimeout(() => { void this.#run() }, this.#delayMs)
    this.#timer.unref()
  }

  async #run (): Promise<void> {
    this.#timer = null
    if (this.#closed) return
    const reasons = [...this.#reasons]
    this.#reasons.clear()
    this.#running = true
    const rssBefore = process.memoryUsage.rss()
    const t0 = performance.now()
    let ran = false
    try {
      ran = await this.#trim()
    } catch {
      ran = false
    } finally {
      this.#running = false
    }
    if (ran) {
      const rssAfter = process.memoryUsage.rss()
      this.#trims++
      this.#releasedBytes += Math.max(0, rssBefore - rssAfter)
      this.#onTrim?.({ rssBefore, rssAfter, ms: performance.now() - t0, reasons })
    }
    // Asked again while this one ran: one more, after the delay.
    if (this.#reasons.size > 0 && !this.#closed) this.#arm()
  }

  close (): void {
    this.#closed = true
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = null
  }
}
