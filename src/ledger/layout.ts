// The ledger's SharedArrayBuffer layout: every offset is a named constant here, and no
// other file indexes the buffer with a bare number.
//
// ## Layout
//
// One SharedArrayBuffer, two views over disjoint regions:
//
//   [ Int32 region:    header32 | gate32 x GATES | slots (per gate) | rows32 x ROWS
//                      | run table | lane block | lane entries ]
//   [ BigInt64 region: budget64 | rows64 x ROWS ]   (8-byte aligned)
//
// The dimensions (permits, queue sizes, rows) are written into header32 by the primary at
// creation, so any thread rebuilds the same layout from the buffer alone (`dimsOf(sab)`). Byte quantities and monotonic totals live in BigInt64 cells (no wrap,
// budgets above 2 GiB); everything touched on the permit fast path is Int32, including the
// permit totals, kept as (lo, hi) pairs so they never wrap and never allocate a BigInt.
//
// Gates are numbered: GATE_EXCHANGE = 0, GATE_PARSE = 1.

export const MAGIC = 0x51c1ce01
export const LAYOUT_VERSION = 3

export const GATE_EXCHANGE = 0
export const GATE_PARSE = 1
export const GATES = 2

// ---- Int32 header ----
export const H_MAGIC = 0
export const H_VERSION = 1
/** The one ledger lock: 0 = free, else the holder's token (row index + 1). */
export const H_LOCK = 2
/** Threads parked in Atomics.wait on H_LOCK (unlock notifies only when > 0). */
export const H_LOCK_PARKED = 3
export const H_ROWS = 4
/** Per gate: maxPermits at H_GATE_DIMS + 2*g, maxQueued at H_GATE_DIMS + 2*g + 1. */
export const H_GATE_DIMS = 5
export const H_DRAINING = H_GATE_DIMS + 2 * GATES // 9: 1 while the gateway drains for shutdown
/** Slots in the run table (turn pins). */
export const H_RUN_SLOTS = H_DRAINING + 1
/** Entries in the session-lane table (0 disables lanes). Added in layout version 2. */
export const H_LANE_ENTRIES = H_RUN_SLOTS + 1
export const HEADER32_FIELDS = H_LANE_ENTRIES + 1

// ---- Int32 per gate ----
export const G_MAX = 0          // permits
export const G_QUEUE_MAX = 1    // waiters admitted to the queue (WAITING slots)
export const G_SLOTS = 2        // physical slots = G_QUEUE_MAX + G_MAX (GRANTED slots await claim)
export const G_ACTIVE = 3       // = sum(rows HELD) + count(GRANTED slots), outside the lock
export const G_QUEUED = 4       // = count(WAITING slots), outside the lock
export const G_NEXT_TICKET = 5  // arrival order; compared with wrap-safe subtraction
export const G_TOTALS = 6         // GATE_TOTAL_FIELDS cells of totals follow
export const GATE32_FIELDS = G_TOTALS + 16 // = G_TOTALS + GATE_TOTAL_FIELDS

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
export const R_GAUGES = R_COUNTERS + 2 * ROW_COUNTERS
export const RG_STREAMS = 0           // relays in flight (active stream readers)
export const RG_PENDING_BYTES = 1     // stream bytes held back or queued to the client
export const RG_INSPECTOR_BYTES = 2   // bytes held by the SSE framer (an unfinished frame)
export const RG_EVENT_STREAMS = 3     // open session event streams (GET /v1/sessions/:id/events)
export const RG_UPSTREAM_WAITS = 4    // provider requests that had to queue in an undici pool for a
                                      // connection (only ever added to: a count, exported as a counter)
export const ROW_GAUGES = 5
/** Per-row latency histograms (layout version 3): HIST_COUNT histograms of HIST_FIELDS cells. */
export const R_HISTS = R_GAUGES + ROW_GAUGES
export const HIST_QUEUE_WAIT = 0      // lane wait + exchange-gate wait, per admitted exchange
export const HIST_FIRST_BYTE = 1      // upstream request -> response headers
export const HIST_TOTAL = 2           // exchange start -> actual release
export const HIST_COUNT = 3
/** Upper bounds (ms) of the buckets; one more bucket (+Inf) follows. */
export const HIST_BOUNDS_MS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000, 300000] as const
/** (lo, hi) pairs: one per bucket incl. +Inf (not cumulative), then the sum in µs, then the count. */
export const HIST_FIELDS = 2 * (HIST_BOUNDS_MS.length + 1) + 2 + 2
export const ROW32_FIELDS = R_HISTS + HIST_COUNT * HIST_FIELDS

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

export interface GateDims { readonly maxPermits: number; readonly maxQueued: number }
export interface LedgerDims {
  readonly gates: readonly GateDims[]
  readonly rows: number
  /** Run-table slots (turn pins); 0 disables the table. */
  readonly runs: number
  /** Session-lane entries; 0 disables lanes. */
  readonly lanes: number
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
  const i32Length = lanes32 + LANE32_FIELDS + lanes * ENTRY_FIELDS
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
    row32: (r) => rowBase32 + r * ROW32_FIELDS,
    row64: (r) => rowBase64 + r * ROW64_FIELDS,
  }
}

/** Reads the dimensions back from an initialised buffer. */
export function dimsOf (sab: SharedArrayBuffer): LedgerDims {
  const h = new Int32Array(sab, 0, HEADER32_FIELDS)
  if (h[H_MAGIC] !== MAGIC || h[H_VERSION] !== LAYOUT_VERSION) throw new Error('not a sluice ledger buffer (or another layout version)')
  const gates: GateDims[] = []
  for (let g = 0; g < GATES; g++) gates.push({ maxPermits: h[H_GATE_DIMS + 2 * g], maxQueued: h[H_GATE_DIMS + 2 * g + 1] })
  return { rows: h[H_ROWS], gates, runs: h[H_RUN_SLOTS], lanes: h[H_LANE_ENTRIES] }
}
