// What a drain waits for: the exchanges in flight and the open event streams of this worker.

import type { SluiceError } from '../src/errors.ts'

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

  track (p: Promise<unknown>): void {
    this.exchanges.add(p)
    void p.finally(() => this.exchanges.delete(p))
  }

  /**
   * Waits for every background exchange (their results still reach the open event streams),
   * then ends every event stream. New ones are refused meanwhile (the ledger is draining).
   */
  async close (): Promise<void> {
    while (this.exchanges.size > 0) await Promise.allSettled([...this.exchanges])
    for (const end of this.streams) end()
  }
}
