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

import t from 'tap'
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import { createHash } from 'node:crypto'
import { EventRing, createRingBuffer, repairRing } from '../../src/events/ring.ts'
import { pickSeed, rng, threadSeed } from './harness.ts'

const SESSIONS: Array<readonly [number, number]> = [[1, 1], [2, 2], [3, 3]]

interface WriterJob { kind: 'writer'; sab: SharedArrayBuffer; row: number; seed: number; appends: number }
interface ReaderJob { kind: 'reader'; sab: SharedArrayBuffer; row: number; session: number; from: number; stop: SharedArrayBuffer }
type Job = WriterJob | ReaderJob

/** payload = [u32 writer row][u32 n][u32 session index][filler][16-byte md5 of all before] */
function makePayload (row: number, n: number, session: number, size: number): Buffer {
  const b = Buffer.alloc(Math.max(28, size))
  b.writeUInt32LE(row, 0)
  b.writeUInt32LE(n, 4)
  b.writeUInt32LE(session, 8)
  for (let i = 12; i < b.length - 16; i++) b[i] = (i * 31 + n) & 0xff
  createHash('md5').update(b.subarray(0, b.length - 16)).digest().copy(b, b.length - 16)
  return b
}

function intact (p: Buffer): boolean {
  if (p.length < 28) return false
  return createHash('md5').update(p.subarray(0, p.length - 16)).digest().equals(p.subarray(p.length - 16))
}

async function writer (job: WriterJob): Promise<void> {
  const ring = new EventRing(job.sab, job.row)
  const rand = rng(job.seed)
  const log: Array<[seq: number, session: number]> = []
  for (let n = 0; n < job.appends; n++) {
    const s = Math.floor(rand() * SESSIONS.length)
    const size = 28 + Math.floor(rand() * Math.min(ring.maxPayload - 28, 3000))
    const seq = ring.append(SESSIONS[s], makePayload(job.row, n, s, size))
    log.push([seq, s])
    if (rand() < 0.05) await new Promise((resolve) => setImmediate(resolve))
  }
  parentPort!.postMessage({ kind: 'written', row: job.row, log })
}

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
    for (const e of r.events) {
      if (!intact(e.payload)) problems.push(`torn payload at ${e.seq}`)
      else if (e.payload.readUInt32LE(8) !== job.session) problems.push(`another session's event at ${e.seq}`)
      if (seen.length > 0 && e.seq <= seen[seen.length - 1]) problems.push(`id ${e.seq} after ${seen[seen.length - 1]}`)
      seen.push(e.seq)
    }
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
      const logs = new Map<number, Array<[number, number]>>()
      const writers = [1, 2, 3].map((row) => {
        const w = spawn({ kind: 'writer', sab, row, seed: threadSeed(seed, row), appends: 1500 })
        const done = new Promise<void>((resolve, reject) => {
          w.on('message', (m: { kind?: string; row: number; log: Array<[number, number]> }) => { if (m?.kind === 'written') logs.set(m.row, m.log) })
          w.once('exit', () => resolve())
          w.once('error', reject)
        })
        return { row, w, done }
      })
      // Kill writer 3 mid-run, whatever it is doing (maybe inside the ring's lock).
      await new Promise((resolve) => setTimeout(resolve, 5 + (seed % 20)))
      await writers[2].w.terminate()
      const repaired = repairRing(sab, 3)
      t.comment(`writer 3 killed; lock ${repaired ? 'was held: repaired' : 'was free'}`)
      await Promise.all(writers.map((w) => w.done))
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
        const expected: number[] = []
        for (const row of [1, 2]) for (const [seq, sess] of logs.get(row) ?? []) if (sess === s && seq > 0) expected.push(seq)
        if (s === 0) expected.push(last)
        const seen = new Set(r.seen)
        const inGap = (seq: number): boolean => r.gaps.some(([after, oldest]) => seq > after && seq < oldest)
        const lost = expected.filter((seq) => !seen.has(seq) && !inGap(seq))
        t.same(lost.slice(0, 10), [], `reader of session ${s}: nothing lost silently (${r.seen.length} seen, ${r.gaps.length} gaps)`)
      }
      if (capacity > 1024 * 1024) t.ok(results.every((r) => r.gaps.length === 0), 'a ring that never evicts reports no gap')
      else t.ok(results.some((r) => r.gaps.length > 0), 'the small ring evicted under readers (gaps were reported)')
    })
  }
}
