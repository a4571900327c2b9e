// Session lanes: per-session backpressure in the shared ledger (DESIGN.md "Sessions").
//
// A session's pending exchanges are those accepted and not yet settled: the running one(s)
// plus the ones queued behind it in the session's FIFO. At most LN_ACTIVE_MAX (1) run at
// once per session, and at most LN_PENDING_MAX are pending (0 = no cap). Because the table
// lives in the ledger, a session whose requests land on different HTTP workers sees one count.
//
// ## Layout (layout.ts)
//
//   lane block (Int32):  LN_PENDING_MAX LN_ACTIVE_MAX LN_ENTRIES LN_PENDING LN_ACTIVE LN_HWM
//                        LN_NEXT_TICKET, then (lo, hi) totals
//   entries:             LN_ENTRIES x { E_STATE, E_OWNER, E_TICKET, E_SESSION_A/B,
//                                       E_EXCHANGE x4 (the exchange's UUID), E_CANCEL, E_FLAGS }
//
// There is no per-session record: a session *is* the set of non-FREE entries carrying its
// 64-bit key (scopedKey64(key name, session id), scoped-hash.ts: two gateway keys never share a lane).
// That keeps the truth in one kind of cell — the entries — which the primary can rebuild
// everything else from after a death, exactly as for a gate's waiter slots. A lane exists
// while it has an entry and costs nothing once its last entry is freed.
//
// ## States of an entry
//
//   from      to       who                   when
//   FREE      ACTIVE   the arriving thread   enter(): the session runs fewer than its max and
//                                            nobody of the session is queued
//   FREE      QUEUED   the arriving thread   enter(): otherwise (if under the pending cap)
//   QUEUED    ACTIVE   any releasing thread  release()/cancel: promotes the session's oldest
//   QUEUED    ACTIVE   the primary           reclaim: a dead row's ACTIVE entry was freed
//   ACTIVE    FREE     the owner             release(): the exchange settled
//   QUEUED    FREE     the owner             abort while still QUEUED
//   ACTIVE    FREE     the owner             abort that lost the race to a promotion: released
//                                            at once, which promotes the next one
//   any       FREE     the primary           reclaim of a dead owner's entries
//
// All transitions happen under the ledger lock. E_STATE is the waitAsync address of a queued
// owner: every QUEUED -> ACTIVE store is followed by Atomics.notify after unlock (and the
// primary's reclaim re-notifies every ACTIVE entry, in case the promoter died in between —
// the gate's D1 lesson). E_CANCEL is a second waitAsync address: a cancel request from any
// worker (`requestCancel`) sets it to 1 and notifies; the owner aborts its exchange. The
// reclaim re-notifies every flagged entry too, in case the requester died in between (model
// finding D4: a retry cannot help, requestCancel skips entries already flagged).
//
// ## Invariants (outside the lock), per session key k
//
//   N1  count(ACTIVE entries of k) <= LN_ACTIVE_MAX
//   N2  count(non-FREE entries of k) <= LN_PENDING_MAX   (when the cap is on)
//   N3  some entry of k QUEUED  implies  count(ACTIVE of k) = LN_ACTIVE_MAX  (no lost wake-up)
//   N4  LN_PENDING = count(non-FREE), LN_ACTIVE = count(ACTIVE), every non-FREE index < LN_HWM
//
// ## The check is synchronous
//
// `enter()` is one critical section and never waits: it refuses (cap reached, or no free
// entry), or counts the exchange ACTIVE or QUEUED and returns. The caller checks its own
// AbortSignal *before* calling, so an already-aborted request is never counted. Only then
// may anything "accepted" (a 202, an exchange id) be written. Waiting for the ACTIVE state
// is a separate step (`waitActive`).
//
// ## Fairness
//
// Strict FIFO within a session, by ticket; sessions are independent (a session's queue never
// delays another session). A released lane slot goes straight to the session's oldest queued
// entry; a newcomer is ACTIVE at once only when nobody of its session queues.
//
// ## Cancel safety
//
// Cancelling a wait (`waitActive`'s AbortSignal) loses your place: a QUEUED entry is withdrawn.
// If the promotion won the race (the entry is already ACTIVE when the abort takes the lock),
// we pretend we never got it: the entry is released in the same critical section, which
// promotes the session's next one (counted in LT_CANCEL_AFTER_PROMOTE). Either way the
// caller holds nothing after the rejection and must not release the entry. `enter()` itself
// never waits, so there is nothing to cancel there; the caller checks its signal first.
//
// ## Memory ordering
//
// As in gate.ts: counters and entry fields are plain Int32 accesses inside the ledger lock,
// which orders them; (lo, hi) totals follow pair64.ts. E_STATE and E_CANCEL are waitAsync
// addresses, so they are written with Atomics.store (the state store last: it commits an
// entry whose owner, ticket and keys are already set) and every notify happens after the
// unlock; the woken owner re-reads its state (Atomics.load) and treats a wake-up that finds
// QUEUED, or a flag on a watcher already stopped, as spurious. Lock-free readers (snapshot,
// pendingOf) may mix two moments (metrics and diagnostics only).
//
// ## Cost
//
// Every operation scans entries [0, LN_HWM) under the lock. The high-water mark keeps the
// scan as short as the busiest moment requires: idle, it is 0; with 32 active sessions it is
// about 32 entries (~100 ns). The table size is `limits.sessionEntries` (default 1024).
//
// ## Death
//
// A dead worker's entries (queued or active) are freed once by the primary (`reclaimLanesLocked`,
// from Ledger.reclaimRow); every session whose ACTIVE entry was freed promotes its oldest
// queued entry; counters are recomputed from the entries. A failed or dead exchange never
// blocks its session's FIFO.

