// The ledger core: one thread's views over the shared buffer, and the ledger lock.
//
// ## Design
//
// Every ledger mutation (gates, byte budget, row holdings) happens inside one short critical
// section guarded by a single lock word, H_LOCK. Critical sections are straight-line reads
// and writes of a few Int32/BigInt64 cells plus, on the slow path, a scan of at most
// (maxQueued + maxPermits) waiter slots. Nothing inside awaits, allocates objects or calls
// user code. One lock (rather than lock-free counters per structure) keeps every composite
// step — "take a permit unless someone queued before you", "hand this permit to the oldest
// waiter" — a single atomic step, which is what makes strict FIFO and "no lost wake-up"
// provable (see src/ledger/model/ledger.pml), and what makes crash repair possible.
//
// ## Invariants (outside the lock)
//
//   L1  H_LOCK is 0 or the token (row + 1) of the thread inside a critical section.
//   L2  A thread never re-enters the lock (asserted).
//   L3  The primary never calls lock(): it would park on a dead holder that only the
//       primary itself can repair (model hazard D3). It uses tryLockForRepair only.
//
// A thread that dies while parked leaves H_LOCK_PARKED one too high for good; the only cost
// is a needless Atomics.notify on every later unlock.
//
// ## Death inside a critical section
//
// A worker can die at any instruction (out of memory at an allocation, `terminate()`).
// If it dies holding H_LOCK, the lock word keeps its token. Every other thread then parks in
// `lock()` (bounded Atomics.wait slices) until the primary observes the worker's `exit`,
// steals the lock with compareExchange(token -> primary token) in `lockForRepair`, and
// rebuilds every derived counter from the truth cells (waiter slots and row holdings; see
// gate.ts and budget.ts "Repair"). A thread that dies between two writes can therefore leave
// derived counters inconsistent, but never the truth of a LIVE row: rows are written only by
// their own thread, and the dead row is zeroed by the repair anyway.
//
// ## Memory ordering
//
// Lock acquire and release are both sequentially consistent compareExchanges (release
// checks it holds the lock). Inside, gate counters are plain Int32 accesses ordered by the
// lock (tear-free for aligned Int32, so lock-free snapshot readers see whole values); slot
// state words and BigInt64 cells use Atomics. Snapshots taken
// without the lock may mix two moments; metrics accept that, decisions never use them.

import { computeLayout, dimsOf, H_LOCK, H_LOCK_PARKED, type Layout } from './layout.ts'

/** Spins before parking: critical sections are ~100 ns, a holder that is preempted is not. */
const SPINS = 100
/** Park slice: bounds how long a parked thread sleeps if a notify is ever missed. */
const PARK_MS = 1

export class LedgerCore {
  readonly sab: SharedArrayBuffer
  readonly layout: Layout
  readonly i32: Int32Array
  readonly i64: BigInt64Array
  readonly row: number
  readonly token: number

  constructor (sab: SharedArrayBuffer, row: number) {
    this.sab = sab
    this.layout = computeLayout(dimsOf(sab))
    if (!Number.isInteger(row) || row < 0 || row >= this.layout.dims.rows) {
      throw new RangeError(`ledger row ${row} out of range (rows: ${this.layout.dims.rows})`)
    }
    this.i32 = new Int32Array(sab, 0, this.layout.i32Length)
    this.i64 = new BigInt64Array(sab, this.layout.i64ByteOffset, this.layout.i64Length)
    this.row = row
    this.token = row + 1
  }

  lock (): void {
    if (Atomics.compareExchange(this.i32, H_LOCK, 0, this.token) === 0) return
    this.lockSlow()
  }

  private lockSlow (): void {
    const i32 = this.i32
    let spins = 0
    for (;;) {
      const holder = Atomics.load(i32, H_LOCK)
      if (holder === 0) {
        if (Atomics.compareExchange(i32, H_LOCK, 0, this.token) === 0) return
        continue
      }
      if (holder === this.token) throw new Error('ledger lock re-entered by its holder')
      if (++spins < SPINS) continue
      // Park until the holder unlocks (it notifies when H_LOCK_PARKED > 0). The slice is
      // short so a dead holder repaired by the primary is noticed quickly even without a
      // notify.
      Atomics.add(i32, H_LOCK_PARKED, 1)
      Atomics.wait(i32, H_LOCK, holder, PARK_MS)
      Atomics.sub(i32, H_LOCK_PARKED, 1)
      spins = 0
    }
  }

  unlock (): void {
    const i32 = this.i32
    // Releasing a lock we do not hold means a bookkeeping bug; fail loudly.
    if (Atomics.compareExchange(i32, H_LOCK, this.token, 0) !== this.token) {
      throw new Error('ledger lock released by a thread that does not hold it')
    }
    if (Atomics.load(i32, H_LOCK_PARKED) > 0) Atomics.notify(i32, H_LOCK, 1)
  }

  /**
   * Primary only, never parks: take the lock if it is free, or steal it if its holder is a
   * dead thread's token. Returns 'locked', 'stolen' (derived counters then need a rebuild),
   * or null when a thread not known to be dead holds it — the caller retries on a later turn
   * of its event loop. Parking here instead would be a deadlock: the holder may be another
   * dead worker whose own exit handler, queued behind this one on the primary's loop, is the
   * only thing that can repair the lock.
   */
  tryLockForRepair (isDeadToken: (token: number) => boolean): 'locked' | 'stolen' | null {
    const i32 = this.i32
    for (let spins = 0; spins < SPINS; spins++) {
      const holder = Atomics.load(i32, H_LOCK)
      if (holder === 0) {
        if (Atomics.compareExchange(i32, H_LOCK, 0, this.token) === 0) return 'locked'
        continue
      }
      if (holder === this.token) throw new Error('ledger lock re-entered by its holder')
      if (isDeadToken(holder)) {
        if (Atomics.compareExchange(i32, H_LOCK, holder, this.token) === holder) return 'stolen'
      }
    }
    return null
  }
}
