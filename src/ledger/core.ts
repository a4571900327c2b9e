// The ledger core: one thread's views over the shared buffer, and the ledger lock.
//
// Every ledger mutation (gates, byte budget, row holdings, lanes, runs) happens inside one
// short critical section guarded by a single lock. Critical sections are straight-line reads
// and writes of a few Int32/BigInt64 cells plus, on the slow path, a scan of at most
// (maxQueued + maxPermits) waiter slots or LN_HWM lane entries. Nothing inside awaits,
// allocates objects or calls user code. One lock (rather than lock-free counters per
// structure) keeps every composite step — "take a permit unless someone queued before you",
// "hand this permit to the oldest waiter" — a single atomic step, which is what makes strict
// FIFO and "no lost wake-up" provable (see src/ledger/model/ledger.pml), and what makes crash
// repair possible.
//
// ## Layout (layout.ts)
//
//   header (Int32):  H_LOCK (the lock word), H_LOCK_PARKED (its parked count): a TokenLock
//                    (token-lock.ts); everything else in the buffer is its structures'.
//
// ## Invariants (outside the lock)
//
//   L1  H_LOCK is 0 or the token (row + 1) of the thread inside a critical section.
//   L2  A thread never re-enters the lock, nor unlocks it without holding it (both throw).
//   L3  The primary never calls lock(): it would park on a dead holder that only the
//       primary itself can repair (model hazard D3). It uses tryLockForRepair only.
//
// ## Fairness
//
// The lock itself barges (token-lock.ts); the structures it guards queue their waiters in
// FIFO ticket order, and no thread ever waits for a permit inside the lock.
//
// ## Cancel safety
//
// Does not apply: lock() is synchronous and nothing inside a critical section awaits, so no
// abort can land between lock and unlock.
//
// ## Memory ordering
//
// Lock acquire and release are sequentially consistent compareExchanges (release checks it
// holds the lock). Inside, gate counters are plain Int32 accesses ordered by the lock
// (tear-free for aligned Int32, so lock-free snapshot readers see whole values); slot state
// words and BigInt64 cells use Atomics; (lo, hi) totals follow pair64.ts. Snapshots taken
// without the lock may mix two moments; metrics accept that, decisions never use them.
//
// ## Death
//
// A worker can die at any instruction (out of memory at an allocation, `terminate()`). If it
// dies holding the lock, the lock word keeps its token. Every other thread then parks in
// `lock()` (bounded Atomics.wait slices) until the primary observes the worker's `exit`,
// steals the lock (`tryLockForRepair`: compareExchange dead token -> primary token) and
// rebuilds every derived counter from the truth cells (waiter slots and row holdings; see
// gate.ts and budget.ts "Death"). A thread that dies between two writes can therefore leave
// derived counters inconsistent, but never the truth of a LIVE row: rows are written only by
// their own thread, and the dead row is zeroed by the repair anyway. A thread that dies while
// parked leaves H_LOCK_PARKED one too high for good: a needless notify at every later unlock.

import { computeLayout, dimsOf, H_LOCK, type Layout } from './layout.ts'
import { TokenLock } from './token-lock.ts'

export class LedgerCore {
  readonly layout: Layout
  readonly i32: Int32Array
  readonly i64: BigInt64Array
  readonly row: number
  readonly token: number
  private readonly mutex: TokenLock

  constructor (sab: SharedArrayBuffer, row: number) {
    this.layout = computeLayout(dimsOf(sab))
    if (!Number.isInteger(row) || row < 0 || row >= this.layout.dims.rows) {
      throw new RangeError(`ledger row ${row} out of range (rows: ${this.layout.dims.rows})`)
    }
    this.i32 = new Int32Array(sab, 0, this.layout.i32Length)
    this.i64 = new BigInt64Array(sab, this.layout.i64ByteOffset, this.layout.i64Length)
    this.row = row
    this.token = row + 1
    this.mutex = new TokenLock(this.i32, H_LOCK, this.token, 'ledger')
  }

  /** Enters the one ledger critical section (spins, then parks; never the primary: L3). */
  lock (): void { this.mutex.lock() }

  /** Leaves it; throws if this thread does not hold the lock. */
  unlock (): void { this.mutex.unlock() }

  /**
   * Primary only, never parks: take the lock if it is free, or steal it if its holder is a
   * dead thread's token. Returns 'locked', 'stolen' (derived counters then need a rebuild),
   * or null when a thread not known to be dead holds it — the caller retries on a later turn
   * of its event loop (token-lock.ts tryLockOrSteal says why parking would deadlock).
   */
  tryLockForRepair (isDeadToken: (token: number) => boolean): 'locked' | 'stolen' | null {
    return this.mutex.tryLockOrSteal(isDeadToken)
  }
}
