// Property: however 6 threads x 3 flows hammer the gates (plain waits, short deadlines,
// aborts at random moments, full queues), no more threads ever believe they hold an
// exchange permit than the gate has, nor a parse permit; and the ledger's totals equal the
// threads' own tallies exactly, ending at idle.
//
// This file is also the worker script (isMainThread picks the side).

import { isMainThread } from 'node:worker_threads'
import { createLedger } from '../../src/ledger/ledger.ts'
import { assertIdle } from '../unit/ledger/helpers.ts'
import { Observer, pickSeed, spawn, threadContext } from './harness.ts'
import { addCounts, emptyCounts, hammer, totalsMismatches, type HammerCounts, type HammerOptions } from './hammer.ts'

const THREADS = 6
const MAX_ACTIVE = 3
const PARSE_PERMITS = 1

const load: HammerOptions = {
  flows: 3,
  iterations: 400,
  budgetMs: 2500,
  pShortDeadline: 0.15,
  pAbort: 0.15,
  pPreAborted: 0.03,
  pParse: 0.5,
  pBytes: 0.5,
  maxBytes: 300,
  longWaitMs: 20_000,
}

if (isMainThread) {
  const { default: t } = await import('tap')
  t.test('exchange and parse gates never admit more holders than permits', async (t) => {
    const seed = pickSeed()
    t.comment(`seed ${seed} (rerun with SLUICE_STRESS_SEED=${seed})`)
    const ledger = createLedger({
      maxActive: MAX_ACTIVE,
      maxQueued: 12, // 18 flows > 3 + 12: the queue fills up at times
      queueWaitMs: 20_000,
      parsePermits: PARSE_PERMITS,
      parseQueue: 1, // up to 3 contenders for 1 + 1: parse refusals too
      parseWaitMs: 20_000,
      storageBytes: 600, // up to 3 holders x 300 bytes: reservations are refused at times
      threads: THREADS,
    })
    const obs = new Observer(THREADS + 1)
    const lives = Array.from({ length: THREADS }, (_, i) => spawn(ledger, obs, new URL(import.meta.url), i + 1, load, { seed }))
    const ends = await Promise.all(lives.map((l) => l.end))

    const total = emptyCounts()
    for (const end of ends) {
      t.equal(end.code, 0, 'thread ended normally')
      t.equal(end.error, null)
      t.same(end.violations, [], 'the thread saw no violation')
      t.same(end.reclaimed, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false }, 'a thread that finished holds nothing')
      addCounts(total, end.result as HammerCounts)
    }
    t.comment(`threads' tally: ${JSON.stringify(total)}`)
    t.comment(`max believed holders: exchange ${obs.maxSeen(0)}/${MAX_ACTIVE}, parse ${obs.maxSeen(1)}/${PARSE_PERMITS}`)
    t.equal(obs.violations, 0, 'no violation observed by any thread')
    t.ok(obs.maxSeen(0) <= MAX_ACTIVE, 'believed exchange holders never above max')
    t.ok(obs.maxSeen(1) <= PARSE_PERMITS, 'believed parse holders never above max')
    t.same(total.errors, [], 'no unexpected error')
    t.equal(total.exchange.longTimeouts + total.parse.longTimeouts, 0, 'no plain waiter timed out (no lost wake-up)')
    t.ok(total.exchange.grants > 0 && total.exchange.queued > 0 && total.parse.grants > 0, 'the gates were used and contended')
    t.same(totalsMismatches(ledger, total), [], 'ledger totals equal the threads\' tallies')
    t.comment(`ledger: ${JSON.stringify(ledger.snapshot().exchange)}`)
    assertIdle(t, ledger)
  })
} else {
  const ctx = threadContext<HammerOptions>()
  const counts = await hammer(ctx, ctx.data)
  ctx.done(counts)
}