import { SluiceError } from '../errors.ts'
import type { LedgerCore } from './core.ts'
import { addLocked, read } from './pair64.ts'
import {
  E_CANCEL, E_EXCHANGE, E_FLAGS, E_OWNER, E_SESSION_A, E_SESSION_B, E_STATE, E_TICKET, ENTRY_FIELDS,
  ENTRY_EVENTS, LANE32_FIELDS, LANE_ACTIVE, LANE_FREE, LANE_QUEUED,
  LN_ACTIVE, LN_ACTIVE_MAX, LN_ENTRIES, LN_HWM, LN_NEXT_TICKET, LN_PENDING, LN_PENDING_MAX, LN_TOTALS,
  LT_CANCELS, LT_CANCEL_AFTER_PROMOTE, LT_CANCEL_REQUESTS, LT_ENTERED, LT_QUEUED, LT_RECLAIMED,
  LT_REFUSED_ENTRIES, LT_REFUSED_FULL, LT_RELEASED,
} from './layout.ts'
import { scopedKey64, type Key64 } from './scoped-hash.ts'

export type { Key64 }

/** An exchange id (a UUID) as four Int32 words. */
export type ExchangeKey = readonly [number, number, number, number]

/** An entry a dead worker left: its exchange never reported its end. */
export interface LostEntry {
  session: Key64
  exchangeId: string
  /** The exchange reports through the session event ring (non-blocking mode). */
  events: boolean
  /** It was running (true) or still queued behind its session (false). */
  active: boolean
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

export type EnterResult =
  | { ok: true; entry: number; active: boolean; pending: number }
  | { ok: false; reason: 'full'; limit: number; pendingCount: number }
  | { ok: false; reason: 'entries'; limit: number }

export interface LaneSnapshot {
  /** Pending cap per session; null when disabled. */
  pendingMax: number | null
  activeMax: number
  entries: number
  pending: number
  active: number
  queued: number
  /** Sessions with at least one pending exchange. */
  sessions: number
  /** The largest pending count of any one session. */
  maxSessionPending: number
  entered: number
  queuedTotal: number
  refusedFull: number
  refusedEntries: number
  released: number
  cancels: number
  cancelsAfterPromote: number
  reclaimed: number
  cancelRequests: number
}

export class Lanes {
  private readonly core: LedgerCore
  private readonly i32: Int32Array
  private readonly base: number
  private readonly entryBase: number
  private readonly totals: number
  /** Entries in the table; 0 = lanes disabled. */
  readonly size: number

