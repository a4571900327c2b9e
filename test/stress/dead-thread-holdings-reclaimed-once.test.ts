// Property: whatever a thread holds or waits for when it dies, its holdings return exactly
// once, and the survivors can then take every permit and every byte.
//
// 6 threads hammer both gates and the byte budget. Meanwhile the primary kills threads one
// at a time: one by out-of-memory (resourceLimits with both heap limits, PLATFORM.md) while
// it holds an exchange permit, the parse permit and bytes, then several by terminate() at
// random moments (possibly inside a critical section: the lock is then stolen and the
// counters rebuilt). Each exit is reclaimed in the `exit` handler, then reclaimed again (must
// find nothing), and a replacement thread takes the row. What a killed thread believed it
// held bounds what was reclaimed. At the end the survivors stop, each in turn takes every
// permit and the whole budget, and the ledger is idle with reclaim accounting exact.
//
// This file is also the worker script (isMainThread picks the side).

import { isMainThread } from 'node:worker_threads'
import { createLedger } from '../../src/ledger/ledger.ts'
import { assertIdle, idleProblems } from '../unit/ledger/helpers.ts'
import { Observer, pause, pickSeed, rng, spawn, threadContext, type Life, type LifeEnd } from './harness.ts'
import { hammer, type HammerOptions } from './hammer.ts'

const HAMMERS = 6
const OOM_ROW = HAMMERS + 1
const MAX_ACTIVE = 4
const LIMIT = 4000
const OOM_BYTES = 1000
const KILLS = 4

const load: HammerOptions = {
  flows: 2,
  iterations: 1_000_000,
  budgetMs: 15_000, // a safety bound: the primary stops the hammers long before
  untilStopped: true,
  pPreAborted: 0.02,
  pShortDeadline: 0.1,
  pAbort: 0.1,
  pParse: 0.5,
  pBytes: 0.7,
  maxBytes: 600,
  longWaitMs: 20_000,
}

type Data = { role: 'hammer'; load: HammerOptions } | { role: 'oom' }
type Cmd = { cmd: 'drain' } | { cmd: 'exit' }
type Msg =
  | { type: 'stopped' }
  | { type: 'holding' }
  | { type: 'drained'; row: number; exchange: number; parse: number; bytes: number; refusedAfter: boolean }

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

