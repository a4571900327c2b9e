// The exchange benchmark: what sluice adds to a streaming exchange, side by side in one run
// with the same upstream reached (a) directly, (b) through a bare Node 24 + undici
// pass-through (native-bench/exchange-passthrough.ts, "the price of a bare pass-through") and
// (c) through sluice (`sluice serve`, one HTTP worker); and in the staggered blocks (d) through
// nginx, when installed (startNginx: the floor, a proxy with no GC on the same core). DESIGN.md
// "Performance targets".
//
//   node native-bench/exchange.bench.ts [--quick] [--sources] [--cpu-prof-dir DIR]
// (also run by `npm run bench`). sluice runs as production runs it: the compiled
// dist/bin/sluice.js with the launchers' Node flags (src/node-flags.ts), built afresh first (scripts/build.ts, what `npm ci` runs); --sources
// runs bin/sluice.ts instead (type stripping in every thread). The run ends with the table of
// issue 15 (pass-through beside sluice, targets beside them). Prints one table; exits 0 unless it crashed — a missed
// target is reported, never a failure. --cpu-prof-dir runs the main sluice instance under
// `node --cpu-prof` and leaves its profiles (primary and worker threads) in DIR.
//
// Processes: the upstream is the simulated provider in its own process
// (native-bench/exchange-sim.ts: the same startSim `sluice sim` runs, which also reports when
// it saw each tagged exchange end, for the cancel figure). sluice and the pass-through each
// run under their own 1-vCPU quota (cgroup v2 cpu.max, else cgroup v1 CFS quota, else
// `taskset -c 0`; the report says which held) and on core 0; the load generator (an undici
// Agent in this process, every thread) and the sim run outside the quotas, on core 1 (issue
// 15's method; PLACEMENT: without two CPUs and taskset nothing is pinned, and the report says so).
//
// Figures:
//   1. added TTFB and total time, p50 / p99, at 1, 32 and 96 concurrent Chat streams
//      (`#sim ttft=20 tokens=50 interval=10`), in rounds of N streams started together, the
//      three paths interleaved round by round. "Added" = the path's percentile minus the
//      direct percentile at the same concurrency. The 96 case runs against a sluice with
//      limits.maxActiveExchanges=128 and upstream.connections=128 (defaults 32 and 64: with
//      them 64 of the 96 streams wait by design); the CPU share of each path's process while
//      it relays the 96-stream rounds (CPU time / wall time of those rounds, with the per-round
//      sluice / pass-through ratios beside); the default-limits 96 case is reported
//      separately, from a second sluice with the default configuration. The 32 and 96 cases
//      are also run staggered: N lanes started 500/N ms apart, streams back to back in each,
//      so about N are in flight but they arrive one by one rather than in one burst (a burst
//      of N arrivals on one event loop waits behind N times the per-exchange CPU); in
//      STAG_BLOCKS blocks, the paths interleaved (rotated by one a block; see interleaved()),
//      right after the bursts. The staggered rows are the ones the +1 / +4 ms target is for
//      (BURST_NOTE). Once more, one block at 96 on each path, after the idle RSS reads: the
//      first exchanges after a quiet period, when sluice's worker has just collected its heap.
//   2. throughput: streams of 2000 events back to back (`tokens=2000 interval=0`), some in
//      sequence and some 8 in parallel: events/s at the client, and the gateway's CPU
//      (each thread's run time from /proc/<pid>/task/*/schedstat, in ns) per 1000 relayed events; and the
//      gateway's CPU per exchange (one-delta streams in sequence), the fixed cost. Both in
//      TP_BLOCKS blocks, the paths interleaved (no path twice in a row), so a slow spell of the
//      machine falls on both paths; the table adds the per-block sluice / pass-through ratios (median, range).
//   3. memory: VmRSS idle (before any exchange, again 2 s and IDLE_READ_MS after the latency runs, and at
//      the end, END_READ_MS after the last exchange, when the on-demand parser thread has retired),
//      the peak (sampled every 50 ms) in the 96-stream run and in the throughput run, and the
//      peak over every run (VmHWM); per active stream = (peak - idle) / 96.
//   4. caller cancel: N streams aborted mid-stream by the client, one every 20 ms; the time
//      until the sim saw each exchange end (CLOCK_MONOTONIC in both processes), and whether
//      every one ended as 'client-closed'.
//   5. start to healthy: exec -> first /readyz 200 (every worker listening; the admin port is
//      chosen free beforehand so it can be polled from the spawn), under the 1-vCPU quota,
//      several spawns; and exec -> first /healthz 200, exec -> "sluice ready".

import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { randomBytes, createHash } from 'node:crypto'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { get } from 'node:http'
import { connect, createServer, type AddressInfo } from 'node:net'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Agent, type Dispatcher } from 'undici'
import { limitsSchema } from '../src/config/schema.ts'
import { NODE_FLAGS } from '../src/node-flags.ts'
import { alive, cpuMsSince, launchChild, machine, makeQuota, rssMb, RssSampler, stopChild, tasksetQuota, threadCpuNs, type Child, type Quota } from './exchange-os.ts'

const args = process.argv.slice(2)
const QUICK = args.includes('--quick')
const SOURCES = args.includes('--sources')
const profIdx = args.indexOf('--cpu-prof-dir')
const PROFILE_DIR = profIdx >= 0 ? args[profIdx + 1] : undefined

const HERE = fileURLToPath(new URL('.', import.meta.url))
const BIN = fileURLToPath(new URL(SOURCES ? '../bin/sluice.ts' : '../dist/bin/sluice.js', import.meta.url))
const BUILD = fileURLToPath(new URL('../scripts/build.ts', import.meta.url))
/** The other kind of entry, measured beside (idle RSS and start) for the .ts/.js comparison. */
const OTHER_BIN = fileURLToPath(new URL(SOURCES ? '../dist/bin/sluice.js' : '../bin/sluice.ts', import.meta.url))
const NODE = process.execPath
const KEY = 'sk-bench-exchange-' + randomBytes(8).toString('hex')
const STARTED = performance.now()

const C1_ROUNDS = QUICK ? 5 : 12
const C_ROUNDS = QUICK ? 3 : 8
/** More at 96: the CPU share row is read from these rounds (one round of each path is ~0.6 s). */
const C96_ROUNDS = QUICK ? 3 : 16
const CONCURRENCY = [1, 32, 96] as const
/** The throughput and per-exchange runs in this many blocks, the paths interleaved (the counts below are multiples of it). */
const TP_BLOCKS = QUICK ? 2 : 4
const TP_SEQ = QUICK ? 16 : 40
const TP_PAR = 8
const TP_PAR_ROUNDS = QUICK ? 4 : 12
/** The staggered latency runs in this many blocks, the paths interleaved. */
const STAG_BLOCKS = 3
const CANCEL_N = QUICK ? 10 : 20
const LANE_STREAMS = QUICK ? 3 : 5 // staggered case: streams per lane, back to back (the first is not counted)
const PER_EXCHANGE_N = QUICK ? 150 : 400
const START_SPAWNS = QUICK ? 2 : 3 // of the default-config sluice; the main instance adds one

const body = (directive: string): Buffer => Buffer.from(JSON.stringify({
  model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: `exchange bench\n#sim ${directive}` }],
}))
const LATENCY_BODY = body('ttft=20 tokens=50 interval=10')
const THROUGHPUT_BODY = body('tokens=2000 interval=0')
const CANCEL_BODY = body('tokens=1000 interval=10')
const TINY_BODY = body('tokens=1')

/** limits.parserIdleMs's default, which the main instance runs with (its parser thread retires after it). */
const PARSER_IDLE_MS = limitsSchema.parse({}).parserIdleMs
/** limits.workerIdleCollectMs's default: the HTTP worker collects its heap once quiet this long. */
const IDLE_COLLECT_MS = limitsSchema.parse({}).workerIdleCollectMs
/** When the idle RSS is read after the latency runs: the quiet period, up to one 5 s window of
 *  the collector, and the malloc trim after it. */
const IDLE_READ_MS = IDLE_COLLECT_MS + 8_000
/** The last idle read: the parser thread has retired and the worker has collected. */
const END_READ_MS = Math.max(PARSER_IDLE_MS, IDLE_COLLECT_MS) + 8_000
/**
 * The malloc setting every production launcher of sluice sets (`npm start`, the systemd units,
 * the container: one glibc arena, not one per thread), given to the pass-through too, so the
 * two run on the same allocator settings. Unless this process already has one.
 */
