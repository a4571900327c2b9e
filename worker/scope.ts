// ExchangeScope: everything one exchange holds, and the one owner of its release.
//
// Every exchange, in every mode (blocking, non-blocking, JSON-RPC), gets one scope at its
// acceptance (worker/accept.ts); every permit, lane slot, turn, parse hold and byte it takes
// from then on is taken through the scope, and only the scope gives them back:
//
//   accept:    tookTurn(ticket), tookLane(ticket)            (synchronous, before any answer)
//   exchange:  tookExchange()   (the gate's permit, FIFO)    reserve / tryReserve / unreserve
//              underParse(fn)   (the parse permit, a short hold around fn; returned when fn
//                                settles, a crashed parser's only after its thread's exit)
//              tryUnderParse(fn) (the same for a synchronous fn, only if the permit is free now)
//              setFloating()    (the relay's held-back and framer bytes)
//   early:     releaseLane()    (just before the caller can see the end: its next prompt must
//                                not meet this one's slot), giveBackTurn() (a local refusal)
//   release:   settle(party) for each party — 'processing' (the handler), 'upstream' (the
//              provider's body closed or never opened), 'http' (the actual HTTP finish/close,
//              or the sink's) — then everything goes at once, the lane slot last
//              (DESIGN.md lifecycle step 9: not when a handler returns).
//
// The lifecycle order is asserted, as undici's decorator handler does: settling a party twice
// or one that is not a party, taking anything after the release, or returning more bytes than
// are held throws at once (a bookkeeping bug must fail loudly, never leak or double-free).
// `discard()` is the one way to end a scope whose exchange never started (a refusal before
// hand-off): it gives the turn back and settles every party still pending.

import type { Ledger } from '../src/ledger/ledger.ts'
import { RG_INSPECTOR_BYTES, RG_PENDING_BYTES } from '../src/ledger/layout.ts'

export type Party = 'processing' | 'upstream' | 'http'

/** The relay's floating reservation moves in steps of this many bytes (setFloating). */
export const FLOATING_STEP = 4096
/** The most a floating reservation holds beyond the relay's need: just under two steps. */
export const FLOATING_SPARE_MAX = 2 * FLOATING_STEP - 1

function roundUpToStep (n: number): number {
  return Math.ceil(n / FLOATING_STEP) * FLOATING_STEP
}

export const ALL_PARTIES: readonly Party[] = ['processing', 'upstream', 'http']

/** A session-lane entry (worker/lane-ticket.ts) or a turn pin (worker/turns.ts). */
export interface LaneHold { release (): void }
export interface TurnHold { giveBack (): void }

export class ExchangeScope {
  private readonly ledger: Ledger
  private exchange = false
  private lane: LaneHold | null = null
  private turn: TurnHold | null = null
  private parse = false
  private bytes = 0
  private floating = 0
  private inspectorBytes = 0
  private pendingBytes = 0
  private readonly pending: Set<Party>
  private released = false
  private onReleased: Array<() => void> = []

  constructor (ledger: Ledger, parties: readonly Party[] = ALL_PARTIES) {
    this.ledger = ledger
    this.pending = new Set(parties)
  }

  /** The exchange's turn pin: given back by giveBackTurn() (a local refusal) or kept. */
  tookTurn (turn: TurnHold): void { this.assertOpen('tookTurn'); this.turn = turn }

  /** The exchange's session-lane entry: released last, after the permit and the bytes. */
  tookLane (lane: LaneHold): void { this.assertOpen('tookLane'); this.lane = lane }

  /** Marks an exchange permit as held (after a successful acquire). */
  tookExchange (): void {
    this.assertOpen('tookExchange')
    if (this.exchange) throw new Error('exchange scope: a second exchange permit')
    this.exchange = true
  }

  /** Reserves bytes against the aggregate budget (throws a SluiceError when refused). */
  reserve (n: number): void {
    this.assertOpen('reserve')
    this.ledger.storage.reserve(n)
    this.bytes += n
  }

  /** Like reserve(), but false (and nothing reserved) when the budget has no room now. */
  tryReserve (n: number): boolean {
    this.assertOpen('tryReserve')
    if (!this.ledger.storage.tryReserve(n)) return false
    this.bytes += n
    return true
  }

  /** Returns part of this exchange's reservation early (e.g. a body buffer dropped). */
  unreserve (n: number): void {
    if (n > this.bytes - this.floating) throw new Error(`exchange scope: unreserve ${n} > held ${this.bytes - this.floating}`)
    this.ledger.storage.release(n)
    this.bytes -= n
  }

  get heldBytes (): number { return this.bytes }

  /** The floating reservation (setFloating): the relay's need, or up to FLOATING_SPARE_MAX more. */
  get floatingBytes (): number { return this.floating }

  /** Whether the exchange permit is held (tests check the lifecycle with it). */
  get holdsExchange (): boolean { return this.exchange }

  /** Whether `party` is still to settle. */
  pendingParty (party: Party): boolean { return this.pending.has(party) }

