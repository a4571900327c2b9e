// The aggregate storage byte budget: one process-wide limit shared by every worker.
//
// ## Layout (layout.ts)
//
//   budget (BigInt64):   B_LIMIT  B_RESERVED  B_PEAK  B_REFUSED  B_RECLAIMED ...
//   row r (BigInt64):    R64_BYTES   bytes row r has reserved
//
// ## Invariants (outside the lock)
//
//   B1  B_RESERVED = sum over rows of R64_BYTES  <=  B_LIMIT
//   B2  every R64_BYTES >= 0
//
// ## Policy
//
// try-reserve / release, no queue: a reservation that does not fit is refused at once with
// `storage_budget_exhausted` (retry later), and one larger than the whole budget with
// `storage_request_too_large` (a retry can never fit) — Go's semaphore rule: a request
// larger than the whole budget must not block or be retried forever. Like Envoy's
// proactive resource monitor (tryAllocateResource / tryDeallocateResource).
//
// ## Cancel safety
//
// try-reserve either takes all n bytes or none: the gate is left unchanged on refusal.
// Release of more than this row holds throws (a double release is a bug, never clamped).
//
// ## Memory ordering
//
// Every cell is a BigInt64 read and written with Atomics inside the ledger lock (the lock
// orders the composite steps; Atomics keep each 64-bit cell whole for lock-free readers).
// `snapshot()` reads without the lock and may mix two moments (metrics only).
//
// ## Death
//
// The primary reclaims a dead row by subtracting its R64_BYTES from B_RESERVED and zeroing
// the row, under the lock. If the lock had to be stolen from a holder that died between its
// two writes, B_RESERVED is recomputed as the sum of rows (truth), restoring B1.

import { SluiceError } from '../errors.ts'
import type { LedgerCore } from './core.ts'
import { B_LIMIT, B_PEAK, B_RECLAIMED, B_REFUSED, B_RESERVED, R64_BYTES } from './layout.ts'

export interface BudgetSnapshot { limit: number; reserved: number; peak: number; refused: number; reclaimed: number }

export class ByteBudget {
  private readonly core: LedgerCore
  private readonly i64: BigInt64Array
  private readonly base: number
  private readonly mine: number

  constructor (core: LedgerCore) {
    this.core = core
    this.i64 = core.i64
    this.base = core.layout.budget64
    this.mine = core.layout.row64(core.row) + R64_BYTES
  }

  get limit (): number { return Number(Atomics.load(this.i64, this.base + B_LIMIT)) }
  get heldByMe (): number { return Number(Atomics.load(this.i64, this.mine)) }

  /**
   * Reserves n bytes for this thread, or throws a SluiceError and changes nothing:
   * `storage_request_too_large` when n exceeds the whole budget, `storage_budget_exhausted`
   * when it does not fit now.
   */
  reserve (n: number): void {
    if (!this.tryReserve(n)) {
      throw new SluiceError('storage_budget_exhausted', { limit: this.limit, requested: n })
    }
  }

  /** Like reserve(), but returns false instead of throwing when it does not fit now. */
  tryReserve (n: number): boolean {
    return this.#take(n, true)
  }

  /**
   * Reserves n bytes when they fit now, else returns false; neither way is it a refusal (not
   * counted, never thrown). For a reservation asked larger than what is needed now (a step
   * ahead, worker/scope.ts setFloating), whose caller then asks for the exact need instead.
   */
  tryReserveAhead (n: number): boolean {
    return this.#take(n, false)
  }

  #take (n: number, refusal: boolean): boolean {
    if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`byte reservation must be a non-negative integer, got ${n}`)
    if (n === 0) return true
    const { i64, base, core } = this
    const big = BigInt(n)
    const limit = Atomics.load(i64, base + B_LIMIT)
    if (big > limit) {
      if (!refusal) return false
      Atomics.add(i64, base + B_REFUSED, 1n)
      throw new SluiceError('storage_request_too_large', { limit: Number(limit), requested: n })
    }
    core.lock()
    const reserved = Atomics.load(i64, base + B_RESERVED) + big
    if (reserved > limit) {
      if (refusal) Atomics.add(i64, base + B_REFUSED, 1n)
      core.unlock()
      return false
    }
    Atomics.store(i64, base + B_RESERVED, reserved)
    Atomics.add(i64, this.mine, big)
    if (reserved > Atomics.load(i64, base + B_PEAK)) Atomics.store(i64, base + B_PEAK, reserved)
    core.unlock()
    return true
  }

  /** Returns n bytes this thread reserved. */
  release (n: number): void {
    if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`byte release must be a non-negative integer, got ${n}`)
    if (n === 0) return
    const { i64, base, core } = this
    const big = BigInt(n)
    core.lock()
    if (Atomics.load(i64, this.mine) < big) {
      core.unlock()
      throw new Error(`byte budget: release of ${n} bytes exceeds this thread's ${this.heldByMe}`)
    }
    Atomics.sub(i64, this.mine, big)
    Atomics.sub(i64, base + B_RESERVED, big)
    core.unlock()
  }

  snapshot (): BudgetSnapshot {
    const { i64, base } = this
    return {
      limit: Number(Atomics.load(i64, base + B_LIMIT)),
      reserved: Number(Atomics.load(i64, base + B_RESERVED)),
      peak: Number(Atomics.load(i64, base + B_PEAK)),
      refused: Number(Atomics.load(i64, base + B_REFUSED)),
      reclaimed: Number(Atomics.load(i64, base + B_RECLAIMED)),
    }
  }
}

/** Primary only, inside the lock: reclaim a dead row's bytes; returns how many. */
export function reclaimBytesLocked (core: LedgerCore, row: number, recompute: boolean): number {
  const { i64, layout } = core
  const base = layout.budget64
  const bytes = Atomics.exchange(i64, layout.row64(row) + R64_BYTES, 0n)
  if (recompute) {
    let sum = 0n
    for (let r = 0; r < layout.dims.rows; r++) sum += Atomics.load(i64, layout.row64(r) + R64_BYTES)
    Atomics.store(i64, base + B_RESERVED, sum)
  } else {
    Atomics.sub(i64, base + B_RESERVED, bytes)
  }
  if (bytes > 0n) Atomics.add(i64, base + B_RECLAIMED, bytes)
  return Number(bytes)
}
