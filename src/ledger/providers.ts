// Provider accounts, circuit breakers and session affinity, shared by every HTTP worker
// (DESIGN.md "Providers"). Counters only: no lock, no waiter, so the Promela model of the
// gates and lanes (model/ledger.pml) is unchanged by this block.
//
// ## Layout (layout.ts, version 6)
//
//   account a:   AC_INFLIGHT, AC_COOLDOWN_UNTIL, AC_FAIL_EWMA, AC_FIRST_BYTE_EWMA, AC_SELECTED,
//                then one AC_ROW_INFLIGHT cell per row (that row's share of AC_INFLIGHT)
//   breaker b:   BR_STATE, BR_FAILURES, BR_OPEN_UNTIL, BR_PROBE, BR_TRANSITIONS
//   affinity s:  AF_HASH_A, AF_HASH_B, AF_ACCOUNT (+1), AF_LAST_USED
//   rows:        R_RETRIES (by reason), R_RETRIES_AFTER_COMMIT ((lo, hi) pairs, owner-written)
//
// Which account and breaker indices belong to which provider is config (src/routing.ts
// `providerSlots`), the same in every thread; the buffer holds only the counts.
//
// ## Invariants
//
//   P1  AC_INFLIGHT(a) = sum over rows of AC_ROW_INFLIGHT(a, r), outside the two adjacent
//       steps of a claim or a release (see Death for the one window).
//   P2  A claim never takes an account past its cap: the increment is a compare-and-swap
//       from the value the cap was checked against.
//   P3  At most one thread holds a breaker's half-open probe: OPEN -> HALF_OPEN is a CAS,
//       and only its winner writes BR_PROBE.
//
// ## Policy
//
// Selection, per exchange: (1) the session's remembered account, if it is eligible (not
// cooling down, under its cap, not already tried by this exchange): caches and
// account-scoped state hold; (2) otherwise the eligible account with the lowest cost =
// in-flight + FAILURE_WEIGHT x failure EWMA + first-byte EWMA / LATENCY_UNIT_MS, ties to the
// lowest index. The in-flight count is incremented by the selection itself (CAS from the
// value the choice was made on), so a synchronised burst spreads: a selector that lost the
// race re-reads and chooses again, and while the burst only adds, the chosen account never
// carries more than one above the least loaded (test/stress/provider-accounts-spread.test.ts).
// The affinity table is a cache: a lost or stale slot costs a session its cache, never
// correctness (the account it names is re-checked for eligibility).
//
// ## Cancel safety
//
// Nothing waits. A claim is released exactly once by its owner (worker/upstream.ts), on
// every path, in a finally.
//
// ## Memory ordering
//
// Every cell is read with Atomics.load and written with Atomics (add, sub, store,
// compareExchange): seq-cst. The EWMAs are read-modify-write without a CAS loop: a lost
// update between two workers changes a heuristic, never a count. Affinity slots are written
// account-first-cleared, then the hash, then the account, so a reader sees either a whole
// slot or one that does not match.
//
// ## Death
//
// `reclaimProvidersRow(core, r)` (under the ledger lock, from `reclaimRow`) subtracts the
// dead row's AC_ROW_INFLIGHT from each AC_INFLIGHT and zeroes it, and gives back a half-open
// probe the row held (HALF_OPEN -> OPEN, due now, so the next exchange probes). A thread
// killed between a claim's two steps (global CAS, then its row's share) leaves one
// in-flight count on that account (an over-count: the account looks one busier, never
// over its cap the other way).

import { scopedKey64 } from './scoped-hash.ts'
import type { LedgerCore } from './core.ts'
import {
  AC_COOLDOWN_UNTIL, AC_FAIL_EWMA, AC_FIRST_BYTE_EWMA, AC_INFLIGHT, AC_ROW_INFLIGHT, AC_SELECTED,
  AF_ACCOUNT, AF_HASH_A, AF_HASH_B, AF_LAST_USED, AFFINITY_FIELDS,
  BR_FAILURES, BR_OPEN_UNTIL, BR_PROBE, BR_STATE, BR_TRANSITIONS, BREAKER_CLOSED, BREAKER_FIELDS, BREAKER_HALF_OPEN, BREAKER_OPEN,
  PROVIDER_EPOCH_MS, R_RETRIES, R_RETRIES_AFTER_COMMIT, RETRY_REASONS,
} from './layout.ts'
import { addOwned, PAIR_FIELDS, read } from './pair64.ts'

