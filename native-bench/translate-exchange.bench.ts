// Translated relay through the real gateway, side by side in one run with the same-protocol
// relay and the bare pass-through (issue 12 "Benchmarks"; DESIGN.md "Performance targets":
// translated streaming <= 3 ms CPU per 1000 events). Where translate.bench.ts times only the
// translation of bytes already in memory, this one runs whole exchanges over sockets:
//
//   direct         the sim's Chat route, no gateway (the baseline of "added" time)
//   pass-through   native-bench/exchange-passthrough.ts (node:http + undici, no features), Chat
//   chat->chat     `sluice serve`, a Chat client on the Chat provider (same-protocol relay)
//   responses->chat  the same sluice, a Responses client (/v1/responses) for the same model:
//                  sluice translates Chat provider events into Responses events
//   messages->chat   the same sluice, a Messages client (/v1/messages), likewise translated
//
// sluice runs with one HTTP worker and one provider, `sim-chat` (protocol openai-chat, models
// gpt-4o*); every client asks for gpt-4o-mini, so the Responses and Messages routes carry a
// model whose provider speaks another protocol, and are translated. sluice and the
// pass-through each run under their own 1-vCPU quota (exchange-os.ts: cgroup v2, else
// cgroup v1 CFS quota, else taskset; the report says which held); the sim (exchange-sim.ts)
// and the load generator (an undici Agent in this process) run outside the quotas.
//
// Figures:
//   1. added TTFB (first body byte) and added time to the first text delta, p50 / p99, at 32
//      concurrent streams (`#sim ttft=20 tokens=50 interval=10`), rounds of 32 started
//      together, the paths interleaved round by round; "added" = path pXX - direct pXX. The
//      gateway's CPU across those rounds per 1000 upstream events is reported too.
//   2. throughput: rounds of 8 parallel streams of 2000 events back to back
//      (`tokens=2000 interval=0`), paths interleaved round by round; the gateway process's CPU
//      (each thread's schedstat run time, exchange-os.ts threadCpuNs / cpuMsSince) per 1000
//      UPSTREAM events (the Chat frames the sim sent, the same for every path; a translated
//      client receives a different number of frames, shown alongside). The rounds include
//      each exchange's fixed cost (8 per 2000-event round).
//   3. the gateway's CPU per exchange, from one-delta streams (`tokens=1`) in sequence, paths
//      interleaved in batches of 40: the fixed cost; and the throughput figure less it. Each
//      CPU reading spans a whole round or batch.
//
//   node native-bench/translate-exchange.bench.ts [--quick] [--cpu-prof-dir DIR]
// (also run by `npm run bench`). --cpu-prof-dir runs sluice under `node --cpu-prof` and leaves
// its profiles (primary and worker threads) in DIR. Prints one table; exits 0 unless it crashed — a missed target
// is reported, never a failure. Takes about 60 s (--quick 25 s) on the loaded 2-core host; past
// 110 s no further round starts, and at 165 s it exits (run.ts kills a bench at 180 s).

import { createHash, randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Agent } from 'undici'
import { NODE_FLAGS } from '../src/node-flags.ts'
import { cpuMsSince, launchChild, machine, makeQuota, stopChild, threadCpuNs, type Child, type Quota } from './exchange-os.ts'
import { killAllSync, live } from '../src/load/run.ts'

const QUICK = process.argv.includes('--quick')
const profIdx = process.argv.indexOf('--cpu-prof-dir')
const PROFILE_DIR = profIdx >= 0 ? process.argv[profIdx + 1] : undefined
const HERE = fileURLToPath(new URL('.', import.meta.url))
const BIN = fileURLToPath(new URL('../bin/sluice.ts', import.meta.url))
const NODE = process.execPath
const KEY = 'sk-bench-translate-' + randomBytes(8).toString('hex')
const STARTED = performance.now()

