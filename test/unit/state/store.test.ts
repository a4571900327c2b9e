// The conversation-state store (src/state/store.ts): parent-linked entries expanded root
// first, keys that never see each other's entries or blobs, the per-entry and per-blob caps
// refused at write time and tombstoned, oldest-first eviction under one hard cap with no
// escape hatch, a pinned blob that survives eviction, TTL expiry, honest errors for evicted,
// expired and unknown ids, linear growth in chain length, and a long random run checked
// against a reference model (every answer either the whole chain or an honest error, and the
// live entries always the newest suffix of the successful writes).

import t from 'tap'
import { ConversationStore, StoreRepair, checkStore, createStoreBuffer, type StoreOptions } from '../../../src/state/store.ts'

const KiB = 1024
const ROW = 1

function store (o: Partial<StoreOptions> = {}, now?: () => number): { s: ConversationStore; sab: SharedArrayBuffer } {
  const sab = createStoreBuffer({ bytes: 256 * KiB, rows: 4, entryBytes: 16 * KiB, blobBytes: 32 * KiB, blobTotalBytes: 128 * KiB, blobThreshold: 4 * KiB, ttlMs: 60_000, ...o })
  return { s: new ConversationStore(sab, ROW, now), sab }
}

const text = (p: Uint8Array[]): string[] => p.map((b) => Buffer.from(b).toString())
const bytes = (s: string): Uint8Array => Buffer.from(s)

t.test('a chain comes back whole, root first; each entry holds only its turn', async (t) => {
  const { s, sab } = store()
  t.same(s.put({ keyName: 'k', id: 'r1', parentId: null, payload: bytes('turn 1') }), { ok: true })
  t.same(s.put({ keyName: 'k', id: 'r2', parentId: 'r1', payload: bytes('turn 2') }), { ok: true })
  t.same(s.put({ keyName: 'k', id: 'r3', parentId: 'r2', payload: bytes('turn 3') }), { ok: true })
  const c = s.chain({ keyName: 'k', id: 'r3' })
  t.ok(c.ok)
  if (c.ok) { t.same(text(c.payloads), ['turn 1', 'turn 2', 'turn 3']); c.release() }
  const mid = s.chain({ keyName: 'k', id: 'r2' })
  t.ok(mid.ok && text(mid.payloads).join() === 'turn 1,turn 2', 'a chain from the middle stops at its own turn')
  if (mid.ok) mid.release()
  t.equal(s.snapshot().entries, 3)
  t.equal(s.snapshot().entryBytes, 18, 'bytes are the sum of the turns')
  t.same(checkStore(sab), [])
})

t.test('a key never reads another key\'s entry, nor its blob by hash', async (t) => {
  const { s, sab } = store()
  const img = Buffer.alloc(8 * KiB, 7)
  t.same(s.put({ keyName: 'alice', id: 'r1', parentId: null, payload: bytes('a'), blobs: [{ hash: 'img', bytes: img }] }), { ok: true })
  t.same(s.chain({ keyName: 'bob', id: 'r1' }), { ok: false, code: 'continuation_not_found', id: 'r1' })
  t.same(s.put({ keyName: 'bob', id: 'b1', parentId: null, payload: bytes('b'), blobs: [{ hash: 'img' }] }), { ok: false, reason: 'blob_missing' }, 'naming alice\'s blob by hash alone is refused')
  t.equal(s.blob('bob', 'img'), null)
  t.same(s.blob('alice', 'img'), img)
  t.same(s.chain({ keyName: 'bob', id: 'never' }), { ok: false, code: 'continuation_not_found', id: 'never' })
  t.same(checkStore(sab), [])
})

