// The conversation store across real worker threads: several threads write chains (with
// blobs they pin, read and name by hash in the next turn) and read each other's chains while
// the store evicts under pressure; one thread is terminated mid-run (possibly inside the
// store's lock). After the primary's reclaim: no torn payload, every chain either whole or an
// honest continuation_expired, every derived figure consistent with the records, pins at 0.

import t from 'tap'
import { Worker } from 'node:worker_threads'
import { ConversationStore, StoreRepair, checkStore, createStoreBuffer } from '../../../src/state/store.ts'
import { createHash } from 'node:crypto'

const KiB = 1024
const THREADS = 3
const VICTIM = 2

// A payload carries its id, its parent and a digest of itself: a torn or mixed-up payload fails.
const script = new URL('data:text/javascript,' + encodeURIComponent(`
  import { workerData, parentPort } from 'node:worker_threads'
  import { createHash } from 'node:crypto'
  const { ConversationStore } = await import(workerData.storeUrl)
  const { sab, row, thread, latest, iterations } = workerData
  const store = new ConversationStore(sab, row)
  const head = new Int32Array(latest)
  let seed = 7 + thread
  const rand = (n) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n }
  const payload = (id, parent, size) => {
    const body = Buffer.alloc(size, id.length)
    const text = JSON.stringify({ id, parent })
    const out = Buffer.concat([Buffer.from(text + '\\n'), body])
    return Buffer.concat([out, createHash('sha256').update(out).digest()])
  }
  const check = (p) => {
    const b = Buffer.from(p)
    const body = b.subarray(0, b.length - 32)
    if (!createHash('sha256').update(body).digest().equals(b.subarray(b.length - 32))) return null
    return JSON.parse(body.subarray(0, body.indexOf(10)).toString())
  }
  const blobOf = (hash) => createHash('sha512').update(hash).digest().toString('hex').repeat(200)
  let bad = 0, whole = 0, honest = 0, puts = 0, refused = 0
  let chainNo = 0, turn = 0, parent = null
  for (let i = 0; i < iterations; i++) {
    if (turn === 0 || rand(12) === 0) { chainNo++; turn = 0; parent = null }
    const id = 't' + thread + '-c' + chainNo + '-n' + turn
    const img = 'img-' + thread + '-' + chainNo
    let pinned = null
    if (parent !== null) {
      const c = store.chain({ keyName: 'k', id: parent })
      if (c.ok) {
        whole++
        const metas = c.payloads.map(check)
        if (metas.some((m) => m === null) || metas[metas.length - 1].id !== parent || metas.some((m, j) => j > 0 && m.parent !== metas[j - 1].id) || metas[0].parent !== null) bad++
        for (const h of c.blobs) { const b = store.blob('k', h); if (b === null || Buffer.from(b).toString() !== blobOf(h)) bad++ }
        pinned = c
      } else if (c.code === 'continuation_expired') { honest++; chainNo++; turn = 0; parent = null } else bad++
    }
    const id2 = 't' + thread + '-c' + chainNo + '-n' + turn
    const blobs = turn === 0 || !pinned ? [{ hash: img, bytes: Buffer.from(blobOf(img)) }] : [{ hash: img }]
    const r = store.put({ keyName: 'k', id: id2, parentId: parent, payload: payload(id2, parent, 200 + rand(6000)), blobs })
    if (r.ok) { puts++; parent = id2; turn++; Atomics.store(head, thread * 2, chainNo); Atomics.store(head, thread * 2 + 1, turn) } else { refused++; turn = 0; parent = null }
    pinned?.release()
    // Read another thread's newest chain: what one worker wrote, any worker reads.
    const other = (thread + 1 + rand(${THREADS - 1})) % ${THREADS}
    const oc = Atomics.load(head, other * 2), ot = Atomics.load(head, other * 2 + 1)
    if (ot > 0) {
      const c = store.chain({ keyName: 'k', id: 't' + other + '-c' + oc + '-n' + (ot - 1) })
      if (c.ok) { whole++; if (c.payloads.some((p) => check(p) === null)) bad++; c.release() } else if (c.code === 'continuation_expired') honest++; else if (c.code !== 'continuation_not_found') bad++
    }
    if (i % 50 === 0) parentPort.postMessage({ progress: i })
  }
  parentPort.postMessage({ done: true, bad, whole, honest, puts, refused })
`))

