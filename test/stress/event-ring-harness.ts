// The pieces both event-ring stress properties share (event-ring-readers-never-see-torn-or-lost-
// events.test.ts, event-ring-session-readers-resume-exactly.test.ts): three sessions, payloads
// that carry their own checksum, the writer thread, the check every reader makes of what it
// read, the primary's run of three writers with the third killed mid-run (its lock repaired as
// the supervisor does), and the "nothing lost silently" reckoning. The readers differ (one
// follows the ring's change token, the other its session's slot), so they stay in their files;
// each test file is its own worker script and hands its writer jobs to `writer` here.

import { parentPort, type Worker } from 'node:worker_threads'
import { createHash } from 'node:crypto'
import { EventRing, repairRing, type RingEvent } from '../../src/events/ring.ts'
import { rng, threadSeed } from './harness.ts'

export const SESSIONS: Array<readonly [number, number]> = [[1, 1], [2, 2], [3, 3]]

export interface WriterJob { kind: 'writer'; sab: SharedArrayBuffer; row: number; seed: number; appends: number }

/** payload = [u32 writer row][u32 n][u32 session index][filler][16-byte md5 of all before] */
export function makePayload (row: number, n: number, session: number, size: number): Buffer {
  const b = Buffer.alloc(Math.max(28, size))
  b.writeUInt32LE(row, 0)
  b.writeUInt32LE(n, 4)
  b.writeUInt32LE(session, 8)
  for (let i = 12; i < b.length - 16; i++) b[i] = (i * 131 + n) & 0xff
  createHash('md5').update(b.subarray(0, b.length - 16)).digest().copy(b, b.length - 16)
  return b
}

export function intact (p: Buffer): boolean {
  if (p.length < 28) return false
  return createHash('md5').update(p.subarray(0, p.length - 16)).digest().equals(p.subarray(p.length - 16))
}

/** A writer thread: `appends` payloads of random sessions and sizes; posts its [seq, session] log. */
export async function writer (job: WriterJob): Promise<void> {
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

/** A reader's check of the events one read gave it (session index `session`): into `seen` and `problems`. */
export function checkEvents (events: readonly RingEvent[], session: number, seen: number[], problems: string[]): void {
  for (const e of events) {
    if (!intact(e.payload)) problems.push(`torn payload at ${e.seq}`)
    else if (e.payload.readUInt32LE(8) !== session) problems.push(`another session's event at ${e.seq}`)
    if (seen.length > 0 && e.seq <= seen[seen.length - 1]) problems.push(`id ${e.seq} after ${seen[seen.length - 1]}`)
    seen.push(e.seq)
  }
}

export interface RingTest { comment (...args: unknown[]): unknown }

/** Writers on rows 1, 2, 3 (1500 appends each); writer 3 is killed mid-run, whatever it is doing (maybe inside the ring's lock), and the lock repaired. Resolves with each writer's log once all have ended. */
export async function runWriters (t: RingTest, sab: SharedArrayBuffer, seed: number, spawn: (job: WriterJob) => Worker): Promise<Map<number, Array<[number, number]>>> {
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
  return logs
}

/**
 * The events of session index `s` that the live writers (rows 1 and 2) appended, and `extra`,
 * that the reader neither saw nor had inside a reported gap [after + 1, oldest - 1].
 */
export function lostEvents (logs: Map<number, Array<[number, number]>>, s: number, extra: readonly number[], read: { seen: number[]; gaps: Array<[number, number]> }): number[] {
  const expected: number[] = []
  for (const row of [1, 2]) for (const [seq, sess] of logs.get(row) ?? []) if (sess === s && seq > 0) expected.push(seq)
  expected.push(...extra)
  const seen = new Set(read.seen)
  const inGap = (seq: number): boolean => read.gaps.some(([after, oldest]) => seq > after && seq < oldest)
  return expected.filter((seq) => !seen.has(seq) && !inGap(seq))
}