t.test('an entry over the per-entry cap, or a blob over the per-blob cap, is refused at once and tombstoned', async (t) => {
  const { s, sab } = store()
  t.same(s.put({ keyName: 'k', id: 'r1', parentId: null, payload: bytes('ok') }), { ok: true })
  t.same(s.put({ keyName: 'k', id: 'big', parentId: 'r1', payload: Buffer.alloc(s.entryCap + 1) }), { ok: false, reason: 'entry_too_large' })
  t.same(s.put({ keyName: 'k', id: 'bigblob', parentId: 'r1', payload: bytes('x'), blobs: [{ hash: 'h', bytes: Buffer.alloc(s.blobCap + 1) }] }), { ok: false, reason: 'entry_too_large' })
  t.same(s.chain({ keyName: 'k', id: 'big' }), { ok: false, code: 'continuation_expired', id: 'big', reason: 'not_continuable' })
  t.same(s.chain({ keyName: 'k', id: 'bigblob' }), { ok: false, code: 'continuation_expired', id: 'bigblob', reason: 'not_continuable' })
  const snap = s.snapshot()
  t.equal(snap.refusedTooLarge, 2)
  t.equal(snap.entries, 1, 'nothing of the refused entries is kept')
  t.equal(snap.blobBytes, 0)
  t.ok(s.put({ keyName: 'k', id: 'r2', parentId: 'r1', payload: Buffer.alloc(s.entryCap) }).ok, 'exactly the cap fits')
  t.same(checkStore(sab), [])
})

t.test('eviction goes oldest first until the new entry fits, whatever the count; evicted ids and chains over them are expired', async (t) => {
  const { s, sab } = store()
  const cap = s.snapshot().capacity
  const size = 15 * KiB
  let n = 0
  for (; n < 40; n++) t.ok(s.put({ keyName: 'k', id: `r${n}`, parentId: n === 0 ? null : `r${n - 1}`, payload: Buffer.alloc(size, n) }).ok)
  const snap = s.snapshot()
  t.ok(snap.used <= cap, `used ${snap.used} <= capacity ${cap}`)
  t.ok(snap.evictedCap > 0, 'some were evicted')
  t.equal(snap.entries + snap.evictedCap, 40)
  // The newest chain lost its root: not a shorter conversation, an honest error.
  t.same(s.chain({ keyName: 'k', id: 'r39' }), { ok: false, code: 'continuation_expired', id: 'r39', reason: 'evicted' })
  t.same(s.chain({ keyName: 'k', id: 'r0' }), { ok: false, code: 'continuation_expired', id: 'r0', reason: 'evicted' })
  // One entry as large as the cap allows still goes in, and the total stays under the cap.
  t.ok(s.put({ keyName: 'k', id: 'solo', parentId: null, payload: Buffer.alloc(s.entryCap) }).ok)
  t.ok(s.snapshot().used <= cap)
  const solo = s.chain({ keyName: 'k', id: 'solo' })
  t.ok(solo.ok)
  if (solo.ok) solo.release()
  t.equal(s.snapshot().tombstones, s.snapshot().evictedCap)
  t.same(checkStore(sab), [])
})

t.test('a blob pinned by an exchange survives eviction under pressure, and the next turn names it by hash', async (t) => {
  const { s, sab } = store()
  const img = Buffer.alloc(20 * KiB, 9)
  t.ok(s.put({ keyName: 'k', id: 'r1', parentId: null, payload: bytes('look at img'), blobs: [{ hash: 'img', bytes: img }] }).ok)
  const c = s.chain({ keyName: 'k', id: 'r1' })
  t.ok(c.ok)
  if (!c.ok) return
  t.same(c.blobs, ['img'])
  t.equal(s.snapshot().blobBytesPinned, img.length)
  t.equal(s.snapshot().pins, 1)
  // Pressure: other traffic fills the store many times over; r1 itself is evicted.
  for (let i = 0; i < 60; i++) t.ok(s.put({ keyName: 'k', id: `x${i}`, parentId: null, payload: Buffer.alloc(15 * KiB, i) }).ok)
  t.same(s.chain({ keyName: 'k', id: 'r1' }), { ok: false, code: 'continuation_expired', id: 'r1', reason: 'evicted' })
  t.ok(s.snapshot().moved > 0, 'the pinned blob was moved past, not evicted')
  t.same(s.blob('k', 'img'), img, 'the pinned blob is still whole')
  t.same(s.put({ keyName: 'k', id: 'r2', parentId: null, payload: bytes('again'), blobs: [{ hash: 'img' }] }), { ok: true }, 'named by hash alone')
  c.release()
  c.release() // a second release is a no-op
  t.equal(s.snapshot().pins, 0)
  t.equal(s.snapshot().blobBytesPinned, 0)
  const c2 = s.chain({ keyName: 'k', id: 'r2' })
  t.ok(c2.ok && c2.blobs[0] === 'img')
  if (c2.ok) c2.release()
  t.same(checkStore(sab), [])
})

