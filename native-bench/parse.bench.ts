// Bounded JSON against the naive baseline, side by side in one run:
//
//   (a) throughput, MB/s, on request bodies built from the recorded Codex CLI requests
//       (fixtures: their `input` items repeated) of ~200 KB and ~8 MiB, plus an adversarial
//       8 MiB body of small objects (the most values per byte): checkJson alone, the naive
//       JSON.parse(body.toString()), and the whole prepare() in this thread;
//   (b) latency of one 200 KB request, µs p50/p99: ParserPool.prepare() (transfer to a warm
//       pool thread, checkJson + parse + shape, transfer back) against JSON.parse in this
//       thread. Sequential calls: the ledger's parse gate allows one parse at a time by default.
//
// checkJson runs on every request body before JSON.parse, so its price is the figure to
// watch: it should be a small fraction of the parse it guards. Prints a table; exits 0
// whatever the figures (only a crash fails).
//
//   node native-bench/parse.bench.ts [--quick]     (also run by `npm run bench`)

import { readFileSync, readdirSync } from 'node:fs'
import { availableParallelism, loadavg } from 'node:os'
import { checkJson } from '../src/json/bounded.ts'
import { prepare, type PrepareTask } from '../src/json/prepare.ts'
import { ParserPool } from '../src/json/pool.ts'

const QUICK = process.argv.includes('--quick')
const ROUNDS = QUICK ? 3 : 7
const ROUND_MS = QUICK ? 150 : 400
const LATENCY_CALLS = QUICK ? 300 : 2000
const LIMITS = { maxDepth: 128, maxNodes: 1_000_000 }
const started = Date.now()

// ---- bodies ----

const dir = new URL('../../shared/fixtures/clients/', import.meta.url)
const codex = readdirSync(dir).filter((f) => f.startsWith('codex-') && f.includes('-POST-'))
  .map((f) => (JSON.parse(readFileSync(new URL(f, dir), 'utf8')) as { body: Record<string, unknown> & { input: unknown[] } }).body)
const items = codex.flatMap((b) => b.input)

/** A Codex request whose `input` repeats the recorded items until the body reaches `bytes`. */
function codexBody (bytes: number): Uint8Array {
  const input: unknown[] = []
  let size = JSON.stringify(codex[0]).length
  for (let i = 0; size < bytes; i++) {
    const item = items[i % items.length]
    input.push(item)
    size += JSON.stringify(item).length + 1
  }
  return new TextEncoder().encode(JSON.stringify({ ...codex[0], input }))
}

function smallObjects (bytes: number): Uint8Array {
  const one = '{"type":"x","id":1,"ok":true,"v":[1,2]}'
  const n = Math.floor(bytes / (one.length + 1))
  return new TextEncoder().encode('{"model":"m","input":[' + new Array(n).fill(one).join(',') + ']}')
}

const bodies = [
  { name: 'codex 200 KB', bytes: codexBody(200 * 1024) },
  { name: 'codex 8 MiB', bytes: codexBody(8 * 1024 * 1024) },
  { name: 'small objects 8 MiB', bytes: smallObjects(8 * 1024 * 1024) },
]

// ---- (a) throughput ----

const naiveParse = (b: Uint8Array) => JSON.parse(Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('utf8')) as unknown
const task = (body: Uint8Array): PrepareTask => ({ body, route: 'responses', limits: { ...LIMITS, maxNodes: 10_000_000 }, aliases: {} })

/** MB/s of `fn` over `b`: median and best of ROUNDS rounds of ROUND_MS each. */
function throughput (b: Uint8Array, fn: (b: Uint8Array) => unknown): { median: number; best: number } {
  fn(b) // warm
  const rates: number[] = []
  for (let r = 0; r < ROUNDS; r++) {
    let calls = 0
    const t0 = performance.now()
    let t1 = t0
    while (t1 - t0 < ROUND_MS) { fn(b); calls++; t1 = performance.now() }
    rates.push(b.byteLength * calls / ((t1 - t0) / 1000) / 1e6)
  }
  rates.sort((x, y) => x - y)
  return { median: rates[Math.floor(rates.length / 2)], best: rates[rates.length - 1] }
}