/** Fixed point of the failure EWMA. */
export const EWMA_SCALE = 1_000_000
/** Weight of the newest observation in both EWMAs (1/8). */
const EWMA_SHIFT = 3
/** A failure rate of 1 costs like this many exchanges in flight. */
const FAILURE_WEIGHT = 4
/** This much first-byte latency costs like one exchange in flight. */
const LATENCY_UNIT_MS = 1000
/** Affinity slots probed per lookup (linear probing from the hash). */
const AFFINITY_PROBE = 4
/** CAS retries before a claim settles for a plain add (only under extreme contention). */
const CLAIM_TRIES = 64

export type BreakerState = 'closed' | 'open' | 'half-open'
export const BREAKER_STATE_NAMES: readonly BreakerState[] = ['closed', 'open', 'half-open']

/** Deciseconds since PROVIDER_EPOCH_MS (the block's clock). */
export function nowDs (now = Date.now()): number {
  return Math.max(1, Math.floor((now - PROVIDER_EPOCH_MS) / 100))
}

export interface AccountRef {
  /** The account's global index (routing.ts providerSlots). */
  readonly index: number
  /** Its concurrency cap across all workers; null = none. */
  readonly maxConcurrent: number | null
}

export type Selection =
  | { ok: true; account: number; affinity: boolean }
  | { ok: false; reason: 'cooling'; retryAfterSeconds: number }
  | { ok: false; reason: 'busy' }

export type BreakerAdmit =
  | { ok: true; probe: boolean }
  | { ok: false; state: BreakerState; retryAfterSeconds: number }

/** A state change, for the caller to log, trace and count. */
export interface BreakerTransition { from: BreakerState; to: BreakerState }

export interface AccountSnapshot { inflight: number; coolingDownMs: number; failureRate: number; firstByteMs: number; selected: number }
export interface BreakerSnapshot { state: BreakerState; failures: number; transitions: number; openForMs: number }
export interface ProvidersSnapshot {
  accounts: AccountSnapshot[]
  breakers: BreakerSnapshot[]
  /** Retries by reason (RETRY_* order), summed over rows. */
  retries: number[]
  retriesAfterCommit: number
}

export class ProviderState {
  private readonly core: LedgerCore
  readonly accounts: number
  readonly breakers: number
  private readonly affinitySlots: number

  constructor (core: LedgerCore) {
    this.core = core
    this.accounts = core.layout.dims.accounts ?? 0
    this.breakers = core.layout.dims.breakers ?? 0
    this.affinitySlots = core.layout.dims.affinity ?? 0
  }

  private ac (a: number): number {
    if (!Number.isInteger(a) || a < 0 || a >= this.accounts) throw new RangeError(`account ${a} out of range`)
    return this.core.layout.accounts32 + a * this.core.layout.accountFields
  }

  private br (b: number): number {
    if (!Number.isInteger(b) || b < 0 || b >= this.breakers) throw new RangeError(`breaker ${b} out of range`)
    return this.core.layout.breakers32 + b * BREAKER_FIELDS
  }

  // ---- accounts ----

