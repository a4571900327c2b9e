// What a drain waits for: the exchanges in flight and the open event streams of this worker;
// and what an exchange leaves for after its response (later()).

import type { SluiceError } from '../src/errors.ts'

/**
 * How long an exchange's closing bookkeeping (its log line, the exemplars it leaves; not its
 * trace, which ends at the release) waits after the exchange has released everything. A caller's next request follows its
 * response's end within a few hundred µs (an agent thread runs its exchanges back to back): run
 * at once, that bookkeeping (~60-100 µs, cache-cold) sat exactly in that request's way in
 * (measured at 32 staggered streams: its time from the client to the worker's 'request' event
 * was 55 µs longer than the bare pass-through's; with the bookkeeping 2 ms later, the same).
 */
export const LATER_DELAY_MS = 2
/** At most this many exchanges' bookkeeping per turn of the loop: a burst of ends (96 streams
 *  that end together) never holds the loop for longer than a few of them. */
const LATER_SLICE = 8

/** Exchanges in flight (blocking ones until their actual release, non-blocking ones until
 *  their result is published) and open event streams: a drain waits for the first, then
 *  ends the second. */
export class Background {
  readonly exchanges = new Set<Promise<unknown>>()
  readonly streams = new Set<() => void>()
  /** Aborts of the exchanges in flight, for the drain deadline (cutAll). */
  readonly aborts = new Set<(err: SluiceError) => void>()

  /**
   * The drain deadline is near: every exchange still in flight ends now with `err`, so a
   * caller that already has bytes gets the signed failure tail (not a bare socket close when
   * the primary stops the worker), and one still waiting gets the JSON refusal.
   */
  cutAll (err: SluiceError): number {
    const n = this.aborts.size
    for (const abort of [...this.aborts]) abort(err)
    return n
  }

  readonly #later: Array<() => void> = []
  #laterTimer: ReturnType<typeof setTimeout> | null = null

  /**
   * Runs `fn` LATER_DELAY_MS from now, in order with the others, at most LATER_SLICE per turn
   * (close() runs whatever is still waiting). For an exchange's log line and the like, never for
   * a release. A throw is reported as an uncaught exception, after the rest have run.
   */
  later (fn: () => void): void {
    this.#later.push(fn)
    this.#laterTimer ??= setTimeout(this.#runLater, LATER_DELAY_MS)
  }

  /** How many wait in later(). */
  get laterQueued (): number { return this.#later.length }

  readonly #runLater = (): void => {
    this.#laterTimer = null
    this.#drainLater(LATER_SLICE)
    if (this.#later.length > 0) this.#laterTimer = setTimeout(this.#runLater, 0)
  }

  #drainLater (max: number): void {
    for (let n = 0; n < max && this.#later.length > 0; n++) {
      const fn = this.#later.shift()!
      try {
        fn()
      } catch (err) {
        process.nextTick(() => { throw err })
      }
    }
  }

  /** Runs everything later() holds now. */
  flushLater (): void {
    if (this.#laterTimer !== null) { clearTimeout(this.#laterTimer); this.#laterTimer = null }
    this.#drainLater(Infinity)
  }

  /** Exchanges tracked so far (the idle collector's activity count: one that moved is not idle). */
  started = 0

  track (p: Promise<unknown>): void {
    this.started++
    this.exchanges.add(p)
    void p.finally(() => this.exchanges.delete(p))
  }

  /**
   * Waits for every background exchange (their results still reach the open event streams),
   * then ends every event stream. New ones are refused meanwhile (the ledger is draining).
   */
  async close (): Promise<void> {
    while (this.exchanges.size > 0) await Promise.allSettled([...this.exchanges])
    this.flushLater()
    for (const end of this.streams) end()
  }
}