  /**
   * The relay's floating reservation, set to cover its current size: `inspector` bytes held by
   * the SSE framer (an unfinished frame), `pending` bytes held back or queued to the client.
   * Keeps this worker's stream gauges (sluice_stream_*_bytes) at the exact sizes.
   *
   * The reservation moves in steps of FLOATING_STEP: it grows to the need rounded up to a step,
   * and shrinks only once the need is two steps below it (to the need rounded up) or is 0. So a
   * stream of small chunks reserves once, not once per chunk: a reservation is the ledger's
   * lock and half a dozen 64-bit atomics, each a fresh BigInt (measured in place at 96 streams:
   * this method 1.3 -> 0.9 µs a chunk, of the relay's ~6 µs). A step that does not fit now is
   * not a refusal: the exact need is asked for instead, and only its refusal throws, as before.
   * So the budget refuses exactly what it would without the steps, and holds at most
   * FLOATING_SPARE_MAX bytes more per relay than the relay holds.
   */
  setFloating (inspector: number, pending: number): void {
    const n = inspector + pending
    const have = this.floating
    let want = n > have || n === 0 || n + 2 * FLOATING_STEP <= have ? roundUpToStep(n) : have
    if (want > have) {
      this.assertOpen('setFloating')
      if (this.ledger.storage.tryReserveAhead(want - have)) this.bytes += want - have
      else { this.reserve(n - have); want = n }
    } else if (want < have) {
      this.ledger.storage.release(have - want)
      this.bytes -= have - want
    }
    this.floating = want
    this.ledger.gauge(RG_INSPECTOR_BYTES, inspector - this.inspectorBytes)
    this.ledger.gauge(RG_PENDING_BYTES, pending - this.pendingBytes)
    this.inspectorBytes = inspector
    this.pendingBytes = pending
  }

  /**
   * Runs `fn` under the parse permit (process-wide, DESIGN.md step 5) and returns the permit
   * as soon as it settles. The fast path takes a free permit without a promise; otherwise the
   * wait is FIFO and bounded (the parse gate's deadline), and aborts with `signal`.
   */
  async underParse<T> (signal: AbortSignal | undefined, fn: () => T | Promise<T>): Promise<T> {
    this.assertOpen('underParse')
    if (this.parse) throw new Error('exchange scope: the parse permit taken twice')
    if (!this.ledger.parse.tryAcquire()) await this.ledger.parse.acquire({ signal })
    this.parse = true
    try {
      return await fn()
    } finally {
      this.parse = false
      this.ledger.parse.release()
    }
  }

  /**
   * underParse without waiting, for a synchronous `fn`: runs it under the parse permit and
   * returns true when the permit is free at once; returns false, fn not run, when it is taken
   * (the caller then waits for it with underParse). The relay's per-frame checks take this
   * path, so a chunk whose permit is free is handled without a promise.
   */
  tryUnderParse (fn: () => void): boolean {
    this.assertOpen('underParse')
    if (this.parse) throw new Error('exchange scope: the parse permit taken twice')
    if (!this.ledger.parse.tryAcquire()) return false
    this.parse = true
    try {
      fn()
    } finally {
      this.parse = false
      this.ledger.parse.release()
    }
    return true
  }

  /**
   * Returns the session-lane entry now, before the rest: the relay calls it just before the
   * caller can see the end of the result (the last bytes of a body, a stream's terminal
   * event), so a caller that sends its next prompt the moment it has this one's answer is
   * never refused by this one's slot. Idempotent.
   */
  releaseLane (): void {
    const l = this.lane
    this.lane = null
    l?.release()
  }

  /** A local refusal before the provider was reached: the run's turn was not spent. */
  giveBackTurn (): void {
    const t = this.turn
    this.turn = null
    t?.giveBack()
  }

  /** Runs `fn` once everything is released (at once if it already is). */
  onRelease (fn: () => void): void {
    if (this.released) fn()
    else this.onReleased.push(fn)
  }

  get isReleased (): boolean { return this.released }

  /** One party has settled; everything is released when the last one does. Exactly once each. */
  settle (party: Party): void {
    if (!this.pending.delete(party)) throw new Error(`exchange scope: '${party}' settled twice or is not a party`)
    if (this.pending.size === 0) this.releaseAll()
  }

  /**
   * Ends a scope whose exchange never started (refused before hand-off): the turn goes back,
   * every party still pending settles, everything is released now.
   */
  discard (): void {
    this.giveBackTurn()
    for (const p of [...this.pending]) this.settle(p)
  }

  /** Binds the 'http' party to the actual finish/close of `res` (a response or a sink). */
  settleOnClose (res: { readonly closed: boolean; once (event: 'close', fn: () => void): unknown }): void {
    if (res.closed) this.settle('http')
    else res.once('close', () => this.settle('http'))
  }

  private releaseAll (): void {
    this.released = true
    // A parse still running (only a bug lets the last party settle under it) keeps its permit:
    // underParse returns it when fn settles. Everything else goes now, never leaked.
    if (this.bytes > 0) { const b = this.bytes; this.bytes = 0; this.floating = 0; this.ledger.storage.release(b) }
    this.ledger.gauge(RG_INSPECTOR_BYTES, -this.inspectorBytes)
    this.ledger.gauge(RG_PENDING_BYTES, -this.pendingBytes)
    this.inspectorBytes = 0
    this.pendingBytes = 0
    if (this.exchange) { this.exchange = false; this.ledger.exchange.release() }
    this.turn = null
    // The session's next exchange may run only once this one has released everything else.
    this.releaseLane()
    const fns = this.onReleased
    this.onReleased = []
    for (const fn of fns) fn()
  }

  private assertOpen (what: string): void {
    if (this.released) throw new Error(`exchange scope: ${what} after the release`)
  }
}
