// The session event ring with 1,000 idle event readers, the old way beside the new:
//
//   walk-all   every reader sleeps on RH_NOTIFY (any append) and each read walks from the
//              ring's head (`changed()` + `read(session, cursor)`): what streamEvents did;
//   per-session  every reader sleeps on its session's change slot and resumes at its ring
//              offset (`sessionChanged()` + `read(session, cursor, max, at)`): what it does.
//
// The ring is full (8 MiB, about 28,000 records of ~300 bytes, the oldest evicted). A worker
// thread runs 1,000 reader loops on idle sessions and one on session A; the main thread
// appends events to A one at a time and waits for A's reader to have read each. Figures: the
// append (lock wait included), append -> A's reader has it (delivery, p50/p99), readers woken
// and records examined per append (the ring's own counters). Prints a table; exits 0
// whatever the figures (only a crash fails).
//
//   node native-bench/event-ring.bench.ts [--quick]     (also run by `npm run bench`)

import { availableParallelism, loadavg } from 'node:os'
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads'
import { EventRing, createRingBuffer, sessionSlot } from '../src/events/ring.ts'

const QUICK = process.argv.includes('--quick')
const RING_BYTES = 8 * 1024 * 1024
const IDLE = 1000
const APPENDS = QUICK ? 10 : 30
const A = [7, 7] as const
const FILLER = [5, 5] as const

type Mode = 'walk-all' | 'per-session'
interface ReaderJob { sab: SharedArrayBuffer; ack: SharedArrayBuffer; mode: Mode }

async function readerThread (job: ReaderJob): Promise<void> {
  const ring = new EventRing(job.sab, 1)
  const ack = new Int32Array(job.ack)
  const ac = new AbortController()
  const latencies: number[] = []
  const loop = async (session: readonly [number, number], own: boolean): Promise<void> => {
    let cursor = ring.nextSeq - 1
    let at = -1
    while (!ac.signal.aborted) {
      const perSession = job.mode === 'per-session'
      const token = perSession ? ring.sessionToken(session) : ring.changeToken
      const r = perSession ? ring.read(session, cursor, undefined, at) : ring.read(session, cursor)
      cursor = r.cursor
      at = r.at
      if (own) {
        for (const e of r.events) {
          latencies.push(Number(process.hrtime.bigint() - e.payload.readBigUInt64LE(0)) / 1000)
          Atomics.add(ack, 0, 1)
          Atomics.notify(ack, 0)
        }
      }
      if (r.more) continue
      await (perSession ? ring.sessionChanged(session, token, 60_000, ac.signal) : ring.changed(token, 60_000, ac.signal))
    }
  }
  const idle: Array<readonly [number, number]> = []
  for (let i = 0; idle.length < IDLE; i++) if (sessionSlot([100 + i, i]) !== sessionSlot(A)) idle.push([100 + i, i])
  const loops = [...idle.map((s) => loop(s, false)), loop(A, true)]
  parentPort!.once('message', () => ac.abort())
  // Every loop has read once and is asleep: tell the main thread.
  await new Promise((resolve) => setImmediate(resolve))
  Atomics.store(ack, 1, 1)
  Atomics.notify(ack, 1)
  await Promise.all(loops)
  parentPort!.postMessage({ latencies })
}

if (!isMainThread) await readerThread(workerData as ReaderJob)

function pct (xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(p * s.length))]
}

interface Row { mode: Mode; records: number; appendP50: number; appendP99: number; deliverP50: number; deliverP99: number; woken: number; scanned: number }

async function run (mode: Mode): Promise<Row> {
  const sab = createRingBuffer(RING_BYTES)
  const ring = new EventRing(sab, 0)
  const filler = Buffer.alloc(300, 0x61)
  while (ring.snapshot().evicted === 0) ring.append(FILLER, filler)
  const records = ring.snapshot().records
  const ack = new Int32Array(new SharedArrayBuffer(8))
  const w = new Worker(new URL(import.meta.url), { workerData: { sab, ack: ack.buffer, mode } satisfies ReaderJob })
  const done = new Promise<{ latencies: number[] }>((resolve, reject) => { w.once('message', resolve); w.once('error', reject) })
  while (Atomics.load(ack, 1) === 0) Atomics.wait(ack, 1, 0, 100)
  const before = ring.snapshot()
  const appendUs: number[] = []
  const payload = Buffer.alloc(300, 0x62)
  for (let k = 1; k <= APPENDS; k++) {
    const t0 = process.hrtime.bigint()
    payload.writeBigUInt64LE(t0, 0)
    ring.append(A, payload)
    appendUs.push(Number(process.hrtime.bigint() - t0) / 1000)
    // Wait until A's reader has it (and the other readers have had their turn on that thread).
    while (Atomics.load(ack, 0) < k) Atomics.wait(ack, 0, Atomics.load(ack, 0), 1000)
    await new Promise((resolve) => setTimeout(resolve, 2))
  }
  const after = ring.snapshot()
  w.postMessage('stop')
  const { latencies } = await done
  await w.terminate()
  return {
    mode,
    records,
    appendP50: pct(appendUs, 0.5),
    appendP99: pct(appendUs, 0.99),
    deliverP50: pct(latencies, 0.5),
    deliverP99: pct(latencies, 0.99),
    woken: (after.woken - before.woken) / APPENDS,
    scanned: (after.scanned - before.scanned) / APPENDS,
  }
}

if (isMainThread) {
  const rows: Row[] = []
  for (const mode of ['walk-all', 'per-session'] as const) rows.push(await run(mode))
  const load = loadavg().map((x) => x.toFixed(2)).join(' ')
  console.log(`event ring: ${IDLE} idle readers + 1 on session A, a full ${RING_BYTES / 1024 / 1024} MiB ring, ${APPENDS} appends to A (Node ${process.versions.node}, ${availableParallelism()} CPUs, load average ${load})`)
  const f = (x: number): string => (x >= 100 ? x.toFixed(0) : x.toFixed(1)).padStart(10)
  console.log(`  ${'mode'.padEnd(12)} ${'records'.padStart(8)} ${'append p50'.padStart(10)} ${'p99 µs'.padStart(10)} ${'deliver p50'.padStart(11)} ${'p99 µs'.padStart(10)} ${'woken/app'.padStart(10)} ${'examined/app'.padStart(13)}`)
  for (const r of rows) {
    console.log(`  ${r.mode.padEnd(12)} ${String(r.records).padStart(8)} ${f(r.appendP50)} ${f(r.appendP99)} ${f(r.deliverP50).padStart(11)} ${f(r.deliverP99)} ${f(r.woken)} ${f(r.scanned).padStart(13)}`)
  }
}