const MALLOC_ENV: NodeJS.ProcessEnv = { MALLOC_ARENA_MAX: process.env.MALLOC_ARENA_MAX ?? '1' }

/**
 * Why the burst rows have no target. DESIGN.md's +1 / +4 ms is for N streams in flight (its
 * reference pass-through: +0.86 / +1.9 ms at 32, +0.70 / +3.7 at 96; the issue's: +0.33 / +1.41
 * and +0.34 / +2.08), what the staggered rows measure. N requests that arrive in the same
 * millisecond on one vCPU are taken one after the other, so the last waits behind N - 1 ways in
 * of whatever process serves them: at the bare pass-through's ~0.1 ms each, 96 of them are ~10
 * ms, and it misses +1 / +4 in every run (docs/benchmarks.md). They are reported beside the
 * pass-through, its difference being sluice's extra way in times the burst's size.
 */
const BURST_NOTE = 'burst rows: no target is reachable there by any process, the bare pass-through included (N arrivals in one ms wait behind N ways in on one vCPU); DESIGN.md\'s +1 / +4 ms is for N streams in flight, the staggered rows'

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
function within<T> (p: Promise<T>, ms: number): Promise<T | null> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(null), ms)
    p.then((v) => { clearTimeout(timer); resolve(v) }, () => { clearTimeout(timer); resolve(null) })
  })
}

// ---------------------------------------------------------------------------------------
// Child processes (every one is killed on the way out, whatever happens)


const children: Child[] = []

/**
 * A detached `sh` that outlives this process: it learns every child's pid on its stdin and,
 * if the stdin closes without "done" (this process was killed, e.g. by run.ts's time bound),
 * stops those pids and removes the cgroups and the temporary directory.
 */
class Watchdog {
  private readonly proc: ChildProcess
  constructor (dirs: string[], tmpDir: string) {
    const rm = [...dirs.map((d) => `rmdir '${d}' 2>/dev/null`), `rm -rf '${tmpDir}'`].join('; ')
    this.proc = spawn('/bin/sh', ['-c', [
      'pids=""',
      'while read -r cmd arg; do case "$cmd" in pid) pids="$pids $arg" ;; done) exit 0 ;; esac; done',
      'for p in $pids; do kill -TERM "$p" 2>/dev/null; done; sleep 3',
      'for p in $pids; do kill -KILL "$p" 2>/dev/null; done; sleep 1',
      rm,
    ].join('\n')], { detached: true, stdio: ['pipe', 'ignore', 'ignore'] })
    this.proc.on('error', () => {})
    this.proc.stdin!.on('error', () => {})
    this.proc.unref()
    ;(this.proc.stdin as unknown as { unref?: () => void }).unref?.()
  }

  add (pid: number): void { this.proc.stdin!.write(`pid ${pid}\n`) }
  done (): void { this.proc.stdin!.end('done\n') }
}
let watchdog: Watchdog | null = null
const quotas: Quota[] = []
const tmp = mkdtempSync(join(tmpdir(), 'sluice-exchange-bench-'))

/**
 * The cores, as issue 15 measures: each gateway (sluice, the pass-through) under its 1-vCPU
 * quota AND on core 0; the upstream (the sim) and the load generator (this process, every
 * thread) on core 1. Without the placement the quota'd gateway floats over both cores and, in
 * a burst of streams started together, takes turns with the sim and the load generator on
 * whichever core it lands (a multi-threaded gateway more often: its V8 helper threads too),
 * and the latency rows measure that contention more than the gateway. Needs two CPUs and a
 * working taskset; otherwise nothing is pinned and the report says so.
 */
const PLACEMENT = ((): { gateway: string; others: string } | null => {
  // The CPUs online, not availableParallelism(): that one honours this process's own affinity,
  // which a caller's taskset may have narrowed (each child is given its core explicitly).
  if (cpus().length < 2 || tasksetQuota() === null) return null
  return { gateway: '0', others: '1' }
})()
/** `cmd args` on one of PLACEMENT's cores (the gateways' inside their quota's wrap); as it is without a placement. */
function onCore (core: 'gateway' | 'others', cmd: string, args: string[]): [string, string[]] {
  return PLACEMENT === null ? [cmd, args] : ['taskset', ['-c', PLACEMENT[core], cmd, ...args]]
}
/** The load generator's own threads, on the others' core (taskset -a: every thread of this process). */
function placeSelf (): string {
  if (PLACEMENT === null) return 'not pinned (needs 2 CPUs and taskset)'
  const r = spawnSync('taskset', ['-a', '-p', '-c', PLACEMENT.others, String(process.pid)])
  return r.status === 0 ? `gateways on core ${PLACEMENT.gateway}; sim and load generator on core ${PLACEMENT.others}` : `load generator not pinned (taskset -a -p: exit ${r.status})`
}

/**
 * The host's own stalls, measured before anything else runs: one busy loop per core for
 * STALL_PROBE_MS, each noting every gap of more than 1 ms between two clock reads (the core
 * did not run the loop: the hypervisor, an interrupt, another task). They delay any path, nginx's
 * too; what a Node process adds to the tail on top of them is its own (STALL_NOTE).
 */
const STALL_PROBE_MS = 3000
/** Printed under the issue table, with what the probe found. */
const STALL_NOTE = 'p99 rows: the 1 % tail of ~1,150 arrivals. nginx, in the same blocks on the same core, shows what this host leaves a proxy: a core that does not run for a few ms (STALL_PROBE_MS) delays every arrival in that window on any path (a gateway path crosses both cores, the direct one one); a Node process adds its own pauses (its GC, and V8\'s helper threads taking the core mid-turn: sluice lowers them, limits.v8HelperNice)'
const STALL_LOOP = `const end = performance.now() + ${STALL_PROBE_MS}; let last = performance.now(); const g = []
for (;;) { const t = performance.now(); if (t - last > 1) g.push(t - last); last = t; if (t > end) break }
console.log(JSON.stringify(g))`
interface Stalls { core: string; gaps: number[] }
async function hostStalls (): Promise<Stalls[]> {
  const probes: Array<[string, [string, string[]]]> = PLACEMENT === null
    ? [['any', [NODE, ['-e', STALL_LOOP]]]]
    : (['gateway', 'others'] as const).map((role) => [PLACEMENT[role], onCore(role, NODE, ['-e', STALL_LOOP])])
  return await Promise.all(probes.map(([core, [cmd, argv]]) => new Promise<Stalls>((resolve) => {
    const p = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'ignore'] })
    let out = ''
    p.stdout!.on('data', (d: Buffer) => { out += d.toString() })
    p.on('close', () => {
      let gaps: number[] = []
      try { gaps = JSON.parse(out) } catch {}
      resolve({ core, gaps })
    })
  })))
}
const stallLine = (ss: Stalls[]): string => ss.map(({ core, gaps }) => {
  const top = [...gaps].sort((a, b) => b - a)
  return `core ${core}: ${gaps.length} gaps > 1 ms in ${STALL_PROBE_MS / 1000} s (${f(gaps.length * 1000 / STALL_PROBE_MS)}/s), longest ${top.slice(0, 3).map(f).join(', ') || '-'} ms`
}).join('; ')

function launch (name: string, command: [string, string[]], onLine: (line: string) => boolean, env: NodeJS.ProcessEnv = process.env): Child {
  const child = launchChild(name, command, onLine, { env })
  children.push(child)
  watchdog?.add(child.pid)
  return child
}

function stop (c: Child): Promise<void> {
  return stopChild(c, 5000, 2000)
}

/** Stops every child, removes the cgroups and the temporary files (once, however we got here). */
let cleaning: Promise<void> | null = null
function cleanup (): Promise<void> {
  cleaning ??= (async () => {
    await agent.destroy().catch(() => {})
    await Promise.all(children.map(stop))
    if (quotas.every((q) => q.remove())) watchdog?.done()
    try { rmSync(tmp, { recursive: true, force: true }) } catch {}
  })()
  return cleaning
}

/**
 * Synchronous last resort (process 'exit' without cleanup): SIGKILL what is left and remove
 * the cgroups; a cgroup whose killed process is not reaped yet is removed by a short detached
 * `sh` once init has reaped it.
 */