  constructor (core: LedgerCore) {
    this.core = core
    this.i32 = core.i32
    this.base = core.layout.lanes32
    this.entryBase = this.base + LANE32_FIELDS
    this.totals = this.base + LN_TOTALS
    this.size = core.layout.dims.lanes
  }

  /** The lane key of a session: scoped by the gateway key's name. */
  static key (keyName: string, sessionId: string): Key64 {
    return scopedKey64(keyName, sessionId)
  }

  /** The 128 bits of an exchange id, or null when it is not a UUID (no entry can match it). */
  static exchangeKey (exchangeId: string): ExchangeKey | null {
    const id = exchangeId.toLowerCase()
    if (!UUID.test(id)) return null
    const hex = id.replaceAll('-', '')
    return [0, 1, 2, 3].map((i) => Number.parseInt(hex.slice(8 * i, 8 * i + 8), 16) | 0) as unknown as ExchangeKey
  }

  /** The UUID text of four exchange words. */
  static exchangeIdOf (w: ArrayLike<number>): string {
    const hex = Array.from({ length: 4 }, (_, i) => (w[i] >>> 0).toString(16).padStart(8, '0')).join('')
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
  }

  /** The pending cap per session (null when disabled). */
  get pendingMax (): number | null {
    const v = Atomics.load(this.i32, this.base + LN_PENDING_MAX)
    return v === 0 ? null : v
  }

  /**
   * The synchronous acceptance check: refuse, or count the exchange into its session's lane
   * as ACTIVE (run now) or QUEUED (wait with waitActive). One critical section; never waits.
   */
  enter (session: Key64, exchange: ExchangeKey, flags = 0): EnterResult {
    const { i32, base, core } = this
    if (this.size === 0) throw new Error('session lanes are disabled in this ledger')
    const [sa, sb] = session
    core.lock()
    const hwm = i32[base + LN_HWM]
    let pending = 0
    let active = 0
    let queued = 0
    let free = -1
    for (let e = 0; e < hwm; e++) {
      const at = this.entryBase + e * ENTRY_FIELDS
      const st = i32[at + E_STATE]
      if (st === LANE_FREE) { if (free < 0) free = e; continue }
      if (i32[at + E_SESSION_A] !== sa || i32[at + E_SESSION_B] !== sb) continue
      pending++
      if (st === LANE_ACTIVE) active++
      else queued++
    }
    const cap = i32[base + LN_PENDING_MAX]
    if (cap > 0 && pending >= cap) {
      addLocked(i32, this.totals + LT_REFUSED_FULL)
      core.unlock()
      return { ok: false, reason: 'full', limit: cap, pendingCount: pending }
    }
    if (free < 0) {
      if (hwm >= i32[base + LN_ENTRIES]) {
        addLocked(i32, this.totals + LT_REFUSED_ENTRIES)
        core.unlock()
        return { ok: false, reason: 'entries', limit: i32[base + LN_ENTRIES] }
      }
      free = hwm
      i32[base + LN_HWM] = hwm + 1
    }
    const runNow = queued === 0 && active < i32[base + LN_ACTIVE_MAX]
    const at = this.entryBase + free * ENTRY_FIELDS
    const ticket = i32[base + LN_NEXT_TICKET]
    i32[base + LN_NEXT_TICKET] = (ticket + 1) | 0
    i32[at + E_OWNER] = core.row
    i32[at + E_TICKET] = ticket
    i32[at + E_SESSION_A] = sa
    i32[at + E_SESSION_B] = sb
    for (let w = 0; w < 4; w++) i32[at + E_EXCHANGE + w] = exchange[w]
    i32[at + E_FLAGS] = flags
    Atomics.store(i32, at + E_CANCEL, 0)
    // The state store commits the entry (owner, ticket and keys are set first).
    Atomics.store(i32, at + E_STATE, runNow ? LANE_ACTIVE : LANE_QUEUED)
    i32[base + LN_PENDING]++
    if (runNow) i32[base + LN_ACTIVE]++
    addLocked(i32, this.totals + LT_ENTERED)
    if (!runNow) addLocked(i32, this.totals + LT_QUEUED)
    core.unlock()
    return { ok: true, entry: free, active: runNow, pending: pending + 1 }
  }

