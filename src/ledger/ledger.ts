// The ledger: the exchange gate, the parse gate, the envelope-parse allowance, the byte
// budget, the run table, the session lanes and the per-thread rows,
// over one SharedArrayBuffer. The primary creates it (`createLedger`) and keeps row 0; each
// HTTP worker attaches with its own row (`attachLedger`). No I/O here.
//
// ## Layout (layout.ts)
//
//   header (Int32):   H_DRAINING (1 while the gateway drains), the dims (H_ROWS, H_GATE_DIMS...)
//   row r (Int32):    R_STATE (UNUSED / ALIVE / DEAD), R_GENERATION, R_THREAD_ID, R_HELD + gate,
//                     R_COUNTERS (refusals by catalogue code, (lo, hi)), R_GAUGES (RG_*: row
//                     gauges), R_HISTS (HIST_* latency histograms, (lo, hi)), R_ENVELOPES
//   row r (BigInt64): R64_BYTES, R64_HEAP_USED, R64_HEAP_LIMIT, R64_EXTERNAL, R64_UPDATED_MS
//   budget (BigInt64): B_REPAIRS (locks stolen from the dead), B_ROW_RECLAIMS (rows reclaimed)
//   providers (Int32, version 6): accounts, circuit breakers, session affinity (providers.ts)
//
// The gates, the byte budget, the envelope allowance, the run table and the lanes own the
// rest (gate.ts, budget.ts, envelopes.ts, runs.ts, lanes.ts); this file creates the buffer,
// owns the rows, and reclaims a dead row across all of them.
//
// ## Invariants
//
//   W1  Row r belongs to one thread at a time. Only the owning thread writes its holdings,
//       counters, gauges, histograms and heap figures. The primary writes R_STATE,
//       R_GENERATION and R_THREAD_ID while the row is not in use (before starting a worker,
//       and in `reclaimRow` after the worker's `exit` was observed).
//   W2  A row is (re)assigned only when it holds nothing (`assignRow` throws otherwise), and
//       each assignment bumps R_GENERATION, so a restarted worker never inherits a previous
//       life's holdings.
//   W3  A life's holdings are reclaimed at most once (see Death).
//
// ## Policy
//
// Each structure keeps its own policy (FIFO gates, try-reserve budget, FIFO session lanes).
// Row counters and histograms are totals that survive the row's death (summed over every
// row); row gauges describe live streams, so a reclaim zeroes them.
//
// ## Cancel safety
//
// Every method is synchronous except `reclaimRow`, which retries the non-parking
// `tryReclaimRow` on later turns of the event loop; each attempt does all of a reclaim or
// nothing (null), so a reclaim abandoned between attempts leaves nothing half done.
//
// ## Memory ordering
//
// Row cells are read by any thread with Atomics.load and written by their owner with
// Atomics (gauges with Atomics.add); (lo, hi) counters follow pair64.ts (`addOwned`: the row's
// owner is their one writer). Reclaim runs under the ledger lock. Sums over rows taken
// without the lock (gauges, histograms, refusals) may mix two moments: metrics only.
//
// ## Death
//
// `reclaimRow(r)` runs in the primary's worker `exit` handler. Under the lock (stolen from
// the dead thread if it died holding it) it zeroes the row's holdings with Atomics.exchange,
// frees its waiter slots and lane entries, rebuilds derived counters, hands freed permits to
// waiters, zeroes its gauges and marks the row DEAD. A second call finds zeros and DEAD and
// does nothing. The supervisor passes the generation of the life that died, so a late
// reclaim can never touch a restarted worker's new life.

import { ByteBudget, reclaimBytesLocked, type BudgetSnapshot } from './budget.ts'
import { LedgerCore } from './core.ts'
import { Gate, initGate, reclaimGateLocked, type GateSnapshot } from './gate.ts'
import {
  B_LIMIT, B_REPAIRS, B_ROW_RECLAIMS, GATE_EXCHANGE, GATE_PARSE, GATES,
  H_ACCOUNTS, H_AFFINITY, H_BREAKERS, H_DRAINING, H_GATE_DIMS, H_MAGIC, H_ROWS, H_LANE_ENTRIES, H_RUN_SLOTS, H_VERSION, LAYOUT_VERSION, MAGIC, PRIMARY_ROW,
  R64_EXTERNAL, R64_HEAP_LIMIT, R64_HEAP_USED, R64_UPDATED_MS, R_GENERATION, R_HELD, R_STATE, R_THREAD_ID,
  ROW_ALIVE, ROW_DEAD, R64_BYTES, R_ENVELOPES, R_COUNTERS, ROW_COUNTERS, R_GAUGES, ROW_GAUGES, R_HISTS, HIST_FIELDS, HIST_BOUNDS_MS,
  HIST_BUCKETS, HIST_N, HIST_SUM_US, GATE_DIM_FIELDS, GD_MAX_PERMITS, GD_MAX_QUEUED,
  computeLayout,
} from './layout.ts'
import { errorCodes, type ErrorCode } from '../errors.ts'
import { addOwned, PAIR_FIELDS, read } from './pair64.ts'
import { RunTable } from './runs.ts'
import { Lanes, initLanes, reclaimLanesLocked, type LaneSnapshot, type LostEntry } from './lanes.ts'
import { EnvelopeParses, initEnvelopes, reclaimEnvelopesLocked, type EnvelopeSnapshot } from './envelopes.ts'
import { ProviderState, reclaimProvidersRow } from './providers.ts'

