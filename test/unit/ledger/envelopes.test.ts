// The envelope-parse allowance (envelopes.ts): a bounded count shared by every row, taken
// before an envelope asks for the parse permit; full means refused at once, never queued;
// a dead row's slots are reclaimed exactly once. Sized with the parse queue, it is what
// keeps room in that queue for every exchange-permit holder.

import t from 'tap'
import { H_EP_IN_USE, H_LOCK } from '../../../src/ledger/layout.ts'
import { assertIdle, makeLedger, outcome, rowHandle } from './helpers.ts'

t.test('tryTake takes one slot per call up to the allowance, then refuses without waiting; give returns it', async (t) => {
  const primary = makeLedger({ envelopeParses: 2 })
  const w = rowHandle(primary, 1)
  t.equal(w.envelopes.max, 2)
  t.ok(w.envelopes.tryTake())
  t.ok(primary.envelopes.tryTake(), 'shared by every row')
  t.notOk(w.envelopes.tryTake(), 'full: refused at once')
  t.match(primary.snapshot().envelopes, { max: 2, inUse: 2, taken: 2, refused: 1, reclaimed: 0 })
  t.match(primary.snapshot().rows[1], { envelopesHeld: 1 })
  w.envelopes.give()
  t.ok(w.envelopes.tryTake(), 'a returned slot is free again')
  w.envelopes.give()
  primary.envelopes.give()
  t.throws(() => w.envelopes.give(), /without a held slot/, 'a double give is a bug, never clamped')
  t.equal(primary.snapshot().envelopes.inUse, 0)
  assertIdle(t, primary)
})

t.test('an allowance of 0 refuses every envelope parse', async (t) => {
  const l = makeLedger()
  t.notOk(l.envelopes.tryTake())
  t.match(l.snapshot().envelopes, { max: 0, inUse: 0, refused: 1 })
  t.throws(() => makeLedger({ envelopeParses: -1 }), RangeError)
})

t.test('a dead row\'s slots are reclaimed once, and in-use is rebuilt from the rows', async (t) => {
  const primary = makeLedger({ envelopeParses: 3 })
  const w = rowHandle(primary, 1)
  const v = rowHandle(primary, 2)
  t.ok(w.envelopes.tryTake())
  t.ok(w.envelopes.tryTake())
  t.ok(v.envelopes.tryTake())
  // A holder that died between its two writes: the derived count is off by one.
  Atomics.add(primary.core.i32, H_EP_IN_USE, 1)
  const r = primary.tryReclaimRow(1)!
  t.equal(r.envelopes, 2, 'exactly what the dead row held')
  t.match(primary.snapshot().envelopes, { inUse: 1, reclaimed: 2 }, 'rebuilt from the rows (the live row\'s slot)')
  t.same(primary.tryReclaimRow(1)!, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false }, 'a second reclaim finds nothing')
  t.ok(primary.envelopes.tryTake(), 'the freed slots are usable')
  t.ok(primary.envelopes.tryTake())
  t.notOk(primary.envelopes.tryTake())
  primary.envelopes.give()
  primary.envelopes.give()
  v.envelopes.give()
  t.equal(Atomics.load(primary.core.i32, H_LOCK), 0)
  assertIdle(t, primary, { exactTotals: true })
})

t.test('queue sized maxActive + allowance: permit holders always find a place while the allowance is full', async (t) => {
  // The shape the gateway uses: parse queue = maxActive + envelopeParses (primary/main.ts).
  const maxActive = 3
  const allowance = 2
  const l = makeLedger({ maxActive, maxQueued: 0, parsePermits: 1, parseQueue: maxActive + allowance, envelopeParses: allowance })
  t.ok(l.parse.tryAcquire(), 'the one parse permit is busy')
  const waits: Promise<string>[] = []
  // Envelopes: take an allowance slot, then wait for the permit; beyond it refused.
  for (let i = 0; i < allowance + 3; i++) {
    if (l.envelopes.tryTake()) waits.push(outcome(l.parse.acquire({})))
  }
  t.equal(waits.length, allowance, 'only the allowance waits; the rest were refused before queueing')
  t.equal(l.snapshot().envelopes.refused, 3)
  // Every exchange-permit holder still finds a queue place.
  for (let i = 0; i < maxActive; i++) t.ok(l.exchange.tryAcquire())
  for (let i = 0; i < maxActive; i++) waits.push(outcome(l.parse.acquire({})))
  t.equal(l.snapshot().parse.queued, maxActive + allowance, 'all queued, none refused')
  t.equal(l.snapshot().parse.refusedFull, 0)
  for (let i = 0; i < waits.length; i++) {
    l.parse.release()
    t.equal(await waits[i], 'granted', `waiter ${i} granted in order`)
  }
  l.parse.release()
  for (let i = 0; i < allowance; i++) l.envelopes.give()
  for (let i = 0; i < maxActive; i++) l.exchange.release()
  assertIdle(t, l)
})
