// The load a stress thread puts on the session lanes, and an observer independent of the
// ledger that checks them at every step.
//
// Each thread runs several flows; each flow loops: pick one of SESSIONS sessions, enter()
// (refused at the cap, or ACTIVE at once, or QUEUED), arm watchCancel (a cancel request
// aborts the exchange, as worker/exchange.ts does), wait for ACTIVE unless it ran at once
// (some waits are aborted after a random pause: the abort races the promotion), run for a
// random pause, then stop the watcher and release (LaneTicket.release's order). Some
// iterations also send a cancel request (a whole session, or one exchange of another flow),
// and some sample the truth cells under the ledger lock.
//
// Checks (a violation is counted in the shared observer and described by the thread):
//   - per session, at most one exchange believed running, at every run start (the belief
//     starts when enter() said active or waitActive resolved, and ends before release);
//   - FIFO: when an exchange starts, no QUEUED entry of its session holds an older ticket,
//     and the tickets of a session's exchanges that run strictly increase;
//   - under the lock, from the entries: per session ACTIVE <= 1, pending <= cap, QUEUED only
//     behind an ACTIVE one (N1-N3), and LN_PENDING / LN_ACTIVE / LN_HWM match (N4);
//   - a 'full' refusal reports the cap and a pending count at the cap; no 'entries' refusal
//     (the table is larger than all flows together);
//   - the thread's own tallies, which the primary compares with the ledger's totals.
//
// Not a test file itself (no .test.ts): the stress tests that use it import it.

import { randomUUID } from 'node:crypto'
import { SluiceError } from '../../src/errors.ts'
import { Lanes, type ExchangeKey, type Key64 } from '../../src/ledger/lanes.ts'
import type { Ledger } from '../../src/ledger/ledger.ts'
import {
  E_OWNER, E_SESSION_A, E_SESSION_B, E_STATE, E_TICKET, ENTRY_FIELDS, LANE32_FIELDS, LANE_ACTIVE, LANE_FREE, LANE_QUEUED,
  LN_ACTIVE, LN_ACTIVE_MAX, LN_ENTRIES, LN_HWM, LN_PENDING, LN_PENDING_MAX,
} from '../../src/ledger/layout.ts'
import { pause, type Rand } from './harness.ts'

export const SESSIONS = 3
export const sessionKeys: readonly Key64[] = Array.from({ length: SESSIONS }, (_, i) => Lanes.key('stress', `session-${i}`))

// ---- the lane observer: its own SharedArrayBuffer ----

const V_VIOLATIONS = 0
const V_STOP = 1
const V_SESSION = 2                 // per session: max seen running, 1 + last ticket run
const V_SESSION_FIELDS = 2
const V_ROWS = V_SESSION + SESSIONS * V_SESSION_FIELDS
const R_BELIEVED = 0                // + session: exchanges of this row believed running
const R_MAY_HOLD = SESSIONS         // entries this row may hold: +1 before enter(), -1 after it gave the entry up
const V_ROW_FIELDS = SESSIONS + 1

export class LaneObserver {
  readonly sab: SharedArrayBuffer
  private readonly i32: Int32Array
  /** Descriptions of the violations this thread saw (the count is shared). */
  readonly seen: string[] = []

  constructor (sabOrRows: SharedArrayBuffer | number) {
    this.sab = typeof sabOrRows === 'number' ? new SharedArrayBuffer(4 * (V_ROWS + sabOrRows * V_ROW_FIELDS)) : sabOrRows
    this.i32 = new Int32Array(this.sab)
  }

  violation (what: string): void {
    Atomics.add(this.i32, V_VIOLATIONS, 1)
    if (this.seen.length < 20) this.seen.push(what)
  }