if (errorCodes.length > ROW_COUNTERS) throw new Error('ledger: more catalogue codes than row counters')
const codeIndex = new Map<ErrorCode, number>(errorCodes.map((c, i) => [c, i]))

export interface LedgerOptions {
  maxActive: number
  maxQueued: number
  queueWaitMs: number
  parsePermits: number
  parseQueue: number
  parseWaitMs: number
  /** Envelope parses (no exchange permit) waiting for or holding the parse permit (default 0:
   *  none; envelopes.ts). The parse queue must have room for these beside the permit holders. */
  envelopeParses?: number
  storageBytes: number
  /** Run-table slots for turn pins (default 4096). */
  runSlots?: number
  /** Session-lane entries (default 1024; 0 disables lanes). */
  laneEntries?: number
  /** Pending exchanges per session, active + queued (default 5; 0 = no cap). */
  pendingPerSession?: number
  /** Active exchanges per session (default 1). */
  activePerSession?: number
  /** Rows besides the primary's: one per HTTP worker (plus any test threads). */
  threads: number
  /** Provider accounts over all providers (default 0; providers.ts). */
  accounts?: number
  /** Circuit breakers: provider x configured model pattern (default 0). */
  breakers?: number
  /** Session-affinity slots (default 0: no affinity). */
  affinity?: number
}

export interface RowSnapshot {
  row: number
  state: 'unused' | 'alive' | 'dead'
  generation: number
  threadId: number
  exchangeHeld: number
  parseHeld: number
  envelopesHeld: number
  bytes: number
  heapUsed: number
  heapLimit: number
  external: number
  updatedMs: number
}

export interface LedgerSnapshot {
  exchange: GateSnapshot
  parse: GateSnapshot
  envelopes: EnvelopeSnapshot
  storage: BudgetSnapshot
  lanes: LaneSnapshot
  rows: RowSnapshot[]
  repairs: number
  rowReclaims: number
  draining: boolean
}

export interface Reclaimed {
  exchange: number
  parse: number
  bytes: number
  lanes: number
  lockStolen: boolean
  /** Session-lane entries the dead thread left (their exchanges never reported an end). */
  lost?: LostEntry[]
  /** Envelope-parse slots the dead thread held (envelopes.ts); absent when none. */
  envelopes?: number
  /** Provider-account claims the dead thread held (providers.ts); absent when none. */
  accountClaims?: number
}

/** Wait defaults travel with the buffer so every thread applies the same ones. */
export interface LedgerHandleInit { sab: SharedArrayBuffer; queueWaitMs: number; parseWaitMs: number }

export class Ledger {
  readonly core: LedgerCore
  readonly exchange: Gate
  readonly parse: Gate
  readonly envelopes: EnvelopeParses
  readonly storage: ByteBudget
  readonly runs: RunTable
  readonly lanes: Lanes
  readonly providers: ProviderState
  readonly init: LedgerHandleInit

  constructor (init: LedgerHandleInit, row: number) {
    this.init = init
    this.core = new LedgerCore(init.sab, row)
    this.exchange = new Gate(this.core, GATE_EXCHANGE, 'exchange', { full: 'capacity_exhausted', timeout: 'capacity_timeout' }, init.queueWaitMs)
    this.parse = new Gate(this.core, GATE_PARSE, 'parse', { full: 'parse_capacity_exhausted', timeout: 'parse_capacity_timeout' }, init.parseWaitMs)
    this.envelopes = new EnvelopeParses(this.core)
    this.storage = new ByteBudget(this.core)
    this.runs = new RunTable(this.core)
    this.lanes = new Lanes(this.core)
    this.providers = new ProviderState(this.core)
  }

