// The ledger's SharedArrayBuffer layout: every offset is a named constant here, and no
// other file indexes the buffer with a bare number.
//
// ## Layout
//
// One SharedArrayBuffer, two views over disjoint regions:
//
//   [ Int32 region:    header32 | gate32 x GATES | slots (per gate) | rows32 x ROWS
//                      | run table | lane block | lane entries
//                      | provider accounts | circuit breakers | session affinity (layout 6) ]
//   [ BigInt64 region: budget64 | rows64 x ROWS ]   (8-byte aligned)
//
// The dimensions (permits, queue sizes, rows) are written into header32 by the primary at
// creation, so any thread rebuilds the same layout from the buffer alone (`dimsOf(sab)`).
// Byte quantities live in BigInt64 cells (budgets above 2 GiB); everything touched on the
// permit fast path is Int32, including the totals, kept as (lo, hi) pairs (pair64.ts,
// PAIR_FIELDS cells each) so they never wrap and never allocate a BigInt.
//
// Gates are numbered: GATE_EXCHANGE = 0, GATE_PARSE = 1.
//
// ## Invariants
//
//   Y1  Every cell has one name, and regions are disjoint and in bounds; each block's size is
//       its field count (*_FIELDS), which `computeLayout` sums (test/unit/ledger/layout.test.ts
//       checks every cell is named exactly once).
//   Y2  Any change to the cells bumps LAYOUT_VERSION: a buffer of another version is refused.
//
// ## Policy
//
// Cells are grouped by who writes them: the header and the gate dims by the primary before
// any thread attaches; gate, lane and run blocks under the ledger lock; row blocks by their
// owner (ledger.ts). Each block's file says how.
//
// ## Cancel safety
//
// Does not apply: constants and pure functions, nothing waits.
//
// ## Memory ordering
//
// Does not apply here (each structure's file states its own). `createLedger` publishes the
// initialised buffer by storing H_MAGIC last, with Atomics.
//
// ## Death
//
// Does not apply: the layout is fixed at creation and no thread's death changes it.

import { PAIR_FIELDS } from './pair64.ts'
import { TL_PARKED, TOKEN_LOCK_FIELDS } from './token-lock.ts'

export const MAGIC = 0x51c1ce01
export const LAYOUT_VERSION = 7

export const GATE_EXCHANGE = 0
export const GATE_PARSE = 1
export const GATES = 2

// ---- Int32 header ----
export const H_MAGIC = 0
export const H_VERSION = 1
/** The one ledger lock, TOKEN_LOCK_FIELDS cells (token-lock.ts): 0 = free, else the holder's token (row + 1). */
export const H_LOCK = 2
/** Threads parked in Atomics.wait on H_LOCK (unlock notifies only when > 0). */
export const H_LOCK_PARKED = H_LOCK + TL_PARKED
export const H_ROWS = H_LOCK + TOKEN_LOCK_FIELDS
/** Per gate g, GATE_DIM_FIELDS cells at H_GATE_DIMS + GATE_DIM_FIELDS * g. */
export const H_GATE_DIMS = H_ROWS + 1
export const GD_MAX_PERMITS = 0
export const GD_MAX_QUEUED = 1
export const GATE_DIM_FIELDS = 2
export const H_DRAINING = H_GATE_DIMS + GATE_DIM_FIELDS * GATES // 9: 1 while the gateway drains for shutdown
/** Slots in the run table (turn pins). */
export const H_RUN_SLOTS = H_DRAINING + 1
/** Entries in the session-lane table (0 disables lanes). Added in layout version 2. */
export const H_LANE_ENTRIES = H_RUN_SLOTS + 1
/**
 * Envelope parses (envelopes.ts, layout version 4): parses by work that holds no exchange
 * permit (JSON-RPC and non-blocking envelopes), waiting for or holding the parse permit.
 * Bounded so that they never take the parse queue's room the permit holders need. Each
 * row's own count is R_ENVELOPES (the truth); H_EP_IN_USE is derived from the rows.
 */
export const H_EP_MAX = H_LANE_ENTRIES + 1      // the allowance (limits.maxEnvelopeParses)
export const H_EP_IN_USE = H_EP_MAX + 1         // = sum over rows of R_ENVELOPES, outside the lock
export const H_EP_TOTALS = H_EP_IN_USE + 1      // EP_TOTAL_FIELDS cells of (lo, hi) totals follow
export const ET_TAKEN = 0                       // allowance slots taken
export const ET_REFUSED = 2                     // refusals: the allowance full (parse_capacity_exhausted)
export const ET_RECLAIMED = 4                   // slots freed from dead rows
export const EP_TOTAL_FIELDS = 6
/** Provider accounts, circuit breakers and session-affinity slots (providers.ts, layout version 6). */
export const H_ACCOUNTS = H_EP_TOTALS + EP_TOTAL_FIELDS
export const H_BREAKERS = H_ACCOUNTS + 1
export const H_AFFINITY = H_BREAKERS + 1
export const HEADER32_FIELDS = H_AFFINITY + 1

