// Stress-test harness: seeded randomness, worker lives with exactly-once reclaim in the
// `exit` handler, and an independent observer in its own SharedArrayBuffer.
//
// The observer is deliberately not the ledger: every thread increments "believed holders"
// of a gate AFTER its acquire resolved and decrements it BEFORE calling release, so the
// believed count never exceeds the true number of holders; checking it against the gate's
// maximum at every step catches any over-admission, whatever the ledger's own counters say.
// Threads also publish their own tallies per row (permits held, bytes held), so the primary
// can compare what a killed thread believed it held with what reclaimRow returned.
//
// Each stress test file is also its own worker script (`isMainThread` picks the side); tap
// runs this file directly too, and then it checks its own helpers.

import { randomInt } from 'node:crypto'
import { isMainThread, parentPort, Worker, workerData, type ResourceLimits } from 'node:worker_threads'
import { attachLedger, type Ledger, type LedgerHandleInit, type Reclaimed } from '../../src/ledger/ledger.ts'

// ---- seeded randomness ----

/** The run's seed: SLUICE_STRESS_SEED if set, else random. Log it. */
export function pickSeed (): number {
  const env = process.env.SLUICE_STRESS_SEED
  if (env !== undefined && env !== '') return Number(env) >>> 0
  return randomInt(0, 2 ** 32 - 1)
}

/** mulberry32: small, fast, good enough to pick delays and operations. */
export function rng (seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let x = a
    x = Math.imul(x ^ (x >>> 15), x | 1)
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61)
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

/** A per-thread stream derived from the run seed. */
export function threadSeed (seed: number, row: number, life = 0): number {
  return (seed ^ Math.imul(row + 1, 0x9e3779b1) ^ Math.imul(life + 1, 0x85ebca6b)) >>> 0
}

export type Rand = () => number

/** A random pause: none, a microtask, a turn of the loop, a short spin, or 0-2 ms. */
export async function pause (rand: Rand): Promise<void> {
  const r = rand()
  if (r < 0.3) return
  if (r < 0.5) { await null; return }
  if (r < 0.75) { await new Promise((resolve) => setImmediate(resolve)); return }
  if (r < 0.9) {
    const end = performance.now() + rand() * 0.05
    while (performance.now() < end) { /* spin up to 50 µs */ }
    return
  }
  await new Promise((resolve) => setTimeout(resolve, Math.floor(rand() * 3)))
}

// ---- the observer ----

const O_BELIEVED = 0 // + gate: threads that believe they hold a permit of that gate
const O_MAX_SEEN = 2 // + gate
const O_VIOLATIONS = 4
const O_STOP = 5
const O_COUNTER = 6 // free-running sequence (e.g. grant order)
const O_ROWS = 8 // per row: [exchange held, parse held]
const O_ROW_FIELDS = 2
const O64_BYTES = 0 // believed reserved bytes
const O64_MAX_BYTES = 1
const O64_ROWS = 2 // per row: bytes held

export class Observer {
  readonly sab: SharedArrayBuffer
  private readonly i32: Int32Array
  private readonly i64: BigInt64Array
  private readonly rows: number
  /** Descriptions of the violations this thread saw (the count is shared). */
  readonly seen: string[] = []

  constructor (sabOrRows: SharedArrayBuffer | number) {
    const rows = typeof sabOrRows === 'number' ? sabOrRows : new Int32Array(sabOrRows, 0, 1)[0]
    const i32Bytes = 8 * Math.ceil(((O_ROWS + rows * O_ROW_FIELDS + 1) * 4) / 8)
    this.sab = typeof sabOrRows === 'number' ? new SharedArrayBuffer(i32Bytes + (O64_ROWS + rows) * 8) : sabOrRows
    this.rows = rows
    this.i32 = new Int32Array(this.sab, 4, O_ROWS + rows * O_ROW_FIELDS)
    if (typeof sabOrRows === 'number') new Int32Array(this.sab, 0, 1)[0] = rows
    this.i64 = new BigInt64Array(this.sab, i32Bytes, O64_ROWS + rows)
  }

  violation (what: string): void {
    Atomics.add(this.i32, O_VIOLATIONS, 1)
    if (this.seen.length < 20) this.seen.push(what)
  }

  /** After a grant of gate g to `row`: count it and check it against the gate's max. */
  granted (g: number, row: number, max: number): void {
    const n = Atomics.add(this.i32, O_BELIEVED + g, 1) + 1
    Atomics.add(this.i32, O_ROWS + row * O_ROW_FIELDS + g, 1)
    if (n > max) this.violation(`gate ${g}: ${n} believed holders > max ${max}`)
    for (let m = Atomics.load(this.i32, O_MAX_SEEN + g); n > m; m = Atomics.load(this.i32, O_MAX_SEEN + g)) {
      if (Atomics.compareExchange(this.i32, O_MAX_SEEN + g, m, n) === m) break
    }
  }

