// What a reader of the session event ring costs (src/events/ring.ts "Readers"), counted, not
// timed: a read that resumes at its offset examines only the records after its cursor; an
// append wakes only the readers waiting on its session's slot; an offset that no longer holds
// is never trusted (the read walks and stays exact). A long random run with several readers
// at different paces checks every resumed read against a reference model.

import t from 'tap'
import { EventRing, SESSION_SLOTS, createRingBuffer, sessionSlot } from '../../../src/events/ring.ts'

const A = [11, 12] as const
const B = [21, 22] as const

function payload (n: number, size: number): Buffer {
  const b = Buffer.alloc(size, 97 + (n % 26))
  b.writeUInt32LE(n, 0)
  return b
}

/** Records examined by `fn`'s reads. */
function scannedBy (ring: EventRing, fn: () => void): number {
  const before = ring.snapshot().scanned
  fn()
  return ring.snapshot().scanned - before
}

t.test('a full ring: a read resumed at its offset examines only the records after its cursor', async (t) => {
  const ring = new EventRing(createRingBuffer(65536), 1)
  for (let i = 0; ring.snapshot().evicted < 100; i++) ring.append(B, payload(i, 200))
  const records = ring.snapshot().records
  t.ok(records > 200, `${records} records retained, the oldest evicted`)

  let r = ring.read(A, ring.nextSeq - 1)
  t.same(r.events, [])
  let n = scannedBy(ring, () => { r = ring.read(A, r.cursor, undefined, r.at) })
  t.equal(n, 0, 'nothing new: nothing examined')

  const seq = ring.append(A, Buffer.from('a1'))
  n = scannedBy(ring, () => { r = ring.read(A, r.cursor, undefined, r.at) })
  t.same(r.events.map((e) => [e.seq, e.payload.toString()]), [[seq, 'a1']])
  t.equal(n, 1, 'one new record: one examined')

  for (let i = 0; i < 3; i++) ring.append(B, payload(i, 200))
  ring.append(A, Buffer.from('a2'))
  n = scannedBy(ring, () => { r = ring.read(A, r.cursor, undefined, r.at) })
  t.same(r.events.map((e) => e.payload.toString()), ['a2'])
  t.equal(n, 4, 'four new records (three of another session): four examined')

  const walked = scannedBy(ring, () => { ring.read(A, seq) })
  t.equal(walked, ring.snapshot().records, 'without the offset the read walks from the head')

  // Around the wrap, many times over: every resumed read examines exactly what is new.
  let worst = 0
  for (let i = 0; i < 2000; i++) {
    ring.append(i % 3 === 0 ? A : B, payload(i, 16 + (i * 37) % 900))
    if (i % 5 === 4) {
      const fresh = ring.nextSeq - 1 - r.cursor
      const before = r.cursor
      n = scannedBy(ring, () => { r = ring.read(A, r.cursor, undefined, r.at) })
      t.equal(r.gap, false)
      if (n !== fresh) { t.fail(`read after ${before}: examined ${n}, ${fresh} new`); break }
      worst = Math.max(worst, n)
    }
  }
  t.equal(worst, 5, 'five appends between reads: five examined, never more')
})

t.test('a read bounded by maxBytes resumes at its offset too', async (t) => {
  const ring = new EventRing(createRingBuffer(65536), 1)
  for (let i = 0; i < 20; i++) ring.append(A, payload(i, 1000))
  let r = ring.read(A, 0, 3000)
  const got = r.events.map((e) => e.seq)
  let examined = 0
  while (r.more) {
    examined += scannedBy(ring, () => { r = ring.read(A, r.cursor, 3000, r.at) })
    got.push(...r.events.map((e) => e.seq))
  }
  t.same(got, Array.from({ length: 20 }, (_, i) => i + 1))
  const reads = Math.ceil((20 - 3) / 3)
  t.ok(examined <= 20 - 3 + reads, `${examined} examined for 17 records in ${reads} reads (each stops on one it leaves)`)
})

t.test('an offset that does not hold is not trusted: the read walks and stays exact', async (t) => {
  const ring = new EventRing(createRingBuffer(8192), 1)
  for (let i = 0; i < 10; i++) ring.append(i % 2 ? A : B, payload(i, 100))
  const all = ring.read(A, 0).events.map((e) => e.seq)
  for (const at of [0, 4, 124, 128, 4096, 8188, 8192, 1 << 20, 3, -1]) {
    const r = ring.read(A, 4, undefined, at)
    t.same(r.events.map((e) => e.seq), all.filter((s) => s > 4), `at ${at}`)
    t.equal(r.gap, false)
  }
})

