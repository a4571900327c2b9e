// One load qualification run (`sluice load model-capacity --profile X`): the simulated
// provider and sluice as separate processes, sluice under the profile's CPU quota
// (src/load/os.ts: cgroup v2 cpu.max, else cgroup v1 CFS quota, else taskset), then three
// phases against it from this process (outside the quota):
//   team      engineers x threadsPerEngineer simultaneous threads, each a sequence of
//             exchanges cycling through chat / responses / messages, streaming and buffered,
//             with the captured client request bodies (ops/load/fixtures) steered by a
//             `#sim ttft=.. tokens=.. interval=..` line for realistic provider timing;
//   headroom  the team plus headroomThreads more threads (32 active with the defaults);
//   burst     maxActive exchanges (a few short, the rest outlasting the queue wait), then
//             maxQueued more (they queue: some are admitted as the short ones finish, the
//             rest must time out after queueWaitMs with capacity_timeout), then burstExtra
//             more that must be refused at once with capacity_exhausted.
// /healthz is probed every health.everyMs throughout and held to health.guardMs. Every 200 is
// compared byte for byte with the same request sent directly to the sim (it is
// deterministic). After the run every permit, queue slot and byte reservation in /metrics
// must be back at idle, and admissions must equal releases.

import { notIdle, scrape } from './scrape.ts'
import { moduleUrl, ROOT_URL } from '../modules.ts'
import { fileURLToPath } from 'node:url'
import { spawnSync } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { nodeHttp } from '../net/node-http.ts'
import { availableParallelism, tmpdir, totalmem } from 'node:os'
import { join } from 'node:path'
import { Agent, request } from 'undici'
import { NODE_FLAGS } from '../node-flags.ts'
import { alive, launchChild, makeQuota, noQuota, RssSampler, stopChild, tasksetQuota, type Child, type Quota } from './os.ts'
import type { Profile } from './profile.ts'
import { settingsOf } from './profile.ts'
import { hashSettings, percentiles, type Hardware, type Receipt } from './receipt.ts'

export const ROOT = ROOT_URL.pathname
// The same kind of code as this run: the sources, or dist/ when it was started compiled.
const BIN = fileURLToPath(moduleUrl('../../bin/sluice.ts', import.meta.url))
const SIM_CHILD = fileURLToPath(moduleUrl('./sim-child.ts', import.meta.url))
export const FIXTURE_DIR = join(ROOT, 'ops/load/fixtures')
const NODE = process.execPath

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
/** A sleep that does not keep the process alive (for races against a deadline). */
const deadline = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref())

// ---------------------------------------------------------------------------------------
// Request bodies

type Proto = 'chat' | 'responses' | 'messages'
interface Fixture { name: string; url: string; proto: Proto; body: Record<string, unknown> }

function protoOf (url: string): Proto {
  const p = url.split('?')[0]
  if (p === '/v1/chat/completions') return 'chat'
  if (p === '/v1/responses') return 'responses'
  if (p === '/v1/messages') return 'messages'
  throw new Error(`fixture url ${url}`)
}

export function loadFixtures (dir = FIXTURE_DIR): Fixture[] {
  return readdirSync(dir).filter((f) => f.endsWith('.request.json')).sort().map((f) => {
    const j = JSON.parse(readFileSync(join(dir, f), 'utf8')) as { url: string; body: Record<string, unknown> }
    return { name: f.replace('.request.json', ''), url: j.url, proto: protoOf(j.url), body: j.body }
  })
}

/**
 * The body with `directive` appended as a line of the last user turn's text (the sim reads it
 * there). A turn that ends in tool results carries no directive (the sim would ignore it), so
 * such a body is returned unsteered.
 */
