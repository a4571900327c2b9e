// The load a stress thread puts on the ledger: several concurrent flows, each looping
//   acquire exchange -> maybe acquire parse -> maybe reserve bytes -> pause -> release all
// with seeded random choices: plain waits, short deadlines, aborts after a random delay,
// already-aborted signals, reservations that do not fit or are larger than the budget.
//
// Every outcome is counted on the thread's side, so the primary can check the ledger's
// totals against an independent tally, and every grant / release goes through the observer
// (harness.ts), which checks "believed holders <= max" at every step.
//
// Run directly (tap), it hammers a ledger from the main thread alone and checks the tallies.

import { isMainThread } from 'node:worker_threads'
import type { AcquireOptions, Gate } from '../../src/ledger/gate.ts'
import type { Ledger } from '../../src/ledger/ledger.ts'
import { checkBounds, pause, type Observer, type Rand } from './harness.ts'

export interface HammerOptions {
  flows: number
  /** Iterations per flow (upper bound). */
  iterations: number
  /** No new iteration starts after this many ms. */
  budgetMs: number
  /** Also stop when the observer's stop flag is set. */
  untilStopped?: boolean
  pShortDeadline: number
  pAbort: number
  pPreAborted: number
  /** Take the parse permit while holding an exchange permit. */
  pParse: number
  /** Reserve bytes while holding an exchange permit. */
  pBytes: number
  /** Reservations are 0..maxBytes; one in 50 asks for more than the whole budget. */
  maxBytes: number
  longWaitMs: number
}

export interface GateCounts {
  grants: number
  releases: number
  queued: number
  timeouts: number
  aborts: number
  full: number
  preAborted: number
  /** Timeouts of acquires that had the long deadline: a sign of a lost wake-up. */
  longTimeouts: number
}

export interface ByteCounts {
  reserved: number
  refused: number
  tooLarge: number
  released: number
  overReleaseRefused: number
}

export interface HammerCounts {
  iterations: number
  exchange: GateCounts
  parse: GateCounts
  bytes: ByteCounts
  /** Unexpected errors (anything not a known refusal code). */
  errors: string[]
}

export interface HammerTarget { ledger: Ledger; row: number; obs: Observer; rand: Rand }

const gateCounts = (): GateCounts => ({ grants: 0, releases: 0, queued: 0, timeouts: 0, aborts: 0, full: 0, preAborted: 0, longTimeouts: 0 })

export function emptyCounts (): HammerCounts {
  return {
    iterations: 0,
    exchange: gateCounts(),
    parse: gateCounts(),
    bytes: { reserved: 0, refused: 0, tooLarge: 0, released: 0, overReleaseRefused: 0 },
    errors: [],
  }
}

/** Sums per-thread counts. */
export function addCounts (into: HammerCounts, c: HammerCounts): HammerCounts {
  into.iterations += c.iterations
  for (const g of ['exchange', 'parse'] as const) {
    for (const k of Object.keys(into[g]) as Array<keyof GateCounts>) into[g][k] += c[g][k]
  }
  for (const k of Object.keys(into.bytes) as Array<keyof ByteCounts>) into.bytes[k] += c.bytes[k]
  into.errors.push(...c.errors)
  return into
}

