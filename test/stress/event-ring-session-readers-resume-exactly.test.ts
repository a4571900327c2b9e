// Property: readers that sleep on their own session's change slot and resume at the ring
// offset of their cursor (the way GET /v1/sessions/:id/events reads) see what readers that
// walk the whole ring see, with several threads appending at once (evicting, wrapping) and a
// writer killed mid-run (its lock repaired): (a) never a torn payload, (b) ids strictly
// increasing, never twice, (c) nothing lost silently — every event of their session appended
// after their start is delivered or inside a reported gap — and (d) no reader stays asleep
// through an append to its session (each ends having read the last one).

import t from 'tap'
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import { createHash } from 'node:crypto'
import { EventRing, createRingBuffer, repairRing } from '../../src/events/ring.ts'
import { pickSeed, rng, threadSeed } from './harness.ts'

const SESSIONS: Array<readonly [number, number]> = [[1, 1], [2, 2], [3, 3]]

interface WriterJob { kind: 'writer'; sab: SharedArrayBuffer; row: number; seed: number; appends: number }
interface ReaderJob { kind: 'reader'; sab: SharedArrayBuffer; row: number; session: number; stop: SharedArrayBuffer }
type Job = WriterJob | ReaderJob

/** payload = [u32 writer row][u32 n][u32 session index][filler][16-byte md5 of all before] */
function makePayload (row: number, n: number, session: number, size: number): Buffer {
  const b = Buffer.alloc(Math.max(28, size))
  b.writeUInt32LE(row, 0)
  b.writeUInt32LE(n, 4)
  b.writeUInt32LE(session, 8)
  for (let i = 12; i < b.length - 16; i++) b[i] = (i * 131 + n) & 0xff
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
    log.push([ring.append(SESSIONS[s], makePayload(job.row, n, s, size)), s])
    if (rand() < 0.05) await new Promise((resolve) => setImmediate(resolve))
  }
  parentPort!.postMessage({ kind: 'written', row: job.row, log })
}

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
    for (const e of r.events) {
      if (!intact(e.payload)) problems.push(`torn payload at ${e.seq}`)
      else if (e.payload.readUInt32LE(8) !== job.session) problems.push(`another session's event at ${e.seq}`)
      if (seen.length > 0 && e.seq <= seen[seen.length - 1]) problems.push(`id ${e.seq} after ${seen[seen.length - 1]}`)
      seen.push(e.seq)
    }
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
      await new Promise((resolve) => setTimeout(resolve, 5 + (seed % 20)))
      await writers[2].w.terminate()
      const repaired = repairRing(sab, 3)
      t.comment(`writer 3 killed; lock ${repaired ? 'was held: repaired' : 'was free'}`)
      await Promise.all(writers.map((w) => w.done))
      // One last event for every session: each reader must wake for it and read it.
      const ring = new EventRing(sab, 20)
      const last = SESSIONS.map((s, i) => ring.append(s, makePayload(20, 0, i, 40)))
      // After the last appends: a reader that sees the flag and no append since its read began has read them.
      Atomics.store(new Int32Array(stop), 0, 1)
      t.ok(last.every((seq) => seq > 0), 'the ring still takes appends')
      const results = await Promise.all(readers)

      for (const [s, r] of results.entries()) {
        t.same(r.problems, [], `reader of session ${s}: no torn payload, no duplicate, ids increasing`)
        const expected: number[] = []
        for (const row of [1, 2]) for (const [seq, sess] of logs.get(row) ?? []) if (sess === s && seq > 0) expected.push(seq)
        expected.push(last[s])
        const seen = new Set(r.seen)
        const inGap = (seq: number): boolean => r.gaps.some(([after, oldest]) => seq > after && seq < oldest)
        const lost = expected.filter((seq) => !seen.has(seq) && !inGap(seq))
        t.same(lost.slice(0, 10), [], `reader of session ${s}: nothing lost silently (${r.seen.length} seen, ${r.gaps.length} gaps)`)
        t.ok(seen.has(last[s]), `reader of session ${s}: woken for its session's last event`)
      }
      if (capacity > 1024 * 1024) t.ok(results.every((r) => r.gaps.length === 0), 'a ring that never evicts reports no gap')
      else t.ok(results.some((r) => r.gaps.length > 0), 'the small ring evicted under readers (gaps were reported)')
    })
  }
}