if (isMainThread) {
  const { default: t } = await import('tap')
  t.test('a dead thread\'s permits, waiter slots and bytes are reclaimed exactly once', async (t) => {
    const seed = pickSeed()
    t.comment(`seed ${seed} (rerun with SLUICE_STRESS_SEED=${seed})`)
    const rand = rng(seed)
    const ledger = createLedger({
      maxActive: MAX_ACTIVE, maxQueued: 24, queueWaitMs: 20_000,
      parsePermits: 1, parseQueue: 8, parseWaitMs: 20_000,
      storageBytes: LIMIT, threads: OOM_ROW,
    })
    const obs = new Observer(OOM_ROW + 1)
    const url = new URL(import.meta.url)
    const lifeCount = new Map<number, number>()
    const ends: LifeEnd[] = []
    const start = (row: number, data: Data, resourceLimits?: { maxOldGenerationSizeMb: number; maxYoungGenerationSizeMb: number }): Life => {
      const life = lifeCount.get(row) ?? 0
      lifeCount.set(row, life + 1)
      const l = spawn(ledger, obs, url, row, data, { seed, life, resourceLimits })
      void l.end.then((e) => ends.push(e))
      return l
    }
    const hammers = new Map<number, Life>()
    for (let row = 1; row <= HAMMERS; row++) hammers.set(row, start(row, { role: 'hammer', load }))
    await sleep(200)

    // 1. Death by out-of-memory while holding an exchange permit, the parse permit and bytes.
    const oom = start(OOM_ROW, { role: 'oom' }, { maxOldGenerationSizeMb: 24, maxYoungGenerationSizeMb: 4 })
    t.same(await oom.next(), { type: 'holding' }, 'the OOM thread holds its permits and bytes')
    const oomEnd = await oom.end
    t.equal(oomEnd.error, 'ERR_WORKER_OUT_OF_MEMORY', 'killed by its heap limit')
    t.equal(oomEnd.code, 1)
    t.same(oomEnd.tally, { exchange: 1, parse: 1, bytes: OOM_BYTES }, 'what it believed it held')
    t.same(oomEnd.reclaimed, { exchange: 1, parse: 1, bytes: OOM_BYTES, lanes: 0, lockStolen: false }, 'exactly that was reclaimed')
    t.same(oomEnd.again, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false }, 'a second reclaim finds nothing')
    t.equal(ledger.snapshot().rows[OOM_ROW].state, 'dead')

    // 2. Deaths by terminate() at random moments, one at a time, each row taken over again.
    for (let k = 0; k < KILLS; k++) {
      await sleep(50 + Math.floor(rand() * 150))
      const row = 1 + Math.floor(rand() * HAMMERS)
      const victim = hammers.get(row)!
      await victim.online
      void victim.worker.terminate()
      const end = await victim.end
      t.equal(end.code, 1, `row ${row}: terminated`)
      const r = end.reclaimed
      const { tally } = end
      t.comment(`kill ${k + 1}: row ${row} believed ${JSON.stringify(tally)}, reclaimed ${JSON.stringify(r)}`)
      // The thread counts a permit after its acquire resolved and uncounts it before release,
      // and each of its flows is at most one step away from its tally.
      t.ok(r.exchange >= tally.exchange && r.exchange <= tally.exchange + load.flows, `row ${row}: exchange reclaimed ${r.exchange} within [${tally.exchange}, +${load.flows}]`)
      t.ok(r.parse >= tally.parse && r.parse <= tally.parse + load.flows, `row ${row}: parse reclaimed ${r.parse} within [${tally.parse}, +${load.flows}]`)
      t.ok(r.bytes >= tally.bytes && r.bytes <= tally.bytes + load.flows * load.maxBytes, `row ${row}: bytes reclaimed ${r.bytes} within [${tally.bytes}, +${load.flows * load.maxBytes}]`)
      t.same(end.again, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false }, `row ${row}: second reclaim finds nothing`)
      const snap = ledger.snapshot()
      t.match(snap.rows[row], { state: 'dead', exchangeHeld: 0, parseHeld: 0, bytes: 0 })
      const generation = snap.rows[row].generation
      hammers.set(row, start(row, { role: 'hammer', load }))
      t.equal(ledger.snapshot().rows[row].generation, generation + 1, `row ${row}: the replacement is a new generation`)
    }
    await sleep(200)

    // 3. Stop the hammers; every survivor in turn must be able to take everything.
    obs.stop()
    for (const l of hammers.values()) t.same(await l.next(), { type: 'stopped' })
    const s0 = ledger.snapshot()
    t.match({ active: s0.exchange.active, queued: s0.exchange.queued, parseQueued: s0.parse.queued, reserved: s0.storage.reserved },
      { active: 0, queued: 0, parseQueued: 0, reserved: 0 }, 'nothing held or queued once every survivor stopped')
    for (const l of hammers.values()) {
      l.send({ cmd: 'drain' } satisfies Cmd)
      t.same(await l.next(), { type: 'drained', row: l.row, exchange: MAX_ACTIVE, parse: 1, bytes: LIMIT, refusedAfter: true },
        `row ${l.row} took every permit and the whole budget, and nothing more`)
    }
    for (const l of hammers.values()) l.send({ cmd: 'exit' } satisfies Cmd)
    for (const l of hammers.values()) {
      const end = await l.end
      t.equal(end.code, 0)
      t.same(end.violations, [])
      t.same(end.reclaimed, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false }, `row ${l.row}: a clean exit leaves nothing`)
      t.same((end.result as { errors: string[] }).errors, [])
    }

    // 4. Accounting: every life reclaimed once; reclaim totals equal what the exits returned.
    const s = ledger.snapshot()
    const sum = (f: (e: LifeEnd) => number): number => ends.reduce((n, e) => n + f(e), 0)
    t.equal(ends.length, HAMMERS + 1 + KILLS + 0, 'every life ended')
    t.equal(s.rowReclaims, 1 + HAMMERS + KILLS, 'one row reclaim per life')
    t.equal(s.exchange.reclaimed, sum((e) => e.reclaimed.exchange), 'exchange permits reclaimed')
    t.equal(s.parse.reclaimed, sum((e) => e.reclaimed.parse), 'parse permits reclaimed')
    t.equal(s.storage.reclaimed, sum((e) => e.reclaimed.bytes), 'bytes reclaimed')
    t.equal(s.repairs, sum((e) => e.reclaimed.lockStolen ? 1 : 0), 'repairs = locks stolen')
    t.comment(`reclaimed: exchange ${s.exchange.reclaimed}, parse ${s.parse.reclaimed}, bytes ${s.storage.reclaimed}; locks stolen: ${s.repairs}`)
    t.comment(`exchange: ${JSON.stringify(s.exchange)}`)
    t.equal(obs.violations, 0, 'no violation seen by any thread')
    if (s.repairs === 0) {
      assertIdle(t, ledger)
    } else {
      // A thread that died inside a critical section may have bumped one total and not the
      // next; the repair rebuilds the live counters, not the history.
      assertIdle(t, ledger, { exactTotals: false })
      for (const g of [s.exchange, s.parse]) t.ok(Math.abs(g.admitted - g.released - g.reclaimed) <= s.repairs, 'totals within the repairs')
    }
    t.same(idleProblems(ledger, { exactTotals: false }), [])
  })
} else {
  const ctx = threadContext<Data>()
  const { ledger, row, obs, rand } = ctx
  if (ctx.data.role === 'oom') {
    await ledger.exchange.acquire({ deadline: Date.now() + 20_000 })
    obs.granted(0, row, MAX_ACTIVE)
    await ledger.parse.acquire({ deadline: Date.now() + 20_000 })
    obs.granted(1, row, 1)
    while (!ledger.storage.tryReserve(OOM_BYTES)) await pause(rand)
    obs.reserved(OOM_BYTES, row, LIMIT)
    ctx.post({ type: 'holding' } satisfies Msg)
    const text = '[' + Array.from({ length: 2000 }, (_, i) => `{"a":${i},"b":[1,2,3],"c":"x${i}"}`).join(',') + ']'
    const keep: unknown[] = []
    for (;;) keep.push(JSON.parse(text)) // until the heap limit kills this thread
  } else {
    const counts = await hammer(ctx, ctx.data.load)
    ctx.post({ type: 'stopped' } satisfies Msg)
    for (;;) {
      const c = await ctx.next() as Cmd
      if (c.cmd === 'exit') break
      let exchange = 0
      while (ledger.exchange.tryAcquire()) { obs.granted(0, row, MAX_ACTIVE); exchange++ }
      const parse = ledger.parse.tryAcquire() ? 1 : 0
      if (parse) obs.granted(1, row, 1)
      const bytes = ledger.storage.tryReserve(LIMIT) ? LIMIT : 0
      if (bytes) obs.reserved(bytes, row, LIMIT)
      const refusedAfter = !ledger.exchange.tryAcquire() && !ledger.parse.tryAcquire() && !ledger.storage.tryReserve(1)
      for (let i = 0; i < exchange; i++) { obs.releasing(0, row); ledger.exchange.release() }
      if (parse) { obs.releasing(1, row); ledger.parse.release() }
      if (bytes) { obs.releasingBytes(bytes, row); ledger.storage.release(bytes) }
      // Reported after the release, so the next survivor finds everything free.
      ctx.post({ type: 'drained', row, exchange, parse, bytes, refusedAfter } satisfies Msg)
    }
    ctx.done(counts)
  }
}
