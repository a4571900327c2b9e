// The last party settling while a parse still runs (only a bug elsewhere can do it) must not
// leak: everything but the parse permit is released at once, and the permit goes back when
// the parse settles. (Found by the worker unit tests: releaseAll used to throw there, leaving
// the exchange permit, the bytes and the lane slot held for good.)

import t from 'tap'
import { randomUUID } from 'node:crypto'
import { idleProblems, makeLedger, turn } from '../ledger/helpers.ts'
import { enterLane } from '../../../worker/lane-ticket.ts'
import { ExchangeScope } from '../../../worker/scope.ts'

t.test('the last settle during a parse releases everything; the parse permit follows the parse', async (t) => {
  const ledger = makeLedger()
  const scope = new ExchangeScope(ledger)
  scope.tookLane(enterLane(ledger, 'unit', 's', randomUUID(), false))
  t.ok(ledger.exchange.tryAcquire()); scope.tookExchange(); scope.reserve(10)
  let finish!: () => void
  const p = scope.underParse(undefined, () => new Promise<void>((resolve) => { finish = resolve }))
  await turn()
  scope.settle('processing'); scope.settle('upstream')
  scope.settle('http')
  t.ok(scope.isReleased, 'released at the last settle')
  const s = ledger.snapshot()
  t.equal(s.exchange.active, 0, 'the exchange permit is back')
  t.equal(s.parse.active, 1, 'the parse permit is still held by the running parse')
  t.equal(ledger.storage.heldByMe, 0, 'the bytes are back')
  finish(); await p
  t.same(idleProblems(ledger), [], 'idle once the parse settled')
})