function killAllSync (): void {
  for (const c of children) if (!c.gone) try { c.proc.kill('SIGKILL') } catch {}
  const end = Date.now() + 2000
  const nap = new Int32Array(new SharedArrayBuffer(4))
  while (children.some((c) => !c.gone && alive(c.pid)) && Date.now() < end) Atomics.wait(nap, 0, 0, 10)
  const left = quotas.filter((q) => !q.remove()).map((q) => q.dir).filter((d) => d !== null)
  if (left.length > 0) {
    const dirs = left.map((d) => `'${d}'`).join(' ')
    spawn('/bin/sh', ['-c', `for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.3; ok=1; for d in ${dirs}; do [ -d "$d" ] && { rmdir "$d" 2>/dev/null || ok=0; }; done; [ $ok = 1 ] && exit 0; done`], { detached: true, stdio: 'ignore' }).unref()
  }
  try { rmSync(tmp, { recursive: true, force: true }) } catch {}
}
process.on('exit', killAllSync)
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(sig, () => {
    setTimeout(() => process.exit(130), 10_000).unref()
    void cleanup().finally(() => process.exit(130))
  })
}

function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as AddressInfo).port
      s.close(() => resolve(port))
    })
  })
}

/** The kernel's high-water mark of the process's RSS (VmHWM), MB. */
function hwmMb (pid: number): number {
  try { return Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024 } catch { return NaN }
}

function healthz (port: number, path = '/healthz'): Promise<boolean> {
  return new Promise((resolve) => {
    const req = get({ host: '127.0.0.1', port, path, agent: false, timeout: 1000 }, (res) => {
      res.resume()
      resolve(res.statusCode === 200)
    })
    req.on('error', () => resolve(false))
    req.on('timeout', () => { req.destroy(); resolve(false) })
  })
}

// ---------------------------------------------------------------------------------------
// The upstream, the pass-through and sluice

interface SimEnd { outcome: string; eventsSent: number; t: bigint }
const simEndWaiters = new Map<string, (e: SimEnd) => void>()
/** When the sim saw a tagged request arrive and wrote its answer's first bytes (hrtime ns). */
const simTimes = new Map<string, { req?: bigint; first?: bigint }>()

async function startSimProcess (): Promise<{ child: Child; url: string }> {
  let ready!: (url: string) => void
  const url = new Promise<string>((resolve) => { ready = resolve })
  const child = launch('sim', onCore('others', NODE, [join(HERE, 'exchange-sim.ts')]), (line) => {
    let j: { url?: string; req?: string; first?: string; end?: string; outcome?: string; eventsSent?: number; t?: string }
    try { j = JSON.parse(line) } catch { return false }
    if (j.url !== undefined) ready(j.url)
    if (j.req !== undefined) simTimes.set(j.req, { ...simTimes.get(j.req), req: BigInt(j.t ?? '0') })
    if (j.first !== undefined) simTimes.set(j.first, { ...simTimes.get(j.first), first: BigInt(j.t ?? '0') })
    if (j.end !== undefined) {
      const w = simEndWaiters.get(j.end)
      simEndWaiters.delete(j.end)
      w?.({ outcome: j.outcome ?? '?', eventsSent: j.eventsSent ?? 0, t: BigInt(j.t ?? '0') })
    }
    return false // keeps listening: the cancel figure needs the 'end' lines
  })
  const got = await Promise.race([url, child.exited.then(() => null), sleep(15_000).then(() => null)])
  if (got === null) throw new Error(`the sim did not start:\n${child.tail}`)
  return { child, url: got }
}

async function startPassthrough (simUrl: string, quota: Quota): Promise<{ child: Child; port: number }> {
  let ready!: (port: number) => void
  const port = new Promise<number>((resolve) => { ready = resolve })
  const child = launch('pass-through', quota.wrap(...onCore('gateway', NODE, [join(HERE, 'exchange-passthrough.ts'), simUrl])), (line) => {
    try { ready((JSON.parse(line) as { port: number }).port); return true } catch { return false }
  }, { ...process.env, ...MALLOC_ENV })
  const got = await Promise.race([port, child.exited.then(() => null), sleep(15_000).then(() => null)])
  if (got === null) throw new Error(`the pass-through did not start:\n${child.tail}`)
  return { child, port: got }
}

/**
 * The floor: nginx (a C proxy, DESIGN.md's first reference row: "nginx 1.22, plain SSE proxy"),
 * one process (no master, no daemon), unbuffered both ways, keep-alive to the sim, under its
 * own 1-vCPU quota on the gateways' core like the other two. It runs only in the staggered
 * blocks (the rows the +1 / +4 ms target is for): what a proxy that costs a fraction of a Node
 * process's CPU per chunk gets on this host in the same minutes. null when nginx is not
 * installed (the report says so; Debian: nginx-light).
 */
async function startNginx (simUrl: string, quota: Quota): Promise<{ child: Child; port: number; version: string } | null> {
  const bin = ['nginx', '/usr/sbin/nginx', '/usr/local/sbin/nginx'].find((b) => spawnSync(b, ['-v']).status === 0)
  if (bin === undefined) return null
  const version = /nginx\/([0-9.]+)/.exec(spawnSync(bin, ['-v']).stderr?.toString() ?? '')?.[1] ?? '?'
  const dir = join(tmp, 'nginx')
  mkdirSync(dir, { recursive: true })
  const port = await freePort()
  const up = new URL(simUrl)
  writeFileSync(join(dir, 'nginx.conf'), [
    'worker_processes 1; master_process off; daemon off; error_log stderr warn;',
    `pid ${join(dir, 'nginx.pid')};`,
    'events { worker_connections 4096; }',
    'http {',
    '  access_log off;',
    ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((k) => `  ${k}_temp_path ${join(dir, k)};`),
    `  upstream sim { server ${up.hostname}:${up.port}; keepalive 256; }`,
    `  server { listen 127.0.0.1:${port}; keepalive_requests 1000000; keepalive_timeout 75s;`,
    '    location / { proxy_pass http://sim; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; proxy_request_buffering off; } }',
    '}',
  ].join('\n') + '\n')
  const child = launch('nginx', quota.wrap(...onCore('gateway', bin, ['-p', dir, '-e', 'stderr', '-c', join(dir, 'nginx.conf')])), () => true)
  for (let i = 0; i < 500 && !child.gone; i++) {
    if (await canConnect(port)) return { child, port, version }
    await sleep(10)
  }
  throw new Error(`nginx did not start:\n${child.tail}`)
}

function canConnect (port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const so = connect(port, '127.0.0.1', () => { so.destroy(); resolve(true) })
    so.once('error', () => resolve(false))
  })
}

interface Sluice {
  child: Child
  port: number
  adminPort: number
  /** spawn -> first /healthz 200 */
  healthyMs: number
  /** spawn -> first /readyz 200 */
  readyzMs: number
  /** spawn -> the "sluice ready" log line (every worker listening) */
  readyMs: number
  /** startMs as sluice logs it itself */
  ownStartMs: number
}

async function startSluice (name: string, simUrl: string, extra: Record<string, unknown>, quota: Quota, nodeFlags: string[] = [], bin = BIN): Promise<Sluice> {
  let lastErr = ''
  for (let attempt = 0; attempt < 3; attempt++) {
    const adminPort = await freePort()
    const file = join(tmp, `${name}-${attempt}.json`)
    writeFileSync(file, JSON.stringify({
      listen: { port: 0, adminPort },
      workers: 1,
      keys: [{ name: 'bench', sha256: createHash('sha256').update(KEY).digest('hex'), models: ['*'] }],
      providers: [{ name: 'sim', protocol: 'openai-chat', baseUrl: simUrl, models: ['*'] }],
      ...extra,
      // The sim matches requests by x-bench-id: forwarded past the header allowlist.
      upstream: { forwardHeaders: ['x-bench-id'], ...(extra.upstream as Record<string, unknown> | undefined) },
    }))
    let ready!: (v: { port: number; startMs: number; at: number }) => void
    const readyP = new Promise<{ port: number; startMs: number; at: number }>((resolve) => { ready = resolve })
    const t0 = performance.now()
    const child = launch(name, quota.wrap(...onCore('gateway', NODE, [...NODE_FLAGS, ...nodeFlags, bin, 'serve', '--config', file])), (line) => {
      if (!line.includes('"sluice ready"')) return false
      const j = JSON.parse(line) as { port: number; startMs: number }
      ready({ port: j.port, startMs: j.startMs, at: performance.now() })
      return true
    }, { ...process.env, ...MALLOC_ENV, SLUICE_SIGNING_KEY: randomBytes(32).toString('hex') })
    let healthyAt = NaN
    let readyzAt = NaN
    const polling = (async () => {
      while (!child.gone && performance.now() - t0 < 15_000) {
        if (Number.isNaN(healthyAt) && await healthz(adminPort)) healthyAt = performance.now()
        if (!Number.isNaN(healthyAt) && await healthz(adminPort, '/readyz')) { readyzAt = performance.now(); return }
        await sleep(2)
      }
    })()
    const r = await Promise.race([readyP, child.exited.then(() => null), sleep(20_000).then(() => null)])
    await polling
    if (r !== null && !Number.isNaN(readyzAt)) {
      return { child, port: r.port, adminPort, healthyMs: healthyAt - t0, readyzMs: readyzAt - t0, readyMs: r.at - t0, ownStartMs: r.startMs }
    }
    lastErr = child.tail
    await stop(child)
    if (!/EADDRINUSE/.test(lastErr)) break
  }
  throw new Error(`sluice (${name}) did not start:\n${lastErr}`)
}

