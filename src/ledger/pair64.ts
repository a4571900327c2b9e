// A 64-bit monotonic counter as two Int32 cells, (lo, hi) at i32[at], i32[at + 1]: the one
// implementation of every (lo, hi) total in the ledger and the event ring. Int32 cells keep
// the permit fast path free of BigInt allocation, and a pair never wraps in practice (2^53).
//
// ## Layout
//
//   i32[at]      lo: the low 32 bits (read unsigned)
//   i32[at + 1]  hi: the high bits, >= 0; or ~H (negative) while a carry from H to H + 1 is
//                being written (see "Carry" below)
//
// ## Invariants
//
//   P1  Outside a carry, value = hi * 2^32 + (lo >>> 0), hi >= 0.
//   P2  While hi = ~H (a carry from H), lo is either the old low word, >= 2^31, or the new
//       one, < 2^31: value = (lo >= 2^31 ? H : H + 1) * 2^32 + lo. This holds because every
//       carry is a step n < 2^31 (larger adds are made in such steps): a carry needs
//       old lo + n >= 2^32, so old lo > 2^31, and leaves new lo = old lo + n - 2^32 < 2^31.
//   P3  One writer at a time: the caller guarantees it (a lock held around every add of this
//       pair, or a pair that only its owning thread ever adds to).
//
// ## Policy
//
// A carry is three stores, in order: hi = ~H (announce), lo = new lo, hi = H + 1. Readers
// never see a pair that is 2^32 too low (the new lo beside the old hi) or too high (the old
// lo beside the new hi), which is what a plain two-store carry shows a reader caught between
// the stores (test/unit/ledger/pair64.test.ts races one). No add waits for a reader.
//
// ## Cancel safety
//
// Nothing here waits or can be cancelled: every operation is a few loads and stores.
//
// ## Memory ordering
//
// - `addLocked`: inside the lock that serialises this pair's writers. Without a carry it is
//   one plain load pair and a plain store of lo (the gate fast path: plain accesses, ordered
//   by the lock's seq-cst acquire and release; aligned Int32 stores are tear-free for
//   lock-free readers). A carry's three stores are Atomics.store (seq-cst), so a reader that
//   sees any of them sees the ones before it. Caveat: a later plain store of the same pair in
//   the same critical section (the ring evicting several records, a reclaim granting several
//   permits) is ordered after the carry by program order only: kept on x86-64 (TSO, where
//   sluice is measured, PLATFORM.md); a weakly ordered CPU may show a lock-free reader that
//   store before the carry's last one, once per 2^32 of the count (metrics only).
// - `addOwned`: the pair's owning thread only (row counters), every store an Atomics.store.
// - `read`: lock-free. Loads hi, lo, hi (seq-cst) and retries while hi changed under it; a
//   stable announced carry (hi = ~H) is decoded by P2, so a reader never spins on a writer
//   that died inside a carry. Retries are bounded by carries: one per 2^31 of the count.
// - `readLocked` / `writeLocked`: plain, inside the lock; `writeLocked` only for pairs no
//   lock-free reader reads (the ring's record seq words) or before the buffer is shared.
//
// ## Death
//
// A writer that dies between the carry's stores leaves hi = ~H: readers decode it (P2), and
// the next add (the lock's next holder, or the row's next life) finishes the carry first.

/** Cells of one pair: layouts size their blocks of totals with it. */
export const PAIR_FIELDS = 2

const TWO32 = 0x100000000
const HALF = 0x80000000
/** Largest step of one add: keeps P2 (a carry's old lo >= 2^31, its new lo < 2^31). */
const MAX_STEP = 0x7fffffff

/** The value of a pair whose hi word is `hi` (possibly an announced carry) and lo `lo`. */
function valueOf (hi: number, lo: number): number {
  if (hi >= 0) return hi * TWO32 + lo
  const from = ~hi
  return (lo >= HALF ? from : from + 1) * TWO32 + lo
}

/** Writes `value` (> the pair's current value by < 2^31, crossing 2^32) as a carry. */
function carry (i32: Int32Array, at: number, value: number): void {
  const hi = Math.floor(value / TWO32)
  Atomics.store(i32, at + 1, ~(hi - 1))
  Atomics.store(i32, at, (value - hi * TWO32) | 0)
  Atomics.store(i32, at + 1, hi)
}

/** Adds n (a non-negative integer) inside the lock that serialises this pair's writers. */
export function addLocked (i32: Int32Array, at: number, n = 1): void {
  const lo = i32[at] >>> 0
  const hi = i32[at + 1]
  if (hi >= 0 && lo + n < TWO32) { i32[at] = lo + n; return }
  addSlow(i32, at, n)
}

/** Adds n (a non-negative integer) to a pair only the calling thread writes. */
export function addOwned (i32: Int32Array, at: number, n = 1): void {
  const lo = Atomics.load(i32, at) >>> 0
  const hi = Atomics.load(i32, at + 1)
  if (hi >= 0 && lo + n < TWO32) { Atomics.store(i32, at, lo + n); return }
  addSlow(i32, at, n)
}

/** The carry path of both adds: finish a dead writer's carry, then add in steps < 2^31. */
function addSlow (i32: Int32Array, at: number, n: number): void {
  let hi = Atomics.load(i32, at + 1)
  let lo = Atomics.load(i32, at) >>> 0
  if (hi < 0) {
    hi = Math.floor(valueOf(hi, lo) / TWO32)
    Atomics.store(i32, at + 1, hi)
  }
  let value = hi * TWO32 + lo
  while (n > 0) {
    const step = n > MAX_STEP ? MAX_STEP : n
    n -= step
    const next = value + step
    if (Math.floor(next / TWO32) === Math.floor(value / TWO32)) Atomics.store(i32, at, (next % TWO32) | 0)
    else carry(i32, at, next)
    value = next
  }
}

/** Reads a pair without the lock (see "Memory ordering"). */
export function read (i32: Int32Array, at: number): number {
  for (;;) {
    const hi = Atomics.load(i32, at + 1)
    const lo = Atomics.load(i32, at) >>> 0
    if (Atomics.load(i32, at + 1) === hi) return valueOf(hi, lo)
  }
}

/** Reads a pair inside the lock that serialises its writers. */
export function readLocked (i32: Int32Array, at: number): number {
  return valueOf(i32[at + 1], i32[at] >>> 0)
}

/**
 * Writes a pair inside its lock, for pairs no lock-free reader reads (or before the buffer
 * is shared): two plain stores, no carry protocol.
 */
export function writeLocked (i32: Int32Array, at: number, value: number): void {
  const hi = Math.floor(value / TWO32)
  i32[at] = (value - hi * TWO32) | 0
  i32[at + 1] = hi
}
