// The envelope-parse allowance: a bounded count of parses by work that holds no exchange
// permit, shared by every worker.
//
// ## Layout (layout.ts)
//
//   header (Int32):  H_EP_MAX  H_EP_IN_USE  H_EP_TOTALS (taken, refused, reclaimed: (lo, hi) pairs)
//   row r (Int32):   R_ENVELOPES   slots row r holds
//
// ## Invariants (outside the lock)
//
//   E1  H_EP_IN_USE = sum over rows of R_ENVELOPES  <=  H_EP_MAX
//   E2  every R_ENVELOPES >= 0
//
// ## Policy
//
// The parse gate's queue holds maxActiveExchanges + maxEnvelopeParses waiters. Work that
// holds an exchange permit waits for at most one parse at a time (its body, a relay
// inspection, a provider error, its result read out of a sink), so permit holders never
// need more than maxActiveExchanges places. The JSON-RPC and non-blocking envelopes are parsed
// before any exchange permit is taken (their acceptance depends on what they contain); left
// unbounded they filled the queue and admitted exchanges were refused mid-stream with
// parse_capacity_exhausted. Each envelope parse therefore takes one slot of this allowance
// before it asks for the parse permit and returns it once the parse settled. With
//
//   waiting permit holders <= maxActiveExchanges   and   waiting envelopes <= maxEnvelopeParses
//
// a parse waiter always finds a place in the queue (no parse_capacity_exhausted for an
// admitted exchange), and one beyond the allowance is refused at once, before it is accepted,
// with parse_capacity_exhausted (503, Retry-After). Waiting itself stays the parse gate's:
// strict FIFO, bounded by parseWaitMs and by the queue's length. The gate protocol is
// unchanged (and so is its Promela model): this is a separate counter checked first.
//
// ## Cancel safety
//
// tryTake either takes one slot or none, and never waits: nothing to cancel. give() of a slot
// this row does not hold throws (a double release is a bug, never clamped).
//
// ## Memory ordering
//
// As in gate.ts: plain Int32 accesses inside the ledger lock, which orders them; aligned
// Int32 reads are tear-free for lock-free snapshot readers; (lo, hi) totals follow pair64.ts.
//
// ## Death
//
// The primary's reclaim of a dead row zeroes its R_ENVELOPES and recomputes H_EP_IN_USE from
// the rows (the truth), under the lock, so a holder that died between its two writes leaves
// nothing behind either; a second reclaim finds zero.

import type { LedgerCore } from './core.ts'
import { addLocked, read } from './pair64.ts'
import { ET_RECLAIMED, ET_REFUSED, ET_TAKEN, H_EP_IN_USE, H_EP_MAX, H_EP_TOTALS, R_ENVELOPES } from './layout.ts'

export interface EnvelopeSnapshot { max: number; inUse: number; taken: number; refused: number; reclaimed: number }

export class EnvelopeParses {
  private readonly core: LedgerCore
  private readonly i32: Int32Array
  private readonly mine: number

  constructor (core: LedgerCore) {
    this.core = core
    this.i32 = core.i32
    this.mine = core.layout.row32(core.row) + R_ENVELOPES
  }

  get max (): number { return Atomics.load(this.i32, H_EP_MAX) }
  get heldByMe (): number { return Atomics.load(this.i32, this.mine) }

  /** Takes one slot for this thread; false (and nothing taken, a refusal counted) when full. */
  tryTake (): boolean {
    const { i32, core } = this
    core.lock()
    if (i32[H_EP_IN_USE] >= i32[H_EP_MAX]) {
      addLocked(i32, H_EP_TOTALS + ET_REFUSED)
      core.unlock()
      return false
    }
    i32[H_EP_IN_USE]++
    i32[this.mine]++
    addLocked(i32, H_EP_TOTALS + ET_TAKEN)
    core.unlock()
    return true
  }

  /** Returns one slot this thread holds. */
  give (): void {
    const { i32, core } = this
    core.lock()
    if (i32[this.mine] <= 0) {
      core.unlock()
      throw new Error('envelope parses: give without a held slot')
    }
    i32[this.mine]--
    i32[H_EP_IN_USE]--
    core.unlock()
  }

  snapshot (): EnvelopeSnapshot {
    const i32 = this.i32
    return {
      max: Atomics.load(i32, H_EP_MAX),
      inUse: Atomics.load(i32, H_EP_IN_USE),
      taken: read(i32, H_EP_TOTALS + ET_TAKEN),
      refused: read(i32, H_EP_TOTALS + ET_REFUSED),
      reclaimed: read(i32, H_EP_TOTALS + ET_RECLAIMED),
    }
  }
}

/** Primary only, at creation. */
export function initEnvelopes (i32: Int32Array, max: number): void {
  if (!Number.isInteger(max) || max < 0) throw new RangeError('the envelope-parse allowance is a non-negative integer')
  i32[H_EP_MAX] = max
}

/** Primary only, inside the lock: frees a dead row's slots; returns how many. */
export function reclaimEnvelopesLocked (core: LedgerCore, row: number): number {
  const { i32, layout } = core
  const n = i32[layout.row32(row) + R_ENVELOPES]
  i32[layout.row32(row) + R_ENVELOPES] = 0
  let sum = 0
  for (let r = 0; r < layout.dims.rows; r++) sum += i32[layout.row32(r) + R_ENVELOPES]
  i32[H_EP_IN_USE] = sum
  if (n > 0) addLocked(i32, H_EP_TOTALS + ET_RECLAIMED, n)
  return n
}
