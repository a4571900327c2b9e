// Admission.tryAdmit: the blocking route's permit without a promise. It takes a permit only
// when admit() would have been granted at once (free, and nobody queued before it: FIFO is
// never jumped), refuses as admit() does, and otherwise takes nothing so admit() can queue.

import t from 'tap'
import { SluiceError } from '../../../src/errors.ts'
import { Admission } from '../../../worker/admission.ts'
import { ExchangeScope } from '../../../worker/scope.ts'
import { assertIdle, makeLedger } from '../ledger/helpers.ts'
import { unitConfig } from './helpers.ts'

t.test('a free permit is taken at once; a full gate or a queue ahead leaves everything to admit()', async (t) => {
  const ledger = makeLedger() // maxActive 2
  const admission = new Admission(ledger, { ...unitConfig().limits })
  const signal = new AbortController().signal
  const a = new ExchangeScope(ledger)
  const b = new ExchangeScope(ledger)
  t.equal(admission.tryAdmit(a, signal), true)
  t.equal(admission.tryAdmit(b, signal), true)
  t.equal(ledger.exchange.heldByMe, 2)
  const c = new ExchangeScope(ledger)
  t.equal(admission.tryAdmit(c, signal), false, 'full: not taken')
  t.equal(ledger.exchange.heldByMe, 2, 'nothing taken')
  // c queues through admit(); a released permit goes to c, and a newcomer's tryAdmit must not
  // take it (or any) while c is ahead of it.
  const queued = admission.admit(c, signal)
  a.discard()
  const d = new ExchangeScope(ledger)
  t.equal(admission.tryAdmit(d, signal), false, 'the released permit is the queued waiter\'s')
  await queued
  t.equal(ledger.exchange.heldByMe, 2, 'b and c hold')
  b.discard()
  t.equal(admission.tryAdmit(d, signal), true, 'free again, nobody queued: taken')
  c.discard()
  d.discard()
  assertIdle(t, ledger)
})

t.test('an aborted signal is left to admit() (its client_closed); drain and heap refuse as admit() does', async (t) => {
  const ledger = makeLedger()
  const limits = { ...unitConfig().limits }
  const admission = new Admission(ledger, limits)
  const ac = new AbortController()
  ac.abort()
  const s = new ExchangeScope(ledger)
  t.equal(admission.tryAdmit(s, ac.signal), false)
  const err = await admission.admit(s, ac.signal).then(() => null, (e) => SluiceError.from(e))
  t.equal(err?.code, 'client_closed')
  ledger.setDraining(true)
  t.throws(() => admission.tryAdmit(s, new AbortController().signal), { code: 'shutting_down' })
  ledger.setDraining(false)
  await new Promise((r) => setImmediate(r)) // a new turn: the heap is read afresh
  limits.workerHeapAdmitFraction = 0.000001
  t.throws(() => admission.tryAdmit(s, new AbortController().signal), { code: 'worker_heap_exhausted' })
  s.discard()
  assertIdle(t, ledger)
})