export function steer (body: Record<string, unknown>, directive: string): { body: Record<string, unknown>; steered: boolean } {
  const b = structuredClone(body)
  const line = `\n${directive}`
  if (typeof b.input === 'string') { b.input += line; return { body: b, steered: true } }
  const list = (Array.isArray(b.messages) ? b.messages : Array.isArray(b.input) ? b.input : null) as Array<Record<string, unknown>> | null
  if (list === null) return { body: b, steered: false }
  for (let i = list.length - 1; i >= 0; i--) {
    const m = list[i]
    if (m.type === 'function_call_output' || m.role === 'tool') return { body: b, steered: false }
    if (m.role !== 'user') continue
    if (typeof m.content === 'string') { m.content += line; return { body: b, steered: true } }
    if (!Array.isArray(m.content)) return { body: b, steered: false }
    const parts = m.content as Array<Record<string, unknown>>
    if (parts.some((p) => p.type === 'tool_result')) return { body: b, steered: false }
    const texts = parts.filter((p) => (p.type === 'text' || p.type === 'input_text') && typeof p.text === 'string')
    if (texts.length === 0) return { body: b, steered: false }
    texts[texts.length - 1].text += line
    return { body: b, steered: true }
  }
  return { body: b, steered: false }
}

function buffered (body: Record<string, unknown>): Record<string, unknown> {
  const b: Record<string, unknown> = { ...body, stream: false }
  delete b.stream_options
  return b
}

// ---------------------------------------------------------------------------------------
// Child processes

export const launch = (name: string, command: [string, string[]], onLine: (line: string) => void, env?: NodeJS.ProcessEnv): Child =>
  // Per-request lines of the sim child are not kept in failure reports.
  launchChild(name, command, onLine, { env, keepInTail: (line) => !line.startsWith('{"req"') })

/** Everything a run started, for the CLI's last-resort synchronous cleanup on exit. */
export const live = { children: new Set<Child>(), quotas: new Set<Quota>() }

export function killAllSync (): void {
  for (const c of live.children) if (!c.gone) try { c.proc.kill('SIGKILL') } catch {}
  const end = Date.now() + 2000
  const nap = new Int32Array(new SharedArrayBuffer(4))
  while ([...live.children].some((c) => !c.gone && alive(c.pid)) && Date.now() < end) Atomics.wait(nap, 0, 0, 10)
  for (const q of live.quotas) q.remove()
}

// ---------------------------------------------------------------------------------------
// Probes

export function healthProbe (adminPort: number, timeoutMs: number): Promise<{ ok: boolean; ms: number }> {
  const t0 = performance.now()
  return new Promise((resolve) => {
    const req = nodeHttp.get({ host: '127.0.0.1', port: adminPort, path: '/healthz', agent: false, timeout: timeoutMs }, (res) => {
      res.resume()
      res.on('end', () => resolve({ ok: res.statusCode === 200, ms: performance.now() - t0 }))
      res.on('error', () => resolve({ ok: false, ms: performance.now() - t0 }))
    })
    req.on('error', () => resolve({ ok: false, ms: performance.now() - t0 }))
    req.on('timeout', () => { req.destroy(); resolve({ ok: false, ms: performance.now() - t0 }) })
  })
}


// ---------------------------------------------------------------------------------------
// The run

type Phase = 'team' | 'headroom' | 'burst'
type Role = 'thread' | 'active-short' | 'active-long' | 'queued' | 'extra'

interface Planned { id: string; phase: Phase; role: Role; session: string; url: string; body: Buffer; steered: boolean }

export interface ExResult {
  id: string
  phase: Phase
  role: Role
  /** ok | bytes-differ | capacity_exhausted | capacity_timeout | refusal-unnamed | status-N | error */
  kind: string
  detail?: string
  /** ms since the run's t0 */
  startMs: number
  ttfbMs: number
  totalMs: number
  queueWaitMs: number
  sendNs: bigint
}

export interface RunOutput {
  receipt: Receipt
  results: ExResult[]
  health: Array<{ t: number; ms: number; ok: boolean }>
}

export interface RunOptions {
  profile: Profile
  smoke: boolean
  /** The one progress line (called about once a second). */
  progress?: (line: string) => void
  /**
   * Use this method instead of the best the host offers (to check the refusal, or where a
   * cgroup must not be touched): 'taskset' or 'none'.
   */
  quotaMethod?: 'taskset' | 'none'
}

