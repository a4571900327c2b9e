// Property: a thread that dies in the middle of lane traffic (terminate() at a random moment:
// running an exchange, queued, waiting for the lock, or inside a critical section) has its
// lane entries freed exactly once by reclaimRow from the primary's exit handler, as the
// supervisor does; its sessions' queues move on (the oldest queued entry is promoted and
// woken), and the survivors keep one running per session, FIFO and the cap throughout.
//
// 5 threads x 3 flows hammer 3 sessions (lane-hammer.ts: aborts racing promotions, cancel
// requests, samples under the lock) while the primary kills a thread 8 times (every other
// time once it may hold an entry, the others at any moment), each exit
// reclaimed then reclaimed again (must find nothing), each row taken over by a new life.
// The dead thread's beliefs are dropped before its reclaim (a survivor promoted by it must
// not count them). What it may have held bounds what was reclaimed. At the end: every enter
// is released, withdrawn or reclaimed (exactly, unless a death inside a critical section
// skipped a total), every session can run again, and the ledger is idle.
//
// This file is also the worker script (isMainThread picks the side).

import { randomUUID } from 'node:crypto'
import { isMainThread } from 'node:worker_threads'
import { Lanes } from '../../src/ledger/lanes.ts'
import { attachLedger, createLedger } from '../../src/ledger/ledger.ts'
import { E_CANCEL, ENTRY_FIELDS, LANE32_FIELDS, LANE_ACTIVE } from '../../src/ledger/layout.ts'
import { assertIdle, rowHandle, turn } from '../unit/ledger/helpers.ts'
import { Observer, pickSeed, rng, spawn, threadContext, type Life, type LifeEnd } from './harness.ts'
import {
  addLaneCounts, emptyLaneCounts, endsOrViolation, hammerLanes, laneEntriesPicture, LaneObserver, SESSIONS, sessionKeys,
  type LaneCounts, type LaneLoad,
} from './lane-hammer.ts'

const THREADS = 5
const KILLS = 8
const CAP = 5

interface Data { load: LaneLoad; lanes: SharedArrayBuffer }