t.test('only pinned bytes left: the write is refused (no_room), tombstoned, and nothing leaks', async (t) => {
  const { s, sab } = store({ blobTotalBytes: 64 * KiB })
  const held: Array<() => void> = []
  for (let i = 0; i < 3; i++) {
    t.ok(s.put({ keyName: 'k', id: `r${i}`, parentId: null, payload: bytes('p'), blobs: [{ hash: `b${i}`, bytes: Buffer.alloc(20 * KiB, i) }] }).ok)
    const c = s.chain({ keyName: 'k', id: `r${i}` })
    if (c.ok) held.push(c.release)
  }
  const before = s.snapshot()
  t.equal(before.blobBytesPinned, 60 * KiB)
  t.same(s.put({ keyName: 'k', id: 'r3', parentId: null, payload: bytes('p'), blobs: [{ hash: 'b3', bytes: Buffer.alloc(20 * KiB) }] }), { ok: false, reason: 'no_room' })
  t.same(s.chain({ keyName: 'k', id: 'r3' }), { ok: false, code: 'continuation_expired', id: 'r3', reason: 'not_continuable' })
  t.equal(s.snapshot().blobBytes, 60 * KiB, 'the refused blob is not kept, the pinned ones are')
  for (const r of held) r()
  t.equal(s.snapshot().pins, 0)
  t.ok(s.put({ keyName: 'k', id: 'r4', parentId: null, payload: bytes('p'), blobs: [{ hash: 'b4', bytes: Buffer.alloc(20 * KiB) }] }).ok, 'room once the pins are gone')
  t.same(checkStore(sab), [])
})

t.test('expiry: an entry older than the TTL is gone, tombstoned, and its chain answers expired', async (t) => {
  let now = 1_000_000
  const { s, sab } = store({ ttlMs: 1000 }, () => now)
  t.ok(s.put({ keyName: 'k', id: 'r1', parentId: null, payload: bytes('1') }).ok)
  now += 600
  t.ok(s.put({ keyName: 'k', id: 'r2', parentId: 'r1', payload: bytes('2'), blobs: [{ hash: 'b', bytes: Buffer.alloc(5 * KiB) }] }).ok)
  now += 600
  t.same(s.chain({ keyName: 'k', id: 'r2' }), { ok: false, code: 'continuation_expired', id: 'r2', reason: 'expired' }, 'the root expired')
  t.same(s.chain({ keyName: 'k', id: 'r1' }), { ok: false, code: 'continuation_expired', id: 'r1', reason: 'expired' })
  now += 600
  t.same(s.chain({ keyName: 'k', id: 'r2' }), { ok: false, code: 'continuation_expired', id: 'r2', reason: 'expired' })
  const snap = s.snapshot()
  t.equal(snap.evictedTtl, 2)
  t.equal(snap.entries, 0)
  t.equal(snap.blobBytes, 0, 'its blob went with the last entry naming it')
  t.same(checkStore(sab), [])
})

t.test('a chain of 200 turns: store bytes grow linearly (the sum of the turns), never quadratically', async (t) => {
  const { s, sab } = store({ bytes: 4 * 1024 * KiB, entryBytes: 64 * KiB })
  let sum = 0
  const at: number[] = []
  for (let n = 0; n < 200; n++) {
    const p = Buffer.alloc(100 + (n % 7) * 10, n)
    sum += p.length
    t.ok(s.put({ keyName: 'k', id: `r${n}`, parentId: n === 0 ? null : `r${n - 1}`, payload: p }).ok)
    const snap = s.snapshot()
    if (snap.entryBytes !== sum) t.fail(`entryBytes ${snap.entryBytes} after ${n + 1} turns, sum of payloads ${sum}`)
    at.push(snap.used)
  }
  t.equal(s.snapshot().entryBytes, sum, 'bytes(200) = the sum of the payloads')
  // Record bytes: payload (4-aligned) plus a fixed header per entry, nothing proportional to depth.
  const perEntry = (at[199] - at[99]) / 100
  const firstHalf = at[99] / 100
  t.ok(Math.abs(perEntry - firstHalf) < 16, `the last 100 turns cost what the first 100 did (${perEntry} vs ${firstHalf} bytes/turn)`)
  const c = s.chain({ keyName: 'k', id: 'r199' })
  t.ok(c.ok && c.payloads.length === 200 && c.payloads[0][0] === 0 && c.payloads[199][0] === 199, 'the whole chain, root first')
  if (c.ok) c.release()
  t.same(checkStore(sab), [])
})

