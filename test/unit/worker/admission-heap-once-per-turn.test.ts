// The heap admission check reads the heap once per synchronous turn (accept() and admit() of
// one exchange share the read) and afresh after any await, so an exchange that waited (in its
// session lane) is checked against the heap as it is then. Observed through the refusal: its
// details carry the figure it was decided on. A refusal also reports that figure to the
// ledger (sluice_worker_heap_bytes); a pass leaves the report to the worker's timer.
//
// The first read is taken right after a full collection: otherwise a collection during the
// allocation below could free more garbage (left from loading the test) than the allocation
// keeps alive, and the fresh read would be lower than the first (seen once in CI).

import t from 'tap'
import { getHeapStatistics } from 'node:v8'
import { SluiceError } from '../../../src/errors.ts'
import { Admission } from '../../../worker/admission.ts'
import { makeLedger, turn } from '../ledger/helpers.ts'
import { fullGc } from '../../helpers/platform.ts'
import { unitConfig } from './helpers.ts'

t.test('one read per synchronous turn, a fresh one after an await', async (t) => {
  const ledger = makeLedger()
  const limits = { ...unitConfig().limits }
  const admission = new Admission(ledger, limits)
  fullGc()
  admission.checkHeap() // the turn's read
  const h = getHeapStatistics()
  const first = h.used_heap_size
  // Admit up to 2 MB above the first read, then grow the live heap well past that.
  limits.workerHeapAdmitFraction = (first + 2 * 2 ** 20) / h.heap_size_limit
  const keep = new Array(300_000).fill(0).map((_, i) => ({ i, s: `x${i}` })) // ~15 MB live
  t.doesNotThrow(() => admission.checkHeap(), 'same turn: the first read stands')
  t.equal(ledger.snapshot().rows[ledger.row].heapUsed, 0, 'a pass reports nothing')
  await turn()
  const err = t.throws(() => admission.checkHeap()) as SluiceError
  t.equal(err.code, 'worker_heap_exhausted', 'after an await: read again, the growth seen')
  const seen = err.details.heapUsed as number
  t.ok(seen > first + 2 * 2 ** 20, `refused on the fresh figure (${seen} > ${first} + 2 MB)`)
  t.equal(ledger.snapshot().rows[ledger.row].heapUsed, seen, 'the refusal reported the figure it was decided on')
  t.equal(keep.length, 300_000)
})

t.test('a refusal after an await is decided on the fresh figures', async (t) => {
  const ledger = makeLedger()
  const limits = { ...unitConfig().limits }
  const admission = new Admission(ledger, limits)
  admission.checkHeap() // passes at 0.85
  await turn()
  limits.workerHeapAdmitFraction = 0.000001
  const err = t.throws(() => admission.checkHeap()) as SluiceError
  t.equal(err.code, 'worker_heap_exhausted')
})
