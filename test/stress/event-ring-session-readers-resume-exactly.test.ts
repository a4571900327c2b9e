// Property: readers that sleep on their own session's change slot and resume at the ring
// offset of their cursor (the way GET /v1/sessions/:id/events reads) see what readers that
// walk the whole ring see, with several threads appending at once (evicting, wrapping) and a
// writer killed mid-run (its lock repaired): (a) never a torn payload, (b) ids strictly
// increasing, never twice, (c) nothing lost silently — every event of their session appended
// after their start is delivered or inside a reported gap — and (d) no reader stays asleep
// through an append to its session (each ends having read the last one).
//
// The payloads, the writer thread, the readers' check and the writers' run with writer 3 killed
// are shared with the other event-ring property (event-ring-harness.ts).

import t from 'tap'
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import { EventRing, createRingBuffer } from '../../src/events/ring.ts'
import { pickSeed } from './harness.ts'
import { checkEvents, lostEvents, makePayload, runWriters, SESSIONS, writer, type WriterJob } from './event-ring-harness.ts'

interface ReaderJob { kind: 'reader'; sab: SharedArrayBuffer; row: number; session: number; stop: SharedArrayBuffer }
type Job = WriterJob | ReaderJob

async function reader (job: ReaderJob): Promise<void> {
  const ring = new EventRing(job.sab, job.row)
  const session = SESSIONS[job.session]
  const stop = new Int32Array(job.stop)
  const problems: string[] = []
  const seen: number[] = []
  const gaps: Array<[after: number, oldest: number]> = []
  let cursor = 0
  let at = -1
  for (;;) {
    const token = ring.sessionToken(session)
    const r = ring.read(session, cursor, 64 * 1024, at)
    if (r.gap) gaps.push([cursor, r.oldest])
    checkEvents(r.events, job.session, seen, problems)
    if (r.cursor < cursor) problems.push(`cursor went back ${cursor} -> ${r.cursor}`)
    cursor = r.cursor
    at = r.at
    if (r.more) continue
    // Stop only once nothing was appended to this session since the read began.
    if (Atomics.load(stop, 0) === 1 && ring.sessionToken(session) === token) break
    await ring.sessionChanged(session, token, 1000)
  }
  parentPort!.postMessage({ kind: 'read', session: job.session, seen, gaps, problems })
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
    t.test(`${label}: 3 writers (one killed), 3 session readers resuming at their offsets`, async (t) => {
      const sab = createRingBuffer(capacity)
      const stop = new SharedArrayBuffer(4)
      const readers = SESSIONS.map((_, s) => {
        const w = spawn({ kind: 'reader', sab, row: 10 + s, session: s, stop })
        return new Promise<{ seen: number[]; gaps: Array<[number, number]>; problems: string[] }>((resolve, reject) => {
          w.on('message', (m: { kind?: string; seen: number[]; gaps: Array<[number, number]>; problems: string[] }) => { if (m?.kind === 'read') resolve(m) })
          w.once('error', reject)
        })
      })
      const logs = await runWriters(t, sab, seed, spawn)
      // One last event for every session: each reader must wake for it and read it.
      const ring = new EventRing(sab, 20)
      const last = SESSIONS.map((s, i) => ring.append(s, makePayload(20, 0, i, 40)))
      // After the last appends: a reader that sees the flag and no append since its read began has read them.
      Atomics.store(new Int32Array(stop), 0, 1)
      t.ok(last.every((seq) => seq > 0), 'the ring still takes appends')
      const results = await Promise.all(readers)

      for (const [s, r] of results.entries()) {
        t.same(r.problems, [], `reader of session ${s}: no torn payload, no duplicate, ids increasing`)
        const lost = lostEvents(logs, s, [last[s]], r)
        const seen = new Set(r.seen)
        t.same(lost.slice(0, 10), [], `reader of session ${s}: nothing lost silently (${r.seen.length} seen, ${r.gaps.length} gaps)`)
        t.ok(seen.has(last[s]), `reader of session ${s}: woken for its session's last event`)
      }
      if (capacity > 1024 * 1024) t.ok(results.every((r) => r.gaps.length === 0), 'a ring that never evicts reports no gap')
      else t.ok(results.some((r) => r.gaps.length > 0), 'the small ring evicted under readers (gaps were reported)')
    })
  }
}