// ---- Int32 per gate ----
export const G_MAX = 0          // permits
export const G_QUEUE_MAX = 1    // waiters admitted to the queue (WAITING slots)
export const G_SLOTS = 2        // physical slots = G_QUEUE_MAX + G_MAX (GRANTED slots await claim)
export const G_ACTIVE = 3       // = sum(rows HELD) + count(GRANTED slots), outside the lock
export const G_QUEUED = 4       // = count(WAITING slots), outside the lock
export const G_NEXT_TICKET = 5  // arrival order; compared with wrap-safe subtraction
export const G_TOTALS = 6       // GATE_TOTAL_FIELDS cells of totals follow (below)

// ---- Int32 per waiter slot ----
export const S_STATE = 0
export const S_OWNER = 1        // row index of the waiting thread
export const S_TICKET = 2
export const SLOT_FIELDS = 3

/** Waiter slot states. */
export const FREE = 0
export const WAITING = 1
export const GRANTED = 2

// ---- Int32 per gate: monotonic totals, each a (lo, hi) pair of cells: lo wraps into hi ----
export const GT_ADMITTED = 0        // permits handed out (fast path + grants)
export const GT_RELEASED = 2        // permits returned by their holder
export const GT_QUEUED = 4          // waiters that entered the queue
export const GT_REFUSED_FULL = 6    // refusals: queue full
export const GT_TIMEOUTS = 8        // waiters removed by their deadline
export const GT_CANCELS = 10        // waiters removed by their AbortSignal
export const GT_CANCEL_AFTER_GRANT = 12 // aborts that lost the race to a grant: permit put back
export const GT_RECLAIMED = 14      // permits reclaimed from dead rows (held or granted to them)
export const GATE_TOTAL_FIELDS = 16
export const GATE32_FIELDS = G_TOTALS + GATE_TOTAL_FIELDS

// ---- BigInt64 header / budget ----
export const B_LIMIT = 0
export const B_RESERVED = 1
export const B_PEAK = 2
export const B_REFUSED = 3
export const B_RECLAIMED = 4
export const B_REPAIRS = 5          // lock repairs after a holder died inside a critical section
export const B_ROW_RECLAIMS = 6     // dead rows reclaimed
export const BUDGET64_FIELDS = 7

// ---- Int32 run table (turn pins): run identity hash -> exchanges taken ----
export const RUN_HASH_A = 0
export const RUN_HASH_B = 1         // (A, B) = 64 bits of SHA-256 of "key\0run"; (0, 0) = empty
export const RUN_COUNT = 2
export const RUN_LAST_USED = 3      // seconds since the ledger's epoch, for LRU eviction
export const RUN_FIELDS = 4

// ---- Int32 session lanes (lanes.ts): one block, then LANE entries ----
export const LN_PENDING_MAX = 0     // pending (queued + active) per session; 0 = no cap
export const LN_ACTIVE_MAX = 1      // active exchanges per session (1 by default)
export const LN_ENTRIES = 2         // entries in the table
export const LN_PENDING = 3         // = count(non-FREE entries), outside the lock
export const LN_ACTIVE = 4          // = count(ACTIVE entries), outside the lock
export const LN_HWM = 5             // 1 + the highest non-FREE entry index (scans stop here)
export const LN_NEXT_TICKET = 6     // arrival order, wrap-safe like a gate's
export const LN_TOTALS = 7          // LANE_TOTAL_FIELDS cells of (lo, hi) totals follow
export const LT_ENTERED = 0         // exchanges counted into a lane
export const LT_QUEUED = 2          // of those, ones that had to wait behind their session
export const LT_REFUSED_FULL = 4    // refusals: session at its pending cap (prompt_queue_full)
export const LT_REFUSED_ENTRIES = 6 // refusals: the whole table full (capacity_exhausted)
export const LT_RELEASED = 8        // entries released by their owner
export const LT_CANCELS = 10        // queued entries withdrawn by their AbortSignal
export const LT_CANCEL_AFTER_PROMOTE = 12 // aborts that lost the race to a promotion
export const LT_RECLAIMED = 14      // entries freed from dead rows
export const LT_CANCEL_REQUESTS = 16 // entries flagged by a cancel request (E_CANCEL)
export const LANE_TOTAL_FIELDS = 18
export const LANE32_FIELDS = LN_TOTALS + LANE_TOTAL_FIELDS

