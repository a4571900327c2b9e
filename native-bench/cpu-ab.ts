// A paired A/B of CPU per exchange, for telling two builds (or settings) apart on a noisy host.
// Not one of `npm run bench`'s benchmarks (no target; a measuring tool).
//
// Every target is started side by side, each pinned to core 0 (the sim and this load on core 1),
// and warmed up; then the load goes to one target at a time, in blocks of BLOCK exchanges at C
// concurrent streams, the targets' order rotated by one every round (blockOrder). Each block's CPU per
// exchange is the target's whole process over that block (every thread's schedstat, thread by
// thread: exchange-os's cpuMsSince), so a host that slows down for a while slows every target's
// blocks alike, and the paired ratio of each block to the first target's block of the same
// round cancels most of it. Figures reported:
// the median per-block CPU per exchange, and the median (and range) of the paired ratios to the
// first target.
//
//   node native-bench/cpu-ab.ts 'old:/path/to/old/dist/bin/sluice.js|new:dist/bin/sluice.js|pass:pass'
//
// A target is `name:entry[:ENV=V,ENV2=V]`, the entry a sluice entry (started with
// src/node-flags.ts's flags, one HTTP worker, maxActiveExchanges and upstream.connections 128,
// as the exchange bench's main instance) or `pass` for the bare pass-through. The environment
// pairs go to that target's process; `LIMITS={"workerYoungGenMb":8}` is merged into its
// config's limits instead, and `FLAGS=--a --b` (space-separated) replaces src/node-flags.ts's
// list on that target's command line (to weigh a launcher flag). Env: C (96), BLOCK (480),
// BLOCKS (8), WARM (960 per target), PAUSE ms after the warm-up (300), SIMD (the sim directive,
// `ttft=20 tokens=50 interval=10`).
//
// Keep in mind when reading it: a target sits idle while the others take their blocks; with
// several targets those gaps can reach a full idle window of src/idle-gc.ts, and then that
// target collects between its blocks (SLUICE's idle collection, and the JIT state it costs,
// is then part of what is measured). Measured on this kind of host: two targets of the same
// build differed by up to 25 % when one of them had collected after the warm-up.

import { createHash } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Agent } from 'undici'
import { NODE_FLAGS } from '../src/node-flags.ts'
import { cpuMsSince, launchChild, stopChild, threadCpuNs, type Child } from './exchange-os.ts'

const C = Number(process.env.C ?? 96)
const BLOCK = Number(process.env.BLOCK ?? 480)
const BLOCKS = Number(process.env.BLOCKS ?? 8)
const WARM = Number(process.env.WARM ?? 960)
const PAUSE = Number(process.env.PAUSE ?? 300)
const SIMD = process.env.SIMD ?? 'ttft=20 tokens=50 interval=10'
const SPEC = process.argv[2] ?? `sluice:${fileURLToPath(new URL('../dist/bin/sluice.js', import.meta.url))}|pass:pass`
const HERE = fileURLToPath(new URL('.', import.meta.url))
const KEY = 'sk-cpu-ab'
const NODE = process.execPath
const tmp = mkdtempSync(join(tmpdir(), 'sluice-cpu-ab-'))

const children: Child[] = []
process.on('exit', () => {
  for (const c of children) { if (!c.gone) c.proc.kill('SIGKILL') }
  rmSync(tmp, { recursive: true, force: true })
})

/** Starts `argv` under taskset on `cpu`; resolves with its first stdout line that matches. */
async function launch (name: string, cpu: string, argv: string[], env: NodeJS.ProcessEnv, match: RegExp): Promise<{ child: Child; line: string }> {
  let seen!: (line: string) => void
  const line = new Promise<string>((resolve) => { seen = resolve })
  const child = launchChild(name, ['taskset', ['-c', cpu, ...argv]], (l) => { if (!match.test(l)) return false; seen(l); return true }, { env })
  children.push(child)
  const got = await Promise.race([line, child.exited.then(() => null)])
  if (got === null) throw new Error(`${name} exited before it was ready:\n${child.tail}`)
  return { child, line: got }
}

interface Target { name: string; child: Child; port: number; cpu: number[] }