  // A session's believed runners are the sum of its rows' beliefs, never a second counter: a
  // thread terminated at any moment changes its beliefs in one atomic operation or not at all,
  // so forgetRow() on its row takes back exactly what it believed. (A separate session total
  // updated next to the row's could be left half-changed by a terminate() between the two.)
  believed (s: number): number {
    let n = 0
    for (let at = V_ROWS + R_BELIEVED + s; at < this.i32.length; at += V_ROW_FIELDS) n += Atomics.load(this.i32, at)
    return n
  }

  /** An exchange of `row` starts running in session s with lane ticket `ticket`. */
  running (s: number, row: number, ticket: number): void {
    const at = V_SESSION + s * V_SESSION_FIELDS
    Atomics.add(this.i32, V_ROWS + row * V_ROW_FIELDS + R_BELIEVED + s, 1)
    const n = this.believed(s)
    if (n > 1) this.violation(`session ${s}: ${n} exchanges believed running at once`)
    for (let m = Atomics.load(this.i32, at); n > m; m = Atomics.load(this.i32, at)) {
      if (Atomics.compareExchange(this.i32, at, m, n) === m) break
    }
    // Run starts of a session are serialised (the previous one stopped believing before it
    // released), so the last ticket is a plain exchange.
    const prev = Atomics.exchange(this.i32, at + 1, ticket + 1)
    if (ticket + 1 <= prev) this.violation(`session ${s}: ticket ${ticket} ran after ticket ${prev - 1} (FIFO)`)
  }

  /** Before the release of a running exchange of `row` in session s. */
  stopping (s: number, row: number): void {
    const mine = Atomics.sub(this.i32, V_ROWS + row * V_ROW_FIELDS + R_BELIEVED + s, 1) - 1
    if (mine < 0) this.violation(`session ${s}: stop with no believed runner (row ${row} ${mine})`)
  }

  mayHold (row: number, delta: number): void { Atomics.add(this.i32, V_ROWS + row * V_ROW_FIELDS + R_MAY_HOLD, delta) }

  /** Primary, in a dead thread's exit handler BEFORE its reclaim: forget its beliefs (a
   *  survivor promoted by the reclaim must not count them). Returns what it may have held. */
  forgetRow (row: number): number {
    for (let s = 0; s < SESSIONS; s++) Atomics.store(this.i32, V_ROWS + row * V_ROW_FIELDS + R_BELIEVED + s, 0)
    return Atomics.exchange(this.i32, V_ROWS + row * V_ROW_FIELDS + R_MAY_HOLD, 0)
  }

  /** Entries `row` may hold now (see mayHold). */
  mayHoldOf (row: number): number { return Atomics.load(this.i32, V_ROWS + row * V_ROW_FIELDS + R_MAY_HOLD) }

  get violations (): number { return Atomics.load(this.i32, V_VIOLATIONS) }
  maxRunning (s: number): number { return Atomics.load(this.i32, V_SESSION + s * V_SESSION_FIELDS) }
  get stopped (): boolean { return Atomics.load(this.i32, V_STOP) === 1 }
  stop (): void { Atomics.store(this.i32, V_STOP, 1) }
}

// ---- truth-cell checks ----