/** One lane entry: one exchange counted against its session. */
export const E_STATE = 0            // LANE_FREE | LANE_QUEUED | LANE_ACTIVE (waitAsync address)
export const E_OWNER = 1            // row of the thread running the exchange
export const E_TICKET = 2
export const E_SESSION_A = 3        // (A, B) = 64 bits of SHA-256("<key name>\0<session id>")
export const E_SESSION_B = 4
export const E_EXCHANGE = 5         // 4 cells: the exchange id (a UUID) as 128 bits, for cancel
                                    // requests and for the primary to name a dead worker's exchanges
export const E_CANCEL = 9           // 0, or 1 once a cancel was requested (waitAsync address)
export const E_FLAGS = 10           // ENTRY_EVENTS: the exchange reports through the session event ring
export const ENTRY_FIELDS = 11

export const ENTRY_EVENTS = 1

export const LANE_FREE = 0
export const LANE_QUEUED = 1
export const LANE_ACTIVE = 2

// ---- rows: one per participating thread (row 0 = the primary) ----
export const R_STATE = 0            // ROW_UNUSED | ROW_ALIVE | ROW_DEAD
export const R_GENERATION = 1       // bumped each time the row is (re)assigned
export const R_THREAD_ID = 2
export const R_HELD = 3             // + gate number: permits of that gate this row holds
/** Per-row event counters (refusals by catalogue code), (lo, hi) pairs written only by the
 *  row's own thread with Atomics; summed over rows by the admin plane. */
export const R_COUNTERS = R_HELD + GATES
export const ROW_COUNTERS = 64
/** Per-row gauges (layout version 3), written only by the row's own thread with Atomics.add. */
export const R_GAUGES = R_COUNTERS + PAIR_FIELDS * ROW_COUNTERS
export const RG_STREAMS = 0           // relays in flight (active stream readers)
export const RG_PENDING_BYTES = 1     // stream bytes held back or queued to the client
export const RG_INSPECTOR_BYTES = 2   // bytes held by the SSE framer (an unfinished frame)
export const RG_EVENT_STREAMS = 3     // open session event streams (GET /v1/sessions/:id/events)
// (layout version 5) protocol translation's retained bytes, by kind (src/translate/canonical.ts
// TranslationBudget): pending tool-call arguments, the open item, the reconstructed output
export const RG_TOOL_ARGUMENT_BYTES = 4
export const RG_TRANSLATE_ITEM_BYTES = 5
export const RG_TRANSLATE_OUTPUT_BYTES = 6
export const RG_TRANSLATIONS = 7      // translated exchanges in flight
export const RG_UPSTREAM_WAITS = 8    // provider requests that had to queue in an undici pool for a
                                      // connection (only ever added to: a count, exported as a counter)
export const ROW_GAUGES = 9
/** Per-row latency histograms (layout version 3): HIST_COUNT histograms of HIST_FIELDS cells. */
export const R_HISTS = R_GAUGES + ROW_GAUGES
export const HIST_QUEUE_WAIT = 0      // lane wait + exchange-gate wait, per admitted exchange
export const HIST_FIRST_BYTE = 1      // upstream request -> response headers
export const HIST_TOTAL = 2           // exchange start -> actual release
export const HIST_COUNT = 3
/** Upper bounds (ms) of the buckets; one more bucket (+Inf) follows. */
export const HIST_BOUNDS_MS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000, 300000] as const
/** (lo, hi) pairs: one per bucket incl. +Inf (not cumulative), then the sum in µs, then the count. */
export const HIST_BUCKETS = HIST_BOUNDS_MS.length + 1
export const HIST_SUM_US = PAIR_FIELDS * HIST_BUCKETS
export const HIST_N = HIST_SUM_US + PAIR_FIELDS
export const HIST_FIELDS = HIST_N + PAIR_FIELDS
/** Envelope-parse slots this row holds (layout version 4; see H_EP_MAX). */
export const R_ENVELOPES = R_HISTS + HIST_COUNT * HIST_FIELDS
/** Upstream retries by reason (layout version 6), (lo, hi) pairs written only by the row's owner. */
export const R_RETRIES = R_ENVELOPES + 1
export const RETRY_CONNECT = 0       // the connection failed (refused, connect timeout)
export const RETRY_RESET = 1         // the connection was reset / closed before the first byte
export const RETRY_TIMEOUT = 2       // no first byte within firstByteTimeoutMs
export const RETRY_STATUS = 3        // 502 / 503 / 504
export const RETRY_RATE_LIMITED = 4  // 429 on one account while another is free
export const RETRY_REASONS = 5
export const RETRY_REASON_NAMES = ['connect', 'reset', 'timeout', 'status', 'rate_limited'] as const
/** Retries attempted after the first downstream byte: structurally impossible, so always 0. */
export const R_RETRIES_AFTER_COMMIT = R_RETRIES + PAIR_FIELDS * RETRY_REASONS
export const ROW32_FIELDS = R_RETRIES_AFTER_COMMIT + PAIR_FIELDS