  /**
   * Waits until `entry` (from enter(), owned by this thread) is ACTIVE. On abort it rejects
   * with client_closed and the entry is gone (withdrawn, or released if the promotion won the
   * race): the caller must not release it then. An abort whose reason is a SluiceError
   * rejects with that error instead.
   */
  waitActive (entry: number, signal?: AbortSignal): Promise<void> {
    const idx = this.stateIndex(entry)
    if (Atomics.load(this.i32, idx) === LANE_ACTIVE) return Promise.resolve()
    return new Promise<void>((resolve, reject) => {
      let settled = false
      const onAbort = (): void => {
        if (settled) return
        settled = true
        this.withdraw(entry)
        reject(signal?.reason instanceof SluiceError ? signal.reason : new SluiceError('client_closed', { gate: 'session' }))
      }
      const watch = (): void => {
        if (settled) return
        if (Atomics.load(this.i32, idx) === LANE_ACTIVE) {
          settled = true
          signal?.removeEventListener('abort', onAbort)
          resolve()
          return
        }
        const r = Atomics.waitAsync(this.i32, idx, LANE_QUEUED)
        if (!r.async) { watch(); return }
        r.value.then(watch, watch)
      }
      if (signal) {
        if (signal.aborted) { onAbort(); return }
        signal.addEventListener('abort', onAbort, { once: true })
      }
      watch()
    })
  }

  /** The owner's release of an ACTIVE or QUEUED entry; promotes the session's next entry. */
  release (entry: number): void {
    const { i32, core } = this
    const at = this.entryBase + entry * ENTRY_FIELDS
    core.lock()
    const st = i32[at + E_STATE]
    if (st === LANE_FREE || i32[at + E_OWNER] !== core.row) {
      core.unlock()
      throw new Error(`session lane: release of entry ${entry} not held by this thread`)
    }
    addLocked(i32, this.totals + LT_RELEASED)
    const promoted = this.freeLocked(entry, st)
    core.unlock()
    this.wake(entry, promoted)
  }

  /** Abort of a waiting owner: withdraw a QUEUED entry, or release one promoted meanwhile. */
  private withdraw (entry: number): void {
    const { i32, core } = this
    const at = this.entryBase + entry * ENTRY_FIELDS
    core.lock()
    const st = i32[at + E_STATE]
    let promoted = -1
    if (st !== LANE_FREE && i32[at + E_OWNER] === core.row) {
      addLocked(i32, this.totals + (st === LANE_QUEUED ? LT_CANCELS : LT_CANCEL_AFTER_PROMOTE))
      promoted = this.freeLocked(entry, st)
    }
    core.unlock()
    this.wake(entry, promoted)
  }

  /**
   * A cancel request from any thread: flags the session's entries (only `exchange`'s when
   * given) and wakes their owners, who abort those exchanges and release their entries.
   * Returns the number of entries flagged now.
   */
  requestCancel (session: Key64, exchange: ExchangeKey | null): number {
    if (this.size === 0) return 0
    const { i32, base, core } = this
    const flagged: number[] = []
    core.lock()
    const hwm = i32[base + LN_HWM]
    for (let e = 0; e < hwm; e++) {
      const at = this.entryBase + e * ENTRY_FIELDS
      if (i32[at + E_STATE] === LANE_FREE) continue
      if (i32[at + E_SESSION_A] !== session[0] || i32[at + E_SESSION_B] !== session[1]) continue
      if (exchange && !sameExchange(i32, at, exchange)) continue
      if (Atomics.load(i32, at + E_CANCEL) !== 0) continue
      Atomics.store(i32, at + E_CANCEL, 1)
      flagged.push(at + E_CANCEL)
    }
    if (flagged.length > 0) addLocked(i32, this.totals + LT_CANCEL_REQUESTS, flagged.length)
    core.unlock()
    for (const idx of flagged) Atomics.notify(i32, idx)
    return flagged.length
  }

