// What one exchange holds from the ledger, released exactly once.
//
// One Holdings object per exchange owns every permit and byte reservation the exchange took.
// Release is idempotent per resource and is triggered by `settle()` only after every party
// that can still touch the exchange has finished (DESIGN.md lifecycle step 9): the handler's
// processing, the upstream's cancellation, and the actual HTTP finish/close. A permit is
// never released "when the handler returns".

import type { Ledger } from '../src/ledger/ledger.ts'
import { RG_INSPECTOR_BYTES, RG_PENDING_BYTES } from '../src/ledger/layout.ts'

/** A session-lane entry (worker/sessions.ts), released with everything else. */
export interface LaneHold { release (): void }

export type Party = 'processing' | 'upstream' | 'http'

export class Holdings {
  private readonly ledger: Ledger
  private exchange = false
  private lane: LaneHold | null = null
  private parse = false
  private bytes = 0
  private floating = 0
  private inspectorBytes = 0
  private pendingBytes = 0
  private pending: Set<Party>
  private released = false
  private onReleased: (() => void) | undefined

  constructor (ledger: Ledger, parties: readonly Party[], onReleased?: () => void) {
    this.ledger = ledger
    this.pending = new Set(parties)
    this.onReleased = onReleased
  }

  /** Marks an exchange permit as held (after a successful acquire). */
  tookExchange (): void { this.assertOpen(); this.exchange = true }

  /** Reserves bytes against the aggregate budget (throws a SluiceError when refused). */
  reserve (n: number): void {
    this.assertOpen()
    this.ledger.storage.reserve(n)
    this.bytes += n
  }

  /** Like reserve(), but false (and nothing reserved) when the budget has no room now. */
  tryReserve (n: number): boolean {
    this.assertOpen()
    if (!this.ledger.storage.tryReserve(n)) return false
    this.bytes += n
    return true
  }

  /**
   * The relay's floating reservation, set to its current size: `inspector` bytes held by the
   * SSE framer (an unfinished frame), `pending` bytes held back or queued to the client.
   * Reserves or returns the difference (throws when growth does not fit) and keeps this
   * worker's stream gauges (sluice_stream_*_bytes) in step.
   */
  setFloating (inspector: number, pending: number): void {
    const n = inspector + pending
    const delta = n - this.floating
    if (delta > 0) this.reserve(delta)
    else if (delta < 0) this.unreserve(-delta)
    this.floating = n
    this.ledger.gauge(RG_INSPECTOR_BYTES, inspector - this.inspectorBytes)
    this.ledger.gauge(RG_PENDING_BYTES, pending - this.pendingBytes)
    this.inspectorBytes = inspector
    this.pendingBytes = pending
  }

  /** Returns part of this exchange's reservation early (e.g. a body buffer dropped). */
  unreserve (n: number): void {
    if (n > this.bytes) throw new Error(`holdings: unreserve ${n} > held ${this.bytes}`)
    this.ledger.storage.release(n)
    this.bytes -= n
  }

  tookParse (): void { this.assertOpen(); this.parse = true }

  /** The exchange's session-lane entry: released last, after the permit and the bytes. */
  tookLane (lane: LaneHold): void { this.assertOpen(); this.lane = lane }

  /**
   * Returns the session-lane entry now, before the rest: the relay calls it just before the
   * caller can see the end of the result (the last bytes of a body, a stream's terminal
   * event), so a caller that sends its next prompt the moment it has this one's answer is
   * never refused by this one's slot. Idempotent.
   */
  releaseLane (): void {
    if (this.lane) { const l = this.lane; this.lane = null; l.release() }
  }

  /** The parse permit is a short hold: returned as soon as the parse settles. */
  releaseParse (): void {
    if (!this.parse) return
    this.parse = false
    this.ledger.parse.release()
  }

  /** Runs `fn` once everything is released (at once if it already is). */
  onRelease (fn: () => void): void {
    if (this.released) { fn(); return }
    const prev = this.onReleased
    this.onReleased = prev ? () => { prev(); fn() } : fn
  }

  get holdsExchange (): boolean { return this.exchange }
  get heldBytes (): number { return this.bytes }
  get isReleased (): boolean { return this.released }

  /** One party has settled; everything is released when the last one does. */
  settle (party: Party): void {
    if (!this.pending.delete(party)) return
    if (this.pending.size === 0) this.releaseAll()
  }

  private releaseAll (): void {
    if (this.released) return
    this.released = true
    if (this.parse) { this.parse = false; this.ledger.parse.release() }
    if (this.bytes > 0) { const b = this.bytes; this.bytes = 0; this.floating = 0; this.ledger.storage.release(b) }
    this.ledger.gauge(RG_INSPECTOR_BYTES, -this.inspectorBytes)
    this.ledger.gauge(RG_PENDING_BYTES, -this.pendingBytes)
    this.inspectorBytes = 0
    this.pendingBytes = 0
    if (this.exchange) { this.exchange = false; this.ledger.exchange.release() }
    // The session's next exchange may run only once this one has released everything else.
    if (this.lane) { const l = this.lane; this.lane = null; l.release() }
    this.onReleased?.()
  }

  private assertOpen (): void {
    if (this.released) throw new Error('holdings: already released')
  }
}