  /**
   * Chooses and claims one account of `candidates` (see Policy): the in-flight count is
   * taken here; give it back with `release`. `exclude`: accounts this exchange already tried
   * (chosen only when no other is eligible and `allowExcluded`). `session`: the affinity key.
   */
  select (candidates: readonly AccountRef[], opts: { session?: readonly [number, number] | null; exclude?: ReadonlySet<number>; allowExcluded?: boolean; now?: number } = {}): Selection {
    const i32 = this.core.i32
    const now = nowDs(opts.now)
    const exclude = opts.exclude ?? new Set<number>()
    const session = opts.session ?? null
    let soonest = Infinity
    let cooling = 0
    const eligible = (c: AccountRef, allowTried: boolean): number => {
      // -1: cooling; -2: busy or tried; else the in-flight count
      const at = this.ac(c.index)
      const until = Atomics.load(i32, at + AC_COOLDOWN_UNTIL)
      if (until > now) return -1
      if (!allowTried && exclude.has(c.index)) return -2
      const n = Atomics.load(i32, at + AC_INFLIGHT)
      if (c.maxConcurrent !== null && n >= c.maxConcurrent) return -2
      return n
    }
    for (let attempt = 0; attempt < CLAIM_TRIES; attempt++) {
      soonest = Infinity
      cooling = 0
      // 1. Affinity: the account that served this session, if it is still eligible.
      if (session !== null && this.affinitySlots > 0) {
        const a = this.remembered(session)
        const c = a === null ? undefined : candidates.find((x) => x.index === a)
        if (c !== undefined) {
          const n = eligible(c, false)
          if (n >= 0 && this.tryClaim(c, n)) return { ok: true, account: c.index, affinity: true }
        }
      }
      // 2. The cheapest eligible account; tried ones only when nothing else is eligible.
      const pick: { best: AccountRef | null; n: number } = { best: null, n: 0 }
      const scan = (allowTried: boolean): void => {
        cooling = 0
        soonest = Infinity
        let bestCost = Infinity
        for (const c of candidates) {
          const n = eligible(c, allowTried)
          if (n === -1) {
            cooling++
            soonest = Math.min(soonest, Atomics.load(i32, this.ac(c.index) + AC_COOLDOWN_UNTIL))
          } else if (n >= 0) {
            const cost = n + this.penalty(c.index)
            if (cost < bestCost) { pick.best = c; pick.n = n; bestCost = cost }
          }
        }
      }
      scan(false)
      if (pick.best === null && opts.allowExcluded === true) scan(true)
      const best = pick.best
      const bestN = pick.n
      if (best === null) {
        if (cooling > 0 && cooling === candidates.length) {
          return { ok: false, reason: 'cooling', retryAfterSeconds: Math.max(1, Math.ceil((soonest - now) / 10)) }
        }
        return { ok: false, reason: 'busy' }
      }
      if (this.tryClaim(best, bestN)) {
        if (session !== null && this.affinitySlots > 0) this.remember(session, best.index, now)
        return { ok: true, account: best.index, affinity: false }
      }
      // Another selector moved this account's count: look again.
    }
    // Extreme contention: take the least loaded without the CAS guarantee (never past a cap).
    for (const c of candidates) {
      const n = eligible(c, opts.allowExcluded === true)
      if (n >= 0 && (c.maxConcurrent === null ? (this.add(c.index), true) : this.tryClaim(c, n))) return { ok: true, account: c.index, affinity: false }
    }
    return { ok: false, reason: 'busy' }
  }

  private penalty (a: number): number {
    const at = this.ac(a)
    const fail = Atomics.load(this.core.i32, at + AC_FAIL_EWMA) / EWMA_SCALE
    const ttfb = Atomics.load(this.core.i32, at + AC_FIRST_BYTE_EWMA)
    return FAILURE_WEIGHT * fail + ttfb / LATENCY_UNIT_MS
  }

  /** The claim: CAS from the count the choice was made on (P2), then this row's share (P1). */
  private tryClaim (c: AccountRef, n: number): boolean {
    const i32 = this.core.i32
    const at = this.ac(c.index)
    if (c.maxConcurrent !== null && n >= c.maxConcurrent) return false
    if (Atomics.compareExchange(i32, at + AC_INFLIGHT, n, n + 1) !== n) return false
    Atomics.add(i32, at + AC_ROW_INFLIGHT + this.core.row, 1)
    Atomics.add(i32, at + AC_SELECTED, 1)
    return true
  }

  private add (a: number): void {
    const at = this.ac(a)
    Atomics.add(this.core.i32, at + AC_INFLIGHT, 1)
    Atomics.add(this.core.i32, at + AC_ROW_INFLIGHT + this.core.row, 1)
    Atomics.add(this.core.i32, at + AC_SELECTED, 1)
  }