t.test('1,000 readers waiting on other sessions: an append wakes none of them', async (t) => {
  const ring = new EventRing(createRingBuffer(65536), 1)
  const others: Array<readonly [number, number]> = []
  for (let i = 0; others.length < 1000; i++) {
    const s = [1000 + i, 7 * i] as const
    if (sessionSlot(s) !== sessionSlot(A)) others.push(s)
  }
  t.ok(new Set(others.map(sessionSlot)).size > 700, 'the readers spread over the slots')
  const ac = new AbortController()
  let othersWoken = 0
  const waits = others.map((s) => ring.sessionChanged(s, ring.sessionToken(s), 60_000, ac.signal).then(() => { if (!ac.signal.aborted) othersWoken++ }))
  let aWoken = false
  const aWait = ring.sessionChanged(A, ring.sessionToken(A), 60_000, ac.signal).then(() => { aWoken = true })

  const before = ring.snapshot().woken
  ring.append(A, Buffer.from('for A'))
  t.equal(ring.snapshot().woken - before, 1, 'one reader woken: A\'s')
  await aWait
  t.equal(aWoken, true)
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(othersWoken, 0, 'no other reader resolved')

  // A second append to A with nobody waiting on A wakes nobody at all.
  const before2 = ring.snapshot().woken
  ring.append(A, Buffer.from('again'))
  t.equal(ring.snapshot().woken - before2, 0)

  // An append to one of them wakes exactly the readers of its slot.
  const target = others[0]
  const sameSlot = others.filter((s) => sessionSlot(s) === sessionSlot(target)).length
  const before3 = ring.snapshot().woken
  ring.append(target, Buffer.from('for one'))
  t.equal(ring.snapshot().woken - before3, sameSlot, `${sameSlot} reader(s) of that slot woken`)
  ac.abort()
  await Promise.all(waits)
  t.equal(SESSION_SLOTS & (SESSION_SLOTS - 1), 0, 'a power of two')
})

t.test('a long random run against a reference model: readers at different paces resume at their offsets', async (t) => {
  const cap = 16384
  const ring = new EventRing(createRingBuffer(cap), 1)
  const sessions = [A, B, [31, 32] as const]
  const all: Array<{ seq: number; session: number; p: Buffer }> = []
  let seed = 987654
  const rand = (n: number): number => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n }
  const readers = [
    { session: 0, every: 2, maxBytes: 1 << 30 },
    { session: 0, every: 9, maxBytes: 2000 },
    { session: 1, every: 40, maxBytes: 1 << 30 }, // falls behind the oldest: gaps
    { session: 2, every: 1, maxBytes: 500 },
  ].map((r) => ({ ...r, cursor: 0, at: -1, seen: [] as number[], gaps: 0, checks: 0 }))
  let failed = false
  for (let i = 0; i < 6000 && !failed; i++) {
    const session = rand(3)
    const p = payload(i, 4 + rand(ring.maxPayload - 4))
    all.push({ seq: ring.append(sessions[session], p), session, p })
    for (const rd of readers) {
      if (i % rd.every !== 0) continue
      const oldest = ring.snapshot().oldestSeq
      const wantGap = rd.cursor + 1 < oldest
      const from = Math.max(rd.cursor, oldest - 1)
      const fresh = ring.nextSeq - 1 - from
      const n0 = ring.snapshot().scanned
      let r = ring.read(sessions[rd.session], rd.cursor, rd.maxBytes, rd.at)
      const got = [...r.events]
      if (r.gap !== wantGap) { t.fail(`gap ${r.gap} want ${wantGap}`); failed = true; break }
      if (r.gap) rd.gaps++
      let stops = 0
      while (r.more) {
        stops++
        r = ring.read(sessions[rd.session], r.cursor, rd.maxBytes, r.at)
        got.push(...r.events)
      }
      // Each read that stopped at maxBytes looked at the record it left: examined again next.
      const examined = ring.snapshot().scanned - n0
      const expected = all.filter((e) => e.session === rd.session && e.seq > from)
      const same = got.length === expected.length && got.every((e, k) => e.seq === expected[k].seq && e.payload.equals(expected[k].p))
      if (!same) { t.fail(`reader ${rd.session}/${rd.every} after ${rd.cursor}: got ${got.map((e) => e.seq)} want ${expected.map((e) => e.seq)}`); failed = true; break }
      if (examined > fresh + stops) { t.fail(`reads examined ${examined}, only ${fresh} new (${stops} stops)`); failed = true; break }
      rd.seen.push(...got.map((e) => e.seq))
      rd.cursor = r.cursor
      rd.at = r.at
      rd.checks++
    }
  }
  for (const rd of readers) {
    t.ok(rd.checks > 100, `reader ${rd.session}/${rd.every}: ${rd.checks} reads checked, ${rd.gaps} gaps`)
    t.ok(rd.seen.every((x, i) => i === 0 || x > rd.seen[i - 1]), 'never an id twice or out of order')
  }
  t.ok(readers[2].gaps > 0, 'the slow reader fell behind the oldest and was told')
})
