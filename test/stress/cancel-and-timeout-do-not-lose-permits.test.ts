// Property: cancels and timeouts never lose (or duplicate) a permit. 6 threads x 4 flows
// fight over 2 exchange permits and 1 parse permit, most acquires being aborted at a random
// moment or given a 0-2 ms deadline, holders keeping their permits only briefly, so grants
// race cancels and timeouts all the time (the put-back path, cancelsAfterGrant, and the
// keep-the-grant path). Afterwards the totals balance exactly, nothing is left queued, and
// every permit and byte can be taken again: none was lost.
//
// This file is also the worker script (isMainThread picks the side).

import { isMainThread } from 'node:worker_threads'
import { createLedger } from '../../src/ledger/ledger.ts'
import { assertIdle } from '../unit/ledger/helpers.ts'
import { Observer, pickSeed, spawn, threadContext } from './harness.ts'
import { addCounts, emptyCounts, hammer, totalsMismatches, type HammerCounts, type HammerOptions } from './hammer.ts'

const THREADS = 6
const MAX_ACTIVE = 2
const STORAGE = 500

const load: HammerOptions = {
  flows: 4,
  iterations: 500,
  budgetMs: 2500,
  pPreAborted: 0.05,
  pShortDeadline: 0.35,
  pAbort: 0.35,
  pParse: 0.6,
  pBytes: 0.5,
  maxBytes: 300,
  longWaitMs: 20_000,
}

if (isMainThread) {
  const { default: t } = await import('tap')
  t.test('aborts and timeouts racing grants lose no permit', async (t) => {
    const seed = pickSeed()
    t.comment(`seed ${seed} (rerun with SLUICE_STRESS_SEED=${seed})`)
    const ledger = createLedger({
      maxActive: MAX_ACTIVE, maxQueued: 32, queueWaitMs: 20_000,
      parsePermits: 1, parseQueue: 8, parseWaitMs: 20_000,
      storageBytes: STORAGE, threads: THREADS,
    })
    const obs = new Observer(THREADS + 1)
    const lives = Array.from({ length: THREADS }, (_, i) => spawn(ledger, obs, new URL(import.meta.url), i + 1, load, { seed }))
    const total = emptyCounts()
    for (const end of await Promise.all(lives.map((l) => l.end))) {
      t.equal(end.code, 0)
      t.same(end.violations, [])
      t.same(end.reclaimed, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false }, 'nothing left behind by a finished thread')
      addCounts(total, end.result as HammerCounts)
    }
    const s = ledger.snapshot()
    t.comment(`threads' tally: ${JSON.stringify(total)}`)
    t.comment(`races: exchange cancelsAfterGrant ${s.exchange.cancelsAfterGrant}, parse ${s.parse.cancelsAfterGrant}; timeouts ${s.exchange.timeouts}/${s.parse.timeouts}; cancels ${s.exchange.cancels}/${s.parse.cancels}`)
    t.equal(obs.violations, 0)
    t.same(total.errors, [])
    t.ok(total.exchange.aborts > 0 && total.exchange.timeouts > 0, 'cancels and timeouts happened')
    t.equal(total.exchange.longTimeouts + total.parse.longTimeouts, 0, 'no plain waiter timed out (no lost wake-up)')
    t.same(totalsMismatches(ledger, total), [], 'ledger totals equal the threads\' tallies')
    assertIdle(t, ledger)

    // Every permit and every byte can be taken again, and not one more.
    for (let i = 0; i < MAX_ACTIVE; i++) t.ok(ledger.exchange.tryAcquire(), `exchange permit ${i + 1}`)
    t.equal(ledger.exchange.tryAcquire(), false, 'and no more')
    t.ok(ledger.parse.tryAcquire(), 'the parse permit')
    t.equal(ledger.parse.tryAcquire(), false)
    t.ok(ledger.storage.tryReserve(STORAGE), 'the whole byte budget')
    t.equal(ledger.storage.tryReserve(1), false)
    for (let i = 0; i < MAX_ACTIVE; i++) ledger.exchange.release()
    ledger.parse.release()
    ledger.storage.release(STORAGE)
    assertIdle(t, ledger)
  })
} else {
  const ctx = threadContext<HammerOptions>()
  ctx.done(await hammer(ctx, ctx.data))
}
