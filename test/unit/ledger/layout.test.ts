import t from 'tap'
import { attachLedger, createLedger } from '../../../src/ledger/ledger.ts'
import {
  BUDGET64_FIELDS, G_TOTALS, GATE32_FIELDS, GATE_TOTAL_FIELDS, GATES, HEADER32_FIELDS, ROW32_FIELDS, ROW64_FIELDS,
  ENTRY_FIELDS, LANE32_FIELDS, RUN_FIELDS, SLOT_FIELDS, computeLayout, dimsOf, type LedgerDims,
} from '../../../src/ledger/layout.ts'
import * as layoutModule from '../../../src/ledger/layout.ts'
import { assertIdle } from './helpers.ts'

const shapes: LedgerDims[] = [
  { rows: 1, runs: 0, lanes: 0, gates: [{ maxPermits: 1, maxQueued: 0 }, { maxPermits: 1, maxQueued: 0 }] },
  { rows: 5, runs: 4096, lanes: 1024, gates: [{ maxPermits: 32, maxQueued: 128 }, { maxPermits: 1, maxQueued: 64 }] },
  { rows: 2, runs: 3, lanes: 7, gates: [{ maxPermits: 3, maxQueued: 1 }, { maxPermits: 7, maxQueued: 2 }] },
  { rows: 64, runs: 1, lanes: 1, gates: [{ maxPermits: 1000, maxQueued: 5000 }, { maxPermits: 4, maxQueued: 0 }] },
]

t.test('dims round-trip through the buffer, for every shape', async (t) => {
  for (const dims of shapes) {
    const ledger = createLedger({
      maxActive: dims.gates[0].maxPermits,
      maxQueued: dims.gates[0].maxQueued,
      queueWaitMs: 100,
      parsePermits: dims.gates[1].maxPermits,
      parseQueue: dims.gates[1].maxQueued,
      parseWaitMs: 100,
      storageBytes: 0,
      runSlots: dims.runs,
      laneEntries: dims.lanes,
      threads: dims.rows - 1,
    })
    t.same(dimsOf(ledger.init.sab), dims, `dims ${JSON.stringify(dims)}`)
    const layout = computeLayout(dims)
    t.equal(ledger.init.sab.byteLength, layout.byteLength, 'buffer is exactly the computed size')
    t.same(ledger.core.layout.gate32, layout.gate32, 'every thread rebuilds the same layout from the buffer')
    const snap = ledger.snapshot()
    t.equal(snap.rows.length, dims.rows)
    t.equal(snap.exchange.max, dims.gates[0].maxPermits)
    t.equal(snap.exchange.queueMax, dims.gates[0].maxQueued)
    t.equal(snap.parse.max, dims.gates[1].maxPermits)
    t.equal(snap.parse.queueMax, dims.gates[1].maxQueued)
    assertIdle(t, ledger)
  }
})

t.test('buffer size is the sum of its named regions', async (t) => {
  for (const dims of shapes) {
    const l = computeLayout(dims)
    const slots = dims.gates.reduce((n, g) => n + (g.maxPermits + g.maxQueued) * SLOT_FIELDS, 0)
    const i32Length = HEADER32_FIELDS + GATES * GATE32_FIELDS + slots + dims.rows * ROW32_FIELDS + dims.runs * RUN_FIELDS + LANE32_FIELDS + dims.lanes * ENTRY_FIELDS
    t.equal(l.i32Length, i32Length, 'Int32 cells')
    t.equal(l.i64ByteOffset % 8, 0, 'BigInt64 region is 8-byte aligned')
    t.ok(l.i64ByteOffset >= i32Length * 4 && l.i64ByteOffset < i32Length * 4 + 8, 'BigInt64 region follows the Int32 region with at most alignment padding')
    t.equal(l.i64Length, BUDGET64_FIELDS + dims.rows * ROW64_FIELDS, 'BigInt64 cells')
    t.equal(l.byteLength, l.i64ByteOffset + l.i64Length * 8, 'byteLength')
  }
  t.equal(GATE32_FIELDS, G_TOTALS + GATE_TOTAL_FIELDS, 'the gate block holds all its totals')
})