  /** Before a release of gate g by `row`. */
  releasing (g: number, row: number): void {
    const n = Atomics.sub(this.i32, O_BELIEVED + g, 1) - 1
    const mine = Atomics.sub(this.i32, O_ROWS + row * O_ROW_FIELDS + g, 1) - 1
    if (n < 0 || mine < 0) this.violation(`gate ${g}: release with no believed holder (total ${n}, row ${row} ${mine})`)
  }

  /** After a reservation of n bytes by `row`. */
  reserved (n: number, row: number, limit: number): void {
    const total = Atomics.add(this.i64, O64_BYTES, BigInt(n)) + BigInt(n)
    Atomics.add(this.i64, O64_ROWS + row, BigInt(n))
    if (total > BigInt(limit)) this.violation(`bytes: ${total} believed reserved > limit ${limit}`)
    for (let m = Atomics.load(this.i64, O64_MAX_BYTES); total > m; m = Atomics.load(this.i64, O64_MAX_BYTES)) {
      if (Atomics.compareExchange(this.i64, O64_MAX_BYTES, m, total) === m) break
    }
  }

  /** Before a release of n bytes by `row`. */
  releasingBytes (n: number, row: number): void {
    const total = Atomics.sub(this.i64, O64_BYTES, BigInt(n)) - BigInt(n)
    const mine = Atomics.sub(this.i64, O64_ROWS + row, BigInt(n)) - BigInt(n)
    if (total < 0n || mine < 0n) this.violation(`bytes: negative believed reservation (total ${total}, row ${row} ${mine})`)
  }

  /** A dead row's tally, removed from the believed totals before its holdings are reclaimed. */
  forgetRow (row: number): { exchange: number; parse: number; bytes: number } {
    const exchange = Atomics.exchange(this.i32, O_ROWS + row * O_ROW_FIELDS, 0)
    const parse = Atomics.exchange(this.i32, O_ROWS + row * O_ROW_FIELDS + 1, 0)
    const bytes = Atomics.exchange(this.i64, O64_ROWS + row, 0n)
    Atomics.sub(this.i32, O_BELIEVED, exchange)
    Atomics.sub(this.i32, O_BELIEVED + 1, parse)
    Atomics.sub(this.i64, O64_BYTES, bytes)
    return { exchange, parse, bytes: Number(bytes) }
  }

  rowTally (row: number): { exchange: number; parse: number; bytes: number } {
    return {
      exchange: Atomics.load(this.i32, O_ROWS + row * O_ROW_FIELDS),
      parse: Atomics.load(this.i32, O_ROWS + row * O_ROW_FIELDS + 1),
      bytes: Number(Atomics.load(this.i64, O64_ROWS + row)),
    }
  }

  get violations (): number { return Atomics.load(this.i32, O_VIOLATIONS) }
  maxSeen (g: number): number { return Atomics.load(this.i32, O_MAX_SEEN + g) }
  get maxBytesSeen (): number { return Number(Atomics.load(this.i64, O64_MAX_BYTES)) }
  believed (g: number): number { return Atomics.load(this.i32, O_BELIEVED + g) }
  get believedBytes (): number { return Number(Atomics.load(this.i64, O64_BYTES)) }
  get stopped (): boolean { return Atomics.load(this.i32, O_STOP) === 1 }
  stop (): void { Atomics.store(this.i32, O_STOP, 1) }
  /** Next value of the shared sequence (0, 1, 2, ...). */
  nextSeq (): number { return Atomics.add(this.i32, O_COUNTER, 1) }
  get rowCount (): number { return this.rows }
}

/** Checks the lock-free snapshot bounds a thread can check at any moment (G1, G2, B1, B2). */
export function checkBounds (ledger: Ledger, obs: Observer): void {
  const s = ledger.snapshot()
  for (const [name, g] of [['exchange', s.exchange], ['parse', s.parse]] as const) {
    if (g.active < 0 || g.active > g.max) obs.violation(`${name}.active ${g.active} outside [0, ${g.max}]`)
    if (g.queued < 0 || g.queued > g.queueMax) obs.violation(`${name}.queued ${g.queued} outside [0, ${g.queueMax}]`)
  }
  if (s.storage.reserved < 0 || s.storage.reserved > s.storage.limit) obs.violation(`storage.reserved ${s.storage.reserved} outside [0, ${s.storage.limit}]`)
  if (s.storage.peak > s.storage.limit) obs.violation(`storage.peak ${s.storage.peak} > limit`)
  const mine = s.rows[ledger.row]
  if (mine.bytes < 0 || mine.exchangeHeld < 0 || mine.parseHeld < 0) obs.violation(`row ${ledger.row} negative: ${JSON.stringify(mine)}`)
}