const throughputRows: string[][] = [['body', 'bytes', 'values', 'checkJson MB/s', 'JSON.parse MB/s', 'prepare() MB/s', 'check / parse time']]
for (const { name, bytes } of bodies) {
  const shape = checkJson(bytes, { maxDepth: 128, maxNodes: 10_000_000 })
  const check = throughput(bytes, (b) => checkJson(b, { maxDepth: 128, maxNodes: 10_000_000 }))
  const parse = throughput(bytes, naiveParse)
  const prep = throughput(bytes, (b) => prepare(task(b)))
  throughputRows.push([name, String(bytes.byteLength), String(shape.nodes),
    `${check.median.toFixed(0)} (${check.best.toFixed(0)})`, `${parse.median.toFixed(0)} (${parse.best.toFixed(0)})`,
    `${prep.median.toFixed(0)} (${prep.best.toFixed(0)})`, `${(100 * parse.median / check.median).toFixed(1)} %`])
}

// ---- (b) latency of one 200 KB request ----

function percentiles (us: number[]): { p50: number; p99: number; max: number } {
  us.sort((x, y) => x - y)
  return { p50: us[Math.floor(us.length * 0.5)], p99: us[Math.floor(us.length * 0.99)], max: us[us.length - 1] }
}

const body200 = bodies[0].bytes
const pool = new ParserPool({ threads: 1, heapMb: 256, youngGenMb: 16 })
const latencyRows: string[][] = [['path (200 KB body, sequential)', 'p50 µs', 'p99 µs', 'max µs']]
try {
  for (let i = 0; i < 50; i++) await pool.prepare(task(body200.slice())) // warm the thread and its JIT

  const inThread: number[] = []
  for (let i = 0; i < LATENCY_CALLS; i++) {
    const t0 = performance.now()
    const v = naiveParse(body200) as { model?: unknown }
    if (typeof v.model !== 'string') throw new Error('bench body lost its model')
    inThread.push((performance.now() - t0) * 1000)
  }
  const prepInThread: number[] = []
  for (let i = 0; i < LATENCY_CALLS; i++) {
    const t0 = performance.now()
    if (!prepare(task(body200)).ok) throw new Error('bench body refused')
    prepInThread.push((performance.now() - t0) * 1000)
  }
  const viaPool: number[] = []
  const aliased: number[] = []
  for (let i = 0; i < LATENCY_CALLS; i++) {
    const copy = body200.slice() // each call gives its buffer away; copy outside the timing
    const t0 = performance.now()
    const r = await pool.prepare(task(copy))
    viaPool.push((performance.now() - t0) * 1000)
    if (!r.ok) throw new Error('bench body refused in the pool')
  }
  for (let i = 0; i < LATENCY_CALLS; i++) {
    const copy = body200.slice()
    const t0 = performance.now()
    const r = await pool.prepare({ ...task(copy), aliases: { 'gpt-5.5': 'provider-model' } })
    aliased.push((performance.now() - t0) * 1000)
    if (!r.ok || !r.rewritten) throw new Error('bench alias not applied')
  }
  for (const [name, xs] of [
    ['JSON.parse(body.toString()) in this thread (naive)', inThread],
    ['prepare() in this thread (no isolation)', prepInThread],
    ['ParserPool.prepare() (transfer, warm thread)', viaPool],
    ['ParserPool.prepare() with an alias rewrite', aliased],
  ] as const) {
    const p = percentiles([...xs])
    latencyRows.push([name, p.p50.toFixed(0), p.p99.toFixed(0), p.max.toFixed(0)])
  }
} finally {
  await pool.close()
}

// ---- report ----

function table (rows: string[][]): void {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)))
  for (const r of rows) console.log('  ' + r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  '))
}
const load = loadavg().map((x) => x.toFixed(2)).join(' ')
console.log(`parse: throughput, MB/s median (best) of ${ROUNDS} rounds (Node ${process.versions.node}, ${process.platform}/${process.arch}, ${availableParallelism()} CPUs, load average ${load})`)
table(throughputRows)
console.log('  JSON.parse = JSON.parse(buffer.toString()); prepare() = checkJson + fatal UTF-8 decode + JSON.parse + shape; "check / parse time" = checkJson\'s cost as a share of JSON.parse\'s')
console.log(`parse: latency of one request, ${LATENCY_CALLS} calls each`)
table(latencyRows)
console.log(`  (bench took ${((Date.now() - started) / 1000).toFixed(1)} s)`)
