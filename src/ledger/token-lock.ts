// A spin-then-park lock in a SharedArrayBuffer, owned by a token: the one lock of the ledger
// (core.ts) and of the session event ring (src/events/ring.ts), and the one any other shared
// table should use (e.g. the continuation store).
//
// ## Layout
//
//   i32[at + TL_WORD]    0 = free, else the holder's token (a thread's row + 1: never 0)
//   i32[at + TL_PARKED]  threads parked in Atomics.wait on the lock word (a hint: unlock
//                        notifies only when it is > 0)
//
// TOKEN_LOCK_FIELDS cells in all; the owner of the buffer names `at` in its layout module.
//
// ## Invariants
//
//   K1  The lock word is 0 or the token of the thread inside the critical section.
//   K2  A thread never re-enters the lock it holds, and never unlocks a lock it does not
//       hold: both throw (a bookkeeping bug, never tolerated), and leave the word unchanged.
//   K3  A thread that may have to repair a dead holder (the primary) never calls lock(): it
//       would park on a holder only it can repair. It uses tryLock / tryLockOrSteal, which
//       never park, and retries on a later turn of its event loop.
//
// ## Fairness
//
// None: whoever's compareExchange lands first wins (barging). Critical sections are short
// straight-line code (~100 ns); ordering between waiters is the business of the structures
// inside (the gates' and lanes' FIFO tickets), not of the lock.
//
// ## Cancel safety
//
// lock() is synchronous and cannot be cancelled; it returns holding the lock or throws (K2)
// holding nothing new. tryLock / tryLockOrSteal return without the lock or with it.
//
// ## Memory ordering
//
// Acquire and release are seq-cst compareExchanges, so everything written inside one
// critical section happens-before everything read inside the next. A waiter increments
// TL_PARKED *before* Atomics.wait checks the word, and unlock reads TL_PARKED *after* its
// release: if unlock read 0, the waiter's wait then sees the word changed and returns at once
// (no lost wake-up). Parking is also bounded (PARK_MS slices), so a missed notify costs 1 ms.
//
// ## Death
//
// A holder that dies keeps its token in the word. Other threads park in PARK_MS slices until
// the primary, having observed the thread's exit, steals the lock from the dead token
// (`tryLockOrSteal`: compareExchange dead token -> own token, then repairs what the dead
// holder left half-written and unlocks) or just frees it (`releaseDead`). Either succeeds
// once: a second attempt finds another token or 0. A thread that dies while parked leaves
// TL_PARKED one too high for good: the only cost is a needless notify at every later unlock.

export const TL_WORD = 0
export const TL_PARKED = 1
export const TOKEN_LOCK_FIELDS = 2

/** Spins before parking: critical sections are ~100 ns, a holder that is preempted is not. */
const SPINS = 100
/** Park slice: bounds how long a parked thread sleeps if a notify is ever missed. */
const PARK_MS = 1

export class TokenLock {
  readonly i32: Int32Array
  readonly token: number
  private readonly word: number
  private readonly parked: number
  private readonly name: string

  /** `name` starts the error messages ("ledger lock re-entered by its holder"). */
  constructor (i32: Int32Array, at: number, token: number, name: string) {
    if (!Number.isInteger(token) || token <= 0) throw new RangeError(`a lock token is a positive integer, got ${token}`)
    if (!Number.isInteger(at) || at < 0 || at + TOKEN_LOCK_FIELDS > i32.length) throw new RangeError(`lock cells at ${at} outside the buffer`)
    this.i32 = i32
    this.word = at + TL_WORD
    this.parked = at + TL_PARKED
    this.token = token
    this.name = name
  }

  /** The token holding the lock, or 0. */
  get holder (): number { return Atomics.load(this.i32, this.word) }

  /** Takes the lock, spinning then parking while another thread holds it. */
  lock (): void {
    if (Atomics.compareExchange(this.i32, this.word, 0, this.token) === 0) return
    this.lockSlow()
  }

  private lockSlow (): void {
    const { i32, word } = this
    let spins = 0
    for (;;) {
      const holder = Atomics.load(i32, word)
      if (holder === 0) {
        if (Atomics.compareExchange(i32, word, 0, this.token) === 0) return
        continue
      }
      if (holder === this.token) throw new Error(`${this.name} lock re-entered by its holder`)
      if (++spins < SPINS) continue
      // Counted before the wait checks the word (see "Memory ordering").
      Atomics.add(i32, this.parked, 1)
      Atomics.wait(i32, word, holder, PARK_MS)
      Atomics.sub(i32, this.parked, 1)
      spins = 0
    }
  }

  /** Releases the lock this thread holds; throws (and changes nothing) if it does not. */
  unlock (): void {
    const { i32, word } = this
    if (Atomics.compareExchange(i32, word, this.token, 0) !== this.token) {
      throw new Error(`${this.name} lock released by a thread that does not hold it`)
    }
    // Read after the release (see "Memory ordering").
    if (Atomics.load(i32, this.parked) > 0) Atomics.notify(i32, word, 1)
  }

  /** Takes the lock if it comes free within a short spin; never parks. */
  tryLock (): boolean {
    const { i32, word } = this
    for (let spins = 0; spins < SPINS; spins++) {
      const holder = Atomics.load(i32, word)
      if (holder === this.token) throw new Error(`${this.name} lock re-entered by its holder`)
      if (holder === 0 && Atomics.compareExchange(i32, word, 0, this.token) === 0) return true
    }
    return false
  }

  /**
   * Never parks: takes the lock if it is free, or steals it if its holder's token is dead.
   * Returns 'locked', 'stolen' (what the dead holder guarded may be half-written: repair it
   * before unlocking), or null when a thread not known to be dead holds it — retry on a later
   * turn of the event loop. Parking instead could deadlock: the holder may be another dead
   * thread whose own exit handler, queued behind this one, is what declares it dead.
   */
  tryLockOrSteal (isDeadToken: (token: number) => boolean): 'locked' | 'stolen' | null {
    const { i32, word } = this
    for (let spins = 0; spins < SPINS; spins++) {
      const holder = Atomics.load(i32, word)
      if (holder === 0) {
        if (Atomics.compareExchange(i32, word, 0, this.token) === 0) return 'locked'
        continue
      }
      if (holder === this.token) throw new Error(`${this.name} lock re-entered by its holder`)
      if (isDeadToken(holder) && Atomics.compareExchange(i32, word, holder, this.token) === holder) return 'stolen'
    }
    return null
  }
}

/**
 * Frees the lock at `at` if the dead thread `deadToken` holds it, without taking it: for a
 * structure whose readers tolerate what a dead holder left half-written (the event ring's
 * readers resynchronise on an unexpected seq), so there is nothing to repair under it.
 * Returns whether it did; true at most once per death. Never parks.
 */
export function releaseDead (i32: Int32Array, at: number, deadToken: number): boolean {
  if (deadToken <= 0) throw new RangeError(`a lock token is a positive integer, got ${deadToken}`)
  const held = Atomics.compareExchange(i32, at + TL_WORD, deadToken, 0) === deadToken
  if (held && Atomics.load(i32, at + TL_PARKED) > 0) Atomics.notify(i32, at + TL_WORD, 1)
  return held
}