// ---------------------------------------------------------------------------------------
// The load generator: one undici Agent, the dispatch API (no stream objects in the way)

const agent = new Agent({ connections: 256, pipelining: 1, headersTimeout: 20_000, bodyTimeout: 20_000 })
const DONE = 'data: [DONE]\n\n'

interface Result { ok: boolean; status: number; ttfb: number; total: number; events: number; error?: string }
interface StreamHooks { benchId?: string; onController?: (c: Dispatcher.DispatchController) => void; onFirst?: () => void }

function stream (origin: string, payload: Buffer, hooks: StreamHooks = {}): Promise<Result> {
  return new Promise((resolve) => {
    const headers: Record<string, string> = { 'content-type': 'application/json', authorization: `Bearer ${KEY}` }
    if (hooks.benchId !== undefined) headers['x-bench-id'] = hooks.benchId
    let status = 0
    let ttfb = -1
    let events = 0
    let lastNl = false
    let tail = ''
    const t0 = performance.now()
    agent.dispatch({ origin, path: '/v1/chat/completions', method: 'POST', headers, body: payload }, {
      onRequestStart (c) { hooks.onController?.(c) },
      onResponseStart (_c, code) { status = code },
      onResponseData (_c, chunk) {
        if (ttfb < 0) { ttfb = performance.now() - t0; hooks.onFirst?.() }
        // Count SSE frame ends ("\n\n"), also across chunk boundaries.
        if (lastNl && chunk[0] === 10) events++
        for (let i = chunk.indexOf('\n\n'); i >= 0; i = chunk.indexOf('\n\n', i + 2)) events++
        lastNl = chunk[chunk.length - 1] === 10
        tail = (tail + chunk.toString('latin1', Math.max(0, chunk.length - DONE.length))).slice(-DONE.length)
      },
      onResponseEnd () {
        resolve({ ok: status === 200 && tail === DONE, status, ttfb, total: performance.now() - t0, events })
      },
      onResponseError (_c, err) {
        resolve({ ok: false, status, ttfb, total: performance.now() - t0, events, error: err.message })
      },
    })
  })
}

const round = (origin: string, n: number, payload: Buffer) =>
  Promise.all(Array.from({ length: n }, () => stream(origin, payload)))

/**
 * The staggered case: n lanes started 500/n ms apart, each running streams back to back, so
 * about n streams are in flight all along but they arrive one by one instead of in a burst.
 */
async function lanes (origin: string, n: number, lat: Lat): Promise<void> {
  const tagged: { id: string; t0: bigint; first: bigint }[] = []
  await Promise.all(Array.from({ length: n }, async (_, i) => {
    await sleep(i * 500 / n)
    for (let k = 0; k < LANE_STREAMS; k++) {
      // Counted streams are tagged: the sim reports when it saw the request and answered.
      const id = `stag-${process.pid}-${benchSeq++}`
      const one = { id, t0: process.hrtime.bigint(), first: 0n }
      const r = await stream(origin, LATENCY_BODY, k > 0 ? { benchId: id, onFirst: () => { one.first = process.hrtime.bigint() } } : {})
      if (k > 0) { record(lat, [r]); if (r.ok) tagged.push(one) }
    }
  }))
  await sleep(50) // the sim's last lines
  for (const { id, t0, first } of tagged) {
    const s = simTimes.get(id)
    simTimes.delete(id)
    if (s?.req === undefined || s.first === undefined || first === 0n) continue
    lat.up.push(Number(s.req - t0) / 1e6)
    lat.sim.push(Number(s.first - s.req) / 1e6)
    lat.down.push(Number(first - s.first) / 1e6)
  }
}

function pct (xs: number[], p: number): number {
  if (xs.length === 0) return NaN
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]
}

// ---------------------------------------------------------------------------------------
// The measurements

type PathKey = 'direct' | 'pass' | 'sluice'
interface Path { key: PathKey; origin: string; pid: number | null }
/** The paths of the staggered blocks: the three, and nginx when it is installed (startNginx). */
type RefKey = PathKey | 'nginx'
interface RefPath { key: RefKey; origin: string; pid: number | null }
interface Lat {
  ttfb: number[]; total: number[]; errors: number; firstError?: string
  /** Staggered streams only, split at the sim: request sent -> the sim has its headers; the sim's
   *  own time to its first write (ttft); that write -> the client's first byte. */
  up: number[]; sim: number[]; down: number[]
}
const newLat = (): Lat => ({ ttfb: [], total: [], errors: 0, up: [], sim: [], down: [] })
function record (lat: Lat, rs: Result[]): void {
  for (const r of rs) {
    if (r.ok) { lat.ttfb.push(r.ttfb); lat.total.push(r.total) } else { lat.errors++; lat.firstError ??= r.error ?? `status ${r.status}` }
  }
}

interface Throughput {
  seqEps: number; parEps: number; events: number; cpuMs: number; errors: number
  /** Accumulated over the blocks: events and wall ms of the sequential and the parallel part. */
  seqEvents: number; seqMs: number; parEvents: number; parMs: number
  /** CPU ms per 1000 events of each block, in block order (the paired ratios come from these). */
  blocks: number[]
}
const newThroughput = (): Throughput => ({ seqEps: NaN, parEps: NaN, events: 0, cpuMs: 0, errors: 0, seqEvents: 0, seqMs: 0, parEvents: 0, parMs: 0, blocks: [] })

/**
 * The paths' order in block `block`: interleaved block by block, so a slow spell of the machine
 * falls on every path rather than on whichever ran in it, and each block gives a paired figure.
 * No path ever runs twice in a row: a run right after the same path's own run finds its caches
 * warm. (Reversing the order every other block did that: measured with two identical sluice
 * builds in scratch A/B runs, the path that ran twice in a row in half of its blocks came out
 * ~7 % cheaper; here it favoured sluice, in 2 of 4 blocks against the pass-through's 1.) Two
 * paths keep their order (each always follows the other); three or more rotate by one a block
 * (each takes every place in turn, and the last of a block is never the next block's first).
 */
function interleaved<T> (paths: readonly T[], block: number): readonly T[] {
  if (paths.length < 3) return paths
  const k = block % paths.length
  return [...paths.slice(k), ...paths.slice(0, k)]
}

/** One block of the throughput run on one path: `seq` streams in sequence, then `par` rounds of TP_PAR; added into `out`. */
async function throughputBlock (p: Path, out: Throughput, seq: number, par: number): Promise<void> {
  const cpu0 = p.pid === null ? null : threadCpuNs(p.pid)
  let events = 0
  let t = performance.now()
  for (let i = 0; i < seq; i++) {
    const r = await stream(p.origin, THROUGHPUT_BODY)
    if (!r.ok) out.errors++
    events += r.events
    out.seqEvents += r.events
  }
  out.seqMs += performance.now() - t
  t = performance.now()
  for (let i = 0; i < par; i++) {
    for (const r of await round(p.origin, TP_PAR, THROUGHPUT_BODY)) { if (!r.ok) out.errors++; events += r.events; out.parEvents += r.events }
  }
  out.parMs += performance.now() - t
  out.events += events
  if (p.pid !== null) {
    const cpu = cpuMsSince(p.pid, cpu0!)
    out.cpuMs += cpu
    out.blocks.push(cpu / (events / 1000))
  }
  out.seqEps = out.seqEvents / (out.seqMs / 1000)
  out.parEps = out.parEvents / (out.parMs / 1000)
}