export function commit (): { sha: string; dirty: boolean } {
  const sha = spawnSync('git', ['-C', ROOT, 'rev-parse', 'HEAD'], { encoding: 'utf8' }).stdout?.trim() || 'unknown'
  const st = spawnSync('git', ['-C', ROOT, 'status', '--porcelain', '--', '.', ':!ops/load/receipts', ':!ops/load/baselines'], { encoding: 'utf8' }).stdout ?? ''
  return { sha, dirty: st.trim().length > 0 }
}

export function cpuModel (): string {
  let info = ''
  try { info = readFileSync('/proc/cpuinfo', 'utf8') } catch {}
  return /^model name\s*:\s*(.+)$/m.exec(info)?.[1]?.trim() ?? 'unknown CPU'
}

export async function runProfile (opts: RunOptions): Promise<RunOutput> {
  const p = opts.profile
  const L = { maxActiveExchanges: 32, maxQueuedExchanges: 128, queueWaitMs: 30_000, ...p.sluice.limits }
  const maxA = L.maxActiveExchanges
  const maxQ = L.maxQueuedExchanges
  const reasons: string[] = []
  const startIso = new Date().toISOString()
  const t0 = performance.now()
  const tmp = mkdtempSync(join(tmpdir(), 'sluice-load-'))
  const key = 'sk-load-' + randomBytes(12).toString('hex')
  const agent = new Agent({ keepAliveTimeout: 10_000, headersTimeout: 300_000, bodyTimeout: 300_000 })

  // quota
  const tag = `sluice-load-${process.pid}-${randomBytes(3).toString('hex')}`
  const { quota, quotaValue } = applyQuota(p, opts.quotaMethod, tag, reasons)

  const children: Child[] = []
  const simSeen = new Map<string, bigint>()
  let sim: Child | null = null
  let gw: Child | null = null
  let sampler: RssSampler | null = null
  let healthTimer: NodeJS.Timeout | null = null
  let progressTimer: NodeJS.Timeout | null = null
  const results: ExResult[] = []
  const health: Array<{ t: number; ms: number; ok: boolean }> = []
  const healthPending: Promise<void>[] = []
  let ledger: Receipt['ledger'] = { admissions: NaN, releases: NaN, refusals: {}, notIdle: {} }
  let peak = { sluice: NaN, sim: NaN }
  let quotaHeld = false
  let ran = false
  let throttled = ''

  try {
    // A run whose quota requirement already failed is not run at all: its figures would
    // carry the profile's name without its CPU. The receipt keeps the refusal.
    if (reasons.length > 0) throw new Refused()
    ran = true
    // the sim
    let simUrl!: (u: string) => void
    const simUrlP = new Promise<string>((resolve) => { simUrl = resolve })
    sim = launch('sim', [NODE, [SIM_CHILD]], (line) => {
      if (line.startsWith('{"req"')) {
        try { const j = JSON.parse(line) as { req: string; t: string }; simSeen.set(j.req, BigInt(j.t)) } catch {}
      } else if (line.startsWith('{"url"')) simUrl((JSON.parse(line) as { url: string }).url)
    })
    children.push(sim); live.children.add(sim)
    const simBase = await Promise.race([simUrlP, sim.exited.then(() => null), deadline(15_000).then(() => null)])
    if (simBase === null) throw new Error(`the sim did not start:\n${sim.tail}`)

    // sluice, under the quota
    const cfgFile = join(tmp, 'sluice.json')
    writeFileSync(cfgFile, JSON.stringify({
      listen: { port: 0, adminPort: 0 },
      workers: p.sluice.workers,
      limits: p.sluice.limits,
      // The sim times each request by its x-load-id: forwarded past the header allowlist.
      upstream: { forwardHeaders: ['x-load-id'], ...p.sluice.upstream },
      keys: [{ name: 'load', sha256: createHash('sha256').update(key).digest('hex'), models: ['*'] }],
      providers: [
        { name: 'sim-chat', protocol: 'openai-chat', baseUrl: simBase, models: ['gpt-4o*'] },
        { name: 'sim-responses', protocol: 'openai-responses', baseUrl: simBase, models: ['gpt-5*'] },
        { name: 'sim-messages', protocol: 'anthropic', baseUrl: simBase, models: ['claude-*'] },
      ],
    }))
    let ready!: (v: { port: number; adminPort: number }) => void
    const readyP = new Promise<{ port: number; adminPort: number }>((resolve) => { ready = resolve })
    gw = launch('sluice', quota.wrap(NODE, [...NODE_FLAGS, BIN, 'serve', '--config', cfgFile]), (line) => {
      if (!line.includes('"sluice ready"')) return
      try { const j = JSON.parse(line) as { port: number; adminPort: number }; ready({ port: j.port, adminPort: j.adminPort }) } catch {}
    }, { ...process.env, SLUICE_SIGNING_KEY: randomBytes(32).toString('hex') })
    children.push(gw); live.children.add(gw)
    const ports = await Promise.race([readyP, gw.exited.then(() => null), deadline(30_000).then(() => null)])
    if (ports === null) throw new Error(`sluice did not start:\n${gw.tail}`)
    const gwUrl = `http://127.0.0.1:${ports.port}`
    quotaHeld = p.quota !== null && quota.kind !== 'none' && quota.holds(gw.pid)
    if (p.quota !== null && p.requireQuota && quota.kind !== 'none' && !quotaHeld) reasons.push(`the ${quota.detail} quota did not hold for the sluice process`)

    sampler = new RssSampler([gw.pid, sim.pid], 100)
    sampler.window()

    // health probes throughout
    const guardMs = p.health.guardMs
    healthTimer = setInterval(() => {
      const t = performance.now() - t0
      healthPending.push(healthProbe(ports.adminPort, guardMs * 5).then((r) => { health.push({ t: Math.round(t), ms: Math.round(r.ms * 10) / 10, ok: r.ok }) }))
    }, p.health.everyMs)

    // progress
    let phase: Phase | 'settle' = 'team'
    let planned = 0
    let lastGauges = { active: 0, queued: 0 }
    progressTimer = setInterval(() => {
      void scrape(ports.adminPort).then((m) => { lastGauges = { active: m.get('sluice_exchanges_active') ?? NaN, queued: m.get('sluice_exchanges_queued') ?? NaN } }, () => {})
      const done = results.length
      const ok = results.filter((r) => r.kind === 'ok').length
      const refused = results.filter((r) => r.kind.startsWith('capacity_')).length
      const other = done - ok - refused
      const hmax = health.reduce((m, h) => Math.max(m, h.ms), 0)
      const hbad = health.filter((h) => !h.ok || h.ms > guardMs).length
      opts.progress?.(`[${p.name}] ${phase.padEnd(8)} ${done}/${planned} done: ${ok} ok, ${refused} refused, ${other} other | active ${lastGauges.active} queued ${lastGauges.queued} | health ${health.length} probes, max ${hmax.toFixed(0)} ms, ${hbad} over guard | ${((performance.now() - t0) / 1000).toFixed(0)} s`)
    }, 1000)

    // the exchanges
    const fixtures = loadFixtures()
    const byProto: Record<Proto, Fixture[]> = { chat: [], responses: [], messages: [] }
    for (const f of fixtures) byProto[f.proto].push(f)
    const expected = new Map<string, Promise<Buffer | null>>()
    const expectedBytes = (url: string, body: Buffer): Promise<Buffer | null> => {
      const k = url + ' ' + createHash('sha256').update(body).digest('hex')
      let e = expected.get(k)
      if (e === undefined) {
        e = request(simBase + url.split('?')[0], { method: 'POST', headers: { 'content-type': 'application/json' }, body, dispatcher: agent })
          .then(async (res) => res.statusCode === 200 ? Buffer.from(await res.body.arrayBuffer()) : (await res.body.dump(), null), () => null)
        expected.set(k, e)
      }
      return e
    }
    let seq = 0
    const plan = (phase: Phase, role: Role, session: string, f: Fixture, stream: boolean, directive: string): Planned => {
      const s = steer(f.body, directive)
      const body = stream ? { ...s.body, stream: true } : buffered(s.body)
      return { id: `${tag}-${seq++}`, phase, role, session, url: f.url, body: Buffer.from(JSON.stringify(body)), steered: s.steered }
    }
    const exchange = async (x: Planned): Promise<ExResult> => {
      const exp = expectedBytes(x.url, x.body)
      const sendNs = process.hrtime.bigint()
      const start = performance.now()
      const r: ExResult = { id: x.id, phase: x.phase, role: x.role, kind: 'error', startMs: Math.round(start - t0), ttfbMs: NaN, totalMs: NaN, queueWaitMs: NaN, sendNs }
      try {
        const res = await request(gwUrl + x.url, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-session-id': x.session, 'x-load-id': x.id },
          body: x.body,
          dispatcher: agent,
        })
        const chunks: Buffer[] = []
        for await (const c of res.body) {
          if (chunks.length === 0) r.ttfbMs = performance.now() - start
          chunks.push(c as Buffer)
        }
        r.totalMs = performance.now() - start
        const got = Buffer.concat(chunks)
        if (res.statusCode === 200) {
          const want = await exp
          r.kind = want !== null && got.equals(want) ? 'ok' : 'bytes-differ'
          if (r.kind !== 'ok') r.detail = want === null ? 'the direct request to the sim failed' : `${got.length} bytes, the provider's ${want.length}`
        } else if (res.statusCode === 503) {
          let j: { code?: string; error?: string; limit?: number; queueLimit?: number } = {}
          try { j = JSON.parse(got.toString('utf8')) } catch {}
          const named = (j.code === 'capacity_exhausted' || j.code === 'capacity_timeout') && /local/i.test(String(j.error)) &&
            j.limit === maxA && j.queueLimit === maxQ && res.headers['retry-after'] !== undefined
          r.kind = named ? j.code! : 'refusal-unnamed'
          if (!named) r.detail = got.toString('utf8').slice(0, 300)
        } else {
          r.kind = `status-${res.statusCode}`
          r.detail = got.toString('utf8').slice(0, 300)
        }
      } catch (e) {
        r.kind = 'error'
        r.detail = (e as Error).message
        r.totalMs = performance.now() - start
      }
      results.push(r)
      return r
    }

    const T = p.timing
    const W = p.workload
    const directiveFor = (thread: number, j: number) =>
      `#sim ttft=${T.ttftMs[(thread * 3 + j) % T.ttftMs.length]} tokens=${T.tokens[(thread + j * 5) % T.tokens.length]} interval=${T.intervalMs}`
    const KINDS: Array<[Proto, boolean]> = [['chat', true], ['responses', false], ['messages', true], ['chat', false], ['responses', true], ['messages', false]]
    const thread = async (ph: Phase, i: number, n: number): Promise<void> => {
      for (let j = 0; j < n; j++) {
        const [proto, stream] = KINDS[(i + j) % KINDS.length]
        const list = byProto[proto]
        const f = list[(i * 7 + j) % list.length]
        await exchange(plan(ph, 'thread', `${tag}-${ph}-t${i}`, f, stream, directiveFor(i, j)))
      }
    }
    const teamThreads = W.engineers * W.threadsPerEngineer
    planned = teamThreads * W.exchangesPerThread + (teamThreads + W.headroomThreads) * W.headroomExchangesPerThread + maxA + maxQ + W.burstExtra

    phase = 'team'
    await Promise.all(Array.from({ length: teamThreads }, (_, i) => thread('team', i, W.exchangesPerThread)))
    phase = 'headroom'
    await Promise.all(Array.from({ length: teamThreads + W.headroomThreads }, (_, i) => thread('headroom', i, W.headroomExchangesPerThread)))

    // burst
    phase = 'burst'
    const chat = byProto.chat[0]
    const shortD = `#sim ttft=${T.ttftMs[0]} tokens=${Math.max(1, Math.ceil((T.burstShortMs - T.ttftMs[0]) / T.intervalMs))} interval=${T.intervalMs}`
    const longInterval = 100
    const longD = `#sim ttft=${T.ttftMs[0]} tokens=${Math.ceil((L.queueWaitMs + T.burstLongMarginMs) / longInterval)} interval=${longInterval}`
    const waitGauge = async (pred: (m: Map<string, number>) => boolean, ms: number): Promise<boolean> => {
      const end = performance.now() + ms
      while (performance.now() < end) {
        try { if (pred(await scrape(ports.adminPort))) return true } catch {}
        await sleep(20)
      }
      return false
    }
    const burst: Promise<ExResult>[] = []
    for (let k = 0; k < maxA; k++) {
      const short = k < W.burstShort
      burst.push(exchange(plan('burst', short ? 'active-short' : 'active-long', `${tag}-b${k}`, chat, true, short ? shortD : longD)))
    }
    if (!await waitGauge((m) => (m.get('sluice_exchanges_active') ?? 0) >= maxA, 15_000)) reasons.push(`burst: the ${maxA} active exchanges were not all admitted within 15 s`)
    for (let k = 0; k < maxQ; k++) burst.push(exchange(plan('burst', 'queued', `${tag}-q${k}`, chat, true, shortD)))
    if (!await waitGauge((m) => (m.get('sluice_exchanges_queued') ?? 0) >= maxQ, 15_000)) reasons.push(`burst: the queue did not fill to ${maxQ} within 15 s`)
    for (let k = 0; k < W.burstExtra; k++) burst.push(exchange(plan('burst', 'extra', `${tag}-x${k}`, chat, true, shortD)))
    await Promise.all(burst)

    // settle: the ledger back at idle
    phase = 'settle'
    let m = new Map<string, number>()
    const settled = await waitGauge((mm) => {
      m = mm
      return Object.keys(notIdle(mm)).length === 0 && mm.get('sluice_admissions_total') === mm.get('sluice_releases_total')
    }, 10_000)
    try { m = await scrape(ports.adminPort) } catch {}
    const refusals: Record<string, number> = {}
    for (const [k, v] of m) {
      const r = /^sluice_refusals_total\{code="([^"]+)"\}$/.exec(k)
      if (r && v > 0) refusals[r[1]] = v
    }
    ledger = { admissions: m.get('sluice_admissions_total') ?? NaN, releases: m.get('sluice_releases_total') ?? NaN, refusals, notIdle: notIdle(m) }
    if (!settled) reasons.push(`the ledger was not back at idle 10 s after the run: ${JSON.stringify(ledger.notIdle)}, admissions ${ledger.admissions}, releases ${ledger.releases}`)
    await sleep(Math.min(500, p.health.everyMs * 3)) // a few idle probes too
    if (gw.gone) reasons.push(`sluice exited during the run:\n${gw.tail}`)
    peak = { sluice: round1(sampler.peak(gw.pid)), sim: round1(sampler.peak(sim.pid)) }
    throttled = quota.throttled()
  } catch (e) {
    if (!(e instanceof Refused)) reasons.push(`the run broke off: ${(e as Error).message}`)
  } finally {
    await tearDown({ timers: [healthTimer, progressTimer], sampler, healthPending, agent, children, quota, tmp, reasons })
  }

  // queue waits (send -> the provider saw it); for refusals, send -> refusal
  for (const r of results) {
    const seen = simSeen.get(r.id)
    r.queueWaitMs = seen !== undefined ? Number(seen - r.sendNs) / 1e6 : r.kind.startsWith('capacity_') ? r.totalMs : NaN
  }

  // checks
  const by = (pred: (r: ExResult) => boolean) => results.filter(pred)
  const count = (rs: ExResult[]) => rs.reduce<Record<string, number>>((o, r) => { o[r.kind] = (o[r.kind] ?? 0) + 1; return o }, {})
  for (const ph of ['team', 'headroom'] as const) {
    const bad = by((r) => r.phase === ph && r.kind !== 'ok')
    if (bad.length > 0) reasons.push(`${ph}: ${bad.length} ordinary exchanges did not complete exactly: ${JSON.stringify(count(bad))} (first: ${bad[0].kind} ${bad[0].detail ?? ''})`)
  }
  const burstRs = by((r) => r.phase === 'burst')
  if (burstRs.length > 0) {
    const bad = (role: Role, allowed: string[]) => by((r) => r.phase === 'burst' && r.role === role && !allowed.includes(r.kind))
    const activeBad = [...bad('active-short', ['ok']), ...bad('active-long', ['ok'])]
    if (activeBad.length > 0) reasons.push(`burst: ${activeBad.length} admitted exchanges did not complete exactly: ${JSON.stringify(count(activeBad))}`)
    const queuedBad = bad('queued', ['ok', 'capacity_timeout'])
    if (queuedBad.length > 0) reasons.push(`burst: ${queuedBad.length} queued exchanges neither completed exactly nor timed out: ${JSON.stringify(count(queuedBad))} (first: ${queuedBad[0].detail ?? ''})`)
    const extraBad = bad('extra', ['capacity_exhausted'])
    if (extraBad.length > 0) reasons.push(`burst: ${extraBad.length} exchanges past active + queue were not refused with capacity_exhausted: ${JSON.stringify(count(extraBad))}`)
    const q = by((r) => r.phase === 'burst' && r.role === 'queued')
    if (!q.some((r) => r.kind === 'ok')) reasons.push('burst: no queued exchange was admitted (the queue was not exercised)')
    if (!q.some((r) => r.kind === 'capacity_timeout')) reasons.push('burst: no queued exchange timed out (the queue timeout was not exercised)')
    const early = q.filter((r) => r.kind === 'capacity_timeout' && r.totalMs < L.queueWaitMs - 50)
    if (early.length > 0) reasons.push(`burst: ${early.length} capacity_timeout refusals came before the ${L.queueWaitMs} ms queue wait (first after ${early[0].totalMs.toFixed(0)} ms)`)
    const late = q.filter((r) => r.kind === 'capacity_timeout' && r.totalMs > L.queueWaitMs + 5000)
    if (late.length > 0) reasons.push(`burst: ${late.length} capacity_timeout refusals came more than 5 s after the queue wait`)
    const slow = by((r) => r.role === 'extra' && r.kind === 'capacity_exhausted' && r.totalMs > p.health.guardMs)
    if (slow.length > 0) reasons.push(`burst: ${slow.length} capacity_exhausted refusals were not immediate (> ${p.health.guardMs} ms)`)
  }
  const unnamed = by((r) => r.kind === 'refusal-unnamed')
  if (unnamed.length > 0) reasons.push(`${unnamed.length} 503 refusals did not name the local capacity (code, a local error, limit ${maxA}, queueLimit ${maxQ}, Retry-After): ${unnamed[0].detail}`)
  const hOver = health.filter((h) => h.ok && h.ms > p.health.guardMs).length
  const hFail = health.filter((h) => !h.ok).length
  if (ran && health.length === 0) reasons.push('no health probe ran')
  if (!ran && reasons.length > 0) reasons.push('the workload was not run')
  if (hFail > 0 || hOver > 0) reasons.push(`health guard: ${hFail} probes failed and ${hOver} took longer than ${p.health.guardMs} ms (max ${Math.max(...health.map((h) => h.ms)).toFixed(0)} ms)`)

  const outcomes: Record<string, Record<string, number>> = { total: {} }
  for (const r of results) {
    const k = r.phase === 'burst' ? `${r.role}:${r.kind}` : r.kind
    ;(outcomes[r.phase] ??= {})[k] = (outcomes[r.phase][k] ?? 0) + 1
    outcomes.total[r.kind] = (outcomes.total[r.kind] ?? 0) + 1
  }
  const lat = (rs: ExResult[]) => ({
    queueWait: percentiles(rs.filter((r) => r.kind === 'ok').map((r) => r.queueWaitMs)),
    timeToFirstByte: percentiles(rs.filter((r) => r.kind === 'ok').map((r) => r.ttfbMs)),
    total: percentiles(rs.filter((r) => r.kind === 'ok').map((r) => r.totalMs)),
  })
  const hs = health.map((h) => h.ms)
  const hp = percentiles(hs)
  const settings = settingsOf(p)
  const hardware: Hardware = {
    cpuModel: cpuModel(),
    cores: availableParallelism(),
    memoryMb: Math.round(totalmem() / 1024 / 1024),
    quotaMethod: quota.kind,
    quotaValue,
  }
  const qualification = !opts.smoke && p.quota !== null && p.requireQuota && quotaHeld && !(quota.kind === 'taskset' && p.quota.cpus < 1)
  const end = new Date().toISOString()
  const receipt: Receipt = {
    receipt: 1,
    profile: p.name,
    qualification,
    settings,
    settingsHash: hashSettings(settings),
    hardware,
    quota: { method: quota.kind, detail: quota.detail, held: quotaHeld, fallbacks: quota.fallbacks, throttled },
    node: process.versions.node,
    commit: commit(),
    start: startIso,
    end,
    durationMs: Math.round(performance.now() - t0),
    outcomes,
    latencyMs: {
      ...lat(results),
      byPhase: Object.fromEntries((['team', 'headroom', 'burst'] as const).map((ph) => [ph, lat(results.filter((r) => r.phase === ph))])),
    },
    health: { probes: health.length, failures: hFail, overGuard: hOver, guardMs: p.health.guardMs, p50: hp.p50, p99: hp.p99, max: hp.max },
    ledger,
    peakRssMb: peak,
    passed: reasons.length === 0,
    reasons,
  }
  return { receipt, results, health }
}

