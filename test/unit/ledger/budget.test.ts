// ByteBudget (budget.ts) on one thread: B1 (reserved = sum of rows <= limit), B2 (no row
// negative), all-or-nothing reservations, the two refusal codes, release checks, peak.

import t from 'tap'
import { SluiceError } from '../../../src/errors.ts'
import type { Ledger } from '../../../src/ledger/ledger.ts'
import { assertIdle, makeLedger, rowHandle } from './helpers.ts'

function b1 (l: Ledger): { reserved: number; sumOfRows: number } {
  const s = l.snapshot()
  return { reserved: s.storage.reserved, sumOfRows: s.rows.reduce((n, r) => n + r.bytes, 0) }
}

function thrown (fn: () => unknown): unknown {
  try {
    fn()
  } catch (e) {
    return e
  }
  return undefined
}

t.test('reserve up to the limit exactly, then refuse with storage_budget_exhausted', async (t) => {
  const ledger = makeLedger({ storageBytes: 1000 })
  const b = ledger.storage
  t.equal(b.limit, 1000)
  b.reserve(600)
  b.reserve(400)
  t.equal(b.heldByMe, 1000)
  t.same(b1(ledger), { reserved: 1000, sumOfRows: 1000 })
  const before = b.snapshot()
  const err = thrown(() => b.reserve(1)) as SluiceError
  t.ok(err instanceof SluiceError)
  t.equal(err.code, 'storage_budget_exhausted')
  t.equal(err.status, 503)
  t.equal(err.side, 'local')
  t.same(err.details, { limit: 1000, requested: 1 })
  t.same(b.snapshot(), { ...before, refused: before.refused + 1 }, 'a refusal changes nothing but its count')
  t.equal(b.heldByMe, 1000)
  b.release(1000)
  t.same(b.snapshot(), { limit: 1000, reserved: 0, peak: 1000, refused: 1, reclaimed: 0 })
  assertIdle(t, ledger)
})

t.test('a request larger than the whole budget is refused at once as storage_request_too_large', async (t) => {
  const ledger = makeLedger({ storageBytes: 1000 })
  const b = ledger.storage
  for (const reserve of [(n: number) => b.reserve(n), (n: number) => b.tryReserve(n)]) {
    const err = thrown(() => reserve(1001)) as SluiceError
    t.equal(err.code, 'storage_request_too_large', 'even with the budget empty')
    t.equal(err.status, 413)
    t.equal(err.side, 'caller')
    t.equal(err.retryAfterSeconds, null, 'a retry can never fit')
    t.same(err.details, { limit: 1000, requested: 1001 })
  }
  t.same(b.snapshot(), { limit: 1000, reserved: 0, peak: 0, refused: 2, reclaimed: 0 })
  assertIdle(t, ledger)
})

t.test('tryReserve returns false when it does not fit now, true when it does', async (t) => {
  const ledger = makeLedger({ storageBytes: 100 })
  const b = ledger.storage
  t.equal(b.tryReserve(70), true)
  t.equal(b.tryReserve(31), false)
  t.equal(b.heldByMe, 70, 'all or nothing: no partial reservation')
  t.equal(b.tryReserve(30), true)
  t.equal(b.snapshot().refused, 1)
  b.release(100)
  assertIdle(t, ledger)
})

t.test('zero-byte reservations and releases are no-ops', async (t) => {
  const ledger = makeLedger({ storageBytes: 0 })
  const b = ledger.storage
  t.equal(b.tryReserve(0), true)
  b.reserve(0)
  b.release(0)
  t.same(b.snapshot(), { limit: 0, reserved: 0, peak: 0, refused: 0, reclaimed: 0 })
  t.equal(thrown(() => b.reserve(1)) instanceof SluiceError, true, 'a zero budget admits no byte')
  assertIdle(t, ledger)
})

t.test('invalid amounts are refused with a RangeError and change nothing', async (t) => {
  const ledger = makeLedger()
  const b = ledger.storage
  b.reserve(10)
  for (const n of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
    t.throws(() => b.reserve(n), RangeError, `reserve(${n})`)
    t.throws(() => b.tryReserve(n), RangeError, `tryReserve(${n})`)
    t.throws(() => b.release(n), RangeError, `release(${n})`)
  }
  t.same(b.snapshot(), { limit: b.limit, reserved: 10, peak: 10, refused: 0, reclaimed: 0 })
  b.release(10)
  assertIdle(t, ledger)
})

t.test('releasing more than this row holds throws and changes nothing (never clamped)', async (t) => {
  const primary = makeLedger({ storageBytes: 1000 })
  const worker = rowHandle(primary, 1)
  primary.storage.reserve(100)
  worker.storage.reserve(50)
  const before = primary.snapshot()
  t.throws(() => primary.storage.release(101), /exceeds this thread's 100/)
  t.throws(() => worker.storage.release(100), /exceeds this thread's 50/, 'bytes of another row are not mine to release')
  t.same(primary.snapshot(), before)
  primary.storage.release(100)
  t.throws(() => primary.storage.release(1), /exceeds/, 'double release')
  worker.storage.release(50)
  t.equal(primary.snapshot().rows.every((r) => r.bytes >= 0), true, 'B2: no row negative')
  assertIdle(t, primary)
})

t.test('rows share one budget: B1 holds across rows', async (t) => {
  const primary = makeLedger({ storageBytes: 1000 })
  const r1 = rowHandle(primary, 1)
  const r2 = rowHandle(primary, 2)
  r1.storage.reserve(500)
  r2.storage.reserve(300)
  t.equal(primary.storage.tryReserve(201), false, 'another row\'s bytes count against my room')
  t.equal(primary.storage.tryReserve(200), true)
  t.same(b1(primary), { reserved: 1000, sumOfRows: 1000 })
  t.same(primary.snapshot().rows.map((r) => r.bytes), [200, 500, 300, 0])
  r1.storage.release(500)
  t.equal(r2.storage.tryReserve(500), true)
  t.same(b1(primary), { reserved: 1000, sumOfRows: 1000 })
  r2.storage.release(800)
  primary.storage.release(200)
  t.equal(primary.storage.snapshot().peak, 1000)
  assertIdle(t, primary)
})

t.test('peak records the highest reservation and never exceeds the limit', async (t) => {
  const ledger = makeLedger({ storageBytes: 1000 })
  const b = ledger.storage
  const script: Array<[string, number]> = [['r', 100], ['r', 250], ['x', 200], ['r', 600], ['x', 600], ['r', 50], ['x', 150], ['r', 999], ['r', 2]]
  let held = 0
  let peak = 0
  for (const [op, n] of script) {
    if (op === 'r') {
      if (b.tryReserve(n)) held += n
    } else {
      b.release(n)
      held -= n
    }
    peak = Math.max(peak, held)
    t.equal(b.snapshot().peak, peak, `after ${op} ${n}`)
    t.equal(b.snapshot().reserved, held)
  }
  t.equal(b.snapshot().refused, 1, 'only the last 2 bytes did not fit')
  t.ok(b.snapshot().peak <= b.snapshot().limit)
  b.release(held)
  assertIdle(t, ledger)
})

t.test('budgets above 2^32 bytes are exact', async (t) => {
  const big = 2 ** 40 + 7
  const ledger = makeLedger({ storageBytes: big })
  const b = ledger.storage
  b.reserve(2 ** 33)
  b.reserve(big - 2 ** 33)
  t.equal(b.snapshot().reserved, big)
  t.equal(b.tryReserve(1), false)
  b.release(big)
  assertIdle(t, ledger)
})