/**
 * The throughput run: a warm-up on each path as long as one block, not counted, then TP_BLOCKS
 * blocks, the paths interleaved. (With a warm-up of two streams the first counted block carried
 * the JIT's tiering up: sluice 1.88 ms per 1000 events against 0.93-1.39 in the next three, the
 * pass-through 0.89 against 0.59-0.76; the relay figure is the steady state's.)
 */
async function throughput (paths: readonly Path[]): Promise<Record<PathKey, Throughput>> {
  const out = {} as Record<PathKey, Throughput>
  for (const p of paths) {
    out[p.key] = newThroughput()
    const warm = newThroughput()
    await throughputBlock(p, warm, TP_SEQ / TP_BLOCKS, TP_PAR_ROUNDS / TP_BLOCKS)
    out[p.key].errors += warm.errors
  }
  for (let b = 0; b < TP_BLOCKS; b++) {
    for (const p of interleaved(paths, b)) await throughputBlock(p, out[p.key], TP_SEQ / TP_BLOCKS, TP_PAR_ROUNDS / TP_BLOCKS)
  }
  return out
}

/**
 * The gateway's CPU per exchange, from sequential one-delta streams (the fixed cost every
 * exchange pays): a warm-up, then TP_BLOCKS blocks, the paths interleaved.
 */
async function perExchangeCpu (paths: readonly Path[]): Promise<Record<string, { ms: number; errors: number; blocks: number[] }>> {
  const out: Record<string, { cpu: number; n: number; errors: number; blocks: number[] }> = {}
  for (const p of paths) {
    out[p.key] = { cpu: 0, n: 0, errors: 0, blocks: [] }
    for (let i = 0; i < 20; i++) if (!(await stream(p.origin, TINY_BODY)).ok) out[p.key].errors++
  }
  const n = PER_EXCHANGE_N / TP_BLOCKS
  for (let b = 0; b < TP_BLOCKS; b++) {
    for (const p of interleaved(paths, b)) {
      const o = out[p.key]
      const cpu0 = threadCpuNs(p.pid!)
      for (let i = 0; i < n; i++) if (!(await stream(p.origin, TINY_BODY)).ok) o.errors++
      const cpu = cpuMsSince(p.pid!, cpu0)
      o.cpu += cpu
      o.n += n
      o.blocks.push(cpu / n)
    }
  }
  return Object.fromEntries(Object.entries(out).map(([k, o]) => [k, { ms: o.cpu / o.n, errors: o.errors, blocks: o.blocks }]))
}

/** Median, lowest and highest of the per-block ratios b[i] / a[i]. */
function pairedRatio (a: readonly number[], b: readonly number[]): { median: number; lo: number; hi: number } {
  const r = a.map((x, i) => b[i] / x).sort((x, y) => x - y)
  if (r.length === 0) return { median: NaN, lo: NaN, hi: NaN }
  const mid = r.length >> 1
  return { median: r.length % 2 === 1 ? r[mid] : (r[mid - 1] + r[mid]) / 2, lo: r[0], hi: r[r.length - 1] }
}

interface Cancel { n: number; reached: number; ms: number[]; outcomes: Record<string, number> }
let benchSeq = 0

async function cancel (p: Path, n: number): Promise<Cancel> {
  const ids: string[] = []
  const ends: Promise<SimEnd | null>[] = []
  const ctrls: (Dispatcher.DispatchController | undefined)[] = []
  const firsts: Promise<void>[] = []
  for (let i = 0; i < n; i++) {
    const id = `${p.key}-${process.pid}-${benchSeq++}`
    ids.push(id)
    ends.push(new Promise<SimEnd>((resolve) => simEndWaiters.set(id, resolve)))
    firsts.push(new Promise<void>((resolve) => {
      void stream(p.origin, CANCEL_BODY, { benchId: id, onController: (c) => { ctrls[i] = c }, onFirst: resolve })
    }))
  }
  await within(Promise.all(firsts), 10_000)
  await sleep(100)
  const abortedAt: bigint[] = []
  for (let i = 0; i < n; i++) {
    abortedAt[i] = process.hrtime.bigint()
    ctrls[i]?.abort(new Error('bench: the caller cancels'))
    await sleep(20)
  }
  const seen = await Promise.all(ends.map((e) => within(e, 3000)))
  for (const id of ids) simEndWaiters.delete(id)
  const out: Cancel = { n, reached: 0, ms: [], outcomes: {} }
  seen.forEach((e, i) => {
    const outcome = e === null ? 'not seen in 3 s' : e.outcome
    out.outcomes[outcome] = (out.outcomes[outcome] ?? 0) + 1
    if (e !== null && e.outcome === 'client-closed') {
      out.reached++
      out.ms.push(Number(e.t - abortedAt[i]) / 1e6)
    }
  })
  return out
}

// ---------------------------------------------------------------------------------------
// The report

const f = (x: number): string => !Number.isFinite(x) ? 'n/a' : Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 10 ? x.toFixed(1) : x.toFixed(2)
const plus = (x: number): string => (Number.isFinite(x) && x >= 0 ? '+' : '') + f(x)
const pair = (a: string, b: string) => `${a} / ${b}`

/** "met" or "MISSED by ..." for x against an upper bound. */
function verdict (parts: Array<[string, number, number, string]>): string {
  const missed = parts.filter(([, x, max]) => !(x <= max))
  if (missed.length === 0) return 'met'
  return 'MISSED: ' + missed.map(([what, x, max, unit]) => Number.isFinite(x) ? `${what}${what ? ' ' : ''}by ${f(x - max)}${unit} (${f(x / max)}x)` : `${what} n/a`).join(', ')
}

function table (rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)))
  return rows.map((r) => r.map((c, i) => i === r.length - 1 ? c : c.padEnd(widths[i])).join('  ').trimEnd()).join('\n')
}

// ---------------------------------------------------------------------------------------