t.test('a long random run against a reference model', async (t) => {
  let now = 0
  const { s, sab } = store({ bytes: 128 * KiB, entryBytes: 8 * KiB, blobBytes: 12 * KiB, blobTotalBytes: 48 * KiB, ttlMs: 5000, slots: 64, tombstones: 1024 }, () => now)
  let seed = 4242
  const rand = (n: number): number => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n }
  // The model: every successful put, in order, with its parent and payload.
  const puts: Array<{ id: string; key: string; parent: string | null; payload: Buffer; blobs: string[]; at: number }> = []
  const byId = new Map<string, number>()
  const blobBytes = new Map<string, Buffer>()
  const pinned: Array<{ release: () => void; key: string; blobs: string[] }> = []
  const modelChain = (key: string, id: string): { payloads: Buffer[]; oldest: number } => {
    const payloads: Buffer[] = []
    let oldest = Infinity
    let cur: string | null = id
    while (cur !== null) {
      const i: number = byId.get(key + '/' + cur)!
      payloads.unshift(puts[i].payload)
      oldest = Math.min(oldest, puts[i].at)
      cur = puts[i].parent
    }
    return { payloads, oldest }
  }
  let problems = 0
  let okChains = 0
  let honest = 0
  for (let step = 0; step < 3000 && problems === 0; step++) {
    now += rand(50) === 0 ? 2000 : rand(20)
    const op = rand(10)
    const key = rand(4) === 0 ? 'other' : 'main'
    if (op < 5) {
      const mine = puts.filter((p) => p.key === key)
      const parent = mine.length > 0 && rand(10) !== 0 ? mine[mine.length - 1 - rand(Math.min(5, mine.length))].id : null
      const id = `r${step}`
      const payload = Buffer.alloc(4 + rand(rand(10) === 0 ? 9 * KiB : 2 * KiB), step % 251)
      payload.writeUInt32LE(step, 0)
      const blobs: Array<{ hash: string; bytes?: Uint8Array }> = []
      if (rand(3) === 0) {
        const h = `b${rand(6)}`
        const b = Buffer.alloc(4 * KiB + rand(rand(8) === 0 ? 10 * KiB : 4 * KiB), h.charCodeAt(1))
        blobs.push({ hash: h, bytes: blobBytes.get(key + h) ?? b })
        blobBytes.set(key + h, blobBytes.get(key + h) ?? b)
      }
      const r = s.put({ keyName: key, id, parentId: parent, payload, blobs })
      if (r.ok) { byId.set(key + '/' + id, puts.length); puts.push({ id, key, parent, payload, blobs: blobs.map((b) => b.hash), at: now }) } else if (r.reason === 'entry_too_large') {
        if (payload.length <= s.entryCap && blobs.every((b) => (b.bytes?.byteLength ?? 0) <= s.blobCap)) { t.fail(`refused as too large at ${payload.length}`); problems++ }
      }
    } else if (op < 8 && puts.length > 0) {
      const p = puts[puts.length - 1 - rand(Math.min(rand(2) === 0 ? 10 : 300, puts.length))]
      const c = s.chain({ keyName: p.key, id: p.id })
      const want = modelChain(p.key, p.id)
      if (c.ok) {
        okChains++
        if (c.payloads.length !== want.payloads.length || c.payloads.some((b, i) => !Buffer.from(b).equals(want.payloads[i]))) { t.fail(`chain ${p.id}: not the whole chain`); problems++ }
        if (now - want.oldest >= 5000) { t.fail('an expired entry answered'); problems++ }
        for (const h of c.blobs) if (!Buffer.from(s.blob(p.key, h) ?? []).equals(blobBytes.get(p.key + h)!)) { t.fail(`blob ${h} torn`); problems++ }
        if (rand(3) === 0) pinned.push({ release: c.release, key: p.key, blobs: c.blobs }); else c.release()
      } else {
        honest++
        if (c.code !== 'continuation_expired' || c.id !== p.id) { t.fail(`chain ${p.id}: ${c.code}`); problems++ }
      }
      // A pinned blob is always readable.
      for (const q of pinned) for (const h of q.blobs) if (s.blob(q.key, h) === null) { t.fail(`pinned blob ${h} gone`); problems++ }
    } else if (pinned.length > 0) {
      pinned.splice(rand(pinned.length), 1)[0].release()
    }
    const snap = s.snapshot()
    if (snap.used > snap.capacity || snap.blobBytes > 48 * KiB) { t.fail(`over a cap: ${JSON.stringify(snap)}`); problems++ }
    if (step % 100 === 0) {
      const bad = checkStore(sab)
      if (bad.length > 0) { t.fail(`step ${step}: ${bad.join('; ')}`); problems++ }
      // Oldest first (by cap or by TTL): the live entries are the newest successful puts.
      let gone = -1
      for (let i = puts.length - 1; i >= 0; i--) {
        const live = s.has(puts[i].key, puts[i].id)
        if (!live && gone < 0) gone = i
        if (live && gone >= 0) { t.fail(`step ${step}: ${puts[i].id} lives though the newer ${puts[gone].id} is gone`); problems++; break }
      }
    }
  }
  for (const q of pinned) q.release()
  t.equal(problems, 0)
  t.ok(okChains > 100, `${okChains} whole chains answered`)
  t.ok(honest > 10, `${honest} honest continuation_expired answers`)
  const snap = s.snapshot()
  t.equal(snap.pins, 0, 'pins back at 0')
  t.equal(snap.blobBytesPinned, 0)
  t.ok(snap.evictedCap > 0 && snap.evictedTtl > 0 && snap.moved > 0, `evicted by cap ${snap.evictedCap}, by ttl ${snap.evictedTtl}, moved ${snap.moved}`)
  t.same(checkStore(sab), [])
})

