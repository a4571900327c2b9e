// A FIFO permit gate in the shared ledger, usable from every thread.
//
// ## Layout (layout.ts)
//
//   gate block (Int32):  G_MAX  G_QUEUE_MAX  G_SLOTS  G_ACTIVE  G_QUEUED  G_NEXT_TICKET
//   waiter slots:        G_SLOTS x { S_STATE, S_OWNER, S_TICKET }
//   row r (Int32):       R_HELD + gate   permits row r has claimed
//   totals (Int32 pairs, G_TOTALS): admitted, released, queued, refused, timeouts, cancels, ...
//
// A waiter slot moves FREE -> WAITING -> GRANTED -> FREE, or WAITING -> FREE on cancel.
//
//   from      to       who                     when
//   FREE      WAITING  the arriving thread     enqueue: no permit free, or someone already queued
//   WAITING   GRANTED  any releasing thread    release(): the permit is handed to the oldest waiter
//   WAITING   GRANTED  the primary             repair(): permits freed by a dead row
//   GRANTED   FREE     the owner               claim: the permit moves into the owner's row
//   WAITING   FREE     the owner               timeout or abort, while still WAITING
//   any       FREE     the primary             reclaim of a dead owner's slots
//
// Every transition happens under the ledger lock (core.ts). The slot's state word is also
// the Atomics.waitAsync address the owner sleeps on; every transition away from WAITING is
// followed by Atomics.notify(all) on it, after the lock is released — unless the notifying
// thread dies in between: then the primary's reclaim of that thread notifies every GRANTED
// slot again.
//
// ## Invariants (outside the lock)
//
//   G1  G_ACTIVE = sum over rows of R_HELD[g] + count(GRANTED slots)  <=  G_MAX
//   G2  G_QUEUED = count(WAITING slots)  <=  G_QUEUE_MAX
//   G3  G_QUEUED > 0  implies  G_ACTIVE = G_MAX        (no waiter sleeps beside a free permit)
//   G4  count(WAITING) + count(GRANTED) <= G_SLOTS     (so enqueue always finds a FREE slot)
//
// ## Fairness
//
// Strict FIFO by ticket. A permit released while anyone waits is handed to the oldest waiter
// directly (G_ACTIVE does not drop), and a newcomer takes the fast path only when nobody is
// queued. Barging — letting a newcomer win a permit just released for a sleeping waiter —
// would be cheaper, but it lets a steady stream of new requests starve a queued one up to
// its 30 s deadline, which is exactly the unfairness users see as "random timeouts".
//
// ## Cancel safety
//
// Cancelling an acquire (AbortSignal) loses your place. If the grant won the race (the slot
// is already GRANTED when the cancel takes the lock), we pretend we never got it: the permit
// is claimed and released in the same critical section, which hands it to the next waiter.
// A timeout that finds its slot GRANTED keeps the grant: the permit arrived before the
// deadline was processed, and the acquire settles as granted. Either way the permit is
// accounted exactly once.
//
// ## Memory ordering
//
// Counters and row cells are plain Int32 reads and writes inside the lock: the lock's
// seq-cst compareExchange (acquire) and store (release) order them, and plain aligned Int32
// accesses are tear-free for the lock-free snapshot readers. (Plain accesses halve the fast
// path: ~65 ns instead of ~130 ns for acquire+release, native-bench/ledger.) The (lo, hi)
// totals follow pair64.ts (`addLocked`: plain unless a carry). Slot state
// words are the exception: they are Atomics.waitAsync addresses, so they are always written
// with Atomics.store. The waker's notify happens after unlock; the woken owner re-reads its
// slot state (Atomics.load) before acting, and treats any wake-up that finds WAITING as
// spurious (slots are reused, notifies are "all").
//
// ## Death
//
// A dead thread's row holdings and slots are reclaimed once by the primary (ledger.ts
// `reclaimRow`): its row's R_HELD is zeroed, its slots freed, G_ACTIVE and G_QUEUED are
// recomputed from the truth (rows + slots), freed permits are handed to waiters in ticket
// order, and every GRANTED slot is notified (the dead thread may have granted one without
// notifying it). Zeroing under the lock makes a second reclaim of the same row a no-op.

