// Property: the aggregate byte budget is never over its limit and no row ever goes negative
// (B1, B2), whatever 6 threads x 4 flows do: reservations of random sizes through reserve()
// and tryReserve(), zero-byte and larger-than-the-budget requests, releases in pieces,
// over-releases (which must throw and change nothing). Each thread's row must equal the
// thread's own tally at every step; refusals are counted exactly; peak <= limit; idle at end.
//
// This file is also the worker script (isMainThread picks the side).

import { isMainThread } from 'node:worker_threads'
import { createLedger } from '../../src/ledger/ledger.ts'
import { assertIdle } from '../unit/ledger/helpers.ts'
import { checkBounds, Observer, pause, pickSeed, spawn, threadContext } from './harness.ts'

const THREADS = 6
const LIMIT = 10_000

interface Load { flows: number; iterations: number; budgetMs: number; maxBytes: number }
interface Counts { reserved: number; exhausted: number; tooLarge: number; pieces: number; overReleaseRefused: number; zero: number; errors: string[] }

const load: Load = { flows: 4, iterations: 600, budgetMs: 2500, maxBytes: 2500 }

if (isMainThread) {
  const { default: t } = await import('tap')
  t.test('the byte budget is never over its limit nor negative, across threads', async (t) => {
    const seed = pickSeed()
    t.comment(`seed ${seed} (rerun with SLUICE_STRESS_SEED=${seed})`)
    const ledger = createLedger({
      maxActive: 1, maxQueued: 0, queueWaitMs: 1000, parsePermits: 1, parseQueue: 0, parseWaitMs: 1000,
      storageBytes: LIMIT, threads: THREADS,
    })
    const obs = new Observer(THREADS + 1)
    const lives = Array.from({ length: THREADS }, (_, i) => spawn(ledger, obs, new URL(import.meta.url), i + 1, load, { seed }))
    // The primary watches too, lock-free, while the threads run.
    let watching = true
    let samples = 0
    const watch = (async () => {
      while (watching) {
        checkBounds(ledger, obs)
        const s = ledger.snapshot()
        if (s.rows.some((r) => r.bytes < 0)) obs.violation('a row went negative')
        samples++
        await new Promise((resolve) => setImmediate(resolve))
      }
    })()
    const ends = await Promise.all(lives.map((l) => l.end))
    watching = false
    await watch
    const total: Counts = { reserved: 0, exhausted: 0, tooLarge: 0, pieces: 0, overReleaseRefused: 0, zero: 0, errors: [] }
    for (const end of ends) {
      t.equal(end.code, 0)
      t.same(end.violations, [])
      t.same(end.reclaimed, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false })
      const c = end.result as Counts
      for (const k of ['reserved', 'exhausted', 'tooLarge', 'pieces', 'overReleaseRefused', 'zero'] as const) total[k] += c[k]
      total.errors.push(...c.errors)
    }
    const s = ledger.storage.snapshot()
    t.comment(`threads' tally: ${JSON.stringify(total)}; primary samples ${samples}`)
    t.comment(`budget: ${JSON.stringify(s)}; max believed reserved ${obs.maxBytesSeen}`)
    t.equal(obs.violations, 0, 'no violation seen by any thread or the primary')
    t.same(total.errors, [])
    t.ok(obs.maxBytesSeen <= LIMIT, 'believed reservations never above the limit')
    t.ok(s.peak <= LIMIT, 'peak never above the limit')
    t.ok(total.exhausted > 0 && total.reserved > 0, 'the budget was contended')
    t.equal(s.refused, total.exhausted + total.tooLarge, 'every refusal counted once')
    t.equal(s.reclaimed, 0)
    assertIdle(t, ledger)
    t.ok(ledger.storage.tryReserve(LIMIT), 'the whole budget is free again')
    ledger.storage.release(LIMIT)
  })
} else {
  const ctx = threadContext<Load>()
  const { ledger, row, obs, rand, data } = ctx
  const b = ledger.storage
  const counts: Counts = { reserved: 0, exhausted: 0, tooLarge: 0, pieces: 0, overReleaseRefused: 0, zero: 0, errors: [] }
  const stopAt = Date.now() + data.budgetMs
  const check = (): void => {
    checkBounds(ledger, obs)
    const mine = ledger.snapshot().rows[row].bytes
    const tally = obs.rowTally(row).bytes
    if (mine !== tally || b.heldByMe !== tally) obs.violation(`row ${row}: ledger ${mine} / heldByMe ${b.heldByMe} != own tally ${tally}`)
  }
  const flow = async (): Promise<void> => {
    for (let i = 0; i < data.iterations && Date.now() < stopAt; i++) {
      check()
      const r = rand()
      const n = r < 0.03 ? LIMIT + 1 + Math.floor(rand() * 10) : r < 0.06 ? 0 : 1 + Math.floor(rand() * data.maxBytes)
      let ok = false
      try {
        if (rand() < 0.5) {
          b.reserve(n)
          ok = true
        } else {
          ok = b.tryReserve(n)
          if (!ok) counts.exhausted++
        }
      } catch (err) {
        const code = (err as { code?: string }).code
        if (code === 'storage_request_too_large') counts.tooLarge++
        else if (code === 'storage_budget_exhausted') counts.exhausted++
        else counts.errors.push(String((err as Error).message))
      }
      if (n > LIMIT && ok) counts.errors.push(`a reservation of ${n} > limit was accepted`)
      if (!ok || n === 0) {
        if (ok) counts.zero++
        await pause(rand)
        continue
      }
      obs.reserved(n, row, LIMIT)
      counts.reserved++
      check()
      await pause(rand)
      if (rand() < 0.05) {
        const before = b.heldByMe
        try {
          b.release(before + 1)
          counts.errors.push('an over-release was accepted')
        } catch {
          counts.overReleaseRefused++
        }
        if (b.heldByMe !== before) counts.errors.push('a refused over-release changed the row')
      }
      // Release in one to three pieces, pausing in between.
      let left = n
      while (left > 0) {
        const piece = rand() < 0.5 ? left : Math.max(1, Math.floor(left * rand()))
        obs.releasingBytes(piece, row)
        b.release(piece)
        left -= piece
        counts.pieces++
        check()
        if (left > 0) await pause(rand)
      }
    }
  }
  await Promise.all(Array.from({ length: data.flows }, flow))
  check()
  ctx.done(counts)
}