/** Problems with the lane invariants N1-N4, read from the entries. Call with the lock held. */
export function laneProblemsLocked (ledger: Ledger): string[] {
  const { i32, layout } = ledger.core
  const base = layout.lanes32
  const entryBase = base + LANE32_FIELDS
  const size = i32[base + LN_ENTRIES]
  const cap = i32[base + LN_PENDING_MAX]
  const activeMax = i32[base + LN_ACTIVE_MAX]
  const hwm = i32[base + LN_HWM]
  const perSession = new Map<string, { active: number; queued: number }>()
  let pending = 0
  let active = 0
  let top = 0
  const out: string[] = []
  for (let e = 0; e < size; e++) {
    const at = entryBase + e * ENTRY_FIELDS
    const st = Atomics.load(i32, at + E_STATE)
    if (st === LANE_FREE) continue
    if (st !== LANE_ACTIVE && st !== LANE_QUEUED) out.push(`entry ${e}: state ${st}`)
    top = e + 1
    pending++
    const k = `${i32[at + E_SESSION_A]}:${i32[at + E_SESSION_B]}`
    const c = perSession.get(k) ?? { active: 0, queued: 0 }
    if (st === LANE_ACTIVE) { c.active++; active++ } else c.queued++
    perSession.set(k, c)
  }
  for (const [k, c] of perSession) {
    if (c.active > activeMax) out.push(`N1: session ${k} has ${c.active} ACTIVE > ${activeMax}`)
    if (cap > 0 && c.active + c.queued > cap) out.push(`N2: session ${k} has ${c.active + c.queued} pending > cap ${cap}`)
    if (c.queued > 0 && c.active !== activeMax) out.push(`N3: session ${k} has ${c.queued} QUEUED behind ${c.active} ACTIVE`)
  }
  if (i32[base + LN_PENDING] !== pending) out.push(`N4: LN_PENDING ${i32[base + LN_PENDING]} != ${pending} entries`)
  if (i32[base + LN_ACTIVE] !== active) out.push(`N4: LN_ACTIVE ${i32[base + LN_ACTIVE]} != ${active} entries`)
  if (hwm !== top) out.push(`N4: LN_HWM ${hwm} != 1 + highest entry in use (${top})`)
  return out
}

/** At a run start: an older QUEUED entry of the same session means someone overtook it. A
 *  lock-free scan: each entry's state is loaded first, and its ticket and session were written
 *  before that state, so a torn read can only show a newer entry, never an older one. */
function olderQueued (ledger: Ledger, session: Key64, ticket: number): number | null {
  const { i32, layout } = ledger.core
  const entryBase = layout.lanes32 + LANE32_FIELDS
  const hwm = Atomics.load(i32, layout.lanes32 + LN_HWM)
  for (let e = 0; e < hwm; e++) {
    const at = entryBase + e * ENTRY_FIELDS
    if (Atomics.load(i32, at + E_STATE) !== LANE_QUEUED) continue
    if (Atomics.load(i32, at + E_SESSION_A) !== session[0] || Atomics.load(i32, at + E_SESSION_B) !== session[1]) continue
    const t = Atomics.load(i32, at + E_TICKET)
    if (((t - ticket) | 0) < 0) return t
  }
  return null
}

// ---- the load ----

export interface LaneLoad {
  flows: number
  iterations: number
  /** No new iteration starts after this many ms (a safety bound). */
  budgetMs: number
  /** Also stop when the observer's stop flag is set. */
  untilStopped?: boolean
  /** A waiting exchange's signal aborts after a random pause. */
  pAbort: number
  /** An iteration sends a cancel request first (a session, or another flow's exchange). */
  pCancel: number
  /** An iteration samples the truth cells under the lock. */
  pSample: number
}

export interface LaneCounts {
  iterations: number
  entered: number
  ranAtOnce: number
  queued: number
  /** Exchanges that ran (enter() active, or waitActive resolved). */
  runs: number
  released: number
  /** Waits that rejected: the entry was withdrawn (or released, promotion won). */
  aborted: number
  /** Of those, aborted by a cancel request. */
  abortedByCancel: number
  /** Running exchanges that a cancel request ended early. */
  cancelledRunning: number
  /** watchCancel callbacks. */
  cancelCallbacks: number
  refusedFull: number
  /** Entries flagged by this thread's requestCancel calls. */
  flagged: number
  cancelRequests: number
  samples: number
  errors: string[]
}

export const emptyLaneCounts = (): LaneCounts => ({
  iterations: 0, entered: 0, ranAtOnce: 0, queued: 0, runs: 0, released: 0, aborted: 0, abortedByCancel: 0,
  cancelledRunning: 0, cancelCallbacks: 0, refusedFull: 0, flagged: 0, cancelRequests: 0, samples: 0, errors: [],
})

export function addLaneCounts (into: LaneCounts, c: LaneCounts): LaneCounts {
  for (const k of Object.keys(into) as Array<keyof LaneCounts>) {
    if (k === 'errors') into.errors.push(...c.errors)
    else into[k] += c[k]
  }
  return into
}