import { SluiceError, type ErrorCode } from '../errors.ts'
import type { LedgerCore } from './core.ts'
import {
  FREE, GRANTED, WAITING,
  G_ACTIVE, G_MAX, G_NEXT_TICKET, G_QUEUED, G_QUEUE_MAX, G_SLOTS, G_TOTALS,
  GT_ADMITTED, GT_CANCELS, GT_CANCEL_AFTER_GRANT, GT_QUEUED, GT_RECLAIMED, GT_REFUSED_FULL, GT_RELEASED, GT_TIMEOUTS,
  R_HELD, S_OWNER, S_STATE, S_TICKET, SLOT_FIELDS,
} from './layout.ts'
import { addLocked, read } from './pair64.ts'

export interface GateCodes {
  readonly full: ErrorCode
  readonly timeout: ErrorCode
}

export interface AcquireOptions {
  /** Absolute deadline (Date.now() ms). Default: now + the gate's default wait. */
  readonly deadline?: number
  readonly signal?: AbortSignal
  /** Called once if the acquire had to queue (for the "waiting for model capacity" event). */
  readonly onQueued?: () => void
}

export interface GateSnapshot {
  max: number
  queueMax: number
  active: number
  queued: number
  admitted: number
  released: number
  queuedTotal: number
  refusedFull: number
  timeouts: number
  cancels: number
  cancelsAfterGrant: number
  reclaimed: number
}

/** The longest delay setTimeout honours; beyond it Node fires after 1 ms. */
const MAX_TIMER_MS = 0x7fffffff

const ENQUEUE_FULL = -1
const ENQUEUE_GRANTED = -2

interface Waiter {
  slot: number
  settled: boolean
  resolve: () => void
  reject: (err: unknown) => void
  timer: ReturnType<typeof setTimeout> | undefined
  signal: AbortSignal | undefined
  onAbort: (() => void) | undefined
}

export class Gate {
  readonly name: string
  private readonly core: LedgerCore
  private readonly i32: Int32Array
  private readonly base: number
  private readonly slotBase: number
  private readonly totals: number
  private readonly held: number
  private readonly codes: GateCodes
  private readonly defaultWaitMs: number

  constructor (core: LedgerCore, gate: number, name: string, codes: GateCodes, defaultWaitMs: number) {
    this.core = core
    this.name = name
    this.i32 = core.i32
    this.base = core.layout.gate32[gate]
    this.slotBase = core.layout.slot32[gate]
    this.totals = this.base + G_TOTALS
    this.held = core.layout.row32(core.row) + R_HELD + gate
    this.codes = codes
    this.defaultWaitMs = defaultWaitMs
  }

  /** Permits this thread currently holds from this gate. */
  get heldByMe (): number { return Atomics.load(this.i32, this.held) }

  /**
   * Takes a permit now if one is free and nobody is queued. Never waits.
   * The uncontended hot path: lock, three loads, two stores, unlock.
   */
  tryAcquire (): boolean {
    const { i32, base, core } = this
    core.lock()
    if (i32[base + G_QUEUED] === 0 && i32[base + G_ACTIVE] < i32[base + G_MAX]) {
      i32[base + G_ACTIVE]++
      i32[this.held]++
      addLocked(i32, this.totals + GT_ADMITTED)
      core.unlock()
      return true
    }
    core.unlock()
    return false
  }

