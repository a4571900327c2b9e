// The run table: how many exchanges each run identity has taken, shared by every worker, for
// turn pins (a run may take at most `maxTurnsPerRun` exchanges).
//
// ## Layout (layout.ts)
//
//   RUN_SLOTS x { RUN_HASH_A, RUN_HASH_B, RUN_COUNT, RUN_LAST_USED }
//
// A run is keyed by scopedKey64(key name, run id) (scoped-hash.ts); (0, 0) marks an empty slot.
//
// ## Invariants (outside the lock)
//
//   R1  no two slots hold the same (A, B)
//   R2  RUN_COUNT of a used slot is >= 1 and never above the pin it was taken under
//
// ## Policy
//
// take() and giveBack() run inside the ledger lock (one scan of the table, ~1 µs at 4096
// slots: once per exchange, never per event). A new run takes an empty slot, else evicts the
// least recently used one. Eviction forgets that run's count: a run idle long enough to be the
// oldest of 4096 starts over. That is the one way a pin can be exceeded; the table size is
// the knob (`limits.maxTrackedRuns`).
//
// ## Cancel safety
//
// Does not apply: take() and giveBack() are synchronous and never wait. A refused exchange
// that took a turn gives it back (giveBack) before the provider is asked.
//
// ## Memory ordering
//
// Plain Int32 accesses inside the ledger lock, which orders them; nothing reads the table
// without the lock.
//
// ## Death
//
// Counts belong to runs, not rows: a dead worker's turns stay taken (the exchanges happened).
// A thread that dies inside take() can leave a half-written slot (a hash without its count);
// it is not repaired: such a slot is a run nobody will look up, evicted like any other.

import { scopedKey64, type Key64 } from './scoped-hash.ts'
import type { LedgerCore } from './core.ts'
import { RUN_COUNT, RUN_FIELDS, RUN_HASH_A, RUN_HASH_B, RUN_LAST_USED } from './layout.ts'

const EPOCH_MS = Date.UTC(2026, 0, 1)

export type TakeResult = { ok: true; count: number } | { ok: false; count: number }

export class RunTable {
  private readonly core: LedgerCore
  private readonly base: number
  private readonly slots: number

  constructor (core: LedgerCore) {
    this.core = core
    this.base = core.layout.runs32
    this.slots = core.layout.dims.runs
  }

  /** The run's table key (scoped-hash.ts). */
  static hash (key: string, run: string): Key64 {
    return scopedKey64(key, run)
  }

  /** Takes one exchange for the run, or refuses when it already has `max`. */
  take (key: string, run: string, max: number): TakeResult {
    if (this.slots === 0) return { ok: true, count: 0 }
    const [a, b] = RunTable.hash(key, run)
    const { i32 } = this.core
    const now = Math.floor((Date.now() - EPOCH_MS) / 1000)
    this.core.lock()
    let empty = -1
    let oldest = -1
    let oldestAt = Infinity
    for (let s = 0; s < this.slots; s++) {
      const at = this.base + s * RUN_FIELDS
      const ha = i32[at + RUN_HASH_A]
      const hb = i32[at + RUN_HASH_B]
      if (ha === a && hb === b) {
        const count = i32[at + RUN_COUNT]
        i32[at + RUN_LAST_USED] = now
        if (count >= max) { this.core.unlock(); return { ok: false, count } }
        i32[at + RUN_COUNT] = count + 1
        this.core.unlock()
        return { ok: true, count: count + 1 }
      }
      if (ha === 0 && hb === 0) { if (empty < 0) empty = s; continue }
      if (i32[at + RUN_LAST_USED] < oldestAt) { oldestAt = i32[at + RUN_LAST_USED]; oldest = s }
    }
    const slot = empty >= 0 ? empty : oldest
    const at = this.base + slot * RUN_FIELDS
    i32[at + RUN_HASH_A] = a
    i32[at + RUN_HASH_B] = b
    i32[at + RUN_COUNT] = 1
    i32[at + RUN_LAST_USED] = now
    this.core.unlock()
    return { ok: max >= 1, count: 1 }
  }

  /** Returns one exchange to the run (the exchange was refused locally before the provider). */
  giveBack (key: string, run: string): void {
    if (this.slots === 0) return
    const [a, b] = RunTable.hash(key, run)
    const { i32 } = this.core
    this.core.lock()
    for (let s = 0; s < this.slots; s++) {
      const at = this.base + s * RUN_FIELDS
      if (i32[at + RUN_HASH_A] === a && i32[at + RUN_HASH_B] === b) {
        if (i32[at + RUN_COUNT] > 0) i32[at + RUN_COUNT]--
        break
      }
    }
    this.core.unlock()
  }
}
