// Property: with several threads appending to the session event ring at once (evicting each
// other's records, wrapping around), readers on other threads following one session each
// (a) never see a torn payload (every payload carries its own checksum), (b) see ids strictly
// increasing, never twice, (c) lose nothing silently: every event of their session that was
// appended after the cursor they started from is either delivered or covered by a reported
// gap. A writer killed in the middle of its run (possibly holding the ring's lock) is repaired
// by repairRing as the supervisor does, and the ring keeps working.
//
// Each thread writes/reads with its row's token. The main thread is the "primary": it starts
// and kills threads and repairs the lock; it never appends.
//
// The payloads, the writer thread, the readers' check and the writers' run with writer 3 killed
// are shared with the other event-ring property (event-ring-harness.ts).

import t from 'tap'
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import { EventRing, createRingBuffer } from '../../src/events/ring.ts'
import { pickSeed } from './harness.ts'
import { checkEvents, lostEvents, makePayload, runWriters, SESSIONS, writer, type WriterJob } from './event-ring-harness.ts'

interface ReaderJob { kind: 'reader'; sab: SharedArrayBuffer; row: number; session: number; from: number; stop: SharedArrayBuffer }
type Job = WriterJob | ReaderJob

async function reader (job: ReaderJob): Promise<void> {
  const ring = new EventRing(job.sab, job.row)
  const stop = new Int32Array(job.stop)
  const problems: string[] = []
  const seen: number[] = []
  const gaps: Array<[after: number, oldest: number]> = []
  let cursor = job.from
  for (;;) {
    const token = ring.changeToken
    const r = ring.read(SESSIONS[job.session], cursor, 64 * 1024)
    if (r.gap) gaps.push([cursor, r.oldest])
    checkEvents(r.events, job.session, seen, problems)
    if (r.cursor < cursor) problems.push(`cursor went back ${cursor} -> ${r.cursor}`)
    cursor = r.cursor
    if (r.more) continue
    if (Atomics.load(stop, 0) === 1 && ring.changeToken === token) break
    await ring.changed(token, 20)
  }
  parentPort!.postMessage({ kind: 'read', session: job.session, seen, gaps, problems, cursor })
}

if (!isMainThread) {
  const job = workerData as Job
  if (job.kind === 'writer') await writer(job)
  else await reader(job)
}

function spawn (job: Job): Worker {
  return new Worker(new URL(import.meta.url), { workerData: job })
}

if (isMainThread) {
  const seed = pickSeed()
  t.comment(`seed ${seed} (SLUICE_STRESS_SEED to replay)`)

  for (const [label, capacity] of [['small ring, constant eviction', 16 * 1024], ['large ring, no eviction', 16 * 1024 * 1024]] as const) {
    t.test(`${label}: 3 writers (one killed), 3 readers`, async (t) => {
      const sab = createRingBuffer(capacity)
      const stop = new SharedArrayBuffer(4)
      const readers = SESSIONS.map((_, s) => {
        const w = spawn({ kind: 'reader', sab, row: 10 + s, session: s, from: 0, stop })
        return new Promise<{ seen: number[]; gaps: Array<[number, number]>; problems: string[]; cursor: number }>((resolve, reject) => {
          w.on('message', (m: { kind?: string; seen: number[]; gaps: Array<[number, number]>; problems: string[]; cursor: number }) => { if (m?.kind === 'read') resolve(m) })
          w.once('error', reject)
        })
      })
      // Kill writer 3 mid-run, whatever it is doing (maybe inside the ring's lock).
      const logs = await runWriters(t, sab, seed, spawn)
      // After every writer: one more append proves the ring is usable (repaired if needed).
      const ring = new EventRing(sab, 20)
      const last = ring.append(SESSIONS[0], makePayload(20, 0, 0, 40))
      t.ok(last > 0, 'the ring still takes appends')
      Atomics.store(new Int32Array(stop), 0, 1)
      const results = await Promise.all(readers)

      const snap = ring.snapshot()
      t.equal(snap.appended, snap.records + snap.evicted, 'every record retained or evicted, once')
      for (const [s, r] of results.entries()) {
        t.same(r.problems, [], `reader of session ${s}: no torn payload, no duplicate, ids increasing`)
        // Every event of session s from the live writers (and the last append) was either
        // delivered or inside a reported gap [after + 1, oldest - 1].
        const lost = lostEvents(logs, s, s === 0 ? [last] : [], r)
        t.same(lost.slice(0, 10), [], `reader of session ${s}: nothing lost silently (${r.seen.length} seen, ${r.gaps.length} gaps)`)
      }
      if (capacity > 1024 * 1024) t.ok(results.every((r) => r.gaps.length === 0), 'a ring that never evicts reports no gap')
      else t.ok(results.some((r) => r.gaps.length > 0), 'the small ring evicted under readers (gaps were reported)')
    })
  }
}