  /**
   * Takes a permit, waiting in FIFO order if none is free. Resolves when the permit is held
   * by this thread; rejects with the gate's `full` code at once when the queue is full, its
   * `timeout` code at the deadline, or `client_closed` when the signal aborts. On rejection
   * the gate is left as if this call never happened.
   */
  acquire (opts: AcquireOptions = {}): Promise<void> {
    const signal = opts.signal
    if (signal?.aborted) return Promise.reject(new SluiceError('client_closed', { gate: this.name }))
    const slot = this.enqueue()
    if (slot === ENQUEUE_GRANTED) return Promise.resolve()
    if (slot === ENQUEUE_FULL) {
      return Promise.reject(new SluiceError(this.codes.full, {
        gate: this.name,
        limit: Atomics.load(this.i32, this.base + G_MAX),
        queueLimit: Atomics.load(this.i32, this.base + G_QUEUE_MAX),
      }))
    }
    const deadline = opts.deadline ?? Date.now() + this.defaultWaitMs
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = { slot, settled: false, resolve, reject, timer: undefined, signal, onAbort: undefined }
      // The timer is ref'd on purpose: a pending Atomics.waitAsync does not keep a thread's
      // event loop alive, the deadline timer does.
      this.arm(w, deadline)
      if (signal) {
        w.onAbort = () => this.cancel(w, 'abort')
        signal.addEventListener('abort', w.onAbort, { once: true })
      }
      // onQueued is caller code: run it only once the waiter is fully registered, so an abort
      // from inside it is seen at once, and a throw withdraws the waiter (counted as a cancel;
      // a grant that raced in is put back) and rejects with that error instead of leaving an
      // orphaned WAITING slot whose eventual grant nobody would ever claim.
      if (opts.onQueued) {
        try {
          opts.onQueued()
        } catch (err) {
          this.cancel(w, 'abort', err)
        }
      }
      this.watch(w)
    })
  }

  /** Returns one permit held by this thread; hands it to the oldest waiter if any. */
  release (): void {
    const { core } = this
    const i32 = this.i32
    core.lock()
    if (i32[this.held] <= 0) {
      core.unlock()
      throw new Error(`${this.name} gate: release without a held permit`)
    }
    i32[this.held]--
    addLocked(i32, this.totals + GT_RELEASED)
    const granted = this.passOnLocked()
    core.unlock()
    if (granted >= 0) Atomics.notify(this.i32, this.stateIndex(granted))
  }

  snapshot (): GateSnapshot {
    const { i32, base, totals } = this
    return {
      max: Atomics.load(i32, base + G_MAX),
      queueMax: Atomics.load(i32, base + G_QUEUE_MAX),
      active: Atomics.load(i32, base + G_ACTIVE),
      queued: Atomics.load(i32, base + G_QUEUED),
      admitted: read(i32, totals + GT_ADMITTED),
      released: read(i32, totals + GT_RELEASED),
      queuedTotal: read(i32, totals + GT_QUEUED),
      refusedFull: read(i32, totals + GT_REFUSED_FULL),
      timeouts: read(i32, totals + GT_TIMEOUTS),
      cancels: read(i32, totals + GT_CANCELS),
      cancelsAfterGrant: read(i32, totals + GT_CANCEL_AFTER_GRANT),
      reclaimed: read(i32, totals + GT_RECLAIMED),
    }
  }

  // ---- internals: everything named *Locked runs inside the ledger lock ----

  private stateIndex (slot: number): number { return this.slotBase + slot * SLOT_FIELDS + S_STATE }

  /** Fast grant, or a WAITING slot, or refusal; in one critical section. */
  private enqueue (): number {
    const { i32, base, core } = this
    core.lock()
    const active = i32[base + G_ACTIVE]
    const queued = i32[base + G_QUEUED]
    if (queued === 0 && active < i32[base + G_MAX]) {
      i32[base + G_ACTIVE] = active + 1
      i32[this.held]++
      addLocked(i32, this.totals + GT_ADMITTED)
      core.unlock()
      return ENQUEUE_GRANTED
    }
    if (queued >= i32[base + G_QUEUE_MAX]) {
      addLocked(i32, this.totals + GT_REFUSED_FULL)
      core.unlock()
      return ENQUEUE_FULL
    }
    // G4 guarantees a FREE slot exists.
    const slots = i32[base + G_SLOTS]
    let slot = -1
    for (let s = 0; s < slots; s++) {
      if (Atomics.load(i32, this.stateIndex(s)) === FREE) { slot = s; break }
    }
    if (slot < 0) {
      core.unlock()
      throw new Error(`${this.name} gate: no free waiter slot (invariant G4 broken)`)
    }
    const at = this.slotBase + slot * SLOT_FIELDS
    const ticket = i32[base + G_NEXT_TICKET]
    i32[base + G_NEXT_TICKET] = (ticket + 1) | 0
    i32[at + S_OWNER] = core.row
    i32[at + S_TICKET] = ticket
    // The state store is the commit point: a slot is WAITING only once owner and ticket are set.
    Atomics.store(i32, at + S_STATE, WAITING)
    i32[base + G_QUEUED] = queued + 1
    addLocked(i32, this.totals + GT_QUEUED)
    core.unlock()
    return slot
  }

  /** Sleeps on the slot's state word until it leaves WAITING or the waiter settles. */
  private watch (w: Waiter): void {
    if (w.settled) return
    const idx = this.stateIndex(w.slot)
    const r = Atomics.waitAsync(this.i32, idx, WAITING)
    if (!r.async) { this.onWake(w); return }
    r.value.then(() => this.onWake(w), (err: unknown) => this.fail(w, err))
  }

  private onWake (w: Waiter): void {
    if (w.settled) return
    if (Atomics.load(this.i32, this.stateIndex(w.slot)) !== GRANTED) { this.watch(w); return }
    this.core.lock()
    this.claimLocked(w.slot)
    this.core.unlock()
    this.settle(w)
    w.resolve()
  }

  /**
   * The owner's timeout or abort. Settles the waiter exactly once, whoever won the race.
   * `error`, when given, is the rejection (an abort caused by a throwing onQueued).
   */
  private cancel (w: Waiter, why: 'timeout' | 'abort', error?: unknown): void {
    if (w.settled) return
    const { i32, base, core } = this
    const idx = this.stateIndex(w.slot)
    let outcome: 'removed' | 'granted' | 'put-back'
    let handedTo = -1
    core.lock()
    const state = Atomics.load(i32, idx)
    if (state === WAITING) {
      Atomics.store(i32, idx, FREE)
      i32[base + G_QUEUED]--
      addLocked(i32, this.totals + (why === 'timeout' ? GT_TIMEOUTS : GT_CANCELS))
      outcome = 'removed'
    } else if (state === GRANTED && why === 'timeout') {
      this.claimLocked(w.slot)
      outcome = 'granted'
    } else if (state === GRANTED) {
      // The grant won the race with the abort: pretend we never got it. Claim and release
      // in one critical section, which hands the permit to the next waiter.
      this.claimLocked(w.slot)
      i32[this.held]--
      addLocked(i32, this.totals + GT_RELEASED)
      addLocked(i32, this.totals + GT_CANCEL_AFTER_GRANT)
      handedTo = this.passOnLocked()
      outcome = 'put-back'
    } else {
      // FREE: only the primary's reclaim frees a live owner's slot, which means this thread
      // was declared dead. Nothing is held; refuse.
      outcome = 'removed'
    }
    core.unlock()
    // Wake our own pending waitAsync (and anyone else parked on a reused slot: spurious for them).
    Atomics.notify(i32, idx)
    if (handedTo >= 0) Atomics.notify(i32, this.stateIndex(handedTo))
    this.settle(w)
    if (outcome === 'granted') { w.resolve(); return }
    if (error !== undefined) w.reject(error)
    else if (why === 'abort') w.reject(new SluiceError('client_closed', { gate: this.name }))
    else w.reject(new SluiceError(this.codes.timeout, { gate: this.name, limit: Atomics.load(i32, base + G_MAX), queueLimit: Atomics.load(i32, base + G_QUEUE_MAX) }))
  }

  /**
   * Arms the deadline timer. setTimeout fires after 1 ms when asked for more than 2^31-1 ms,
   * so a farther deadline is reached in steps.
   */
  private arm (w: Waiter, deadline: number): void {
    if (w.settled) return
    const left = deadline - Date.now()
    w.timer = left > MAX_TIMER_MS
      ? setTimeout(() => this.arm(w, deadline), MAX_TIMER_MS)
      : setTimeout(() => this.cancel(w, 'timeout'), Math.max(0, left))
  }

  private fail (w: Waiter, err: unknown): void {
    // Atomics.waitAsync rejecting is not expected; surface it rather than hang.
    if (w.settled) return
    this.cancel(w, 'abort')
    void err
  }

  private settle (w: Waiter): void {
    w.settled = true
    if (w.timer !== undefined) clearTimeout(w.timer)
    if (w.signal && w.onAbort) w.signal.removeEventListener('abort', w.onAbort)
  }

  /** GRANTED -> FREE, the permit into this row (G_ACTIVE already counts it). */
  private claimLocked (slot: number): void {
    Atomics.store(this.i32, this.stateIndex(slot), FREE)
    this.i32[this.held]++
  }

  /**
   * A permit just came free: hand it to the oldest WAITING slot (returns that slot, to be
   * notified after unlock) or return it to the pool (returns -1).
   */
  private passOnLocked (): number {
    const slot = oldestWaitingLocked(this.i32, this.base, this.slotBase)
    if (slot < 0) {
      this.i32[this.base + G_ACTIVE]--
      return -1
    }
    Atomics.store(this.i32, this.stateIndex(slot), GRANTED)
    this.i32[this.base + G_QUEUED]--
    addLocked(this.i32, this.totals + GT_ADMITTED)
    return slot
  }
}