const CONC = 32
const LAT_ROUNDS = QUICK ? 3 : 8
const TP_PAR = 8
const TP_ROUNDS = QUICK ? 3 : 10
const MODEL = 'gpt-4o-mini'
const LATENCY = 'ttft=20 tokens=50 interval=10'
const THROUGHPUT = 'tokens=2000 interval=0'
const TINY = 'tokens=1'
const PER_EX_BATCHES = QUICK ? 3 : 6 // of PER_EX_BATCH one-delta streams in sequence per path, paths interleaved
const PER_EX_BATCH = 40

// run.ts SIGKILLs a benchmark after 180 s, which would leave sluice running (it does not watch
// its stdin): past SOFT_MS no further round starts (the report counts the rounds done), and
// at HARD_MS the process exits, its 'exit' handler killing the children and the cgroups.
const SOFT_MS = 110_000
const HARD_MS = 165_000
const late = () => performance.now() - STARTED > SOFT_MS
setTimeout(() => { console.error(`translate-exchange bench: over its own ${HARD_MS / 1000} s bound, stopping`); void leave(1) }, HARD_MS).unref()

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
const deadline = (ms: number) => new Promise<null>((resolve) => setTimeout(() => resolve(null), ms).unref())

// ---------------------------------------------------------------------------------------
// The client protocols: route, body, and what marks the first text delta and a complete stream

type Proto = 'chat' | 'responses' | 'messages'
interface Wire { path: string; body: (directive: string) => Buffer; firstDelta: string; end: string }
const text = (directive: string) => `translate exchange bench\n#sim ${directive}`
const WIRE: Record<Proto, Wire> = {
  chat: {
    path: '/v1/chat/completions',
    body: (d) => Buffer.from(JSON.stringify({ model: MODEL, stream: true, messages: [{ role: 'user', content: text(d) }] })),
    firstDelta: '"delta":{"content"',
    end: 'data: [DONE]\n\n',
  },
  responses: {
    path: '/v1/responses',
    body: (d) => Buffer.from(JSON.stringify({ model: MODEL, stream: true, input: text(d) })),
    firstDelta: 'event: response.output_text.delta\n',
    end: 'event: response.completed\n',
  },
  messages: {
    path: '/v1/messages',
    body: (d) => Buffer.from(JSON.stringify({ model: MODEL, stream: true, max_tokens: 4096, messages: [{ role: 'user', content: text(d) }] })),
    firstDelta: 'event: content_block_delta\n',
    end: 'event: message_stop\n',
  },
}

// ---------------------------------------------------------------------------------------
// The load generator: one undici Agent, the dispatch API

const agent = new Agent({ connections: 256, pipelining: 1, headersTimeout: 20_000, bodyTimeout: 20_000 })

interface Result { ok: boolean; ttfb: number; tDelta: number; frames: number; error?: string }