  /**
   * Calls `onCancel` once if a cancel is requested for `entry` (E_CANCEL set) before the
   * owner calls the returned `stop()` when it releases the entry. stop() marks the watcher
   * dead and wakes it, so it ends without calling back: entries are reused, and a flag seen
   * after stop() belongs to a later exchange.
   */
  watchCancel (entry: number, onCancel: () => void): () => void {
    const idx = this.entryBase + entry * ENTRY_FIELDS + E_CANCEL
    let live = true
    const watch = (): void => {
      if (!live) return
      if (Atomics.load(this.i32, idx) !== 0) { live = false; onCancel(); return }
      const r = Atomics.waitAsync(this.i32, idx, 0)
      if (!r.async) { watch(); return }
      r.value.then(watch, watch)
    }
    watch()
    return () => {
      if (!live) return
      live = false
      Atomics.notify(this.i32, idx)
    }
  }

  /** Pending exchanges of one session (lock-free read; for diagnostics and tests). */
  pendingOf (session: Key64): number {
    const { i32, base } = this
    let n = 0
    const hwm = Atomics.load(i32, base + LN_HWM)
    for (let e = 0; e < hwm; e++) {
      const at = this.entryBase + e * ENTRY_FIELDS
      if (Atomics.load(i32, at + E_STATE) === LANE_FREE) continue
      if (Atomics.load(i32, at + E_SESSION_A) === session[0] && Atomics.load(i32, at + E_SESSION_B) === session[1]) n++
    }
    return n
  }

  /** The raw state of an entry (tests). */
  stateOf (entry: number): number { return Atomics.load(this.i32, this.stateIndex(entry)) }

  snapshot (): LaneSnapshot {
    const { i32, base, totals } = this
    const perSession = new Map<string, number>()
    let queued = 0
    const hwm = Atomics.load(i32, base + LN_HWM)
    for (let e = 0; e < hwm; e++) {
      const at = this.entryBase + e * ENTRY_FIELDS
      const st = Atomics.load(i32, at + E_STATE)
      if (st === LANE_FREE) continue
      if (st === LANE_QUEUED) queued++
      const k = `${Atomics.load(i32, at + E_SESSION_A)}:${Atomics.load(i32, at + E_SESSION_B)}`
      perSession.set(k, (perSession.get(k) ?? 0) + 1)
    }
    let maxSessionPending = 0
    for (const n of perSession.values()) if (n > maxSessionPending) maxSessionPending = n
    const cap = Atomics.load(i32, base + LN_PENDING_MAX)
    return {
      pendingMax: cap === 0 ? null : cap,
      activeMax: Atomics.load(i32, base + LN_ACTIVE_MAX),
      entries: Atomics.load(i32, base + LN_ENTRIES),
      pending: Atomics.load(i32, base + LN_PENDING),
      active: Atomics.load(i32, base + LN_ACTIVE),
      queued,
      sessions: perSession.size,
      maxSessionPending,
      entered: read(i32, totals + LT_ENTERED),
      queuedTotal: read(i32, totals + LT_QUEUED),
      refusedFull: read(i32, totals + LT_REFUSED_FULL),
      refusedEntries: read(i32, totals + LT_REFUSED_ENTRIES),
      released: read(i32, totals + LT_RELEASED),
      cancels: read(i32, totals + LT_CANCELS),
      cancelsAfterPromote: read(i32, totals + LT_CANCEL_AFTER_PROMOTE),
      reclaimed: read(i32, totals + LT_RECLAIMED),
      cancelRequests: read(i32, totals + LT_CANCEL_REQUESTS),
    }
  }