const load: LaneLoad = {
  flows: 3,
  iterations: 1_000_000,
  budgetMs: 15_000, // a safety bound: the primary stops the threads long before
  untilStopped: true,
  pAbort: 0.3,
  pCancel: 0.05,
  pSample: 0.1,
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

if (isMainThread) {
  const { default: t } = await import('tap')
  t.test('a dead thread\'s lane entries are reclaimed exactly once and its sessions move on', async (t) => {
    const seed = pickSeed()
    t.comment(`seed ${seed} (rerun with SLUICE_STRESS_SEED=${seed})`)
    const rand = rng(seed)
    const ledger = createLedger({
      maxActive: 1, maxQueued: 1, queueWaitMs: 1000, parsePermits: 1, parseQueue: 1, parseWaitMs: 1000,
      storageBytes: 0, threads: THREADS, laneEntries: 64, pendingPerSession: CAP, activePerSession: 1,
    })
    const obs = new Observer(THREADS + 1)
    const lanes = new LaneObserver(THREADS + 1)
    const url = new URL(import.meta.url)
    const lifeCount = new Map<number, number>()
    const ends: LifeEnd[] = []
    const mayHold = new Map<Life, number>()
    const start = (row: number): Life => {
      const life = lifeCount.get(row) ?? 0
      lifeCount.set(row, life + 1)
      const l = spawn<Data>(ledger, obs, url, row, { load, lanes: lanes.sab }, { seed, life })
      // Before the harness's exit handler, which reclaims the row at once: forget the dead
      // thread's beliefs first (the reclaim may promote a survivor of the same session).
      l.worker.prependListener('exit', () => { mayHold.set(l, lanes.forgetRow(row)) })
      void l.end.then((e) => ends.push(e))
      return l
    }
    const threads = new Map<number, Life>()
    for (let row = 1; row <= THREADS; row++) threads.set(row, start(row))
    await sleep(300)

    let reclaimedTotal = 0
    for (let k = 0; k < KILLS; k++) {
      await sleep(100 + Math.floor(rand() * 350))
      const row = 1 + Math.floor(rand() * THREADS)
      const victim = threads.get(row)!
      await victim.online
      // Every other kill waits until the victim may hold an entry (running or queued), then
      // strikes after a random pause; the others strike whatever it is doing.
      if (k % 2 === 0) {
        while (lanes.mayHoldOf(row) === 0) await sleep(1)
        await sleep(Math.floor(rand() * 3))
      }
      void victim.worker.terminate()
      const end = await victim.end
      const held = mayHold.get(victim) ?? -1
      t.equal(end.code, 1, `row ${row}: terminated`)
      const r = end.reclaimed
      t.comment(`kill ${k + 1}: row ${row} may have held ${held} entries; reclaimed ${r.lanes}${r.lockStolen ? ' (lock stolen)' : ''}`)
      // The thread counts an entry before enter() and uncounts it after giving it up, one
      // exchange per flow: it held between (its count - flows) and its count.
      t.ok(r.lanes <= held && r.lanes >= held - load.flows, `row ${row}: reclaimed ${r.lanes} within [${held - load.flows}, ${held}]`)
      t.equal(r.lost?.length ?? 0, r.lanes, `row ${row}: every reclaimed entry is reported lost`)
      t.same(end.again, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false }, `row ${row}: a second reclaim finds nothing`)
      reclaimedTotal += r.lanes
      threads.set(row, start(row))
    }
    await sleep(300)

    // Stop: every flow finishes its exchange (no lost wake-up: each queued one is promoted
    // and woken in turn) and the threads end.
    lanes.stop()
    if (!await endsOrViolation([...threads.values()].map((l) => l.end), lanes)) {
      t.fail(`a thread saw a violation while others still run (a stuck lane?): ${laneEntriesPicture(ledger)}`)
      for (const l of threads.values()) void l.worker.terminate()
    }
    const total = emptyLaneCounts()
    for (const l of threads.values()) {
      const end = await l.end
      t.equal(end.code, 0, `row ${l.row}: ended cleanly${end.error === null ? '' : `: ${end.error}`}`)
      t.same(end.reclaimed, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false }, `row ${l.row}: a clean exit leaves nothing`)
      if (end.result !== undefined) addLaneCounts(total, end.result as LaneCounts)
    }
    const snap = ledger.snapshot()
    const s = snap.lanes
    t.comment(`survivors: ${JSON.stringify({ ...total, errors: total.errors.length })}`)
    t.comment(`ledger: entered ${s.entered}, released ${s.released}, cancels ${s.cancels}, cancelsAfterPromote ${s.cancelsAfterPromote}, reclaimed ${s.reclaimed}, refusedFull ${s.refusedFull}; locks stolen ${snap.repairs}`)
    t.same(total.errors, [], 'no violation or unexpected error in the survivors')
    t.equal(lanes.violations, 0, 'no violation seen by any thread, dead ones included')
    for (let i = 0; i < SESSIONS; i++) t.ok(lanes.maxRunning(i) <= 1, `session ${i}: at most one running at any moment (max seen ${lanes.maxRunning(i)})`)
    t.equal(ends.length, THREADS + KILLS, 'every life ended')
    t.equal(s.reclaimed, reclaimedTotal, 'the ledger\'s reclaimed total is what the exits returned')
    t.ok(reclaimedTotal > 0, 'some dead thread left entries behind')
    const accounted = s.released + s.cancels + s.cancelsAfterPromote + s.reclaimed
    if (snap.repairs === 0) {
      t.equal(s.entered, accounted, 'every enter released, withdrawn or reclaimed exactly once')
    } else {
      // A thread that died inside a critical section may have committed an entry and not
      // counted it yet (or counted a release it did not finish): the totals are history, the
      // repair rebuilds only the live counters.
      t.ok(Math.abs(s.entered - accounted) <= snap.repairs, `entered ${s.entered} vs accounted ${accounted}, within ${snap.repairs} repairs`)
    }
    assertIdle(t, ledger, { exactTotals: snap.repairs === 0 })

    // Every session runs again: nothing of the dead is left ACTIVE or QUEUED in front. (The
    // primary may lock now: no dead thread is pending repair.)
    for (let i = 0; i < SESSIONS; i++) {
      const x = ledger.lanes
      const a = x.enter(sessionKeys[i], Lanes.exchangeKey(randomUUID())!)
      const b = x.enter(sessionKeys[i], Lanes.exchangeKey(randomUUID())!)
      if (!a.ok || !b.ok) { t.fail(`session ${i}: refused after the run`); continue }
      t.ok(a.active && !b.active, `session ${i}: runs at once again, the next one queues`)
      x.release(a.entry)
      t.equal(x.stateOf(b.entry), LANE_ACTIVE, `session ${i}: the release promoted the next`)
      x.release(b.entry)
    }
    assertIdle(t, ledger, { exactTotals: snap.repairs === 0 })
  })

  // The model's finding D4, replayed deterministically on one thread (rows as handles): the
  // requester dies between its flag (inside the lock) and its notify (after unlock).
  t.test('a cancel flagged by a thread that died before its notify still reaches the exchange (model D4)', async (t) => {
    const ledger = createLedger({
      maxActive: 1, maxQueued: 1, queueWaitMs: 1000, parsePermits: 1, parseQueue: 1, parseWaitMs: 1000,
      storageBytes: 0, threads: 2, laneEntries: 8, pendingPerSession: 0,
    })
    const owner = rowHandle(ledger, 1)
    ledger.assignRow(2)
    const requester = attachLedger(ledger.init, 2)
    const r = owner.lanes.enter(sessionKeys[0], Lanes.exchangeKey(randomUUID())!)
    if (!r.ok) { t.fail('refused'); return }
    let cancelled = false
    const stop = owner.lanes.watchCancel(r.entry, () => { cancelled = true })
    // requestCancel() as far as its unlock: the flag is stored, the notify never comes.
    requester.core.lock()
    Atomics.store(requester.core.i32, requester.core.layout.lanes32 + LANE32_FIELDS + r.entry * ENTRY_FIELDS + E_CANCEL, 1)
    requester.core.unlock()
    for (let i = 0; i < 20; i++) await turn()
    t.equal(cancelled, false, 'nobody woke the watcher')
    t.equal(owner.lanes.requestCancel(sessionKeys[0], null), 0, 'a retry finds the entry flagged already and wakes nobody')
    const got = await ledger.reclaimRow(2)
    t.equal(got.lanes, 0, 'the requester held no entry')
    for (let i = 0; i < 100 && !cancelled; i++) await turn()
    t.equal(cancelled, true, 'the reclaim of the requester\'s row woke the watcher, which saw the flag')
    stop()
    owner.lanes.release(r.entry)
    assertIdle(t, ledger)
  })
} else {
  const ctx = threadContext<Data>()
  const lanes = new LaneObserver(ctx.data.lanes)
  const counts = await hammerLanes({ ledger: ctx.ledger, row: ctx.row, obs: lanes, rand: ctx.rand }, ctx.data.load)
  counts.errors.push(...lanes.seen)
  ctx.done(counts)
}