  get row (): number { return this.core.row }

  get draining (): boolean { return Atomics.load(this.core.i32, H_DRAINING) === 1 }
  setDraining (on: boolean): void { Atomics.store(this.core.i32, H_DRAINING, on ? 1 : 0) }

  /** The owning thread reports its heap figures (bytes). */
  reportHeap (heapUsed: number, heapLimit: number, external: number): void {
    const at = this.core.layout.row64(this.core.row)
    const i64 = this.core.i64
    Atomics.store(i64, at + R64_HEAP_USED, BigInt(Math.trunc(heapUsed)))
    Atomics.store(i64, at + R64_HEAP_LIMIT, BigInt(Math.trunc(heapLimit)))
    Atomics.store(i64, at + R64_EXTERNAL, BigInt(Math.trunc(external)))
    Atomics.store(i64, at + R64_UPDATED_MS, BigInt(Date.now()))
  }

  /** Counts one refusal or failure with this code (metrics: sluice_refusals_total{code}). */
  countRefusal (code: ErrorCode): void {
    const at = this.core.layout.row32(this.core.row) + R_COUNTERS + PAIR_FIELDS * (codeIndex.get(code) ?? 0)
    addOwned(this.core.i32, at, 1) // only this thread writes its row's counters
  }

  /** Adds `delta` to one of this thread's row gauges (RG_*): only the owner writes its row. */
  gauge (which: number, delta: number): void {
    if (delta !== 0) Atomics.add(this.core.i32, this.core.layout.row32(this.core.row) + R_GAUGES + which, delta)
  }

  /** Records one observation (ms) in one of this thread's histograms (HIST_*). */
  observe (hist: number, ms: number): void {
    const i32 = this.core.i32
    const at = this.core.layout.row32(this.core.row) + R_HISTS + hist * HIST_FIELDS
    let b = 0
    while (b < HIST_BOUNDS_MS.length && ms > HIST_BOUNDS_MS[b]) b++
    addOwned(i32, at + PAIR_FIELDS * b, 1)
    addOwned(i32, at + HIST_SUM_US, Math.max(0, Math.round(ms * 1000)))
    addOwned(i32, at + HIST_N, 1)
  }

  /** Row gauges summed over live rows (a dead row's gauges are zeroed by its reclaim). */
  gauges (): number[] {
    const { i32, layout } = this.core
    const out = new Array<number>(ROW_GAUGES).fill(0)
    for (let r = 0; r < layout.dims.rows; r++) {
      for (let g = 0; g < ROW_GAUGES; g++) out[g] += Atomics.load(i32, layout.row32(r) + R_GAUGES + g)
    }
    return out
  }

  /** One histogram summed over every row: per-bucket counts (not cumulative), sum (ms), count. */
  histogram (hist: number): { buckets: number[]; sumMs: number; count: number } {
    const { i32, layout } = this.core
    const buckets = new Array<number>(HIST_BUCKETS).fill(0)
    let sumUs = 0
    let count = 0
    for (let r = 0; r < layout.dims.rows; r++) {
      const at = layout.row32(r) + R_HISTS + hist * HIST_FIELDS
      for (let b = 0; b < HIST_BUCKETS; b++) buckets[b] += read(i32, at + PAIR_FIELDS * b)
      sumUs += read(i32, at + HIST_SUM_US)
      count += read(i32, at + HIST_N)
    }
    return { buckets, sumMs: sumUs / 1000, count }
  }

  /** Refusal totals by code, summed over every row (dead rows included: totals survive). */
  refusals (): Map<ErrorCode, number> {
    const out = new Map<ErrorCode, number>()
    const { i32, layout } = this.core
    for (const [code, i] of codeIndex) {
      let n = 0
      for (let r = 0; r < layout.dims.rows; r++) n += read(i32, layout.row32(r) + R_COUNTERS + PAIR_FIELDS * i)
      if (n > 0) out.set(code, n)
    }
    return out
  }

  // ---- primary only ----