// ---- thread side ----

export interface ThreadData<D> { init: LedgerHandleInit; row: number; observer: SharedArrayBuffer; seed: number; data: D }

export interface ThreadContext<D> {
  ledger: Ledger
  row: number
  obs: Observer
  rand: Rand
  data: D
  post (msg: unknown): void
  /** Messages from the primary, in order. */
  next (): Promise<unknown>
  /** Reports the result and lets the thread end (the keep-alive is cleared). */
  done (result: unknown): void
}

/** In a worker: attach the ledger on the row we were given and keep the thread alive. */
export function threadContext<D> (): ThreadContext<D> {
  const wd = workerData as ThreadData<D>
  // A pending Atomics.waitAsync does not keep a worker alive: this does, until done().
  const keepAlive = setInterval(() => {}, 1 << 30)
  const inbox: unknown[] = []
  const readers: Array<(m: unknown) => void> = []
  parentPort!.on('message', (m: unknown) => {
    const r = readers.shift()
    if (r) r(m)
    else inbox.push(m)
  })
  return {
    ledger: attachLedger(wd.init, wd.row),
    row: wd.row,
    obs: new Observer(wd.observer),
    rand: rng(wd.seed),
    data: wd.data,
    post: (msg) => parentPort!.postMessage(msg),
    next: () => inbox.length > 0 ? Promise.resolve(inbox.shift()) : new Promise((resolve) => readers.push(resolve)),
    done (result) {
      parentPort!.postMessage({ type: 'done', result, violations: this.obs.seen })
      clearInterval(keepAlive)
      parentPort!.unref()
    },
  }
}

// ---- primary side ----

export interface LifeEnd {
  code: number
  error: string | null
  /** Tally the thread published when its exit was observed (before reclaim). */
  tally: { exchange: number; parse: number; bytes: number }
  reclaimed: Reclaimed
  /** A second reclaim of the same row, right after: must find nothing. */
  again: Reclaimed
  result: unknown
  violations: string[]
}

export interface Life {
  row: number
  worker: Worker
  /** Resolves when the thread has started running. */
  online: Promise<void>
  end: Promise<LifeEnd>
  /** The next message (other than the final 'done') from the thread. */
  next (): Promise<unknown>
  send (msg: unknown): void
}

export interface SpawnOptions {
  resourceLimits?: ResourceLimits
  seed: number
  life?: number
}

/**
 * Primary: assigns `row` and starts `url` on it. In the `exit` handler (the only place, as in
 * the supervisor) the thread's tally is removed from the observer and its row reclaimed, then
 * reclaimed a second time to prove the first was the only one that found anything.
 */
export function spawn<D> (ledger: Ledger, obs: Observer, url: URL, row: number, data: D, opts: SpawnOptions): Life {
  ledger.assignRow(row)
  const wd: ThreadData<D> = { init: ledger.init, row, observer: obs.sab, seed: threadSeed(opts.seed, row, opts.life), data }
  const worker = new Worker(url, { workerData: wd, execArgv: [], resourceLimits: opts.resourceLimits, stdout: false, stderr: false })
  ledger.setThreadId(row, worker.threadId)
  const inbox: unknown[] = []
  const readers: Array<(m: unknown) => void> = []
  let result: unknown
  let violations: string[] = []
  let error: string | null = null
  worker.on('message', (m: { type?: string; result?: unknown; violations?: string[] }) => {
    if (m && m.type === 'done') {
      result = m.result
      violations = m.violations ?? []
      return
    }
    const r = readers.shift()
    if (r) r(m)
    else inbox.push(m)
  })
  worker.on('error', (err: Error & { code?: string }) => { error = err.code ?? err.message })
  const end = new Promise<LifeEnd>((resolve) => {
    worker.once('exit', async (code) => {
      const tally = obs.forgetRow(row)
      const reclaimed = await ledger.reclaimRow(row)
      const again = await ledger.reclaimRow(row)
      for (const r of readers.splice(0)) r({ type: 'exited', code })
      resolve({ code, error, tally, reclaimed, again, result, violations })
    })
  })
  const online = new Promise<void>((resolve) => worker.once('online', () => resolve()))
  return {
    row,
    worker,
    online,
    end,
    next: () => inbox.length > 0 ? Promise.resolve(inbox.shift()) : new Promise((resolve) => readers.push(resolve)),
    send: (msg) => worker.postMessage(msg),
  }
}

