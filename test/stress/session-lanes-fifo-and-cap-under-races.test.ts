// Property: session lanes keep one exchange running per session, FIFO behind it, and the
// pending cap, while 5 threads x 3 flows hammer 3 sessions with aborts racing promotions
// and cancel requests from any thread (lane-hammer.ts). At every run start: at most one
// exchange of the session believed running, no older entry of the session still queued,
// tickets of the session's exchanges that ran strictly increasing; at every sample under the
// lock: N1-N4 from the entries. Afterwards the ledger's lane totals equal the threads' own
// tallies, every enter is accounted for exactly once (entered = released + cancels +
// cancelsAfterPromote, nothing reclaimed), and the ledger is idle. Two rounds: a roomy cap
// (4) and a tight one (2, more refusals, shorter queues).
//
// This file is also the worker script (isMainThread picks the side).

import { isMainThread } from 'node:worker_threads'
import { createLedger } from '../../src/ledger/ledger.ts'
import { assertIdle } from '../unit/ledger/helpers.ts'
import { Observer, pickSeed, spawn, threadContext } from './harness.ts'
import {
  addLaneCounts, emptyLaneCounts, endsOrViolation, hammerLanes, laneEntriesPicture, laneTotalsMismatches, LaneObserver, SESSIONS,
  type LaneCounts, type LaneLoad,
} from './lane-hammer.ts'

const THREADS = 5

interface Data { load: LaneLoad; lanes: SharedArrayBuffer }

const load: LaneLoad = {
  flows: 3,
  iterations: 1500,
  budgetMs: 3000, // a bound on the round, whatever the machine: no assertion depends on it
  pAbort: 0.35,
  pCancel: 0.06,
  pSample: 0.1,
}

if (isMainThread) {
  const { default: t } = await import('tap')
  const seed = pickSeed()
  t.comment(`seed ${seed} (rerun with SLUICE_STRESS_SEED=${seed})`)

  for (const cap of [4, 2]) {
    t.test(`cap ${cap}: one active per session, FIFO behind it, the cap, every enter accounted once`, async (t) => {
      const ledger = createLedger({
        maxActive: 1, maxQueued: 1, queueWaitMs: 1000, parsePermits: 1, parseQueue: 1, parseWaitMs: 1000,
        storageBytes: 0, threads: THREADS, laneEntries: 64, pendingPerSession: cap, activePerSession: 1,
      })
      const obs = new Observer(THREADS + 1)
      const lanes = new LaneObserver(THREADS + 1)
      const lives = Array.from({ length: THREADS }, (_, i) =>
        spawn<Data>(ledger, obs, new URL(import.meta.url), i + 1, { load, lanes: lanes.sab }, { seed: seed + cap }))
      if (!await endsOrViolation(lives.map((l) => l.end), lanes)) {
        t.fail(`a thread saw a violation while others still run (a stuck lane?): ${laneEntriesPicture(ledger)}`)
        for (const l of lives) void l.worker.terminate()
      }
      const total = emptyLaneCounts()
      for (const end of await Promise.all(lives.map((l) => l.end))) {
        t.equal(end.code, 0, `thread exited cleanly${end.error === null ? '' : `: ${end.error}`}`)
        t.same(end.violations, [])
        t.same(end.reclaimed, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false }, 'a finished thread leaves no entry behind')
        if (end.result !== undefined) addLaneCounts(total, end.result as LaneCounts)
      }
      const s = ledger.snapshot().lanes
      t.comment(`threads: ${JSON.stringify({ ...total, errors: total.errors.length })}`)
      t.comment(`ledger: entered ${s.entered}, queued ${s.queuedTotal}, released ${s.released}, cancels ${s.cancels}, cancelsAfterPromote ${s.cancelsAfterPromote}, refusedFull ${s.refusedFull}, cancelRequests ${s.cancelRequests}`)
      t.same(total.errors, [])
      t.equal(lanes.violations, 0, 'no violation seen by any thread')
      for (let i = 0; i < SESSIONS; i++) t.ok(lanes.maxRunning(i) <= 1, `session ${i}: at most one running at any moment (max seen ${lanes.maxRunning(i)})`)
      t.ok(total.queued > 0 && total.aborted > 0 && total.refusedFull > 0 && total.cancelCallbacks > 0 && total.samples > 0,
        'exchanges queued, waits were aborted, the cap refused, cancel requests arrived, samples were taken')
      t.same(laneTotalsMismatches(ledger, total), [], 'ledger totals equal the threads\' tallies')
      t.ok(total.cancelCallbacks <= total.flagged, `a cancel callback only for a flagged entry (${total.cancelCallbacks} <= ${total.flagged})`)
      t.equal(s.entered, s.released + s.cancels + s.cancelsAfterPromote + s.reclaimed, 'every enter released, withdrawn or reclaimed exactly once')
      t.equal(s.reclaimed, 0)
      assertIdle(t, ledger)
    })
  }
} else {
  const ctx = threadContext<Data>()
  const lanes = new LaneObserver(ctx.data.lanes)
  const counts = await hammerLanes({ ledger: ctx.ledger, row: ctx.row, obs: lanes, rand: ctx.rand }, ctx.data.load)
  counts.errors.push(...lanes.seen)
  ctx.done(counts)
}
