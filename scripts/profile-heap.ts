// Heap profile of sluice under load, from one command (DESIGN.md "Observability"):
//
//   npm run profile:heap [-- options]
//
// Starts the simulated provider (src/load/sim-child.ts, its own process, so its allocations
// are not in the profile) and `sluice serve` in front of it under a heap profiler, drives
// `--concurrency` streaming exchanges at a time for `--seconds` (the captured client bodies of
// ops/load/fixtures, all three protocols, each steered by a `#sim` line), stops sluice,
// and prints where the profile is with a short per-thread summary. Bounded in time: it stops
// by itself, and kills what it started if anything hangs.
//
// Profilers (`--tool`):
//   node    (default) Node's own --heap-prof: one .heapprofile per thread — primary, every
//           HTTP worker, the JSON parser threads. Stopped with SIGTERM (sluice's own drain;
//           each thread writes its file as it exits).
//   clinic  `clinic heapprofiler` (clinic 13, not a dependency: found in node_modules/.bin or
//           on PATH). Stopped the way clinic expects, with SIGINT to the process group (what
//           Ctrl+C does). It samples the MAIN thread only — the primary, which carries no
//           exchange: sluice's data path runs in worker threads and is not in its HTML.
//
// What a sampling heap profile shows: the sampled allocations still live when sampling
// stopped. `--at load` (default) stops sluice while the streams are still running (drainMs
// is short in the profiling config, so the workers are stopped with exchanges in flight): the
// profile holds what in-flight exchanges keep. `--at idle` lets the load finish and the ledger
// return to idle first: what remains is what sluice retains (look here for leaks).
//
// Options:
//   --seconds N       load duration (default 20)
//   --concurrency N   simultaneous streams (default 32)
//   --workers N       HTTP worker threads (default 1)
//   --at load|idle    when to stop (default load)
//   --tool node|clinic
//   --interval BYTES  sampling interval for --tool node (default 32768; Node's own is 524288)
//   --out DIR         output directory (default tmp/heap-<time>/ in the repo; gitignored)

import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes, createHash } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { delimiter, join, relative, resolve } from 'node:path'
import { parseArgs } from 'node:util'
import { Agent, request } from 'undici'
import { launchChild, rssMb, stopChild } from '../src/load/os.ts'
import { loadFixtures, steer } from '../src/load/run.ts'
import { notIdle, scrape } from '../src/load/scrape.ts'

const ROOT = new URL('../', import.meta.url).pathname
const NODE = process.execPath
const BIN = join(ROOT, 'bin/sluice.ts')
const SIM_CHILD = join(ROOT, 'src/load/sim-child.ts')
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

const { values: a } = parseArgs({
  options: {
    seconds: { type: 'string', default: '20' },
    concurrency: { type: 'string', default: '32' },
    workers: { type: 'string', default: '1' },
    at: { type: 'string', default: 'load' },
    tool: { type: 'string', default: 'node' },
    interval: { type: 'string', default: '32768' },
    out: { type: 'string' },
  },
})
const int = (name: string, s: string): number => {
  if (!/^\d+$/.test(s) || Number(s) < 1) usage(`--${name} must be a positive integer`)
  return Number(s)
}
function usage (msg: string): never {
  process.stderr.write(`profile-heap: ${msg}\n(see the options at the top of scripts/profile-heap.ts)\n`)
  process.exit(2)
}
const seconds = int('seconds', a.seconds)
const concurrency = int('concurrency', a.concurrency)
const workers = int('workers', a.workers)
const interval = int('interval', a.interval)
if (a.at !== 'load' && a.at !== 'idle') usage('--at is load or idle')
if (a.tool !== 'node' && a.tool !== 'clinic') usage('--tool is node or clinic')
const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19)
const out = resolve(a.out ?? join(ROOT, 'tmp', `heap-${stamp}`))
mkdirSync(out, { recursive: true })

function findClinic (): string {
  const local = join(ROOT, 'node_modules/.bin/clinic')
  if (existsSync(local)) return local
  for (const dir of (process.env.PATH ?? '').split(delimiter)) if (dir && existsSync(join(dir, 'clinic'))) return join(dir, 'clinic')
  usage('--tool clinic: no clinic in node_modules/.bin or on PATH (npm install -g clinic@13.0.0)')
}
const clinic = a.tool === 'clinic' ? findClinic() : ''