  // ---- internals (inside the lock) ----

  private stateIndex (entry: number): number { return this.entryBase + entry * ENTRY_FIELDS + E_STATE }

  /** Frees `entry` (in state `st`) and promotes its session's next entry; returns it or -1. */
  private freeLocked (entry: number, st: number): number {
    const { i32, base } = this
    const at = this.entryBase + entry * ENTRY_FIELDS
    Atomics.store(i32, at + E_STATE, LANE_FREE)
    i32[base + LN_PENDING]--
    if (st !== LANE_ACTIVE) { lowerHwmLocked(i32, base, this.entryBase); return -1 }
    i32[base + LN_ACTIVE]--
    const next = oldestQueuedLocked(i32, this.entryBase, i32[base + LN_HWM], i32[at + E_SESSION_A], i32[at + E_SESSION_B])
    if (next >= 0) {
      Atomics.store(i32, this.entryBase + next * ENTRY_FIELDS + E_STATE, LANE_ACTIVE)
      i32[base + LN_ACTIVE]++
    }
    lowerHwmLocked(i32, base, this.entryBase)
    return next
  }

  /** After unlock: wake our own watcher on a freed entry, and the promoted owner. */
  private wake (entry: number, promoted: number): void {
    Atomics.notify(this.i32, this.stateIndex(entry))
    if (promoted >= 0) Atomics.notify(this.i32, this.stateIndex(promoted))
  }
}

function sameExchange (i32: Int32Array, at: number, x: ExchangeKey): boolean {
  return i32[at + E_EXCHANGE] === x[0] && i32[at + E_EXCHANGE + 1] === x[1] && i32[at + E_EXCHANGE + 2] === x[2] && i32[at + E_EXCHANGE + 3] === x[3]
}

/** The QUEUED entry of session (sa, sb) with the oldest ticket (wrap-safe), or -1. */
function oldestQueuedLocked (i32: Int32Array, entryBase: number, hwm: number, sa: number, sb: number): number {
  let best = -1
  let bestTicket = 0
  for (let e = 0; e < hwm; e++) {
    const at = entryBase + e * ENTRY_FIELDS
    if (Atomics.load(i32, at + E_STATE) !== LANE_QUEUED) continue
    if (i32[at + E_SESSION_A] !== sa || i32[at + E_SESSION_B] !== sb) continue
    const t = i32[at + E_TICKET]
    if (best < 0 || ((t - bestTicket) | 0) < 0) { best = e; bestTicket = t }
  }
  return best
}

function lowerHwmLocked (i32: Int32Array, base: number, entryBase: number): void {
  let hwm = i32[base + LN_HWM]
  while (hwm > 0 && Atomics.load(i32, entryBase + (hwm - 1) * ENTRY_FIELDS + E_STATE) === LANE_FREE) hwm--
  i32[base + LN_HWM] = hwm
}

/**
 * Primary only, inside the lock: free every entry `row` owns, rebuild the counters from the
 * entries, promote the oldest queued entry of every session left without its active quota,
 * and return the words to notify after unlock (every ACTIVE entry's state: its promoter may
 * have died between the store and the notify; every flagged entry's E_CANCEL: its requester
 * may have, D4) and the number of entries freed.
 */
export function reclaimLanesLocked (core: LedgerCore, row: number): { notify: number[]; reclaimed: number; lost: LostEntry[] } {
  const { i32, layout } = core
  const size = layout.dims.lanes
  const lost: LostEntry[] = []
  if (size === 0) return { notify: [], reclaimed: 0, lost }
  const base = layout.lanes32
  const entryBase = base + LANE32_FIELDS
  // The high-water mark is derived too: a thread that died inside enter() may have raised it
  // without committing the entry, or committed without raising it. Scan the whole table.
  let reclaimed = 0
  for (let e = 0; e < size; e++) {
    const at = entryBase + e * ENTRY_FIELDS
    const st = Atomics.load(i32, at + E_STATE)
    if (st !== LANE_FREE && Atomics.load(i32, at + E_OWNER) === row) {
      lost.push({
        session: [i32[at + E_SESSION_A], i32[at + E_SESSION_B]],
        exchangeId: Lanes.exchangeIdOf(i32.subarray(at + E_EXCHANGE, at + E_EXCHANGE + 4)),
        events: (i32[at + E_FLAGS] & ENTRY_EVENTS) !== 0,
        active: st === LANE_ACTIVE,
      })
      Atomics.store(i32, at + E_STATE, LANE_FREE)
      reclaimed++
    }
  }
  let hwm = 0
  for (let e = 0; e < size; e++) {
    if (Atomics.load(i32, entryBase + e * ENTRY_FIELDS + E_STATE) !== LANE_FREE) hwm = e + 1
  }
  Atomics.store(i32, base + LN_HWM, hwm)
  // Per session: active count; promote oldest queued while under the active quota (N3).
  const activeMax = Atomics.load(i32, base + LN_ACTIVE_MAX)
  const activeOf = new Map<string, number>()
  for (let e = 0; e < hwm; e++) {
    const at = entryBase + e * ENTRY_FIELDS
    if (Atomics.load(i32, at + E_STATE) !== LANE_ACTIVE) continue
    const k = `${i32[at + E_SESSION_A]}:${i32[at + E_SESSION_B]}`
    activeOf.set(k, (activeOf.get(k) ?? 0) + 1)
  }
  for (let e = 0; e < hwm; e++) {
    const at = entryBase + e * ENTRY_FIELDS
    if (Atomics.load(i32, at + E_STATE) !== LANE_QUEUED) continue
    const sa = i32[at + E_SESSION_A]
    const sb = i32[at + E_SESSION_B]
    const k = `${sa}:${sb}`
    while ((activeOf.get(k) ?? 0) < activeMax) {
      const next = oldestQueuedLocked(i32, entryBase, hwm, sa, sb)
      if (next < 0) break
      Atomics.store(i32, entryBase + next * ENTRY_FIELDS + E_STATE, LANE_ACTIVE)
      activeOf.set(k, (activeOf.get(k) ?? 0) + 1)
    }
  }
  let pending = 0
  let active = 0
  const notify: number[] = []
  for (let e = 0; e < hwm; e++) {
    const st = Atomics.load(i32, entryBase + e * ENTRY_FIELDS + E_STATE)
    if (st === LANE_FREE) continue
    pending++
    if (st === LANE_ACTIVE) { active++; notify.push(entryBase + e * ENTRY_FIELDS + E_STATE) }
    if (Atomics.load(i32, entryBase + e * ENTRY_FIELDS + E_CANCEL) !== 0) notify.push(entryBase + e * ENTRY_FIELDS + E_CANCEL)
  }
  Atomics.store(i32, base + LN_PENDING, pending)
  Atomics.store(i32, base + LN_ACTIVE, active)
  if (reclaimed > 0) addLocked(i32, base + LN_TOTALS + LT_RECLAIMED, reclaimed)
  return { notify, reclaimed, lost }
}

/** Initialises the lane block (primary, before any thread attaches). */
export function initLanes (i32: Int32Array, base: number, entries: number, pendingMax: number, activeMax: number): void {
  if (!Number.isInteger(pendingMax) || pendingMax < 0) throw new RangeError('pendingMax must be a non-negative integer (0 = no cap)')
  if (!Number.isInteger(activeMax) || activeMax < 1) throw new RangeError('activeMax must be a positive integer')
  Atomics.store(i32, base + LN_PENDING_MAX, pendingMax)
  Atomics.store(i32, base + LN_ACTIVE_MAX, activeMax)
  Atomics.store(i32, base + LN_ENTRIES, entries)
}