  /** Assigns a row to a new thread (before it starts). Returns the row's new generation. */
  assignRow (row: number, threadId = 0): number {
    this.checkRow(row)
    const at = this.core.layout.row32(row)
    const i32 = this.core.i32
    const state = Atomics.load(i32, at + R_STATE)
    if (state === ROW_ALIVE) throw new Error(`ledger row ${row} is still alive`)
    for (let g = 0; g < GATES; g++) {
      if (Atomics.load(i32, at + R_HELD + g) !== 0) throw new Error(`ledger row ${row} still holds permits: reclaim it first`)
    }
    if (Atomics.load(this.core.i64, this.core.layout.row64(row) + R64_BYTES) !== 0n) throw new Error(`ledger row ${row} still holds bytes: reclaim it first`)
    if (Atomics.load(i32, at + R_ENVELOPES) !== 0) throw new Error(`ledger row ${row} still holds envelope-parse slots: reclaim it first`)
    Atomics.store(i32, at + R_THREAD_ID, threadId)
    Atomics.store(i32, at + R_STATE, ROW_ALIVE)
    return Atomics.add(i32, at + R_GENERATION, 1) + 1
  }

  /** Records the thread id once the thread is known (Worker.threadId). */
  setThreadId (row: number, threadId: number): void {
    this.checkRow(row)
    Atomics.store(this.core.i32, this.core.layout.row32(row) + R_THREAD_ID, threadId)
  }

  /**
   * Reclaims everything a dead thread's row holds, exactly once (see the file header).
   * Call only after the thread's exit was observed. Never parks the calling thread: while
   * another thread holds the ledger lock, it retries on later turns of the event loop, so
   * other exit handlers (perhaps the dead lock holder's own) can run meanwhile.
   * `isDeadRow` names every row whose thread is known dead (their locks may be stolen too).
   */
  async reclaimRow (row: number, isDeadRow: (row: number) => boolean = (r) => r === row, generation?: number): Promise<Reclaimed> {
    for (;;) {
      const done = this.tryReclaimRow(row, isDeadRow, generation)
      if (done) return done
      await new Promise((resolve) => setImmediate(resolve))
    }
  }

  /**
   * One non-parking attempt at reclaimRow(); null when a live thread holds the lock. With
   * `generation`, a row already reassigned to a newer life is left alone (zeros returned).
   */
  tryReclaimRow (row: number, isDeadRow: (row: number) => boolean = (r) => r === row, generation?: number): Reclaimed | null {
    this.checkRow(row)
    if (row === this.core.row) throw new Error('a thread cannot reclaim its own row')
    const core = this.core
    const got = core.tryLockForRepair((token) => token === row + 1 || (token - 1 !== core.row && isDeadRow(token - 1)))
    if (got === null) return null
    const lockStolen = got === 'stolen'
    if (generation !== undefined && Atomics.load(core.i32, core.layout.row32(row) + R_GENERATION) !== generation) {
      core.unlock()
      return { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen }
    }
    const notify: number[] = []
    let exchange = 0
    let parse = 0
    let bytes = 0
    let lanes = 0
    let envelopes = 0
    let accountClaims = 0
    let lost: LostEntry[] = []
    try {
      const ex = reclaimGateLocked(core, GATE_EXCHANGE, row)
      const pa = reclaimGateLocked(core, GATE_PARSE, row)
      exchange = ex.reclaimed
      parse = pa.reclaimed
      const ln = reclaimLanesLocked(core, row)
      lanes = ln.reclaimed
      lost = ln.lost
      notify.push(...ex.granted, ...pa.granted, ...ln.notify)
      envelopes = reclaimEnvelopesLocked(core, row)
      bytes = reclaimBytesLocked(core, row, lockStolen)
      accountClaims = reclaimProvidersRow(core, row).inflight
      const at = core.layout.row32(row)
      // A dead thread's gauges describe streams that no longer exist.
      for (let g = 0; g < ROW_GAUGES; g++) Atomics.store(core.i32, at + R_GAUGES + g, 0)
      if (Atomics.exchange(core.i32, at + R_STATE, ROW_DEAD) === ROW_ALIVE) Atomics.add(core.i64, core.layout.budget64 + B_ROW_RECLAIMS, 1n)
      if (lockStolen) Atomics.add(core.i64, core.layout.budget64 + B_REPAIRS, 1n)
    } finally {
      core.unlock()
    }
    for (const idx of notify) Atomics.notify(core.i32, idx)
    const out: Reclaimed = { exchange, parse, bytes, lanes, lockStolen }
    if (lost.length > 0) out.lost = lost
    if (envelopes > 0) out.envelopes = envelopes
    if (accountClaims > 0) out.accountClaims = accountClaims
    return out
  }

