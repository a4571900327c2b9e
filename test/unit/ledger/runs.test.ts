// The run table (src/ledger/runs.ts): turn pins shared by every thread, LRU eviction, give-back.

import t from 'tap'
import { Worker } from 'node:worker_threads'
import { makeLedger, rowHandle } from './helpers.ts'
import { RunTable } from '../../../src/ledger/runs.ts'

t.test('a run takes at most its pin, and the refusal reports the count', async (t) => {
  const ledger = makeLedger({ runSlots: 8 })
  const r = ledger.runs
  t.same(r.take('k', 'run-1', 3), { ok: true, count: 1 })
  t.same(r.take('k', 'run-1', 3), { ok: true, count: 2 })
  t.same(r.take('k', 'run-1', 3), { ok: true, count: 3 })
  t.same(r.take('k', 'run-1', 3), { ok: false, count: 3 }, 'the fourth is refused')
  t.same(r.take('k', 'run-1', 3), { ok: false, count: 3 }, 'a refusal takes nothing')
})

t.test('runs are keyed by gateway key and run id together', async (t) => {
  const r = makeLedger({ runSlots: 8 }).runs
  t.same(r.take('a', 'run', 1), { ok: true, count: 1 })
  t.same(r.take('b', 'run', 1), { ok: true, count: 1 }, 'another key, same run id: its own count')
  t.same(r.take('a', 'run2', 1), { ok: true, count: 1 })
  t.same(r.take('a', 'run', 1), { ok: false, count: 1 })
  // "a\0b" + "c" and "a" + "b\0c" must not collide through naive concatenation.
  t.not(RunTable.hash('a\0b', 'c').join(), RunTable.hash('a', 'b\0c').join())
})

t.test('giveBack returns one turn, never below zero', async (t) => {
  const r = makeLedger({ runSlots: 8 }).runs
  r.take('k', 'x', 2)
  r.take('k', 'x', 2)
  t.same(r.take('k', 'x', 2), { ok: false, count: 2 })
  r.giveBack('k', 'x')
  t.same(r.take('k', 'x', 2), { ok: true, count: 2 }, 'the given-back turn can be taken again')
  r.giveBack('k', 'x')
  r.giveBack('k', 'x')
  r.giveBack('k', 'x')
  r.giveBack('k', 'unknown')
  t.same(r.take('k', 'x', 2), { ok: true, count: 1 }, 'extra give-backs stop at zero')
})

t.test('a full table evicts the least recently used run, which starts over', async (t) => {
  const r = makeLedger({ runSlots: 4 }).runs
  for (const run of ['r0', 'r1', 'r2', 'r3']) t.same(r.take('k', run, 1), { ok: true, count: 1 })
  // Every slot is used; a new run evicts one of them (all equally old at one-second
  // resolution, so the first oldest found): that run's count is forgotten.
  t.same(r.take('k', 'r4', 1), { ok: true, count: 1 })
  t.same(r.take('k', 'r4', 1), { ok: false, count: 1 }, 'the new run is counted')
  // Ties at one-second resolution go to the first slot scanned: r0 was evicted.
  t.same(r.take('k', 'r0', 1), { ok: true, count: 1 }, 'the evicted run starts over')
})

t.test('a table of zero slots pins nothing', async (t) => {
  const r = makeLedger({ runSlots: 0 }).runs
  for (let i = 0; i < 5; i++) t.same(r.take('k', 'x', 1), { ok: true, count: 0 })
  r.giveBack('k', 'x')
})

t.test('every thread sees one count per run', async (t) => {
  const primary = makeLedger({ runSlots: 64, threads: 3 })
  const init = primary.init
  rowHandle(primary, 1)
  rowHandle(primary, 2)
  // Two threads take turns of the same run concurrently; the pin holds across them.
  const script = new URL('data:text/javascript,' + encodeURIComponent(`
    import { workerData, parentPort } from 'node:worker_threads'
    const { attachLedger } = await import(workerData.ledgerUrl)
    const ledger = attachLedger(workerData.init, workerData.row)
    let ok = 0
    for (let i = 0; i < 200; i++) if (ledger.runs.take('k', 'shared', 150).ok) ok++
    parentPort.postMessage(ok)
  `))
  const ledgerUrl = new URL('../../../src/ledger/ledger.ts', import.meta.url).href
  const run = (row: number): Promise<number> => new Promise((resolve, reject) => {
    const w = new Worker(script, { workerData: { init, row, ledgerUrl } })
    w.once('message', resolve)
    w.once('error', reject)
  })
  const [a, b] = await Promise.all([run(1), run(2)])
  t.equal(a + b, 150, `exactly the pin was granted across two threads (${a} + ${b})`)
  t.same(primary.runs.take('k', 'shared', 150), { ok: false, count: 150 })
})