export interface LaneTarget { ledger: Ledger; row: number; obs: LaneObserver; rand: Rand }

/** An exchange id as the gateway makes them (a UUID), and its lane key. */
function newExchange (): { id: string; key: ExchangeKey } {
  const id = randomUUID()
  const key = Lanes.exchangeKey(id)
  if (key === null) throw new Error(`not a UUID: ${id}`)
  return { id, key }
}

export async function hammerLanes (target: LaneTarget, load: LaneLoad): Promise<LaneCounts> {
  const { ledger, row, obs, rand } = target
  const lanes = ledger.lanes
  const { i32, layout } = ledger.core
  const entryBase = layout.lanes32 + LANE32_FIELDS
  const cap = lanes.pendingMax
  const c = emptyLaneCounts()
  const stopAt = Date.now() + load.budgetMs
  /** Each flow's current exchange id (for targeted cancel requests by other flows). */
  const current: Array<ExchangeKey | null> = Array.from({ length: load.flows }, () => null)

  const sample = (): void => {
    ledger.core.lock()
    let problems: string[]
    try { problems = laneProblemsLocked(ledger) } finally { ledger.core.unlock() }
    c.samples++
    for (const p of problems) obs.violation(`row ${row}: ${p}`)
  }

  const flow = async (f: number): Promise<void> => {
    for (let i = 0; i < load.iterations; i++) {
      // A last sample on the way out: a session left stuck (QUEUED behind no ACTIVE entry)
      // shows as N3 while its waiters still wait, so the primary fails at once, not by timeout.
      if (Date.now() >= stopAt || (load.untilStopped === true && obs.stopped)) { sample(); return }
      c.iterations++
      if (rand() < load.pSample) sample()
      if (rand() < load.pCancel) {
        c.cancelRequests++
        const other = current[Math.floor(rand() * load.flows)]
        const s = Math.floor(rand() * SESSIONS)
        // A targeted request names an exchange of another flow (in whatever session it is:
        // a wrong session must flag nothing), else the whole session.
        c.flagged += other !== null && rand() < 0.5
          ? lanes.requestCancel(sessionKeys[s], other)
          : lanes.requestCancel(sessionKeys[s], null)
      }
      const s = Math.floor(rand() * SESSIONS)
      const { id: exchangeId, key: exchangeKey } = newExchange()
      obs.mayHold(row, 1)
      const r = lanes.enter(sessionKeys[s], exchangeKey)
      if (!r.ok) {
        obs.mayHold(row, -1)
        if (r.reason === 'full') {
          c.refusedFull++
          if (r.limit !== cap || r.pendingCount !== cap) obs.violation(`row ${row}: 'full' refusal with limit ${r.limit}, pending ${r.pendingCount} (cap ${cap})`)
        } else {
          obs.violation(`row ${row}: refused '${r.reason}' (the table is larger than all flows)`)
        }
        await pause(rand)
        continue
      }
      c.entered++
      current[f] = exchangeKey
      const entry = r.entry
      const ticket = Atomics.load(i32, entryBase + entry * ENTRY_FIELDS + E_TICKET)
      const ac = new AbortController()
      let cancelled = false
      const stopWatch = lanes.watchCancel(entry, () => {
        c.cancelCallbacks++
        cancelled = true
        ac.abort(new SluiceError('exchange_cancelled', { exchangeId }))
      })
      if (r.active) c.ranAtOnce++
      else {
        c.queued++
        if (rand() < load.pAbort) void pause(rand).then(() => ac.abort())
        try {
          await lanes.waitActive(entry, ac.signal)
        } catch (err) {
          // The entry is gone (withdrawn, or released because the promotion won the race).
          stopWatch()
          const code = (err as { code?: string }).code
          if (code === 'client_closed' || code === 'exchange_cancelled') {
            c.aborted++
            if (code === 'exchange_cancelled') c.abortedByCancel++
            if (code === 'exchange_cancelled' && !cancelled) c.errors.push('exchange_cancelled without a cancel callback')
          } else {
            c.errors.push(`waitActive: ${code ?? (err as Error).message}`)
          }
          current[f] = null
          obs.mayHold(row, -1)
          await pause(rand)
          continue
        }
      }
      // The exchange runs.
      c.runs++
      obs.running(s, row, ticket)
      const older = olderQueued(ledger, sessionKeys[s], ticket)
      if (older !== null) obs.violation(`session ${s}: ticket ${ticket} runs while ticket ${older} still queues (FIFO)`)
      if (lanes.stateOf(entry) !== LANE_ACTIVE) obs.violation(`row ${row}: a running exchange's entry ${entry} is not ACTIVE`)
      await pause(rand)
      if (!cancelled && rand() < 0.3) await pause(rand)
      if (cancelled) c.cancelledRunning++
      obs.stopping(s, row)
      stopWatch()
      lanes.release(entry)
      c.released++
      current[f] = null
      obs.mayHold(row, -1)
      if (rand() < 0.5) await pause(rand)
    }
  }

  await Promise.all(Array.from({ length: load.flows }, (_, f) => flow(f)))
  return c
}