// Streams must outlast the drain for --at load (so workers stop with exchanges in flight):
// about 3 s each, against a 500 ms drain.
const DIRECTIVE = '#sim ttft=50 tokens=300 interval=10'
const drainMs = a.at === 'load' ? 500 : 30_000

const t0 = performance.now()
const elapsed = () => `${((performance.now() - t0) / 1000).toFixed(1)} s`
const log = (s: string) => process.stdout.write(`[profile-heap ${elapsed()}] ${s}\n`)

let gw: ChildProcess | null = null
const killGroup = (sig: NodeJS.Signals) => { if (gw?.pid !== undefined && gw.exitCode === null && gw.signalCode === null) try { process.kill(-gw.pid, sig) } catch {} }
process.on('exit', () => killGroup('SIGKILL'))

// ---------------------------------------------------------------------------------------
// The sim, and sluice under the profiler

let simUrl!: (u: string) => void
const simUrlP = new Promise<string>((resolve) => { simUrl = resolve })
const sim = launchChild('sim', [NODE, [SIM_CHILD]], (line) => {
  if (!line.startsWith('{"url"')) return false
  simUrl((JSON.parse(line) as { url: string }).url)
  return true
})
const simBase = await Promise.race([simUrlP, sleep(15_000).then(() => null)])
if (simBase === null) { log(`the sim did not start:\n${sim.tail}`); process.exit(1) }

const key = 'sk-profile-' + randomBytes(12).toString('hex')
const cfgFile = join(out, 'sluice.json')
writeFileSync(cfgFile, JSON.stringify({
  listen: { port: 0, adminPort: 0 },
  workers,
  limits: { drainMs },
  keys: [{ name: 'profile', sha256: createHash('sha256').update(key).digest('hex'), models: ['*'] }],
  providers: [
    { name: 'sim-chat', protocol: 'openai-chat', baseUrl: simBase, models: ['gpt-4o*'] },
    { name: 'sim-responses', protocol: 'openai-responses', baseUrl: simBase, models: ['gpt-5*'] },
    { name: 'sim-messages', protocol: 'anthropic', baseUrl: simBase, models: ['claude-*'] },
  ],
}, null, 2))

const serve = [BIN, 'serve', '--config', cfgFile]
const argv = a.tool === 'node'
  ? ['--heap-prof', `--heap-prof-dir=${out}`, `--heap-prof-interval=${interval}`, ...serve]
  : [clinic, 'heapprofiler', '--open=false', '--dest', out, '--', NODE, ...serve]
log(`${a.tool === 'node' ? 'node --heap-prof' : 'clinic heapprofiler'}: sluice (${workers} worker${workers > 1 ? 's' : ''}) -> sim ${simBase}`)
// Its own process group: clinic is stopped like Ctrl+C stops it (SIGINT to the group).
gw = spawn(NODE, argv, { detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_INSIGHT: '1' } })
const gwExit = new Promise<number | null>((resolve) => gw!.once('exit', (code) => resolve(code)))
const workerThreads = new Map<number, number>() // threadId -> worker row
let tail = ''
let ready!: (v: { port: number; adminPort: number; pid: number }) => void
const readyP = new Promise<{ port: number; adminPort: number; pid: number }>((resolve) => { ready = resolve })
let buf = ''
gw.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
  buf += chunk
  let nl
  while ((nl = buf.indexOf('\n')) >= 0) {
    const line = buf.slice(0, nl)
    buf = buf.slice(nl + 1)
    if (!line.includes('"msg":"exchange"')) tail = (tail + line + '\n').slice(-4000)
    if (!line.startsWith('{')) continue
    try {
      const j = JSON.parse(line) as { msg?: string; port: number; adminPort: number; pid: number; worker: number; threadId: number }
      if (j.msg === 'sluice ready') ready(j)
      if (j.msg === 'worker started') workerThreads.set(j.threadId, j.worker)
    } catch {}
  }
})
gw.stderr!.setEncoding('utf8').on('data', (chunk: string) => { tail = (tail + chunk).slice(-4000) })
const ports = await Promise.race([readyP, gwExit.then(() => null), sleep(30_000).then(() => null)])
if (ports === null) { log(`sluice did not start:\n${tail}`); killGroup('SIGKILL'); await stopChild(sim); process.exit(1) }
log(`sluice ready (pid ${ports.pid}, data :${ports.port}, admin :${ports.adminPort}); ${concurrency} streams for ${seconds} s`)