function stream (origin: string, proto: Proto, payload: Buffer): Promise<Result> {
  const w = WIRE[proto]
  return new Promise((resolve) => {
    let status = 0
    let ttfb = -1
    let tDelta = -1
    let frames = 0
    let lastNl = false
    let ended = false
    let carry = ''
    const t0 = performance.now()
    agent.dispatch({ origin, path: w.path, method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` }, body: payload }, {
      onRequestStart () {},
      onResponseStart (_c, code) { status = code },
      onResponseData (_c, chunk) {
        const now = performance.now()
        if (ttfb < 0) ttfb = now - t0
        // SSE frame ends ("\n\n"), also across chunk boundaries.
        if (lastNl && chunk[0] === 10) frames++
        for (let i = chunk.indexOf('\n\n'); i >= 0; i = chunk.indexOf('\n\n', i + 2)) frames++
        lastNl = chunk[chunk.length - 1] === 10
        // Markers searched in the chunk plus the tail of the one before (split markers).
        const s = carry + chunk.toString('latin1')
        if (tDelta < 0 && s.includes(w.firstDelta)) tDelta = now - t0
        if (!ended && s.includes(w.end)) ended = true
        carry = s.slice(-64)
      },
      onResponseEnd () {
        const ok = status === 200 && ended && tDelta >= 0
        resolve({ ok, ttfb, tDelta, frames, error: ok ? undefined : `status ${status}, ${ended ? '' : 'no terminal event'}${tDelta < 0 ? ', no text delta' : ''}` })
      },
      onResponseError (_c, err) { resolve({ ok: false, ttfb, tDelta, frames, error: err.message }) },
    })
  })
}

// ---------------------------------------------------------------------------------------
// Processes (killed on the way out whatever happens: killAllSync of the load runner)

const tmp = mkdtempSync(join(tmpdir(), 'sluice-translate-bench-'))
/** Stops every child (SIGTERM, then SIGKILL), then removes the cgroups and the temporary files; once. */
let cleaning: Promise<void> | null = null
function cleanup (): Promise<void> {
  cleaning ??= (async () => {
    await agent.destroy().catch(() => {})
    await Promise.all([...live.children].map((c) => stopChild(c, 3000, 2000)))
    for (const q of live.quotas) q.remove()
    try { rmSync(tmp, { recursive: true, force: true }) } catch {}
  })()
  return cleaning
}
/** Leaves after the cleanup (a killed child must be reaped before its cgroup can go). */
function leave (code: number): Promise<never> {
  process.exitCode = code
  setTimeout(() => process.exit(code), 8000).unref()
  return cleanup().finally(() => process.exit(code)) as Promise<never>
}
// Last resort if the process exits without cleanup: SIGKILL what is left (the load runner's).
process.on('exit', () => { killAllSync(); try { rmSync(tmp, { recursive: true, force: true }) } catch {} })
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => { void leave(130) })

function launch (name: string, command: [string, string[]], onLine: (line: string) => boolean, env?: NodeJS.ProcessEnv): Child {
  const c = launchChild(name, command, onLine, { env })
  live.children.add(c)
  return c
}

async function startWithLine<T> (name: string, command: [string, string[]], parse: (line: string) => T | undefined, env?: NodeJS.ProcessEnv): Promise<{ child: Child; v: T }> {
  let got!: (v: T) => void
  const p = new Promise<T>((resolve) => { got = resolve })
  const child = launch(name, command, (line) => {
    let v: T | undefined
    try { v = parse(line) } catch {}
    if (v === undefined) return false
    got(v)
    return true
  }, env)
  const v = await Promise.race([p, child.exited.then(() => null), deadline(30_000)])
  if (v === null) throw new Error(`${name} did not start:\n${child.tail}`)
  return { child, v }
}

function startSluice (simUrl: string, quota: Quota) {
  const file = join(tmp, 'sluice.json')
  writeFileSync(file, JSON.stringify({
    listen: { port: 0, adminPort: 0 },
    workers: 1,
    keys: [{ name: 'bench', sha256: createHash('sha256').update(KEY).digest('hex'), models: ['*'] }],
    // One Chat provider: the Responses and Messages routes reach gpt-4o* only by translation.
    providers: [{ name: 'sim-chat', protocol: 'openai-chat', baseUrl: simUrl, models: ['gpt-4o*'] }],
  }))
  const prof = PROFILE_DIR !== undefined ? ['--cpu-prof', '--cpu-prof-dir', PROFILE_DIR] : []
  return startWithLine('sluice', quota.wrap(NODE, [...NODE_FLAGS, ...prof, BIN, 'serve', '--config', file]),
    (line) => line.includes('"sluice ready"') ? (JSON.parse(line) as { port: number }).port : undefined,
    { ...process.env, SLUICE_SIGNING_KEY: randomBytes(32).toString('hex') })
}

// ---------------------------------------------------------------------------------------
// Measurements

type Key = 'direct' | 'pass' | 'chat' | 'responses' | 'messages'
interface Path { key: Key; label: string; origin: string; proto: Proto; pid: number | null }
interface Acc { ttfb: number[]; tDelta: number[]; frames: number; streams: number; cpuMs: number; errors: number; firstError?: string }
const newAcc = (): Acc => ({ ttfb: [], tDelta: [], frames: 0, streams: 0, cpuMs: 0, errors: 0 })

/** n streams started together on p; the gateway's CPU across the round is added to acc. */
async function round (p: Path, n: number, payload: Buffer, acc: Acc | null): Promise<void> {
  const c0 = p.pid === null ? null : threadCpuNs(p.pid)
  const rs = await Promise.all(Array.from({ length: n }, () => stream(p.origin, p.proto, payload)))
  const cpu = p.pid === null ? 0 : cpuMsSince(p.pid, c0!)
  if (acc === null) return
  acc.cpuMs += cpu
  for (const r of rs) {
    if (!r.ok) { acc.errors++; acc.firstError ??= r.error; continue }
    acc.ttfb.push(r.ttfb); acc.tDelta.push(r.tDelta); acc.frames += r.frames; acc.streams++
  }
}

/** n streams one after the other on p, the gateway's CPU read once around all of them. */
async function sequence (p: Path, n: number, payload: Buffer, acc: Acc): Promise<void> {
  const c0 = p.pid === null ? null : threadCpuNs(p.pid)
  const rs: Result[] = []
  for (let i = 0; i < n; i++) rs.push(await stream(p.origin, p.proto, payload))
  acc.cpuMs += p.pid === null ? 0 : cpuMsSince(p.pid, c0!)
  for (const r of rs) {
    if (!r.ok) { acc.errors++; acc.firstError ??= r.error; continue }
    acc.streams++
  }
}

function pct (xs: number[], p: number): number {
  if (xs.length === 0) return NaN
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]
}

const f = (x: number): string => !Number.isFinite(x) ? 'n/a' : Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 10 ? x.toFixed(1) : x.toFixed(2)
const plus = (x: number): string => (Number.isFinite(x) && x >= 0 ? '+' : '') + f(x)
function table (rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)))
  return rows.map((r) => r.map((c, i) => i === r.length - 1 ? c : c.padEnd(widths[i])).join('  ').trimEnd()).join('\n')
}
const loadavg = (): string => { try { return readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ') } catch { return '?' } }

async function main (): Promise<void> {
  const loadBefore = loadavg()
  const tag = `sluice-translate-bench-${process.pid}`
  const qGw = makeQuota(`${tag}-gw`); live.quotas.add(qGw)
  const qPass = makeQuota(`${tag}-pass`); live.quotas.add(qPass)

  const { child: sim, v: simUrl } = await startWithLine('sim', [NODE, [join(HERE, 'exchange-sim.ts')]],
    (line) => (JSON.parse(line) as { url?: string }).url)
  const { child: pass, v: passPort } = await startWithLine('pass-through', qPass.wrap(NODE, [join(HERE, 'exchange-passthrough.ts'), simUrl]),
    (line) => (JSON.parse(line) as { port?: number }).port)
  const { child: gw, v: gwPort } = await startSluice(simUrl, qGw)
  const held = { sluice: qGw.holds(gw.pid), pass: qPass.holds(pass.pid) }
  const gwOrigin = `http://127.0.0.1:${gwPort}`

  const paths: Path[] = [
    { key: 'direct', label: 'direct (sim)', origin: simUrl, proto: 'chat', pid: null },
    { key: 'pass', label: 'pass-through', origin: `http://127.0.0.1:${passPort}`, proto: 'chat', pid: pass.pid },
    { key: 'chat', label: 'sluice chat->chat', origin: gwOrigin, proto: 'chat', pid: gw.pid },
    { key: 'responses', label: 'sluice responses->chat', origin: gwOrigin, proto: 'responses', pid: gw.pid },
    { key: 'messages', label: 'sluice messages->chat', origin: gwOrigin, proto: 'messages', pid: gw.pid },
  ]
  const body = (p: Path, d: string) => WIRE[p.proto].body(d)

  // Upstream frames per stream, counted on the direct path (the sim is deterministic in count).
  const upstreamFrames = async (d: string): Promise<number> => {
    const r = await stream(simUrl, 'chat', WIRE.chat.body(d))
    if (!r.ok) throw new Error(`the sim's stream failed: ${r.error}`)
    return r.frames
  }
  const upLat = await upstreamFrames(LATENCY)
  const upTp = await upstreamFrames(THROUGHPUT)

  // 1. latency at 32 streams, interleaved
  const lat = Object.fromEntries(paths.map((p) => [p.key, newAcc()])) as Record<Key, Acc>
  for (const p of paths) { await round(p, CONC, body(p, LATENCY), null); await sleep(30) } // warm-up
  const done = { lat: 0, tp: 0, ex: 0 }
  for (let r = 0; r < LAT_ROUNDS && (r === 0 || !late()); r++, done.lat++) {
    for (const p of paths) { await round(p, CONC, body(p, LATENCY), lat[p.key]); await sleep(30) }
  }
  // 2. throughput, interleaved
  const tp = Object.fromEntries(paths.map((p) => [p.key, newAcc()])) as Record<Key, Acc>
  for (const p of paths) await round(p, TP_PAR, body(p, THROUGHPUT), null) // warm-up
  for (let r = 0; r < TP_ROUNDS && (r === 0 || !late()); r++, done.tp++) {
    for (const p of paths) await round(p, TP_PAR, body(p, THROUGHPUT), tp[p.key])
  }
  // 3. the fixed cost per exchange: one-delta streams in sequence, interleaved in batches
  const perEx = Object.fromEntries(paths.map((p) => [p.key, newAcc()])) as Record<Key, Acc>
  for (const p of paths) await round(p, 1, body(p, TINY), null) // warm-up
  for (let b = 0; b < PER_EX_BATCHES && (b === 0 || !late()); b++, done.ex++) {
    for (const p of paths) await sequence(p, PER_EX_BATCH, body(p, TINY), perEx[p.key])
  }
  const throttled = { sluice: qGw.throttled(), pass: qPass.throttled() }
  await Promise.all([stopChild(gw, 5000, 2000), stopChild(pass, 5000, 2000), stopChild(sim, 5000, 2000)])
  for (const q of live.quotas) q.remove()

  // ---- report
  const cols = paths.map((p) => p.label)
  const rows: string[][] = [['figure', ...cols, 'target (translated)', 'translated vs target']]
  const d = lat.direct
  const added = (k: Key, what: 'ttfb' | 'tDelta', q: number) => pct(lat[k][what], q) - pct(d[what], q)
  const translated: Key[] = ['responses', 'messages']
  const verdict = (xs: Array<[string, number, number]>): string => {
    const missed = xs.filter(([, x, max]) => !(x <= max))
    return missed.length === 0 ? 'met' : 'MISSED: ' + missed.map(([w, x, max]) => `${w} ${f(x)} > ${f(max)}`).join(', ')
  }
  for (const what of ['ttfb', 'tDelta'] as const) {
    const name = what === 'ttfb' ? `TTFB @${CONC}, ms p50 / p99` : `first text delta @${CONC}, ms p50 / p99`
    rows.push([name, ...paths.map((p) => p.key === 'direct'
      ? `${f(pct(d[what], 50))} / ${f(pct(d[what], 99))}`
      : `${plus(added(p.key, what, 50))} / ${plus(added(p.key, what, 99))}`),
    what === 'ttfb' ? '+<=1 / +<=4' : '-',
    what === 'ttfb' ? verdict(translated.flatMap((k): Array<[string, number, number]> => [[`${k} p50`, added(k, what, 50), 1], [`${k} p99`, added(k, what, 99), 4]])) : ''])
  }
  const per1k = (a: Acc, up: number) => a.cpuMs / (a.streams * up / 1000)
  rows.push([`CPU ms per 1000 upstream events @${CONC} (latency rounds)`, ...paths.map((p) => p.pid === null ? '-' : f(per1k(lat[p.key], upLat))), '-', ''])
  rows.push([`CPU ms per 1000 upstream events, throughput (${f(tp.chat.streams * upTp / 1000)}k events per path)`,
    ...paths.map((p) => p.pid === null ? '-' : f(per1k(tp[p.key], upTp))),
    '<=3', verdict(translated.map((k): [string, number, number] => [k, per1k(tp[k], upTp), 3]))])
  rows.push(['  translated / same-protocol (chat->chat), throughput', ...paths.map((p) => translated.includes(p.key) ? `${f(per1k(tp[p.key], upTp) / per1k(tp.chat, upTp))}x` : '-'), '-', ''])
  const exMs = (k: Key) => perEx[k].cpuMs / perEx[k].streams
  rows.push([`CPU ms per exchange (${done.ex * PER_EX_BATCH} one-delta streams in sequence)`, ...paths.map((p) => p.pid === null ? '-' : f(exMs(p.key))), '-', ''])
  // The throughput rounds less their exchanges' fixed cost: the per-event relay cost alone.
  const perEvent = (k: Key) => (tp[k].cpuMs - tp[k].streams * exMs(k)) / (tp[k].streams * upTp / 1000)
  rows.push(['  throughput CPU per 1000 events less the per-exchange cost', ...paths.map((p) => p.pid === null ? '-' : f(perEvent(p.key))), '-', ''])
  rows.push(['client frames per upstream frame, throughput', ...paths.map((p) => f(tp[p.key].frames / (tp[p.key].streams * upTp))), '-', ''])

  const errs = paths.flatMap((p) => [[`lat.${p.key}`, lat[p.key]] as const, [`tp.${p.key}`, tp[p.key]] as const, [`perExchange.${p.key}`, perEx[p.key]] as const]).filter(([, a]) => a.errors > 0)
  const q = (name: string, quota: Quota, ok: boolean, thr: string) => `${name}: ${quota.detail} ${ok ? 'held' : 'DID NOT HOLD'}${thr ? ` (${thr})` : ''}`
  console.log(`translate exchange bench — Node ${process.versions.node}, ${machine()}${QUICK ? ' (--quick)' : ''}; load average before ${loadBefore}, after ${loadavg()} (other work on the host skews the figures: compare within one run)`)
  console.log(`quota, 1 vCPU each: ${q('sluice', qGw, held.sluice, throttled.sluice)}; ${q('pass-through', qPass, held.pass, throttled.pass)}`)
  if (qGw.fallbacks.length > 0) console.log(`  not used: ${qGw.fallbacks.join('; ')}`)
  console.log(`sluice: 1 worker, provider sim-chat (openai-chat, gpt-4o*); every client asks for ${MODEL}: Responses and Messages clients are translated`)
  console.log(`latency: #sim ${LATENCY} (${upLat} upstream frames), ${done.lat} rounds of ${CONC} streams started together, paths interleaved; added = path pXX - direct pXX`)
  console.log(`throughput: #sim ${THROUGHPUT} (${upTp} upstream frames), ${done.tp} rounds of ${TP_PAR} parallel streams, paths interleaved; gateway CPU = the run time of each of its threads (schedstat)`)
  console.log('')
  console.log(table(rows))
  console.log('')
  if (done.lat < LAT_ROUNDS || done.tp < TP_ROUNDS || done.ex < PER_EX_BATCHES) console.log(`cut short past ${SOFT_MS / 1000} s: ${done.lat}/${LAT_ROUNDS} latency rounds, ${done.tp}/${TP_ROUNDS} throughput rounds, ${done.ex}/${PER_EX_BATCHES} per-exchange batches`)
  console.log(`errors: ${errs.length === 0 ? 'none' : errs.map(([k, a]) => `${k}=${a.errors} (first: ${a.firstError})`).join(', ')}`)
  if (PROFILE_DIR !== undefined) console.log(`cpu profiles of sluice: ${PROFILE_DIR}`)
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