  /** Gives back one claim of `a` taken by this thread. */
  release (a: number): void {
    const at = this.ac(a)
    Atomics.sub(this.core.i32, at + AC_ROW_INFLIGHT + this.core.row, 1)
    Atomics.sub(this.core.i32, at + AC_INFLIGHT, 1)
  }

  /** A 429: the account cools down for `seconds` (never shortens a cooldown already running). */
  coolDown (a: number, seconds: number, now = Date.now()): void {
    const at = this.ac(a) + AC_COOLDOWN_UNTIL
    const until = nowDs(now) + Math.max(1, Math.ceil(seconds * 10))
    for (;;) {
      const cur = Atomics.load(this.core.i32, at)
      if (cur >= until || Atomics.compareExchange(this.core.i32, at, cur, until) === cur) return
    }
  }

  /** One attempt's outcome on `a`: a transient failure or not; the first-byte latency when it answered. */
  observe (a: number, failed: boolean, firstByteMs: number | null): void {
    const i32 = this.core.i32
    const at = this.ac(a)
    const f = Atomics.load(i32, at + AC_FAIL_EWMA)
    Atomics.store(i32, at + AC_FAIL_EWMA, f + (((failed ? EWMA_SCALE : 0) - f) >> EWMA_SHIFT))
    if (firstByteMs !== null) {
      const t = Atomics.load(i32, at + AC_FIRST_BYTE_EWMA)
      const ms = Math.min(2 ** 30, Math.max(0, Math.round(firstByteMs)))
      Atomics.store(i32, at + AC_FIRST_BYTE_EWMA, t === 0 ? ms : t + ((ms - t) >> EWMA_SHIFT))
    }
  }

  /** Seconds until `a`'s cooldown ends; 0 when it is not cooling. */
  coolingSeconds (a: number, now = Date.now()): number {
    const left = Atomics.load(this.core.i32, this.ac(a) + AC_COOLDOWN_UNTIL) - nowDs(now)
    return left > 0 ? Math.ceil(left / 10) : 0
  }

  // ---- session affinity (a cache; see Policy) ----

  private remembered (key: readonly [number, number]): number | null {
    if (this.affinitySlots === 0) return null
    const i32 = this.core.i32
    const base = this.core.layout.affinity32
    const first = (key[0] >>> 0) % this.affinitySlots
    for (let p = 0; p < AFFINITY_PROBE; p++) {
      const at = base + ((first + p) % this.affinitySlots) * AFFINITY_FIELDS
      if (Atomics.load(i32, at + AF_HASH_A) === key[0] && Atomics.load(i32, at + AF_HASH_B) === key[1]) {
        const acc = Atomics.load(i32, at + AF_ACCOUNT) - 1
        if (acc >= 0 && acc < this.accounts) return acc
      }
    }
    return null
  }

  private remember (key: readonly [number, number], account: number, now: number): void {
    if (this.affinitySlots === 0) return
    const i32 = this.core.i32
    const base = this.core.layout.affinity32
    const first = (key[0] >>> 0) % this.affinitySlots
    let victim = -1
    let oldest = Infinity
    for (let p = 0; p < AFFINITY_PROBE; p++) {
      const at = base + ((first + p) % this.affinitySlots) * AFFINITY_FIELDS
      const mine = Atomics.load(i32, at + AF_HASH_A) === key[0] && Atomics.load(i32, at + AF_HASH_B) === key[1]
      const used = Atomics.load(i32, at + AF_ACCOUNT) === 0 ? 0 : Atomics.load(i32, at + AF_LAST_USED)
      if (mine) { victim = at; break }
      if (used < oldest) { oldest = used; victim = at }
    }
    Atomics.store(i32, victim + AF_ACCOUNT, 0)
    Atomics.store(i32, victim + AF_HASH_A, key[0])
    Atomics.store(i32, victim + AF_HASH_B, key[1])
    Atomics.store(i32, victim + AF_LAST_USED, now)
    Atomics.store(i32, victim + AF_ACCOUNT, account + 1)
  }

  // ---- circuit breakers ----