t.test('repair: a holder that died mid-write leaves nothing torn; the primary rebuilds and returns its pins once', async (t) => {
  const { s, sab } = store()
  t.ok(s.put({ keyName: 'k', id: 'r1', parentId: null, payload: bytes('one'), blobs: [{ hash: 'img', bytes: Buffer.alloc(6 * KiB, 1) }] }).ok)
  const other = new ConversationStore(sab, 2)
  const c = other.chain({ keyName: 'k', id: 'r1' })
  t.ok(c.ok)
  // Row 2 "dies" inside the lock halfway through a write: bytes past the tail and a figure
  // changed, nothing committed.
  const h = new Int32Array(sab, 0, 42)
  t.equal(Atomics.compareExchange(h, 1, 0, 3), 0)
  h[13] += 5 // H_ENTRIES, as a half-done put would have left it
  const repair = new StoreRepair(sab, 0)
  t.equal(repair.reclaimRow(2, () => false), 'busy', 'a live holder is waited for, never stolen')
  const r = repair.reclaimRow(2, (tok) => tok === 3)
  t.same(r, { pins: 1, rebuilt: true })
  t.same(checkStore(sab), [])
  t.same(repair.reclaimRow(2, () => true), { pins: 0, rebuilt: false }, 'a second reclaim finds nothing')
  const again = s.chain({ keyName: 'k', id: 'r1' })
  t.ok(again.ok && text(again.payloads)[0] === 'one', 'the data survived')
  if (again.ok) again.release()
  if (c.ok) c.release() // the dead row's late release finds its pins gone: a no-op
  t.equal(s.snapshot().pins, 0)
  t.equal(s.snapshot().repairs, 1)
  t.same(checkStore(sab), [])
})
