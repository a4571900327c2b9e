// A synchronised burst spreads over a provider's accounts: 64 selections from 2-4 threads,
// all released at one barrier, land within one of even on equal accounts (the in-flight
// count is taken by the selection itself, with a compare-and-swap, so the next selector
// sees it). Then every claim is released and a dead thread's claims are reclaimed once.
//
// This file is also its own worker script (isMainThread picks the side).

import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import { attachLedger, createLedger, type LedgerHandleInit } from '../../src/ledger/ledger.ts'
import type { AccountRef } from '../../src/ledger/providers.ts'

interface Job { init: LedgerHandleInit; row: number; barrier: SharedArrayBuffer; picks: number; accounts: number; release: boolean; threads: number }

if (!isMainThread) {
  const job = workerData as Job
  const ledger = attachLedger(job.init, job.row)
  const refs: AccountRef[] = Array.from({ length: job.accounts }, (_, index) => ({ index, maxConcurrent: null }))
  const bar = new Int32Array(job.barrier)
  Atomics.add(bar, 1, 1)
  Atomics.wait(bar, 0, 0) // every thread starts selecting at the same instant
  const got: number[] = []
  for (let i = 0; i < job.picks; i++) {
    const s = ledger.providers.select(refs)
    if (!s.ok) throw new Error('selection refused')
    got.push(s.account)
  }
  if (job.release) {
    // Release only once every thread has selected: the burst is all claims, then all releases.
    Atomics.add(bar, 2, 1)
    Atomics.notify(bar, 2)
    for (let seen = Atomics.load(bar, 2); seen < job.threads; seen = Atomics.load(bar, 2)) Atomics.wait(bar, 2, seen, 100)
    for (const a of got) ledger.providers.release(a)
  }
  parentPort!.postMessage(got)
} else {
  const { default: t } = await import('tap')
  const run = async (threads: number, accounts: number, release: boolean): Promise<{ ledger: ReturnType<typeof createLedger>; counts: number[] }> => {
    const ledger = createLedger({ maxActive: 1, maxQueued: 0, queueWaitMs: 1000, parsePermits: 1, parseQueue: 0, parseWaitMs: 1000, storageBytes: 0, threads, accounts, breakers: 1, affinity: 64 })
    const barrier = new SharedArrayBuffer(12)
    const bar = new Int32Array(barrier)
    const workers: Worker[] = []
    const results: Array<Promise<number[]>> = []
    for (let r = 1; r <= threads; r++) {
      ledger.assignRow(r)
      const w = new Worker(new URL(import.meta.url), { workerData: { init: ledger.init, row: r, barrier, picks: 64 / threads, accounts, release, threads } satisfies Job })
      workers.push(w)
      results.push(new Promise((resolve, reject) => { w.once('message', resolve); w.once('error', reject) }))
    }
    while (Atomics.load(bar, 1) < threads) await new Promise((resolve) => setTimeout(resolve, 1))
    Atomics.store(bar, 0, 1)
    Atomics.notify(bar, 0)
    const picked = (await Promise.all(results)).flat()
    await Promise.all(workers.map((w) => new Promise((resolve) => { if (w.threadId === -1) resolve(null); else { w.once('exit', resolve) } })))
    const counts = new Array<number>(accounts).fill(0)
    for (const a of picked) counts[a]++
    return { ledger, counts }
  }

  for (const threads of [2, 4]) {
    for (const accounts of [2, 3, 4]) {
      t.test(`burst-spreads-within-one: ${threads} threads, ${accounts} accounts`, async (t) => {
        const { ledger, counts } = await run(threads, accounts, false)
        const snap = ledger.providers.snapshot()
        t.same(snap.accounts.map((a) => a.inflight), counts, 'the ledger counts every claim the threads made')
        t.equal(counts.reduce((a, b) => a + b, 0), 64, 'every selection was granted')
        t.ok(Math.max(...counts) - Math.min(...counts) <= 1, `spread within one of even: ${counts.join(', ')}`)
        // The threads exited without releasing: their claims come back with their rows, once.
        let back = 0
        for (let r = 1; r <= threads; r++) back += (await ledger.reclaimRow(r)).accountClaims ?? 0
        t.equal(back, 64, 'a dead row\'s claims are reclaimed')
        for (let r = 1; r <= threads; r++) t.equal((await ledger.reclaimRow(r)).accountClaims, undefined, 'a second reclaim finds nothing')
        t.same(ledger.providers.snapshot().accounts.map((a) => a.inflight), new Array(accounts).fill(0), 'idle')
      })
    }
  }

  t.test('released-claims-leave-the-accounts-idle', async (t) => {
    const { ledger, counts } = await run(4, 4, true)
    t.same(counts, [16, 16, 16, 16], 'the burst spread evenly')
    t.same(ledger.providers.snapshot().accounts.map((a) => a.inflight), [0, 0, 0, 0], 'every claim released by its thread')
  })
}