export const ROW_UNUSED = 0
export const ROW_ALIVE = 1
export const ROW_DEAD = 2

export const R64_BYTES = 0          // storage bytes this row holds
export const R64_HEAP_USED = 1
export const R64_HEAP_LIMIT = 2
export const R64_EXTERNAL = 3       // Buffer/ArrayBuffer bytes outside the JS heap
export const R64_UPDATED_MS = 4
export const ROW64_FIELDS = 5

export const PRIMARY_ROW = 0

// ---- Int32 provider accounts (providers.ts, layout version 6): one entry per account ----
// Counters only (Atomics, no lock): the Promela model (gates, lanes) needs no change.
export const AC_INFLIGHT = 0        // exchanges in flight on this account, all workers (CAS-claimed at selection)
export const AC_COOLDOWN_UNTIL = 1  // deciseconds since PROVIDER_EPOCH_MS; 0 = not cooling (a 429's Retry-After)
export const AC_FAIL_EWMA = 2       // recent transient failure rate, parts per EWMA_SCALE
export const AC_FIRST_BYTE_EWMA = 3 // first-byte latency EWMA, ms
export const AC_SELECTED = 4        // selections, total (wraps at 2^31: metrics only)
export const AC_ROW_INFLIGHT = 5    // + row: this row's share of AC_INFLIGHT (its owner writes it; reclaim subtracts it)
export const ACCOUNT_FIXED_FIELDS = 5

// ---- Int32 circuit breakers: one per provider x configured model pattern ----
export const BR_STATE = 0           // BREAKER_CLOSED | BREAKER_OPEN | BREAKER_HALF_OPEN
export const BR_FAILURES = 1        // consecutive transient failures while closed
export const BR_OPEN_UNTIL = 2      // deciseconds since PROVIDER_EPOCH_MS
export const BR_PROBE = 3           // 0, or the row + 1 of the thread holding the half-open probe
export const BR_TRANSITIONS = 4     // state changes, total (wraps at 2^31: metrics only)
export const BREAKER_FIELDS = 5
export const BREAKER_CLOSED = 0
export const BREAKER_OPEN = 1
export const BREAKER_HALF_OPEN = 2

// ---- Int32 session affinity: session key -> the account that served it (a cache) ----
export const AF_HASH_A = 0
export const AF_HASH_B = 1
export const AF_ACCOUNT = 2         // account index + 1; 0 = empty
export const AF_LAST_USED = 3       // deciseconds since PROVIDER_EPOCH_MS (replacement: the oldest of a probe window)
export const AFFINITY_FIELDS = 4

/** The providers block's time base (deciseconds in an Int32 last until 2032). */
export const PROVIDER_EPOCH_MS = Date.UTC(2026, 0, 1)

export interface GateDims { readonly maxPermits: number; readonly maxQueued: number }
export interface LedgerDims {
  readonly gates: readonly GateDims[]
  readonly rows: number
  /** Run-table slots (turn pins); 0 disables the table. */
  readonly runs: number
  /** Session-lane entries; 0 disables lanes. */
  readonly lanes: number
  /** Provider accounts (layout version 6); absent = 0. */
  readonly accounts?: number
  /** Circuit breakers (provider x model pattern); absent = 0. */
  readonly breakers?: number
  /** Session-affinity slots; absent = 0 (no affinity). */
  readonly affinity?: number
}

export interface Layout {
  readonly dims: LedgerDims
  readonly byteLength: number
  readonly i32Length: number
  /** Byte offset of the BigInt64 region. */
  readonly i64ByteOffset: number
  readonly i64Length: number
  /** Int32 index of gate g's block. */
  readonly gate32: readonly number[]
  /** Int32 index of gate g's first waiter slot. */
  readonly slot32: readonly number[]
  readonly budget64: number
  /** Int32 index of the run table. */
  readonly runs32: number
  /** Int32 index of the session-lane block; its entries follow it. */
  readonly lanes32: number
  /** Int32 index of the first account entry (accountFields cells each). */
  readonly accounts32: number
  /** Cells per account entry: ACCOUNT_FIXED_FIELDS + one per row. */
  readonly accountFields: number
  /** Int32 index of the first circuit breaker (BREAKER_FIELDS cells each). */
  readonly breakers32: number
  /** Int32 index of the first session-affinity slot (AFFINITY_FIELDS cells each). */
  readonly affinity32: number
  /** Int32 index of row r's block. */
  row32 (r: number): number
  /** BigInt64 index of row r's block. */
  row64 (r: number): number
}