// ---------------------------------------------------------------------------------------
// Load: `concurrency` loops of streaming exchanges until the deadline

const bodies = loadFixtures().map((f) => ({ url: f.url.split('?')[0], body: JSON.stringify({ ...steer(f.body, DIRECTIVE).body, stream: true }) }))
const agent = new Agent({ connections: concurrency * 2, keepAliveTimeout: 10_000 })
const counts = { ok: 0, failed: 0, bytes: 0 }
const failures = new Map<string, number>()
let stopping = false
let peakRss = 0
let peakHeap = 0
const sampler = setInterval(() => {
  peakRss = Math.max(peakRss, rssMb(ports.pid) || 0)
  void scrape(ports.adminPort).then((m) => {
    let h = 0
    for (const [k, v] of m) if (k.startsWith('sluice_worker_heap_bytes')) h += v
    peakHeap = Math.max(peakHeap, h)
  }, () => {})
}, 250)
const progress = setInterval(() => log(`${counts.ok} ok, ${counts.failed} failed, RSS ${rssMb(ports.pid).toFixed(0)} MB`), 5000)

async function loop (i: number): Promise<void> {
  for (let n = i; !stopping; n += concurrency) {
    const b = bodies[n % bodies.length]
    try {
      const res = await request(`http://127.0.0.1:${ports!.port}${b.url}`, {
        method: 'POST',
        dispatcher: agent,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, 'anthropic-version': '2023-06-01' },
        body: b.body,
      })
      for await (const chunk of res.body) counts.bytes += (chunk as Buffer).length
      if (res.statusCode === 200) counts.ok++
      else { counts.failed++; failures.set(String(res.statusCode), (failures.get(String(res.statusCode)) ?? 0) + 1) }
    } catch (err) {
      // After the stop signal, streams cut by the end of the drain are expected.
      if (stopping) return
      counts.failed++
      const code = (err as NodeJS.ErrnoException).code ?? 'error'
      failures.set(code, (failures.get(code) ?? 0) + 1)
    }
  }
}
const loops = Array.from({ length: concurrency }, (_, i) => loop(i))
await sleep(seconds * 1000)
stopping = true
clearInterval(progress)

if (a.at === 'idle') {
  log('load over: waiting for the streams to end and the ledger to be idle')
  await Promise.race([Promise.all(loops), sleep(30_000)])
  for (let i = 0; i < 100 && Object.keys(notIdle(await scrape(ports.adminPort).catch(() => new Map()))).length > 0; i++) await sleep(50)
}
clearInterval(sampler)
const load = { ...counts, failures: Object.fromEntries(failures) }

// ---------------------------------------------------------------------------------------
// Stop: SIGTERM (sluice drains, every thread writes its .heapprofile as it exits), or for
// clinic SIGINT to the group (clinic ignores its own, the profiled process writes its data,
// then clinic builds the HTML).

const signal = a.tool === 'node' ? 'SIGTERM' : 'SIGINT'
log(`${signal} to ${a.tool === 'node' ? 'sluice' : 'the clinic process group'}${a.at === 'load' ? ` with ${concurrency} streams running (drainMs ${drainMs})` : ''}`)
if (a.tool === 'node') gw.kill(signal)
else try { process.kill(-gw.pid!, signal) } catch {}
const code = await Promise.race([gwExit, sleep(drainMs + 60_000).then(() => 'timeout' as const)])
if (code === 'timeout') { log(`no exit within ${drainMs + 60_000} ms: killed\n${tail}`); killGroup('SIGKILL') }
await Promise.allSettled(loops)
await agent.close().catch(() => {})
await stopChild(sim)

// ---------------------------------------------------------------------------------------
// Report