/** A queue of messages read in order, each at most once. */
export class Mailbox {
  private readonly inbox: unknown[] = []
  private readonly readers: Array<(m: unknown) => void> = []

  push (m: unknown): void {
    const r = this.readers.shift()
    if (r) r(m)
    else this.inbox.push(m)
  }

  next (): Promise<unknown> {
    return this.inbox.length > 0 ? Promise.resolve(this.inbox.shift()) : new Promise((resolve) => this.readers.push(resolve))
  }

  get waiting (): number { return this.inbox.length }
}

/** Waits until `cond()` holds, checking on every turn of the event loop. */
export async function until (cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((resolve) => setImmediate(resolve))
}

// ---- self-test: tap runs this file directly ----

if (import.meta.main && isMainThread) {
  const { default: t } = await import('tap')
  const { createLedger } = await import('../../src/ledger/ledger.ts')

  t.test('rng is deterministic per seed and spread over [0, 1)', async (t) => {
    const a = rng(42)
    const b = rng(42)
    const xs = Array.from({ length: 1000 }, () => a())
    t.same(Array.from({ length: 1000 }, () => b()), xs)
    t.notSame(Array.from({ length: 10 }, rng(43)), xs.slice(0, 10))
    t.ok(xs.every((x) => x >= 0 && x < 1))
    const mean = xs.reduce((s, x) => s + x, 0) / xs.length
    t.ok(mean > 0.4 && mean < 0.6, `mean ${mean}`)
    t.not(threadSeed(1, 1), threadSeed(1, 2))
    t.not(threadSeed(1, 1, 0), threadSeed(1, 1, 1))
  })

  t.test('the observer flags over-admission, negative counts and over-reservation', async (t) => {
    const o = new Observer(3)
    o.granted(0, 1, 2)
    o.granted(0, 2, 2)
    t.equal(o.violations, 0)
    o.granted(0, 1, 2)
    t.equal(o.violations, 1)
    t.equal(o.maxSeen(0), 3)
    o.releasing(1, 1)
    t.equal(o.violations, 2, 'release of a gate nobody holds')
    o.reserved(60, 2, 100)
    o.reserved(40, 1, 100)
    t.equal(o.violations, 2)
    o.reserved(1, 1, 100)
    t.equal(o.violations, 3)
    o.releasingBytes(100, 2)
    t.equal(o.violations, 4, 'row 2 released more than it believed it held')
    t.same(o.forgetRow(1), { exchange: 2, parse: -1, bytes: 41 })
    t.equal(o.believed(0), 1)
    t.equal(o.seen.length, 4)
    const view = new Observer(o.sab)
    t.equal(view.rowCount, 3, 'another view on the same buffer')
    t.equal(view.violations, 4)
  })

  t.test('spawn reclaims a thread that exits holding a permit, exactly once', async (t) => {
    const ledger = createLedger({ maxActive: 1, maxQueued: 1, queueWaitMs: 1000, parsePermits: 1, parseQueue: 1, parseWaitMs: 1000, storageBytes: 100, threads: 1 })
    const obs = new Observer(2)
    const life = spawn(ledger, obs, new URL(import.meta.url), 1, 'hold-and-exit', { seed: 1 })
    t.same(await life.next(), { holding: true })
    t.equal(ledger.snapshot().exchange.active, 1)
    t.same(obs.rowTally(1), { exchange: 1, parse: 0, bytes: 30 })
    life.send('exit')
    const end = await life.end
    t.equal(end.code, 0)
    t.same(end.tally, { exchange: 1, parse: 0, bytes: 30 })
    t.same(end.reclaimed, { exchange: 1, parse: 0, bytes: 30, lanes: 0, lockStolen: false })
    t.same(end.again, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false })
    t.same(end.result, 'left holding')
    t.equal(obs.believed(0), 0, 'the dead row\'s tally is forgotten')
    t.equal(ledger.snapshot().exchange.active, 0)
    t.equal(ledger.snapshot().storage.reserved, 0)
  })
} else if (!isMainThread && (workerData as ThreadData<unknown>).data === 'hold-and-exit') {
  const ctx = threadContext<string>()
  t0(ctx)
}

function t0 (ctx: ThreadContext<string>): void {
  if (!ctx.ledger.exchange.tryAcquire()) throw new Error('no permit')
  ctx.obs.granted(0, ctx.row, 1)
  ctx.ledger.storage.reserve(30)
  ctx.obs.reserved(30, ctx.row, 100)
  ctx.post({ holding: true })
  void ctx.next().then(() => ctx.done('left holding'))
}
