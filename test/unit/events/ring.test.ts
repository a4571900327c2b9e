// The session event ring (src/events/ring.ts): sequence numbers, per-session filtering,
// eviction of the oldest records at a fixed capacity, wrap-around, gaps reported honestly,
// readers resuming from any id, payload cap, and a dead lock holder repaired by the primary.
// A reference model (a plain array of every appended event) checks every read of a long
// random run, so a bookkeeping bug in the wrap logic cannot hide.

import t from 'tap'
import { Worker } from 'node:worker_threads'
import { EventRing, createRingBuffer, repairRing } from '../../../src/events/ring.ts'

const A = [11, 12] as const
const B = [21, 22] as const

function payload (n: number, size: number): Buffer {
  const b = Buffer.alloc(size, 97 + (n % 26))
  b.writeUInt32LE(n, 0)
  return b
}

t.test('appends get increasing ids; a reader sees only its session, in order', async (t) => {
  const ring = new EventRing(createRingBuffer(4096), 1)
  t.equal(ring.append(A, Buffer.from('a1')), 1)
  t.equal(ring.append(B, Buffer.from('b1')), 2)
  t.equal(ring.append(A, Buffer.from('a2')), 3)
  const r = ring.read(A, 0)
  t.same(r.events.map((e) => [e.seq, e.payload.toString()]), [[1, 'a1'], [3, 'a2']])
  t.equal(r.cursor, 3)
  t.equal(r.gap, false)
  t.same(ring.read(A, 1).events.map((e) => e.seq), [3], 'resume after an id')
  t.same(ring.read(A, 3).events, [], 'nothing after the newest')
  t.same(ring.read(B, 0).events.map((e) => e.payload.toString()), ['b1'])
  t.equal(ring.nextSeq, 4)
})

t.test('a payload above a quarter of the ring is refused, and counted', async (t) => {
  const ring = new EventRing(createRingBuffer(4096), 1)
  t.equal(ring.append(A, Buffer.alloc(ring.maxPayload + 1)), 0)
  t.ok(ring.append(A, Buffer.alloc(ring.maxPayload)) > 0)
  t.equal(ring.snapshot().refused, 1)
})

t.test('a long random run against a reference model: eviction, wrap, gaps', async (t) => {
  const cap = 8192
  const ring = new EventRing(createRingBuffer(cap), 1)
  const all: Array<{ seq: number; session: readonly [number, number]; p: Buffer }> = []
  let seed = 12345
  const rand = (n: number): number => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n }
  let cursorA = 0
  let seenA: number[] = []
  let checks = 0
  for (let i = 0; i < 4000; i++) {
    const session = rand(3) === 0 ? B : A
    const p = payload(i, 4 + rand(ring.maxPayload - 4))
    const seq = ring.append(session, p)
    all.push({ seq, session, p })
    if (seq !== all.length) { t.fail(`seq ${seq} at append ${all.length}`); break }
    const s = ring.snapshot()
    if (s.bytes > cap || s.records < 1) { t.fail(`bytes ${s.bytes} records ${s.records}`); break }
    // Retained = the newest `records` events, exactly.
    if (s.oldestSeq !== all.length - s.records + 1) { t.fail(`oldest ${s.oldestSeq} vs ${all.length - s.records + 1}`); break }
    if (rand(4) === 0) {
      const r = ring.read(A, cursorA, 1 << 30)
      const expected = all.filter((e) => e.session === A && e.seq > Math.max(cursorA, s.oldestSeq - 1))
      const same = r.events.length === expected.length && r.events.every((e, k) => e.seq === expected[k].seq && e.payload.equals(expected[k].p))
      if (!same) { t.fail(`read after ${cursorA}: got ${r.events.map((e) => e.seq)} want ${expected.map((e) => e.seq)}`); break }
      const wantGap = cursorA + 1 < s.oldestSeq
      if (r.gap !== wantGap) { t.fail(`gap ${r.gap} want ${wantGap} (cursor ${cursorA}, oldest ${s.oldestSeq})`); break }
      seenA = seenA.concat(r.events.map((e) => e.seq))
      cursorA = r.cursor
      checks++
    }
  }
  t.ok(checks > 500, `${checks} reads checked against the model`)
  const s = ring.snapshot()
  t.equal(s.appended, 4000)
  t.equal(s.evicted + s.records, 4000, 'every record is retained or evicted, once')
  t.ok(seenA.every((x, i) => i === 0 || x > seenA[i - 1]), 'a reader never sees an id twice or out of order')
})

t.test('a read bounded by maxBytes continues where it stopped', async (t) => {
  const ring = new EventRing(createRingBuffer(65536), 1)
  for (let i = 0; i < 20; i++) ring.append(A, payload(i, 1000))
  const got: number[] = []
  let cursor = 0
  for (let k = 0; k < 30; k++) {
    const r = ring.read(A, cursor, 3000)
    got.push(...r.events.map((e) => e.seq))
    cursor = r.cursor
    if (!r.more) break
  }
  t.same(got, Array.from({ length: 20 }, (_, i) => i + 1))
})

t.test('changed() wakes a reader on append from another thread; repairRing clears a dead holder\'s lock', async (t) => {
  const sab = createRingBuffer(4096)
  const ring = new EventRing(sab, 1)
  const token = ring.changeToken
  const woke = ring.changed(token, 10_000)
  const w = new Worker(`
    const { workerData } = require('node:worker_threads')
    const h = new Int32Array(workerData, 0, 18)
    Atomics.store(h, 1, 3) // take the lock as row 2 (token 3) and die holding it
    Atomics.add(h, 10, 1); Atomics.notify(h, 10)
  `, { eval: true, workerData: sab })
  await new Promise((resolve) => w.once('exit', resolve))
  await woke
  t.not(ring.changeToken, token, 'woken by the other thread')
  t.equal(repairRing(sab, 1), false, 'row 1 does not hold it')
  t.equal(repairRing(sab, 2), true, 'the dead row 2 held it: cleared')
  t.equal(ring.append(A, Buffer.from('after repair')), 1, 'usable again')
})