export async function hammer (target: HammerTarget, opts: HammerOptions): Promise<HammerCounts> {
  const { ledger, row, obs, rand } = target
  const counts = emptyCounts()
  const stopAt = Date.now() + opts.budgetMs
  const limit = ledger.storage.limit
  const max = [ledger.exchange.snapshot().max, ledger.parse.snapshot().max]

  const check = (): void => {
    checkBounds(ledger, obs)
    const mine = ledger.snapshot().rows[row]
    const tally = obs.rowTally(row)
    if (mine.bytes !== tally.bytes) obs.violation(`row ${row}: ledger bytes ${mine.bytes} != thread's own tally ${tally.bytes}`)
    if (mine.exchangeHeld < tally.exchange || mine.parseHeld < tally.parse) obs.violation(`row ${row}: ledger holds less than the thread believes: ${JSON.stringify({ mine, tally })}`)
  }

  const take = async (gate: Gate, g: number, c: GateCounts): Promise<boolean> => {
    const r = rand()
    let preAborted = false
    let long = false
    const acquireOpts: { deadline?: number; signal?: AbortSignal; onQueued: () => void } = { onQueued: () => { c.queued++ } }
    if (r < opts.pPreAborted) {
      acquireOpts.signal = AbortSignal.abort()
      preAborted = true
    } else if (r < opts.pPreAborted + opts.pShortDeadline) {
      acquireOpts.deadline = Date.now() + Math.floor(rand() * 3)
    } else if (r < opts.pPreAborted + opts.pShortDeadline + opts.pAbort) {
      const ac = new AbortController()
      acquireOpts.signal = ac.signal
      acquireOpts.deadline = Date.now() + opts.longWaitMs
      void pause(rand).then(() => ac.abort())
    } else {
      acquireOpts.deadline = Date.now() + opts.longWaitMs
      long = true
    }
    try {
      await gate.acquire(acquireOpts as AcquireOptions)
    } catch (err) {
      const code = (err as { code?: string }).code
      if (code === 'client_closed' && preAborted) c.preAborted++
      else if (code === 'client_closed') c.aborts++
      else if (code === 'capacity_timeout' || code === 'parse_capacity_timeout') {
        c.timeouts++
        if (long) c.longTimeouts++
      }
      else if (code === 'capacity_exhausted' || code === 'parse_capacity_exhausted') c.full++
      else counts.errors.push(`${gate.name}: ${code ?? (err as Error).message}`)
      return false
    }
    if (preAborted) counts.errors.push(`${gate.name}: granted despite an aborted signal`)
    c.grants++
    obs.granted(g, row, max[g])
    return true
  }

  const give = (gate: Gate, g: number, c: GateCounts): void => {
    obs.releasing(g, row)
    gate.release()
    c.releases++
  }

  const flow = async (): Promise<void> => {
    for (let i = 0; i < opts.iterations; i++) {
      if (Date.now() >= stopAt || (opts.untilStopped === true && obs.stopped)) return
      counts.iterations++
      check()
      if (!await take(ledger.exchange, 0, counts.exchange)) { await pause(rand); continue }
      check()
      let parse = false
      let bytes = 0
      if (rand() < opts.pParse) parse = await take(ledger.parse, 1, counts.parse)
      if (rand() < opts.pBytes) {
        const n = rand() < 0.02 ? limit + 1 + Math.floor(rand() * 100) : Math.floor(rand() * (opts.maxBytes + 1))
        try {
          if (ledger.storage.tryReserve(n)) {
            bytes = n
            if (n > 0) {
              obs.reserved(n, row, limit)
              counts.bytes.reserved++
            }
          } else {
            counts.bytes.refused++
          }
        } catch (err) {
          if ((err as { code?: string }).code === 'storage_request_too_large') counts.bytes.tooLarge++
          else counts.errors.push(`bytes: ${(err as Error).message}`)
        }
      }
      check()
      await pause(rand)
      if (bytes > 0 && rand() < 0.05) {
        // Releasing more than this row holds must throw and change nothing.
        const held = ledger.storage.heldByMe
        try {
          ledger.storage.release(held + 1)
          counts.errors.push('bytes: an over-release was accepted')
        } catch {
          counts.bytes.overReleaseRefused++
        }
      }
      if (bytes > 0) {
        obs.releasingBytes(bytes, row)
        ledger.storage.release(bytes)
        counts.bytes.released++
      } else if (bytes === 0 && rand() < 0.01) {
        ledger.storage.release(0)
      }
      if (parse) give(ledger.parse, 1, counts.parse)
      if (rand() < 0.5) await pause(rand)
      give(ledger.exchange, 0, counts.exchange)
      check()
    }
  }

  await Promise.all(Array.from({ length: opts.flows }, flow))
  return counts
}