class Refused extends Error {}

function round1 (x: number): number { return Math.round(x * 10) / 10 }

/**
 * The CPU quota a load run puts sluice under: the best the host offers (cgroup v2, v1, then
 * taskset), or what --quota-method says; tracked in `live` for the clean-up. A profile that
 * requires its quota and cannot get it gets a reason in `reasons` (the run is then no
 * qualification of that profile). Shared by model-capacity and recall-burst.
 */
export function applyQuota (p: { name: string; quota: { cpus: number; periodUs: number } | null; requireQuota: boolean }, quotaMethod: string | undefined, tag: string, reasons: string[]): { quota: Quota; quotaValue: string } {
  let quota: Quota
  if (p.quota === null) quota = noQuota('no quota (not asked for)')
  else if (quotaMethod === 'none') quota = noQuota('no quota (--quota-method none)', ['cgroups and taskset not tried: --quota-method none'])
  else if (quotaMethod === 'taskset') quota = tasksetQuota(['cgroups not tried: --quota-method taskset']) ?? noQuota('no quota', ['taskset: not available'])
  else quota = makeQuota(tag, { quotaUs: Math.round(p.quota.cpus * p.quota.periodUs), periodUs: p.quota.periodUs })
  live.quotas.add(quota)
  const quotaValue = p.quota === null ? 'none'
    : quota.kind === 'taskset' ? '1 CPU (taskset -c 0)'
      : quota.kind === 'none' ? 'none' : `${Math.round(p.quota.cpus * p.quota.periodUs)}/${p.quota.periodUs} us (${p.quota.cpus} vCPU)`
  if (p.quota !== null && p.requireQuota) {
    if (quota.kind === 'none') reasons.push(`no CPU quota could be applied (${quota.fallbacks.join('; ')}): this is not a ${p.name} run`)
    else if (quota.kind === 'taskset' && p.quota.cpus < 1) reasons.push(`only taskset (a whole CPU) could be applied, not ${p.quota.cpus} vCPU: this is not a ${p.name} run`)
  }
  return { quota, quotaValue }
}

/**
 * The end of a load run, whatever happened: timers and the RSS sampler stopped, the last
 * health probes and the client agent settled, the children stopped, the quota's cgroup
 * removed (a reason when it cannot be), the temporary folder gone. Shared by model-capacity
 * and recall-burst.
 */
export async function tearDown (r: { timers: Array<NodeJS.Timeout | null>; sampler: RssSampler | null; healthPending: Promise<void>[]; agent: Agent; children: Child[]; quota: Quota; tmp: string; reasons: string[] }): Promise<void> {
  for (const t of r.timers) if (t !== null) clearInterval(t)
  r.sampler?.stop()
  await Promise.all(r.healthPending)
  await r.agent.destroy().catch(() => {})
  await Promise.all(r.children.map((c) => stopChild(c)))
  for (let i = 0; i < 20 && !r.quota.remove(); i++) await sleep(100)
  if (r.quota.remove()) live.quotas.delete(r.quota)
  else r.reasons.push(`could not remove the cgroup ${r.quota.dir}`)
  for (const c of r.children) live.children.delete(c)
  try { rmSync(r.tmp, { recursive: true, force: true }) } catch {}
}