/** The WAITING slot with the oldest ticket (wrap-safe comparison), or -1. */
export function oldestWaitingLocked (i32: Int32Array, base: number, slotBase: number): number {
  if (i32[base + G_QUEUED] === 0) return -1
  const slots = i32[base + G_SLOTS]
  let best = -1
  let bestTicket = 0
  for (let s = 0; s < slots; s++) {
    const at = slotBase + s * SLOT_FIELDS
    if (Atomics.load(i32, at + S_STATE) !== WAITING) continue
    const t = i32[at + S_TICKET]
    if (best < 0 || ((t - bestTicket) | 0) < 0) { best = s; bestTicket = t }
  }
  return best
}

/**
 * Primary only, inside the lock: reclaim everything `row` holds or waits for in gate `g`,
 * rebuild the derived counters from the truth (rows + slots), and hand freed permits to
 * waiters in ticket order. Returns the slots granted (to notify after unlock) and the number
 * of permits reclaimed.
 */
export function reclaimGateLocked (core: LedgerCore, g: number, row: number): { granted: number[]; reclaimed: number } {
  const { i32, layout } = core
  const base = layout.gate32[g]
  const slotBase = layout.slot32[g]
  const totals = base + G_TOTALS
  let reclaimed = Atomics.exchange(i32, layout.row32(row) + R_HELD + g, 0)
  const slots = Atomics.load(i32, base + G_SLOTS)
  let granted = 0
  let waiting = 0
  for (let s = 0; s < slots; s++) {
    const at = slotBase + s * SLOT_FIELDS
    const state = Atomics.load(i32, at + S_STATE)
    if (state === FREE) continue
    if (Atomics.load(i32, at + S_OWNER) === row) {
      if (state === GRANTED) reclaimed++
      Atomics.store(i32, at + S_STATE, FREE)
      continue
    }
    if (state === GRANTED) granted++
    else waiting++
  }
  let held = 0
  for (let r = 0; r < layout.dims.rows; r++) held += Atomics.load(i32, layout.row32(r) + R_HELD + g)
  Atomics.store(i32, base + G_ACTIVE, held + granted)
  Atomics.store(i32, base + G_QUEUED, waiting)
  if (reclaimed > 0) addLocked(i32, totals + GT_RECLAIMED, reclaimed)
  // Every slot already GRANTED is notified again: its waker may have been the dead thread,
  // killed between its GRANTED store and its notify (the store is inside the lock, the
  // notify after it). Without this the waiter sleeps on a granted permit until its deadline
  // (found by the model, src/ledger/model: D1). A spurious wake-up is harmless.
  const out: number[] = []
  for (let s = 0; s < slots; s++) {
    const at = slotBase + s * SLOT_FIELDS
    if (Atomics.load(i32, at + S_STATE) === GRANTED) out.push(at + S_STATE)
  }
  // Restore G3: hand every free permit to the oldest waiters.
  const max = Atomics.load(i32, base + G_MAX)
  while (Atomics.load(i32, base + G_ACTIVE) < max) {
    const slot = oldestWaitingLocked(i32, base, slotBase)
    if (slot < 0) break
    Atomics.store(i32, slotBase + slot * SLOT_FIELDS + S_STATE, GRANTED)
    Atomics.sub(i32, base + G_QUEUED, 1)
    Atomics.add(i32, base + G_ACTIVE, 1)
    addLocked(i32, totals + GT_ADMITTED)
    out.push(slotBase + slot * SLOT_FIELDS + S_STATE)
  }
  return { granted: out, reclaimed }
}

/** Initialises gate g's block (primary, before any thread attaches). */
export function initGate (i32: Int32Array, base: number, maxPermits: number, maxQueued: number): void {
  Atomics.store(i32, base + G_MAX, maxPermits)
  Atomics.store(i32, base + G_QUEUE_MAX, maxQueued)
  Atomics.store(i32, base + G_SLOTS, maxPermits + maxQueued)
  Atomics.store(i32, base + G_ACTIVE, 0)
  Atomics.store(i32, base + G_QUEUED, 0)
  Atomics.store(i32, base + G_NEXT_TICKET, 0)
}