/**
 * The ledger's totals must equal the threads' own tallies (no deaths, no repairs):
 * returns the mismatches.
 */
export function totalsMismatches (ledger: Ledger, c: HammerCounts): string[] {
  const s = ledger.snapshot()
  const out: string[] = []
  const eq = (what: string, ledgerValue: number, threads: number): void => {
    if (ledgerValue !== threads) out.push(`${what}: ledger ${ledgerValue} != threads ${threads}`)
  }
  for (const g of ['exchange', 'parse'] as const) {
    const l = s[g]
    const t = c[g]
    eq(`${g}.admitted`, l.admitted, t.grants + l.cancelsAfterGrant)
    eq(`${g}.released`, l.released, t.releases + l.cancelsAfterGrant)
    eq(`${g} grants vs releases (threads)`, t.grants, t.releases)
    eq(`${g}.queuedTotal`, l.queuedTotal, t.queued)
    eq(`${g}.refusedFull`, l.refusedFull, t.full)
    eq(`${g}.timeouts`, l.timeouts, t.timeouts)
    eq(`${g}.cancels + cancelsAfterGrant`, l.cancels + l.cancelsAfterGrant, t.aborts)
  }
  eq('storage.refused', s.storage.refused, c.bytes.refused + c.bytes.tooLarge)
  eq('bytes reserved vs released (threads)', c.bytes.reserved, c.bytes.released)
  return out
}

// ---- self-test: one thread, no workers ----
if (import.meta.main && isMainThread) {
  const { default: t } = await import('tap')
  const { createLedger } = await import('../../src/ledger/ledger.ts')
  const { Observer, pickSeed, rng } = await import('./harness.ts')
  const { assertIdle } = await import('../unit/ledger/helpers.ts')

  t.test('hammering from one thread keeps the totals equal to the tallies', async (t) => {
    const seed = pickSeed()
    t.comment(`seed ${seed} (rerun with SLUICE_STRESS_SEED=${seed})`)
    const ledger = createLedger({ maxActive: 2, maxQueued: 4, queueWaitMs: 1000, parsePermits: 1, parseQueue: 1, parseWaitMs: 1000, storageBytes: 1000, threads: 0 })
    const obs = new Observer(1)
    const counts = await hammer({ ledger, row: 0, obs, rand: rng(seed) }, {
      flows: 8, iterations: 150, budgetMs: 2000, pShortDeadline: 0.15, pAbort: 0.15, pPreAborted: 0.05,
      pParse: 0.5, pBytes: 0.6, maxBytes: 400, longWaitMs: 5000,
    })
    t.comment(JSON.stringify(counts))
    t.same(counts.errors, [])
    t.same(obs.seen, [])
    t.equal(obs.violations, 0)
    t.ok(obs.maxSeen(0) <= 2 && obs.maxSeen(1) <= 1)
    t.ok(counts.exchange.grants > 0 && counts.exchange.queued > 0, 'the gate was contended')
    t.same(totalsMismatches(ledger, counts), [])
    assertIdle(t, ledger)
  })

  t.test('totalsMismatches reports a difference', async (t) => {
    const ledger = createLedger({ maxActive: 1, maxQueued: 1, queueWaitMs: 1000, parsePermits: 1, parseQueue: 1, parseWaitMs: 1000, storageBytes: 10, threads: 0 })
    const c = emptyCounts()
    t.same(totalsMismatches(ledger, c), [])
    t.ok(ledger.exchange.tryAcquire())
    ledger.exchange.release()
    t.same(totalsMismatches(ledger, c), ['exchange.admitted: ledger 1 != threads 0', 'exchange.released: ledger 1 != threads 0'])
    c.exchange.grants = 1
    c.exchange.releases = 1
    t.same(totalsMismatches(ledger, c), [])
    t.same(addCounts(emptyCounts(), c).exchange.grants, 1)
  })
}