export function computeLayout (dims: LedgerDims): Layout {
  if (dims.gates.length !== GATES) throw new RangeError(`ledger needs ${GATES} gates`)
  if (!Number.isInteger(dims.rows) || dims.rows < 1) throw new RangeError('ledger needs at least one row')
  for (const g of dims.gates) {
    if (!Number.isInteger(g.maxPermits) || g.maxPermits < 1) throw new RangeError('a gate needs at least one permit')
    if (!Number.isInteger(g.maxQueued) || g.maxQueued < 0) throw new RangeError('a gate queue size is a non-negative integer')
  }
  const gate32: number[] = []
  const slot32: number[] = []
  let at = HEADER32_FIELDS
  for (let g = 0; g < GATES; g++) { gate32.push(at); at += GATE32_FIELDS }
  for (const g of dims.gates) { slot32.push(at); at += (g.maxQueued + g.maxPermits) * SLOT_FIELDS }
  const rowBase32 = at
  const runs32 = rowBase32 + dims.rows * ROW32_FIELDS
  const runs = dims.runs ?? 0
  if (!Number.isInteger(runs) || runs < 0) throw new RangeError('run slots must be a non-negative integer')
  const lanes = dims.lanes ?? 0
  if (!Number.isInteger(lanes) || lanes < 0) throw new RangeError('lane entries must be a non-negative integer')
  const lanes32 = runs32 + runs * RUN_FIELDS
  const accounts = dims.accounts ?? 0
  const breakers = dims.breakers ?? 0
  const affinity = dims.affinity ?? 0
  for (const [n, what] of [[accounts, 'accounts'], [breakers, 'breakers'], [affinity, 'affinity slots']] as const) {
    if (!Number.isInteger(n) || n < 0) throw new RangeError(`${what} must be a non-negative integer`)
  }
  const accounts32 = lanes32 + LANE32_FIELDS + lanes * ENTRY_FIELDS
  const accountFields = ACCOUNT_FIXED_FIELDS + dims.rows
  const breakers32 = accounts32 + accounts * accountFields
  const affinity32 = breakers32 + breakers * BREAKER_FIELDS
  const i32Length = affinity32 + affinity * AFFINITY_FIELDS
  const i64ByteOffset = 8 * Math.ceil((i32Length * 4) / 8)
  const budget64 = 0
  const rowBase64 = budget64 + BUDGET64_FIELDS
  const i64Length = rowBase64 + dims.rows * ROW64_FIELDS
  return {
    dims,
    byteLength: i64ByteOffset + i64Length * 8,
    i32Length,
    i64ByteOffset,
    i64Length,
    gate32,
    slot32,
    budget64,
    runs32,
    lanes32,
    accounts32,
    accountFields,
    breakers32,
    affinity32,
    row32: (r) => rowBase32 + r * ROW32_FIELDS,
    row64: (r) => rowBase64 + r * ROW64_FIELDS,
  }
}

/** Reads the dimensions back from an initialised buffer. */
export function dimsOf (sab: SharedArrayBuffer): LedgerDims {
  const h = new Int32Array(sab, 0, HEADER32_FIELDS)
  if (h[H_MAGIC] !== MAGIC || h[H_VERSION] !== LAYOUT_VERSION) throw new Error('not a sluice ledger buffer (or another layout version)')
  const gates: GateDims[] = []
  for (let g = 0; g < GATES; g++) {
    const at = H_GATE_DIMS + GATE_DIM_FIELDS * g
    gates.push({ maxPermits: h[at + GD_MAX_PERMITS], maxQueued: h[at + GD_MAX_QUEUED] })
  }
  const dims: { -readonly [K in keyof LedgerDims]: LedgerDims[K] } = { rows: h[H_ROWS], gates, runs: h[H_RUN_SLOTS], lanes: h[H_LANE_ENTRIES] }
  // Absent when 0, so a ledger without providers has the dims it was created with.
  if (h[H_ACCOUNTS] !== 0) dims.accounts = h[H_ACCOUNTS]
  if (h[H_BREAKERS] !== 0) dims.breakers = h[H_BREAKERS]
  if (h[H_AFFINITY] !== 0) dims.affinity = h[H_AFFINITY]
  return dims
}