t.test('every named cell has its own index (regions are disjoint and in bounds)', async (t) => {
  const dims = shapes[2]
  const l = computeLayout(dims)
  const owners32 = new Map<number, string>()
  const clash: string[] = []
  const claim = (map: Map<number, string>, i: number, who: string, limit: number): void => {
    if (i < 0 || i >= limit) clash.push(`${who} -> ${i} out of [0, ${limit})`)
    const prev = map.get(i)
    if (prev !== undefined) clash.push(`${who} and ${prev} share ${i}`)
    map.set(i, who)
  }
  for (let f = 0; f < HEADER32_FIELDS; f++) claim(owners32, f, `header ${f}`, l.i32Length)
  for (let g = 0; g < GATES; g++) {
    for (let f = 0; f < GATE32_FIELDS; f++) claim(owners32, l.gate32[g] + f, `gate ${g} field ${f}`, l.i32Length)
    const n = dims.gates[g].maxPermits + dims.gates[g].maxQueued
    for (let s = 0; s < n; s++) {
      for (let f = 0; f < SLOT_FIELDS; f++) claim(owners32, l.slot32[g] + s * SLOT_FIELDS + f, `gate ${g} slot ${s} field ${f}`, l.i32Length)
    }
  }
  for (let r = 0; r < dims.rows; r++) {
    for (let f = 0; f < ROW32_FIELDS; f++) claim(owners32, l.row32(r) + f, `row ${r} field ${f}`, l.i32Length)
  }
  for (let s = 0; s < dims.runs; s++) {
    for (let f = 0; f < RUN_FIELDS; f++) claim(owners32, l.runs32 + s * RUN_FIELDS + f, `run ${s} field ${f}`, l.i32Length)
  }
  for (let f = 0; f < LANE32_FIELDS; f++) claim(owners32, l.lanes32 + f, `lane block field ${f}`, l.i32Length)
  for (let e = 0; e < dims.lanes; e++) {
    for (let f = 0; f < ENTRY_FIELDS; f++) claim(owners32, l.lanes32 + LANE32_FIELDS + e * ENTRY_FIELDS + f, `lane entry ${e} field ${f}`, l.i32Length)
  }
  t.equal(owners32.size, l.i32Length, 'every Int32 cell is named exactly once')
  const owners64 = new Map<number, string>()
  for (let f = 0; f < BUDGET64_FIELDS; f++) claim(owners64, l.budget64 + f, `budget ${f}`, l.i64Length)
  for (let r = 0; r < dims.rows; r++) {
    for (let f = 0; f < ROW64_FIELDS; f++) claim(owners64, l.row64(r) + f, `row64 ${r} field ${f}`, l.i64Length)
  }
  t.equal(owners64.size, l.i64Length, 'every BigInt64 cell is named exactly once')
  t.same(clash, [], 'no overlaps, nothing out of bounds')
})

t.test('the gate dims table has one entry per gate', async (t) => {
  t.equal(layoutModule.GATE_EXCHANGE, 0)
  t.equal(layoutModule.GATE_PARSE, 1)
  t.equal(GATES, 2)
  t.equal(layoutModule.H_DRAINING, layoutModule.H_GATE_DIMS + 2 * GATES, 'draining follows the gate dims')
})

t.test('invalid dims are refused', async (t) => {
  const ok = { maxPermits: 1, maxQueued: 0 }
  t.throws(() => computeLayout({ rows: 1, runs: 0, lanes: 0, gates: [ok] }), RangeError, 'one gate')
  t.throws(() => computeLayout({ rows: 0, runs: 0, lanes: 0, gates: [ok, ok] }), RangeError, 'no rows')
  t.throws(() => computeLayout({ rows: 1.5, runs: 0, lanes: 0, gates: [ok, ok] }), RangeError, 'fractional rows')
  t.throws(() => computeLayout({ rows: 1, runs: 0, lanes: 0, gates: [{ maxPermits: 0, maxQueued: 0 }, ok] }), RangeError, 'no permits')
  t.throws(() => computeLayout({ rows: 1, runs: 0, lanes: 0, gates: [{ maxPermits: 1, maxQueued: -1 }, ok] }), RangeError, 'negative queue')
  t.throws(() => computeLayout({ rows: 1, runs: 0, lanes: 0, gates: [ok, { maxPermits: Number.NaN, maxQueued: 0 }] }), RangeError, 'NaN permits')
  t.throws(() => computeLayout({ rows: 1, runs: 0, lanes: 0, gates: [ok, { maxPermits: 1, maxQueued: 0.5 }] }), RangeError, 'fractional queue')
  t.throws(() => computeLayout({ rows: 1, runs: -1, lanes: 0, gates: [ok, ok] }), RangeError, 'negative run slots')
  t.throws(() => computeLayout({ rows: 1, runs: 0, lanes: -1, gates: [ok, ok] }), RangeError, 'negative lane entries')
  t.throws(() => computeLayout({ rows: 1, runs: 0, lanes: 0.5, gates: [ok, ok] }), RangeError, 'fractional lane entries')
  t.throws(() => createLedger({ maxActive: 1, maxQueued: 0, queueWaitMs: 1, parsePermits: 1, parseQueue: 0, parseWaitMs: 1, storageBytes: 0, threads: 0, pendingPerSession: -1 }), RangeError, 'negative pending cap')
  t.throws(() => createLedger({ maxActive: 1, maxQueued: 0, queueWaitMs: 1, parsePermits: 1, parseQueue: 0, parseWaitMs: 1, storageBytes: 0, threads: 0, pendingPerSession: Number.NaN }), RangeError, 'NaN pending cap')
  t.throws(() => createLedger({ maxActive: 1, maxQueued: 0, queueWaitMs: 1, parsePermits: 1, parseQueue: 0, parseWaitMs: 1, storageBytes: 0, threads: 0, pendingPerSession: 2.5 }), RangeError, 'fractional pending cap')
  t.throws(() => createLedger({ maxActive: 1, maxQueued: 0, queueWaitMs: 1, parsePermits: 1, parseQueue: 0, parseWaitMs: 1, storageBytes: -1, threads: 0 }), RangeError, 'negative storage')
  t.throws(() => createLedger({ maxActive: 1, maxQueued: 0, queueWaitMs: 1, parsePermits: 1, parseQueue: 0, parseWaitMs: 1, storageBytes: 0.5, threads: 0 }), RangeError, 'fractional storage')
})