  /** May an exchange go to breaker `b`'s provider + model? Opens the half-open probe when due. */
  admit (b: number, openMs: number, now = Date.now()): BreakerAdmit & { transition?: BreakerTransition } {
    const i32 = this.core.i32
    const at = this.br(b)
    const state = Atomics.load(i32, at + BR_STATE)
    if (state === BREAKER_CLOSED) return { ok: true, probe: false }
    const until = Atomics.load(i32, at + BR_OPEN_UNTIL)
    const t = nowDs(now)
    if (state === BREAKER_OPEN && t >= until && Atomics.compareExchange(i32, at + BR_STATE, BREAKER_OPEN, BREAKER_HALF_OPEN) === BREAKER_OPEN) {
      Atomics.store(i32, at + BR_PROBE, this.core.row + 1)
      Atomics.add(i32, at + BR_TRANSITIONS, 1)
      return { ok: true, probe: true, transition: { from: 'open', to: 'half-open' } }
    }
    const s = Atomics.load(i32, at + BR_STATE)
    if (s === BREAKER_CLOSED) return { ok: true, probe: false }
    // Open: until its time; half-open: while the one probe is out (about one open period).
    const left = s === BREAKER_OPEN ? until - t : Math.ceil(openMs / 100)
    return { ok: false, state: BREAKER_STATE_NAMES[s], retryAfterSeconds: Math.max(1, Math.ceil(left / 10)) }
  }

  /** A provider answer (not a transient failure) through breaker `b`. */
  success (b: number, probe: boolean): BreakerTransition | null {
    const i32 = this.core.i32
    const at = this.br(b)
    Atomics.store(i32, at + BR_FAILURES, 0)
    if (probe && Atomics.compareExchange(i32, at + BR_STATE, BREAKER_HALF_OPEN, BREAKER_CLOSED) === BREAKER_HALF_OPEN) {
      Atomics.store(i32, at + BR_PROBE, 0)
      Atomics.add(i32, at + BR_TRANSITIONS, 1)
      return { from: 'half-open', to: 'closed' }
    }
    return null
  }

  /** A transient provider failure through breaker `b`: opens it at `threshold`, or re-opens a failed probe. */
  failure (b: number, probe: boolean, threshold: number, openMs: number, now = Date.now()): BreakerTransition | null {
    const i32 = this.core.i32
    const at = this.br(b)
    const until = nowDs(now) + Math.max(1, Math.ceil(openMs / 100))
    if (probe) {
      Atomics.store(i32, at + BR_OPEN_UNTIL, until)
      if (Atomics.compareExchange(i32, at + BR_STATE, BREAKER_HALF_OPEN, BREAKER_OPEN) === BREAKER_HALF_OPEN) {
        Atomics.store(i32, at + BR_PROBE, 0)
        Atomics.add(i32, at + BR_TRANSITIONS, 1)
        return { from: 'half-open', to: 'open' }
      }
      return null
    }
    const n = Atomics.add(i32, at + BR_FAILURES, 1) + 1
    if (n >= threshold && Atomics.load(i32, at + BR_STATE) === BREAKER_CLOSED) {
      Atomics.store(i32, at + BR_OPEN_UNTIL, until)
      if (Atomics.compareExchange(i32, at + BR_STATE, BREAKER_CLOSED, BREAKER_OPEN) === BREAKER_CLOSED) {
        Atomics.store(i32, at + BR_FAILURES, 0)
        Atomics.add(i32, at + BR_TRANSITIONS, 1)
        return { from: 'closed', to: 'open' }
      }
    }
    return null
  }

  /** A probe that ended with no provider verdict (a caller abort, a local refusal): the next exchange probes. */
  abandonProbe (b: number, now = Date.now()): BreakerTransition | null {
    const i32 = this.core.i32
    const at = this.br(b)
    Atomics.store(i32, at + BR_OPEN_UNTIL, nowDs(now))
    if (Atomics.compareExchange(i32, at + BR_STATE, BREAKER_HALF_OPEN, BREAKER_OPEN) === BREAKER_HALF_OPEN) {
      Atomics.store(i32, at + BR_PROBE, 0)
      Atomics.add(i32, at + BR_TRANSITIONS, 1)
      return { from: 'half-open', to: 'open' }
    }
    return null
  }