interface Node { callFrame: { functionName: string; url: string; lineNumber: number }; selfSize: number; children?: Node[] }

function summarise (file: string): { live: number; sites: Array<[string, number]>; owners: Array<[string, number]>; role: string } {
  const p = JSON.parse(readFileSync(file, 'utf8')) as { head: Node }
  const sites = new Map<string, number>()
  const owners = new Map<string, number>()
  const urls = new Set<string>()
  const name = (n: Node, u: string) => `${n.callFrame.functionName || '(anonymous)'} ${u ? `${u.startsWith(ROOT) ? relative(ROOT, u) : u}:${n.callFrame.lineNumber + 1}` : '(native)'}`
  let live = 0
  // owner: the innermost frame on the stack from sluice's own files or its dependencies,
  // so bytes allocated inside node: internals are charged to the code that asked for them.
  const walk = (n: Node, owner: string): void => {
    live += n.selfSize
    const u = n.callFrame.url.replace(/^file:\/\//, '')
    urls.add(u)
    if (u.startsWith('/')) owner = name(n, u)
    if (n.selfSize > 0) {
      sites.set(name(n, u), (sites.get(name(n, u)) ?? 0) + n.selfSize)
      owners.set(owner, (owners.get(owner) ?? 0) + n.selfSize)
    }
    for (const c of n.children ?? []) walk(c, owner)
  }
  walk(p.head, '(node internals only)')
  const has = (part: string) => [...urls].some((u) => u.includes(part))
  const tid = Number(/\.\d+\.(\d+)\.\d+\.heapprofile$/.exec(file)?.[1])
  const role = tid === 0 ? 'primary'
    : workerThreads.has(tid) ? `HTTP worker ${workerThreads.get(tid)}`
      : has('/src/json/') || has('piscina') ? 'JSON parser thread' : 'other thread'
  const top = (m: Map<string, number>) => [...m].sort((x, y) => y[1] - x[1]).slice(0, 6)
  return { live, sites: top(sites), owners: top(owners), role }
}

const kb = (n: number) => `${(n / 1024).toFixed(0)} KiB`
const files = readdirSync(out).filter((f) => f !== 'sluice.json').sort()
const total = files.reduce((s, f) => s + statSync(join(out, f)).size, 0)
log(`sluice exited with ${code}; load: ${load.ok} streams ok, ${load.failed} failed${load.failed ? ` ${JSON.stringify(load.failures)}` : ''}, ${(load.bytes / 1e6).toFixed(1)} MB relayed; peak RSS ${peakRss.toFixed(0)} MB, peak worker heap ${(peakHeap / 1048576).toFixed(0)} MiB`)
process.stdout.write(`\nprofile: ${out} (${files.length} files, ${kb(total)})\n`)
if (a.tool === 'node') {
  for (const f of files.filter((f) => f.endsWith('.heapprofile'))) {
    const s = summarise(join(out, f))
    process.stdout.write(`\n  ${f}  ${s.role}, ${kb(s.live)} sampled live${a.at === 'load' ? ' at stop' : ' at idle'}\n    largest allocation sites:\n`)
    for (const [site, bytes] of s.sites) process.stdout.write(`    ${kb(bytes).padStart(9)}  ${site}\n`)
    process.stdout.write('    by the innermost frame of sluice or a dependency:\n')
    for (const [site, bytes] of s.owners) process.stdout.write(`    ${kb(bytes).padStart(9)}  ${site}\n`)
  }
  process.stdout.write('\nOpen a .heapprofile in Chrome DevTools (Memory > Load profile), in VS Code, or in speedscope. See ops/README.md "Heap profiling".\n')
} else {
  for (const f of files) process.stdout.write(`  ${f}  ${kb(statSync(join(out, f)).size)}\n`)
  const html = files.find((f) => f.endsWith('.html'))
  process.stdout.write(html ? `\nHTML: file://${join(out, html)} (the primary thread only: exchanges run in worker threads; use --tool node for those)\n` : '\nclinic wrote no HTML\n')
}
const ok = files.some((f) => f.endsWith('.heapprofile') || f.endsWith('.html'))
process.exit(ok && (code === 0 || a.tool === 'clinic') ? 0 : 1)