t.test('a buffer that is not a ledger is refused', async (t) => {
  t.throws(() => dimsOf(new SharedArrayBuffer(1024)), /not a sluice ledger/)
  const ledger = createLedger({ maxActive: 1, maxQueued: 0, queueWaitMs: 1, parsePermits: 1, parseQueue: 0, parseWaitMs: 1, storageBytes: 0, threads: 1 })
  const bad = new SharedArrayBuffer(ledger.init.sab.byteLength)
  new Uint8Array(bad).set(new Uint8Array(ledger.init.sab))
  new Int32Array(bad)[layoutModule.H_VERSION] = layoutModule.LAYOUT_VERSION + 1
  t.throws(() => dimsOf(bad), /layout version/)
})

t.test('a handle can only attach to an existing row', async (t) => {
  const ledger = createLedger({ maxActive: 1, maxQueued: 0, queueWaitMs: 1, parsePermits: 1, parseQueue: 0, parseWaitMs: 1, storageBytes: 0, threads: 2 })
  t.equal(attachLedger(ledger.init, 2).row, 2)
  t.throws(() => attachLedger(ledger.init, 3), RangeError)
  t.throws(() => attachLedger(ledger.init, -1), RangeError)
  t.throws(() => attachLedger(ledger.init, 0.5), RangeError)
  t.throws(() => ledger.assignRow(3), RangeError)
  t.throws(() => ledger.tryReclaimRow(3)!, RangeError)
  assertIdle(t, ledger)
})

t.test('the providers block (layout 6) follows the lanes, sized by its dims, and round-trips', async (t) => {
  const dims: LedgerDims = { rows: 3, runs: 2, lanes: 4, accounts: 3, breakers: 2, affinity: 5, gates: [{ maxPermits: 1, maxQueued: 1 }, { maxPermits: 1, maxQueued: 1 }] }
  const l = computeLayout(dims)
  const lanesEnd = l.lanes32 + LANE32_FIELDS + dims.lanes * ENTRY_FIELDS
  t.equal(l.accounts32, lanesEnd, 'accounts follow the lane entries')
  t.equal(l.accountFields, layoutModule.ACCOUNT_FIXED_FIELDS + dims.rows, 'an account has one in-flight share per row')
  t.equal(l.breakers32, l.accounts32 + 3 * l.accountFields)
  t.equal(l.affinity32, l.breakers32 + 2 * layoutModule.BREAKER_FIELDS)
  t.equal(l.i32Length, l.affinity32 + 5 * layoutModule.AFFINITY_FIELDS, 'nothing after the affinity slots')
  const ledger = createLedger({ maxActive: 1, maxQueued: 1, queueWaitMs: 100, parsePermits: 1, parseQueue: 1, parseWaitMs: 100, storageBytes: 0, runSlots: 2, laneEntries: 4, threads: 2, accounts: 3, breakers: 2, affinity: 5 })
  t.same(dimsOf(ledger.init.sab), dims, 'dims round-trip')
  t.equal(ledger.init.sab.byteLength, l.byteLength)
  t.throws(() => computeLayout({ ...dims, accounts: -1 }), RangeError, 'negative accounts')
  t.throws(() => computeLayout({ ...dims, breakers: 0.5 }), RangeError, 'fractional breakers')
  assertIdle(t, ledger)
})