  // ---- retries (row counters) ----

  countRetry (reason: number): void {
    if (!Number.isInteger(reason) || reason < 0 || reason >= RETRY_REASONS) throw new RangeError(`retry reason ${reason}`)
    addOwned(this.core.i32, this.core.layout.row32(this.core.row) + R_RETRIES + PAIR_FIELDS * reason, 1)
  }

  countRetryAfterCommit (): void {
    addOwned(this.core.i32, this.core.layout.row32(this.core.row) + R_RETRIES_AFTER_COMMIT, 1)
  }

  snapshot (now = Date.now()): ProvidersSnapshot {
    const { i32, layout } = this.core
    const t = nowDs(now)
    const accounts: AccountSnapshot[] = []
    for (let a = 0; a < this.accounts; a++) {
      const at = this.ac(a)
      const until = Atomics.load(i32, at + AC_COOLDOWN_UNTIL)
      accounts.push({
        inflight: Atomics.load(i32, at + AC_INFLIGHT),
        coolingDownMs: until > t ? (until - t) * 100 : 0,
        failureRate: Atomics.load(i32, at + AC_FAIL_EWMA) / EWMA_SCALE,
        firstByteMs: Atomics.load(i32, at + AC_FIRST_BYTE_EWMA),
        selected: Atomics.load(i32, at + AC_SELECTED),
      })
    }
    const breakers: BreakerSnapshot[] = []
    for (let b = 0; b < this.breakers; b++) {
      const at = this.br(b)
      const st = Atomics.load(i32, at + BR_STATE)
      const until = Atomics.load(i32, at + BR_OPEN_UNTIL)
      breakers.push({
        state: BREAKER_STATE_NAMES[st] ?? 'closed',
        failures: Atomics.load(i32, at + BR_FAILURES),
        transitions: Atomics.load(i32, at + BR_TRANSITIONS),
        openForMs: st === BREAKER_OPEN && until > t ? (until - t) * 100 : 0,
      })
    }
    const retries = new Array<number>(RETRY_REASONS).fill(0)
    let after = 0
    for (let r = 0; r < layout.dims.rows; r++) {
      const at = layout.row32(r)
      for (let k = 0; k < RETRY_REASONS; k++) retries[k] += read(i32, at + R_RETRIES + PAIR_FIELDS * k)
      after += read(i32, at + R_RETRIES_AFTER_COMMIT)
    }
    return { accounts, breakers, retries, retriesAfterCommit: after }
  }
}

/** The session key of the affinity table: the same scoped hash as every shared table. */
export function affinityKey (keyName: string, sessionId: string): readonly [number, number] {
  return scopedKey64(keyName, sessionId)
}

/** Reclaim of a dead row (see Death). Call under the ledger lock, after the thread's exit. */
export function reclaimProvidersRow (core: LedgerCore, row: number): { inflight: number; probes: number } {
  const i32 = core.i32
  const accounts = core.layout.dims.accounts ?? 0
  const breakers = core.layout.dims.breakers ?? 0
  let inflight = 0
  let probes = 0
  for (let a = 0; a < accounts; a++) {
    const at = core.layout.accounts32 + a * core.layout.accountFields
    const n = Atomics.exchange(i32, at + AC_ROW_INFLIGHT + row, 0)
    if (n !== 0) { Atomics.sub(i32, at + AC_INFLIGHT, n); inflight += n }
  }
  for (let b = 0; b < breakers; b++) {
    const at = core.layout.breakers32 + b * BREAKER_FIELDS
    if (Atomics.compareExchange(i32, at + BR_PROBE, row + 1, 0) === row + 1) {
      Atomics.store(i32, at + BR_OPEN_UNTIL, nowDs())
      if (Atomics.compareExchange(i32, at + BR_STATE, BREAKER_HALF_OPEN, BREAKER_OPEN) === BREAKER_HALF_OPEN) Atomics.add(i32, at + BR_TRANSITIONS, 1)
      probes++
    }
  }
  return { inflight, probes }
}
