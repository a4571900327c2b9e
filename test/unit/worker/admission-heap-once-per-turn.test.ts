// The heap admission check reads the heap once per synchronous turn (accept() and admit() of
// one exchange share the read) and afresh after any await, so an exchange that waited (in its
// session lane) is checked against the heap as it is then. Observed through the figures it
// reports to the ledger, and through the refusal itself.
//
// The first read is taken right after a full collection: otherwise a collection during the
// allocation below could free more garbage (left from loading the test) than the allocation
// keeps alive, and the fresh read would be lower than the first (seen once in CI).

import t from 'tap'
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
  admission.checkHeap()
  const first = ledger.snapshot().rows[ledger.row].heapUsed
  t.ok(first > 0, 'the heap was read and reported')
  const keep = new Array(200_000).fill(0).map((_, i) => ({ i })) // a few MB of live objects
  admission.checkHeap()
  t.equal(ledger.snapshot().rows[ledger.row].heapUsed, first, 'same turn: the first read stands')
  await turn()
  admission.checkHeap()
  t.ok(ledger.snapshot().rows[ledger.row].heapUsed > first, 'after an await: read again, the growth seen')
  t.equal(keep.length, 200_000)
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