  snapshot (): LedgerSnapshot {
    const { i32, i64, layout } = this.core
    const rows: RowSnapshot[] = []
    for (let r = 0; r < layout.dims.rows; r++) {
      const a = layout.row32(r)
      const b = layout.row64(r)
      const st = Atomics.load(i32, a + R_STATE)
      rows.push({
        row: r,
        state: st === ROW_ALIVE ? 'alive' : st === ROW_DEAD ? 'dead' : 'unused',
        generation: Atomics.load(i32, a + R_GENERATION),
        threadId: Atomics.load(i32, a + R_THREAD_ID),
        exchangeHeld: Atomics.load(i32, a + R_HELD + GATE_EXCHANGE),
        parseHeld: Atomics.load(i32, a + R_HELD + GATE_PARSE),
        envelopesHeld: Atomics.load(i32, a + R_ENVELOPES),
        bytes: Number(Atomics.load(i64, b + R64_BYTES)),
        heapUsed: Number(Atomics.load(i64, b + R64_HEAP_USED)),
        heapLimit: Number(Atomics.load(i64, b + R64_HEAP_LIMIT)),
        external: Number(Atomics.load(i64, b + R64_EXTERNAL)),
        updatedMs: Number(Atomics.load(i64, b + R64_UPDATED_MS)),
      })
    }
    return {
      exchange: this.exchange.snapshot(),
      parse: this.parse.snapshot(),
      envelopes: this.envelopes.snapshot(),
      storage: this.storage.snapshot(),
      lanes: this.lanes.snapshot(),
      rows,
      repairs: Number(Atomics.load(i64, layout.budget64 + B_REPAIRS)),
      rowReclaims: Number(Atomics.load(i64, layout.budget64 + B_ROW_RECLAIMS)),
      draining: this.draining,
    }
  }

  private checkRow (row: number): void {
    if (!Number.isInteger(row) || row < 0 || row >= this.core.layout.dims.rows) throw new RangeError(`ledger row ${row} out of range`)
  }
}

/** Primary: allocate and initialise the buffer; returns the primary's handle (row 0). */
export function createLedger (opts: LedgerOptions): Ledger {
  const dims = {
    rows: 1 + opts.threads,
    runs: opts.runSlots ?? 4096,
    lanes: opts.laneEntries ?? 1024,
    ...(opts.accounts ? { accounts: opts.accounts } : {}),
    ...(opts.breakers ? { breakers: opts.breakers } : {}),
    ...(opts.affinity ? { affinity: opts.affinity } : {}),
    gates: [
      { maxPermits: opts.maxActive, maxQueued: opts.maxQueued },
      { maxPermits: opts.parsePermits, maxQueued: opts.parseQueue },
    ],
  }
  const layout = computeLayout(dims)
  if (!Number.isSafeInteger(opts.storageBytes) || opts.storageBytes < 0) throw new RangeError('storageBytes must be a non-negative integer')
  const sab = new SharedArrayBuffer(layout.byteLength)
  const i32 = new Int32Array(sab, 0, layout.i32Length)
  const i64 = new BigInt64Array(sab, layout.i64ByteOffset, layout.i64Length)
  i32[H_VERSION] = LAYOUT_VERSION
  i32[H_ROWS] = dims.rows
  i32[H_RUN_SLOTS] = dims.runs
  i32[H_LANE_ENTRIES] = dims.lanes
  i32[H_ACCOUNTS] = opts.accounts ?? 0
  i32[H_BREAKERS] = opts.breakers ?? 0
  i32[H_AFFINITY] = opts.affinity ?? 0
  initLanes(i32, layout.lanes32, dims.lanes, opts.pendingPerSession ?? 5, opts.activePerSession ?? 1)
  initEnvelopes(i32, opts.envelopeParses ?? 0)
  for (let g = 0; g < GATES; g++) {
    i32[H_GATE_DIMS + GATE_DIM_FIELDS * g + GD_MAX_PERMITS] = dims.gates[g].maxPermits
    i32[H_GATE_DIMS + GATE_DIM_FIELDS * g + GD_MAX_QUEUED] = dims.gates[g].maxQueued
    initGate(i32, layout.gate32[g], dims.gates[g].maxPermits, dims.gates[g].maxQueued)
  }
  i64[layout.budget64 + B_LIMIT] = BigInt(opts.storageBytes)
  // The magic is written last: a buffer is usable only once fully initialised.
  Atomics.store(i32, H_MAGIC, MAGIC)
  const ledger = new Ledger({ sab, queueWaitMs: opts.queueWaitMs, parseWaitMs: opts.parseWaitMs }, PRIMARY_ROW)
  ledger.assignRow(PRIMARY_ROW)
  return ledger
}

/** A thread's handle on a ledger created elsewhere. */
export function attachLedger (init: LedgerHandleInit, row: number): Ledger {
  return new Ledger(init, row)
}