t.test('threads share chains under eviction; one killed mid-run; invariants hold after reclaim', async (t) => {
  const sab = createStoreBuffer({ bytes: 1024 * KiB, rows: THREADS + 1, entryBytes: 16 * KiB, blobBytes: 64 * KiB, blobTotalBytes: 400 * KiB, blobThreshold: 4 * KiB, ttlMs: 3_600_000 })
  const latest = new SharedArrayBuffer(THREADS * 2 * 4)
  const storeUrl = new URL('../../../src/state/store.ts', import.meta.url).href
  const repair = new StoreRepair(sab, 0)
  const dead = new Set<number>()
  const results: Array<{ bad: number; whole: number; honest: number; puts: number; refused: number }> = []
  await Promise.all(Array.from({ length: THREADS }, (_, thread) => new Promise<void>((resolve, reject) => {
    const row = thread + 1
    const w = new Worker(script, { workerData: { sab, row, thread, latest, iterations: thread === VICTIM ? 100_000 : 1500, storeUrl } })
    w.on('message', (m: { progress?: number; done?: boolean }) => {
      // The victim dies at some instruction once it is well into its run.
      if (thread === VICTIM && m.progress === 300) void w.terminate()
      if (m.done) results.push(m as typeof results[number])
    })
    w.once('error', reject)
    w.once('exit', () => {
      if (thread !== VICTIM) { resolve(); return }
      dead.add(row)
      // The primary's reclaim: retried while a live thread holds the lock, never parked.
      const again = (): void => {
        const r = repair.reclaimRow(row, (token) => dead.has(token - 1))
        if (r === 'busy') { setImmediate(again); return }
        t.comment(`victim reclaimed: ${JSON.stringify(r)}`)
        resolve()
      }
      again()
    })
  })))
  t.equal(results.length, THREADS - 1, 'the survivors finished')
  for (const r of results) {
    t.equal(r.bad, 0, `no torn payload, no truncated chain, no wrong code (${JSON.stringify(r)})`)
    t.ok(r.whole > 100, 'whole chains were read')
  }
  t.ok(results.some((r) => r.honest > 0), 'eviction made some chains honestly expired')
  t.same(checkStore(sab), [], 'every derived figure agrees with the records')
  const snap = repair.snapshot()
  t.equal(snap.pins, 0, 'pins back at 0')
  t.equal(snap.blobBytesPinned, 0)
  t.ok(snap.evictedCap > 0 && snap.used <= snap.capacity, `evicted ${snap.evictedCap}, used ${snap.used} of ${snap.capacity}`)
  // Every chain still stored reads whole from yet another thread's view (the main thread).
  const s = new ConversationStore(sab, THREADS)
  const codes: Record<string, number> = {}
  let whole = 0
  for (let th = 0; th < THREADS; th++) {
    const last = new Int32Array(latest)[th * 2]
    for (let c = Math.max(1, last - 100); c <= last; c++) {
      for (let n = 0; n < 30; n++) {
        const r = s.chain({ keyName: 'k', id: `t${th}-c${c}-n${n}` })
        if (!r.ok) { codes[r.code] = (codes[r.code] ?? 0) + 1; if (r.code === "continuation_expired" || r.code === "continuation_not_found") continue; t.fail(r.code) }
        else {
          whole++
          for (const p of r.payloads) {
            const b = Buffer.from(p)
            if (!createHash('sha256').update(b.subarray(0, b.length - 32)).digest().equals(b.subarray(b.length - 32))) t.fail('torn payload')
          }
          r.release()
        }
      }
    }
  }
  t.ok(whole > 0, `${whole} stored chains read whole (${JSON.stringify(codes)}, ${JSON.stringify(repair.snapshot())})`)
  t.equal(repair.snapshot().pins, 0)
  t.same(checkStore(sab), [])
})