/**
 * Primary: waits until every thread ended (true), or until some thread recorded a violation
 * while others still run (false: a stuck lane would otherwise hang the test until its timeout).
 */
export async function endsOrViolation (ends: ReadonlyArray<Promise<unknown>>, obs: LaneObserver): Promise<boolean> {
  let ended = false
  const all = Promise.all(ends).then(() => { ended = true })
  while (!ended && obs.violations === 0) await Promise.race([all, new Promise((resolve) => setTimeout(resolve, 5))])
  return ended
}

/** A lock-free picture of the lane entries for a failure message (may mix two moments). */
export function laneEntriesPicture (ledger: Ledger): string {
  const { i32, layout } = ledger.core
  const entryBase = layout.lanes32 + LANE32_FIELDS
  const hwm = Atomics.load(i32, layout.lanes32 + LN_HWM)
  const out: string[] = []
  for (let e = 0; e < hwm; e++) {
    const at = entryBase + e * ENTRY_FIELDS
    const st = Atomics.load(i32, at + E_STATE)
    if (st === LANE_FREE) continue
    const s = sessionKeys.findIndex((k) => k[0] === Atomics.load(i32, at + E_SESSION_A) && k[1] === Atomics.load(i32, at + E_SESSION_B))
    out.push(`${e}:s${s}:${st === LANE_ACTIVE ? 'A' : 'Q'}#${Atomics.load(i32, at + E_TICKET)}@row${Atomics.load(i32, at + E_OWNER)}`)
  }
  return out.join(' ') || '(none)'
}

/** The ledger's lane totals against the threads' tallies (no deaths): the mismatches. */
export function laneTotalsMismatches (ledger: Ledger, c: LaneCounts): string[] {
  const s = ledger.snapshot().lanes
  const out: string[] = []
  const eq = (what: string, a: number, b: number): void => { if (a !== b) out.push(`${what}: ${a} != ${b}`) }
  eq('entered: ledger vs threads', s.entered, c.entered)
  eq('queuedTotal: ledger vs threads', s.queuedTotal, c.queued)
  eq('released: ledger vs threads', s.released, c.released)
  eq('cancels + cancelsAfterPromote: ledger vs threads\' rejected waits', s.cancels + s.cancelsAfterPromote, c.aborted)
  eq('refusedFull: ledger vs threads', s.refusedFull, c.refusedFull)
  eq('cancelRequests: ledger vs entries flagged by the threads', s.cancelRequests, c.flagged)
  eq('threads: entered vs released + aborted', c.entered, c.released + c.aborted)
  eq('threads: entered vs ran at once + queued', c.entered, c.ranAtOnce + c.queued)
  eq('threads: runs vs released', c.runs, c.released)
  return out
}
