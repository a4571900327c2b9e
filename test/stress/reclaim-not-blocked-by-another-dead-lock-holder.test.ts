// Property: a dead worker's holdings are reclaimed whatever order the primary observes the
// exits of several dead workers in (core.ts "Death inside a critical section": "the primary
// observes the worker's exit, steals the lock ... and rebuilds").
//
// Scenario: two workers die together (shutdown, an OOM storm). Row 2 died inside a critical
// section, so the lock word still holds row 2's token; row 1 died holding a permit. The
// primary's `exit` events arrive row 1 first, then row 2, each handler calling reclaimRow as
// the supervisor does. Reclaiming row 1 must not wait for a lock that only row 2's exit
// handler (queued behind it on the same event loop) can repair.
//
// A worker thread plays the primary here, so that if it blocks, the test thread can see it
// (it parks on the lock word: H_LOCK_PARKED > 0 while the lock still holds row 2's token)
// instead of hanging.
//
// This file is also the worker script (isMainThread picks the side).

import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import { attachLedger, createLedger, type LedgerHandleInit, type Reclaimed } from '../../src/ledger/ledger.ts'
import { H_LOCK, H_LOCK_PARKED } from '../../src/ledger/layout.ts'
import { assertIdle, rowHandle } from '../unit/ledger/helpers.ts'

type Msg = { type: 'reclaimed'; row: number; result: Reclaimed } | { type: 'handling'; row: number }

if (isMainThread) {
  const { default: t } = await import('tap')
  t.test('reclaiming one dead row is not blocked by a lock held by another dead row', async (t) => {
    const ledger = createLedger({
      maxActive: 2, maxQueued: 2, queueWaitMs: 5000, parsePermits: 1, parseQueue: 1, parseWaitMs: 5000,
      storageBytes: 1000, threads: 2,
    })
    const row1 = rowHandle(ledger, 1)
    const row2 = rowHandle(ledger, 2)
    t.ok(row1.exchange.tryAcquire(), 'row 1 holds an exchange permit')
    row2.storage.reserve(100)
    // Both threads are now dead; row 2 died inside a critical section.
    Atomics.store(ledger.core.i32, H_LOCK, row2.core.token)

    const primary = new Worker(new URL(import.meta.url), { workerData: ledger.init, execArgv: [] })
    const results = new Map<number, Reclaimed>()
    const handling: number[] = []
    primary.on('message', (m: Msg) => {
      if (m.type === 'handling') handling.push(m.row)
      else results.set(m.row, m.result)
    })
    let blocked = false
    for (;;) {
      if (results.size === 2) break
      if (handling.length > 0 && Atomics.load(ledger.core.i32, H_LOCK_PARKED) > 0 && Atomics.load(ledger.core.i32, H_LOCK) === row2.core.token) {
        blocked = true
        break
      }
      await new Promise((resolve) => setImmediate(resolve))
    }
    t.notOk(blocked, `the primary parked in reclaimRow(${handling.join(', ')}) on the lock of dead row 2, whose own exit handler can then never run: the primary's event loop is stuck for good`)
    await primary.terminate()

    if (blocked) {
      // Repair from here so the rest of the checks still mean something.
      results.set(2, await ledger.reclaimRow(2))
      results.set(1, await ledger.reclaimRow(1))
    }
    const r1 = results.get(1)!
    const r2 = results.get(2)!
    t.equal(r1.exchange + r2.exchange, 1, 'row 1\'s permit reclaimed once')
    t.equal(r1.bytes + r2.bytes, 100, 'row 2\'s bytes reclaimed once')
    t.equal(Number(r1.lockStolen) + Number(r2.lockStolen), 1, 'the lock was stolen once')
    t.equal(Atomics.load(ledger.core.i32, H_LOCK), 0)
    t.equal(ledger.snapshot().repairs, 1)
    assertIdle(t, ledger)
  })
} else {
  // The primary: exit events for rows 1 and 2 are delivered in that order, each handler
  // reclaiming its row (as primary/supervisor.ts does).
  const ledger = attachLedger(workerData as LedgerHandleInit, 0)
  const keepAlive = setInterval(() => {}, 1 << 30)
  let done = 0
  for (const row of [1, 2]) {
    setImmediate(async () => {
      parentPort!.postMessage({ type: 'handling', row } satisfies Msg)
      const result = await ledger.reclaimRow(row)
      parentPort!.postMessage({ type: 'reclaimed', row, result } satisfies Msg)
      if (++done === 2) clearInterval(keepAlive)
    })
  }
}