const { line: simLine } = await launch('sim', '1', [NODE, join(HERE, 'exchange-sim.ts')], process.env, /^\{"url"/)
const simUrl = (JSON.parse(simLine) as { url: string }).url
const targets: Target[] = []
for (const [i, spec] of SPEC.split('|').entries()) {
  // name:entry[:ENV=V,...]: the environment part may hold colons (LIMITS's JSON)
  const [name, entry, ...rest] = spec.split(':')
  const envs = rest.join(':')
  const extra: Record<string, string> = Object.fromEntries(envs.split(',').filter(Boolean).map((kv) => {
    const eq = kv.indexOf('=')
    return [kv.slice(0, eq), kv.slice(eq + 1)]
  }))
  const limits = extra.LIMITS !== undefined ? JSON.parse(extra.LIMITS) as Record<string, unknown> : {}
  delete extra.LIMITS
  const flags = extra.FLAGS !== undefined ? extra.FLAGS.split(' ').filter(Boolean) : NODE_FLAGS
  delete extra.FLAGS
  let started
  if (entry === 'pass') {
    started = await launch(name, '0', [NODE, join(HERE, 'exchange-passthrough.ts'), simUrl], { ...process.env, MALLOC_ARENA_MAX: '1', ...extra }, /^\{"port"/)
  } else {
    const cfg = join(tmp, `${i}.json`)
    writeFileSync(cfg, JSON.stringify({
      listen: { port: 0, adminPort: 0 },
      workers: 1,
      limits: { maxActiveExchanges: 128, ...limits },
      upstream: { connections: 128 },
      keys: [{ name: 'ab', sha256: createHash('sha256').update(KEY).digest('hex'), models: ['*'] }],
      providers: [{ name: 'sim', protocol: 'openai-chat', baseUrl: simUrl, models: ['*'] }],
    }))
    started = await launch(name, '0', [NODE, ...flags, entry, 'serve', '--config', cfg],
      { ...process.env, MALLOC_ARENA_MAX: '1', SLUICE_SIGNING_KEY: 'a'.repeat(64), ...extra }, /"sluice ready"/)
  }
  targets.push({ name, child: started.child, port: (JSON.parse(started.line) as { port: number }).port, cpu: [] })
}

const agent = new Agent({ connections: 512, pipelining: 1 })
const payload = Buffer.from(JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: `cpu a/b\n#sim ${SIMD}` }] }))

function exchange (port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    agent.dispatch({ origin: `http://127.0.0.1:${port}`, path: '/v1/chat/completions', method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` }, body: payload }, {
      onRequestStart () {},
      onResponseStart (_c, status) { if (status !== 200) reject(new Error(`status ${status}`)) },
      onResponseData () {},
      onResponseEnd () { resolve() },
      onResponseError (_c, err) { reject(err) },
    })
  })
}

async function run (port: number, n: number): Promise<void> {
  let i = 0
  await Promise.all(Array.from({ length: C }, async () => { while (i++ < n) await exchange(port) }))
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
/**
 * Round b's order. Three or more targets: rotated by one each round, so each takes every place
 * equally often and none takes two blocks in a row. (Reversed every other round, as this tool
 * did before, the first and last targets run back to back at each turn and then sit idle for
 * twice as long. Measured with a scratch driver of the same design, 96 streams, four targets
 * and the pass-through: four identical builds came out 1.00 / 0.95 / 0.99 / 1.08 in CPU per
 * exchange, and in two runs of four different builds the last target was the costliest whatever
 * it ran; rotated, four identical builds agreed within 1.5 %.) Two targets simply alternate.
 */
const blockOrder = (b: number): readonly Target[] => targets.length < 3 ? targets : targets.map((_, i) => targets[(i + b) % targets.length])
for (const t of targets) await run(t.port, WARM)
await sleep(PAUSE)
for (let b = 0; b < BLOCKS; b++) {
  for (const t of blockOrder(b)) {
    const before = threadCpuNs(t.child.pid)
    await run(t.port, BLOCK)
    t.cpu.push(cpuMsSince(t.child.pid, before) / BLOCK)
    await sleep(30)
  }
}

const median = (xs: readonly number[]) => { const s = [...xs].sort((a, b) => a - b); return s[s.length >> 1] }
const first = targets[0]
console.log(`C=${C}, ${BLOCKS} blocks of ${BLOCK} exchanges per target ('${SIMD}'), ms of process CPU per exchange:`)
for (const t of targets) {
  const ratios = t.cpu.map((v, i) => v / first.cpu[i]).sort((a, b) => a - b)
  console.log(`${t.name.padEnd(12)} median ${median(t.cpu).toFixed(3)}   paired vs ${first.name}: ${median(ratios).toFixed(3)} [${ratios[0].toFixed(3)}..${ratios[ratios.length - 1].toFixed(3)}]`)
}
await agent.close()
await Promise.all(children.map((c) => stopChild(c)))