const loadavg = (): string => { try { return readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ') } catch { return '?' } }
let loadBefore = '?'
let placement = '?'
let host = '?'
let stalls: Stalls[] = []

async function main (): Promise<void> {
  if (!SOURCES) {
    const b = spawnSync(NODE, [BUILD], { stdio: ['ignore', 'ignore', 'inherit'] })
    if (b.status !== 0) throw new Error('the build (scripts/build.ts) failed')
  }
  loadBefore = loadavg()
  host = machine()
  placement = placeSelf()
  stalls = await hostStalls()
  const tag = `sluice-exchange-bench-${process.pid}`
  const qGw = makeQuota(`${tag}-gw`); quotas.push(qGw)
  const qPass = makeQuota(`${tag}-pass`); quotas.push(qPass)
  const qDef = makeQuota(`${tag}-gwdefault`); quotas.push(qDef)
  const qNginx = makeQuota(`${tag}-nginx`); quotas.push(qNginx)
  watchdog = new Watchdog(quotas.map((q) => q.dir).filter((d) => d !== null), tmp)

  const { child: sim, url: simUrl } = await startSimProcess()

  // 5. start to healthy: default-config spawns (the last one stays for the default-limits 96 case).
  const starts: Sluice[] = []
  let gwDefault!: Sluice
  for (let i = 0; i < START_SPAWNS; i++) {
    const s = await startSluice(`sluice-default-${i}`, simUrl, {}, qDef)
    starts.push(s)
    if (i < START_SPAWNS - 1) await stop(s.child)
    else gwDefault = s
  }
  const profFlags = PROFILE_DIR !== undefined ? ['--cpu-prof', '--cpu-prof-dir', PROFILE_DIR] : []
  const gw = await startSluice('sluice', simUrl, {
    limits: { maxActiveExchanges: 128 },
    upstream: { connections: 128 },
  }, qGw, profFlags)
  starts.push(gw)
  const { child: pass, port: passPort } = await startPassthrough(simUrl, qPass)
  const nginx = await startNginx(simUrl, qNginx)

  // the other kind of entry (sources vs compiled), same config, alone under the quota the
  // default-config instances used: idle RSS before and after a short warm-up, and its start
  const other = await startSluice('sluice-other', simUrl, { limits: { maxActiveExchanges: 128 }, upstream: { connections: 128 } }, qDef, [], OTHER_BIN)
  await sleep(500)
  const otherIdle = rssMb(other.child.pid)
  for (let r = 0; r < 3; r++) await round(`http://127.0.0.1:${other.port}`, 32, LATENCY_BODY)
  await sleep(2000)
  const otherWarm = rssMb(other.child.pid)
  await stop(other.child)

  const held = {
    sluice: qGw.holds(gw.child.pid),
    sluiceDefault: qDef.holds(gwDefault.child.pid),
    pass: qPass.holds(pass.pid),
  }

  const paths: Path[] = [
    { key: 'direct', origin: simUrl, pid: null },
    { key: 'pass', origin: `http://127.0.0.1:${passPort}`, pid: pass.pid },
    { key: 'sluice', origin: `http://127.0.0.1:${gw.port}`, pid: gw.child.pid },
  ]
  const P = Object.fromEntries(paths.map((p) => [p.key, p])) as Record<PathKey, Path>

  // 3. idle RSS (after a short settle, before any exchange)
  await sleep(500)
  const idle = { sluice: rssMb(gw.child.pid), pass: rssMb(pass.pid) }
  const sampler = new RssSampler([gw.child.pid, pass.pid, gwDefault.child.pid], 50)

  // 1. latency, the three paths interleaved round by round
  const lat: Record<number, Record<PathKey, Lat>> = {}
  const peak96 = { sluice: NaN, pass: NaN, sluiceDefault: NaN }
  // CPU time / wall time of each path's own 96-stream rounds
  const share96 = { pass: { cpu: 0, wall: 0, rounds: [] as number[] }, sluice: { cpu: 0, wall: 0, rounds: [] as number[] } }
  for (const c of CONCURRENCY) {
    lat[c] = { direct: newLat(), pass: newLat(), sluice: newLat() }
    for (const p of paths) { await round(p.origin, c, LATENCY_BODY); await sleep(30) } // warm-up: connections on every hop
    if (c === 96) sampler.window()
    const rounds = c === 1 ? C1_ROUNDS : c === 96 ? C96_ROUNDS : C_ROUNDS
    for (let r = 0; r < rounds; r++) {
      for (const p of paths) {
        const cpu0 = p.pid === null ? null : threadCpuNs(p.pid)
        const t0 = performance.now()
        record(lat[c][p.key], await round(p.origin, c, LATENCY_BODY))
        if (c === 96 && p.key !== 'direct') {
          const cpu = cpuMsSince(p.pid!, cpu0!)
          const wall = performance.now() - t0
          share96[p.key].cpu += cpu
          share96[p.key].wall += wall
          share96[p.key].rounds.push(cpu / wall)
        }
        await sleep(30)
      }
    }
    if (c === 96) { peak96.sluice = sampler.peak(gw.child.pid); peak96.pass = sampler.peak(pass.pid) }
  }
  // the same concurrency with staggered arrivals, right after the bursts: the steady state the
  // +1 / +4 ms target is for
  // (nginx, the floor, takes its turn in these blocks only)
  const stagPaths: RefPath[] = nginx === null ? paths : [...paths, { key: 'nginx', origin: `http://127.0.0.1:${nginx.port}`, pid: nginx.child.pid }]
  const stag: Record<number, Record<RefKey, Lat>> = {}
  for (const c of [32, 96]) {
    stag[c] = { direct: newLat(), pass: newLat(), sluice: newLat(), nginx: newLat() }
    if (nginx !== null) { await lanes(`http://127.0.0.1:${nginx.port}`, c, newLat()); await sleep(30) } // its warm-up (connections to the sim); the others are warm from the bursts
    for (let b = 0; b < STAG_BLOCKS; b++) {
      for (const p of interleaved(stagPaths, b)) { await lanes(p.origin, c, stag[c][p.key]); await sleep(30) }
    }
  }
  // idle again after the latency runs (warm: connections, JIT, heaps grown), settled
  await sleep(2000)
  const idleWarm2 = { sluice: rssMb(gw.child.pid), pass: rssMb(pass.pid) }
  // and later: an idle period long enough for sluice's idle collection (src/idle-gc.ts,
  // limits.workerIdleCollectMs)
  await sleep(IDLE_READ_MS - 2_000)
  const idleWarm = { sluice: rssMb(gw.child.pid), pass: rssMb(pass.pid) }
  // What the first exchanges after that quiet period cost: one staggered block at 96 on each
  // path, sluice's worker having just collected its heap (the JIT state it loses: README
  // "Memory after a burst goes back by itself").
  const afterQuiet: Record<RefKey, Lat> = { direct: newLat(), pass: newLat(), sluice: newLat(), nginx: newLat() }
  for (const p of stagPaths) { await lanes(p.origin, 96, afterQuiet[p.key]); await sleep(30) }
  // the default-limits 96 case (32 active + 64 queued), against the direct figures above
  const latDefault = newLat()
  const defOrigin = `http://127.0.0.1:${gwDefault.port}`
  await round(defOrigin, 96, LATENCY_BODY)
  sampler.window()
  for (let r = 0; r < C_ROUNDS; r++) { record(latDefault, await round(defOrigin, 96, LATENCY_BODY)); await sleep(30) }
  peak96.sluiceDefault = sampler.peak(gwDefault.child.pid)
  const throttledDefault = qDef.throttled()
  await stop(gwDefault.child)

  // 2. throughput (and its RSS peak)
  sampler.window()
  const tp = await throughput(paths)
  const peakTp = { sluice: sampler.peak(gw.child.pid), pass: sampler.peak(pass.pid) }
  sampler.stop()
  const perEx = await perExchangeCpu([P.pass, P.sluice])

  // 4. caller cancel -> upstream closed
  const cn = {} as Record<PathKey, Cancel>
  for (const p of paths) cn[p.key] = await cancel(p, CANCEL_N)

  const throttled = { sluice: qGw.throttled(), pass: qPass.throttled(), sluiceDefault: throttledDefault }
  const hwm = { sluice: hwmMb(gw.child.pid), pass: hwmMb(pass.pid) }
  // Idle once more, after limits.parserIdleMs without a parse: sluice's
  // parser thread has been retired (on demand since issue 15); the pass-through beside it.
  await sleep(END_READ_MS)
  const idleRetired = { sluice: rssMb(gw.child.pid), pass: rssMb(pass.pid) }
  await Promise.all([stop(gw.child), stop(pass), stop(sim), ...(nginx === null ? [] : [stop(nginx.child)])])
  await cleanup()

  // ---- report
  const nginxWhat = nginx === null ? '(the floor: not installed here, so not run)' : `${nginx.version} (C, one process, same quota and core: the floor on this host)`
  /** A path's added TTFB, p50 and p99: its percentile minus the direct one's, same block set. */
  const added = <K extends RefKey>(L: Record<number, Record<K | 'direct', Lat>>, c: number, k: K) =>
    [pct(L[c][k].ttfb, 50) - pct(L[c].direct.ttfb, 50), pct(L[c][k].ttfb, 99) - pct(L[c].direct.ttfb, 99)]
  const rows: string[][] = [['figure', 'direct', 'pass-through', 'sluice', 'target (sluice)', 'sluice vs target']]
  const latRow = (what: 'ttfb' | 'total', c: number, target?: [number, number], staggered = false) => {
    const L = staggered ? stag : lat
    const d = L[c].direct[what]
    const add = (k: PathKey) => [pct(L[c][k][what], 50) - pct(d, 50), pct(L[c][k][what], 99) - pct(d, 99)]
    const [s50, s99] = add('sluice')
    const [p50, p99] = add('pass')
    rows.push([
      `${what === 'ttfb' ? 'TTFB' : 'total'} @${c}${staggered ? ' staggered' : ''}${c === 96 ? ' (max active 128)' : ''}, ms p50/p99`,
      pair(f(pct(d, 50)), f(pct(d, 99))),
      pair(plus(p50), plus(p99)),
      pair(plus(s50), plus(s99)),
      target ? `+<=${target[0]} / +<=${target[1]}` : '-',
      target ? verdict([['p50', s50, target[0], ' ms'], ['p99', s99, target[1], ' ms']]) : '',
    ])
  }
  // The +1 / +4 target is DESIGN.md's and the issue's figure for N streams in flight, which
  // is what the staggered rows measure (their reference pass-through figures, +0.33 to +0.86 ms
  // p50, are out of reach of any process in a burst: see BURST_NOTE). Bursts are reported
  // beside, against the pass-through.
  for (const c of CONCURRENCY) latRow('ttfb', c)
  for (const c of [32, 96]) {
    latRow('ttfb', c, [1, 4], true)
    const [n50, n99] = added(stag, c, 'nginx')
    rows.push([`  the same through nginx ${nginxWhat}`, '', nginx === null ? 'not installed' : pair(plus(n50), plus(n99)), '', '', nginx === null ? '' : `nginx vs the target: ${verdict([['p50', n50, 1, ' ms'], ['p99', n99, 4, ' ms']])}`])
  }
  for (const c of [32, 96]) {
    // Where the staggered TTFB goes: to the sim, in the sim, back (p50 of each part, ms).
    const parts = (k: RefKey) => `${f(pct(stag[c][k].up, 50))} / ${f(pct(stag[c][k].sim, 50))} / ${f(pct(stag[c][k].down, 50))}`
    rows.push([`  @${c} staggered, p50 to the sim / in the sim / back to the client, ms`, parts('direct'), parts('pass'), parts('sluice'), '', nginx === null ? '' : `nginx: ${parts('nginx')}`])
  }
  {
    const d = lat[96].direct.ttfb
    rows.push(['TTFB @96, default limits (32+64 queued)', pair(f(pct(d, 50)), f(pct(d, 99))), '', pair(plus(pct(latDefault.ttfb, 50) - pct(d, 50)), plus(pct(latDefault.ttfb, 99) - pct(d, 99))), '(queueing by design)', ''])
  }
  for (const c of CONCURRENCY) latRow('total', c)
  for (const c of [32, 96]) latRow('total', c, undefined, true)
  {
    const d = lat[96].direct.total
    rows.push(['total @96, default limits', pair(f(pct(d, 50)), f(pct(d, 99))), '', pair(plus(pct(latDefault.total, 50) - pct(d, 50)), plus(pct(latDefault.total, 99) - pct(d, 99))), '', ''])
  }
  const eps = (t: Throughput) => pair(`${f(t.seqEps / 1000)}k`, `${f(t.parEps / 1000)}k`)
  rows.push(['events/s, seq / 8 parallel (2000-event streams)', eps(tp.direct), eps(tp.pass), eps(tp.sluice), '>=500k per vCPU', ''])
  const cpuPer1k = (t: Throughput) => t.cpuMs / (t.events / 1000)
  rows.push([`CPU ms per 1000 relayed events (${f(tp.sluice.events / 1000)}k events)`, '-', f(cpuPer1k(tp.pass)), f(cpuPer1k(tp.sluice)), '<=2', verdict([['', cpuPer1k(tp.sluice), 2, ' ms']])])
  rows.push([`CPU ms per exchange (${PER_EXCHANGE_N} one-delta streams in sequence)`, '-', f(perEx.pass.ms), f(perEx.sluice.ms), '-', ''])
  {
    const k = pairedRatio(tp.pass.blocks, tp.sluice.blocks)
    const e = pairedRatio(perEx.pass.blocks, perEx.sluice.blocks)
    rows.push([`  sluice / pass-through per block (${TP_BLOCKS} blocks, interleaved): median [lowest..highest]`, '-', '', `relay ${f(k.median)}x [${f(k.lo)}..${f(k.hi)}]; per exchange ${f(e.median)}x [${f(e.lo)}..${f(e.hi)}]`, '', ''])
    // Each block's own figures, in block order: which path moved when a ratio is far off.
    const inOrder = (a: readonly number[]) => a.map((x) => f(x)).join(' ')
    rows.push(['  ...per block, in order: relay ms per 1000 events; ms per exchange', '-', `${inOrder(tp.pass.blocks)}; ${inOrder(perEx.pass.blocks)}`, `${inOrder(tp.sluice.blocks)}; ${inOrder(perEx.sluice.blocks)}`, '', ''])
  }
  rows.push(['RSS idle (before any exchange), MB', '-', f(idle.pass), f(idle.sluice), '<=100', verdict([['', idle.sluice, 100, ' MB']])])
  rows.push(['RSS idle 2 s after warm-up (the latency runs, bursts then staggered), MB', '-', f(idleWarm2.pass), f(idleWarm2.sluice), '<=100', verdict([['', idleWarm2.sluice, 100, ' MB']])])
  rows.push([`RSS idle ${IDLE_READ_MS / 1000} s after warm-up (the worker's idle collection done), MB`, '-', f(idleWarm.pass), f(idleWarm.sluice), '<=100', verdict([['', idleWarm.sluice, 100, ' MB']])])
  rows.push([`RSS idle at the end, ${END_READ_MS / 1000} s after the last exchange (parser thread retired), MB`, '-', f(idleRetired.pass), f(idleRetired.sluice), '<=100', verdict([['', idleRetired.sluice, 100, ' MB']])])
  rows.push([`  the ${SOURCES ? 'compiled dist/' : '.ts sources'} instead: idle / after 3 rounds @32, start -> /readyz`, '-', '-', `${f(otherIdle)} / ${f(otherWarm)} MB, ${f(other.readyzMs)} ms`, '', ''])
  rows.push(['RSS peak over all runs (VmHWM), MB', '-', f(hwm.pass), f(hwm.sluice), '<=160', verdict([['', hwm.sluice, 160, ' MB']])])
  rows.push(['RSS peak @96 streams, MB', '-', f(peak96.pass), f(peak96.sluice), '<=160', verdict([['', peak96.sluice, 160, ' MB']])])
  rows.push(['RSS peak @96, default limits, MB', '-', '', f(peak96.sluiceDefault), '<=160', verdict([['', peak96.sluiceDefault, 160, ' MB']])])
  rows.push(['RSS peak in the throughput run, MB', '-', f(peakTp.pass), f(peakTp.sluice), '<=160', verdict([['', peakTp.sluice, 160, ' MB']])])
  rows.push(['RSS per active stream @96, MB', '-', f((peak96.pass - idle.pass) / 96), f((peak96.sluice - idle.sluice) / 96), '-', ''])
  const cRow = (k: PathKey) => pair(f(pct(cn[k].ms, 50)), f(Math.max(...cn[k].ms)))
  rows.push(['caller cancel -> upstream closed, ms p50/max', cRow('direct'), cRow('pass'), cRow('sluice'), '<=5 p50', verdict([['p50', pct(cn.sluice.ms, 50), 5, ' ms']])])
  const reach = (k: PathKey) => `${cn[k].reached}/${cn[k].n}`
  rows.push(['  ...cancels that reached the upstream', reach('direct'), reach('pass'), reach('sluice'), 'every time', cn.sluice.reached === cn.sluice.n ? 'met' : `MISSED: ${JSON.stringify(cn.sluice.outcomes)}`])
  const healthy = starts.map((s) => s.healthyMs)
  const readyz = starts.map((s) => s.readyzMs)
  rows.push([`start -> /readyz 200, ms median (${starts.length} spawns)`, '-', '-', f(pct(readyz, 50)), '<=500', verdict([['', pct(readyz, 50), 500, ' ms']])])
  rows.push([`start -> /healthz 200, ms median`, '-', '-', f(pct(healthy, 50)), '', ''])
  rows.push(['start -> "sluice ready" (workers listening), ms', '-', '-', `${f(pct(starts.map((s) => s.readyMs), 50))} (own startMs ${f(pct(starts.map((s) => s.ownStartMs), 50))})`, '', ''])

  const errors = {
    ...Object.fromEntries(CONCURRENCY.flatMap((c) => paths.map((p) => [`${p.key}@${c}`, lat[c][p.key].errors]))),
    ...Object.fromEntries([32, 96].flatMap((c) => stagPaths.map((p) => [`${p.key}@${c}staggered`, stag[c][p.key].errors]))),
    ...Object.fromEntries(stagPaths.map((p) => [`${p.key}@96afterQuiet`, afterQuiet[p.key].errors])),
    'sluice@96default': latDefault.errors, 'tp.direct': tp.direct.errors, 'tp.pass': tp.pass.errors, 'tp.sluice': tp.sluice.errors, 'perExchange.pass': perEx.pass.errors, 'perExchange.sluice': perEx.sluice.errors }
  const bad = Object.entries(errors).filter(([, n]) => n > 0)
  const firstErr = [...CONCURRENCY.flatMap((c) => paths.map((p) => lat[c][p.key].firstError)), ...[32, 96].flatMap((c) => stagPaths.map((p) => stag[c][p.key].firstError)), ...stagPaths.map((p) => afterQuiet[p.key].firstError), latDefault.firstError].find((e) => e !== undefined)

  const q = (name: string, quota: Quota, ok: boolean, thr: string) => `${name}: ${quota.detail} ${ok ? 'held' : 'DID NOT HOLD'}${thr ? ` (${thr})` : ''}`
  console.log(`exchange bench — Node ${process.versions.node}, ${host}${QUICK ? ' (--quick)' : ''}; load average before ${loadBefore}, after ${loadavg()} (other work on the host skews the figures)`)
  console.log(`quota, 1 vCPU each: ${q('sluice', qGw, held.sluice, throttled.sluice)}; ${q('sluice default-limits', qDef, held.sluiceDefault, throttled.sluiceDefault)}; ${q('pass-through', qPass, held.pass, throttled.pass)}`)
  if (qGw.fallbacks.length > 0) console.log(`  not used: ${qGw.fallbacks.join('; ')}`)
  console.log(`cores: ${placement}`)
  console.log('upstream: the sim (startSim) in its own process, outside the quota; load: undici Agent in the bench process, outside the quota')
  console.log(`latency: #sim ttft=20 tokens=50 interval=10, rounds of N streams started together (@1 ${C1_ROUNDS} rounds, @32 ${C_ROUNDS}, @96 ${C96_ROUNDS}), paths interleaved; added = path pXX - direct pXX`)
  console.log(`staggered: N lanes started 500/N ms apart, ${LANE_STREAMS} streams each back to back (first not counted): ~N in flight, arriving one by one`)
  console.log('@96: sluice with limits.maxActiveExchanges=128 and upstream.connections=128 (defaults 32 and 64); "default limits" = a second sluice with the default config')
  console.log('')
  console.log(table(rows))
  console.log('')
  console.log(`errors: ${bad.length === 0 ? 'none' : bad.map(([k, n]) => `${k}=${n}`).join(', ') + (firstErr ? ` (first: ${firstErr})` : '')}`)
  console.log(`start spawns, ms to /readyz 200: ${readyz.map(f).join(', ')}; to /healthz 200: ${healthy.map(f).join(', ')} (last = the max-active-128 instance)`)
  if (PROFILE_DIR !== undefined) console.log(`cpu profiles of the main sluice instance: ${PROFILE_DIR}`)

  // The table of issue 15: pass-through beside sluice, this run only.
  const share = (k: 'pass' | 'sluice') => 100 * share96[k].cpu / share96[k].wall
  const issue: string[][] = [['figure', 'pass-through', 'sluice', 'target', 'sluice vs target']]
  for (const c of [32, 96]) {
    const [p50, p99] = added(stag, c, 'pass')
    const [s50, s99] = added(stag, c, 'sluice')
    issue.push([`added TTFB p50 / p99, ${c} streams in flight (arrivals staggered)`, `${plus(p50)} / ${plus(p99)} ms`, `${plus(s50)} / ${plus(s99)} ms`, '<= +1 / +4', verdict([['p50', s50, 1, ' ms'], ['p99', s99, 4, ' ms']])])
    const split = (k: RefKey) => {
      const d = stag[c].direct
      return `${plus(pct(stag[c][k].up, 50) - pct(d.up, 50))} / ${plus(pct(stag[c][k].down, 50) - pct(d.down, 50))} ms`
    }
    issue.push(['  ...of it, added p50 on the way to the provider / on the way back', split('pass'), split('sluice'), '', ''])
    if (nginx !== null) {
      const [n50, n99] = added(stag, c, 'nginx')
      issue.push([`  the same blocks through nginx ${nginx.version} (C; its own quota, same core): added p50 / p99; to / back`, `${plus(n50)} / ${plus(n99)} ms; ${split('nginx')}`, '', '', `nginx vs the target: ${verdict([['p50', n50, 1, ' ms'], ['p99', n99, 4, ' ms']])}`])
    }
  }
  {
    const a = (k: Exclude<RefKey, 'direct'>) => { const [a50, a99] = added({ 96: afterQuiet }, 96, k); return `${plus(a50)} / ${plus(a99)} ms` }
    issue.push([`  96 in flight, the first block after ${IDLE_READ_MS / 1000} s idle (sluice's worker has collected its heap)`, a('pass'), a('sluice'), '(after a quiet period)', nginx === null ? '' : `nginx: ${a('nginx')}`])
  }
  for (const c of [32, 96]) {
    const [p50, p99] = added(lat, c, 'pass')
    const [s50, s99] = added(lat, c, 'sluice')
    issue.push([`  ${c} streams started in the same ms (a burst)`, `${plus(p50)} / ${plus(p99)} ms`, `${plus(s50)} / ${plus(s99)} ms`, 'none reachable (BURST_NOTE)', `sluice - pass-through: ${plus(s50 - p50)} / ${plus(s99 - p99)} ms`])
  }
  const sharePaired = pairedRatio(share96.pass.rounds, share96.sluice.rounds)
  issue.push(['CPU share while relaying 96 streams', `${f(share('pass'))} %`, `${f(share('sluice'))} %`, '<= 1.3x the pass-through', `${f(share('sluice') / share('pass'))}x (per round ${f(sharePaired.median)}x [${f(sharePaired.lo)}..${f(sharePaired.hi)}]): ${share('sluice') / share('pass') <= 1.3 ? 'met' : 'MISSED'}`])
  const k1 = { pass: cpuPer1k(tp.pass), sluice: cpuPer1k(tp.sluice) }
  const k1paired = pairedRatio(tp.pass.blocks, tp.sluice.blocks)
  issue.push([`relay CPU per 1000 events (2000-event streams, 1 and ${TP_PAR} parallel)`, `${f(k1.pass)} ms`, `${f(k1.sluice)} ms (${f(tp.sluice.parEps / 1000)}k events/s at ${TP_PAR})`, '<= 1.5x the pass-through', `${f(k1.sluice / k1.pass)}x (per block ${f(k1paired.lo)}-${f(k1paired.hi)}x): ${k1.sluice / k1.pass <= 1.5 ? 'met' : 'MISSED'}`])
  issue.push([`RSS idle ${IDLE_READ_MS / 1000} s after warm-up / peak over all runs`, `${f(idleWarm.pass)} / ${f(hwm.pass)} MB`, `${f(idleWarm.sluice)} / ${f(hwm.sluice)} MB`, '<= 100 / <= 160 MB', verdict([['idle', idleWarm.sluice, 100, ' MB'], ['peak', hwm.sluice, 160, ' MB']])])
  issue.push([`  RSS idle ${END_READ_MS / 1000} s after the last exchange (parser thread retired)`, `${f(idleRetired.pass)} MB`, `${f(idleRetired.sluice)} MB`, '<= 100 MB', verdict([['', idleRetired.sluice, 100, ' MB']])])
  issue.push([`  RSS idle before any exchange / after 3 rounds @32: ${SOURCES ? '.ts sources' : 'compiled'} vs ${SOURCES ? 'compiled' : '.ts sources'}`, `${f(idle.pass)} MB`, `${f(idle.sluice)} vs ${f(otherIdle)} MB / - vs ${f(otherWarm)} MB`, '', ''])
  issue.push(['start to healthy (exec -> /readyz 200) under the quota', '-', `${f(pct(readyz, 50))} ms (median of ${readyz.length}: ${readyz.map(f).join(', ')})`, '<= 500 ms', verdict([['', pct(readyz, 50), 500, ' ms']])])
  console.log('')
  console.log(`issue 15 table (one run; sluice = ${SOURCES ? 'the .ts sources' : 'compiled dist/'}, 1 HTTP worker, MALLOC_ARENA_MAX=${MALLOC_ENV.MALLOC_ARENA_MAX} for both, maxActiveExchanges 128, upstream.connections 128; each under its own 1-vCPU quota; load average before ${loadBefore}, after ${loadavg()}):`)
  console.log(table(issue))
  console.log(BURST_NOTE)
  console.log(STALL_NOTE)
  console.log(`  host stalls in this run, idle, before anything started: ${stallLine(stalls)}`)
  console.log(`took ${((performance.now() - STARTED) / 1000).toFixed(1)} s`)
}

try {
  await main()
} catch (err) {
  console.error(err instanceof Error ? err.stack : err)
  process.exitCode = 1
} finally {
  await cleanup()
}
