// The ledger lock (core.ts): L1 (the lock word is 0 or its holder's token), L2 (no
// re-entry, asserted), a foreign unlock fails loudly, and lockForRepair steals only from a
// token it is told is dead.

import t from 'tap'
import { LedgerCore } from '../../../src/ledger/core.ts'
import { H_LOCK } from '../../../src/ledger/layout.ts'
import { assertIdle, makeLedger, rowHandle } from './helpers.ts'

const lockWord = (core: LedgerCore): number => Atomics.load(core.i32, H_LOCK)

t.test('lock writes the holder token (row + 1), unlock clears it', async (t) => {
  const primary = makeLedger()
  const worker = rowHandle(primary, 2)
  t.equal(primary.core.token, 1)
  t.equal(worker.core.token, 3)
  primary.core.lock()
  t.equal(lockWord(primary.core), 1)
  primary.core.unlock()
  t.equal(lockWord(primary.core), 0)
  worker.core.lock()
  t.equal(lockWord(primary.core), 3)
  worker.core.unlock()
  assertIdle(t, primary)
})

t.test('re-entering the lock fails loudly and leaves it held by its holder', async (t) => {
  const ledger = makeLedger()
  ledger.core.lock()
  t.throws(() => ledger.core.lock(), /re-entered/)
  t.equal(lockWord(ledger.core), 1, 'still held by the same token')
  // Re-entry through a ledger operation fails the same way and changes nothing.
  t.throws(() => ledger.exchange.tryAcquire(), /re-entered/)
  t.throws(() => ledger.storage.reserve(1), /re-entered/)
  ledger.core.unlock()
  t.equal(ledger.exchange.snapshot().admitted, 0, 'the refused operation admitted nothing')
  assertIdle(t, ledger)
})

t.test('unlocking a lock held by another row fails loudly and keeps it held', async (t) => {
  const primary = makeLedger()
  const worker = rowHandle(primary, 1)
  worker.core.lock()
  t.throws(() => primary.core.unlock(), /does not hold it/)
  t.equal(lockWord(primary.core), 2, 'still held by row 1')
  worker.core.unlock()
  assertIdle(t, primary)
})

t.test('unlocking a free lock fails loudly', async (t) => {
  const ledger = makeLedger()
  t.throws(() => ledger.core.unlock(), /does not hold it/)
  t.equal(lockWord(ledger.core), 0)
  assertIdle(t, ledger)
})

t.test('tryLockForRepair takes a free lock without reporting a theft', async (t) => {
  const ledger = makeLedger()
  const asked: number[] = []
  t.equal(ledger.core.tryLockForRepair((tok: number) => { asked.push(tok); return true }), 'locked')
  t.equal(lockWord(ledger.core), 1)
  t.same(asked, [], 'nobody to declare dead')
  ledger.core.unlock()
  assertIdle(t, ledger)
})

t.test('tryLockForRepair steals the lock from a dead token', async (t) => {
  const primary = makeLedger()
  rowHandle(primary, 3)
  Atomics.store(primary.core.i32, H_LOCK, 4) // row 3 died inside a critical section
  t.equal(primary.core.tryLockForRepair((tok: number) => tok === 4), 'stolen')
  t.equal(lockWord(primary.core), 1, 'now held by the primary')
  primary.core.unlock()
  assertIdle(t, primary)
})

t.test('tryLockForRepair never parks on a lock held by a thread not known dead', async (t) => {
  const primary = makeLedger()
  rowHandle(primary, 2)
  Atomics.store(primary.core.i32, H_LOCK, 3) // row 2 holds the lock, alive as far as we know
  t.equal(primary.core.tryLockForRepair((tok: number) => tok === 4), null, 'returns at once instead of waiting')
  t.equal(lockWord(primary.core), 3, 'the holder keeps the lock')
  Atomics.store(primary.core.i32, H_LOCK, 0)
  assertIdle(t, primary)
})

t.test('tryLockForRepair refuses re-entry by the primary itself', async (t) => {
  const ledger = makeLedger()
  ledger.core.lock()
  t.throws(() => ledger.core.tryLockForRepair(() => true), /re-entered/, 'its own token is never "dead"')
  t.equal(lockWord(ledger.core), 1)
  ledger.core.unlock()
  assertIdle(t, ledger)
})

t.test('a core refuses rows outside the buffer', async (t) => {
  const ledger = makeLedger()
  t.throws(() => new LedgerCore(ledger.init.sab, 4), RangeError)
  t.throws(() => new LedgerCore(ledger.init.sab, -1), RangeError)
  t.equal(new LedgerCore(ledger.init.sab, 3).token, 4)
  assertIdle(t, ledger)
})
