// One recall-burst qualification run (`sluice load recall-burst --profile X`): seed 003's
// workload. The simulated provider (src/load/sim-child.ts --script, outside any quota) and
// sluice (under the profile's CPU quota, src/load/os.ts) as separate processes; sluice has
// three sim providers, one per protocol, and every session is one of the nine client ->
// provider pairs (three same-protocol, six translated).
//
// A wave is S sessions x R rounds. One round of one session:
//   opening  a stream steered by `#sim tools=N call=... parallel stagger args={"input":"<marker>"}`
//            (1..8 parallel function / namespace / custom / tool_search calls; from the Chat
//            provider the argument deltas of different calls interleave), possibly carrying an
//            injected provider fault scoped to one account's key (`fault_key`: account `a` of
//            the provider resets before the first byte, is out with 503s for one round on the
//            Responses provider, answers 429 to the rate-limited sessions of the Messages
//            provider) -> the gateway retries it before the first byte on another account of
//            the three each provider has, and the client sees the answer;
//   tools    the client sleeps 10..500 ms (the simulated tool latency), then waits at the
//            round's barrier until every session of the wave has its tool results;
//   recall   all sessions send the calls and their tool outputs at the same instant; the
//            provider answers text.
// A quarter of the streams are aborted by the client mid-stream and sent again; every fifth
// session reads slowly. The conversation grows round by round (each body carries the earlier
// rounds), as an agent's does.
//
// Waves: warm-up, then identical sustained waves (the same draws: every random choice comes
// from the profile's seed, the session and the round), then identical burst waves (64 sessions).
//
// Pass (each failure is a reason in the verdict):
//   isolation  every stream a session received (whole, or as far as a cancel let it go) is
//              the provider's answer to that very request: the sim says, per x-load-id, what it
//              answered (its response id, each call's id key, the text: sim-child --script) and
//              the session's marker is in every call's arguments; and no id is ever seen by two
//              markers;
//   idle       after every wave every application-owned gauge (scrape.ts IDLE_GAUGES: exchanges,
//              lanes, parse permits and envelopes, storage bytes, stream readers / pending /
//              inspector bytes, tool-argument and translation bytes, continuation pins) is 0 and
//              admissions = releases; the storage budget has no waiters (try-reserve, never a
//              queue): the only waiters are the exchange, parse and lane queues, in that list;
//   retention  the store, lane table and event ring gauges after each wave equal the first's;
//   RSS        the least-squares slope of sluice's idle RSS (median of 5 samples after the
//              wave's settle) over the measured sustained waves is at most
//              rss.slopeToleranceMbPerWave (its standard error is in the receipt too);
//   retries    `sluice_retries_after_commit_total`, read from the gateway, is 0 (missing fails);
//              `sluice_retries_total{reason}` equals, reason by reason, the faults the sim fired
//              (reset -> reset, 503 -> status, 429 -> rate_limited), and their sum the repeated
//              requests the sim saw (same x-load-id); `sluice_provider_in_flight` and every
//              account's in-flight gauge are 0 after every wave;
//   every round completes (with the client's own re-sends), every exchange that carried a fault
//   directive ends 200 whole (retried on another account, or never on the faulty one), no
//   stream fails that the client did not cut, health guard.

import { createHash, randomBytes } from 'node:crypto'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { availableParallelism, tmpdir, totalmem } from 'node:os'
import { join } from 'node:path'
import { Agent, request } from 'undici'
import { NODE_FLAGS } from '../node-flags.ts'
import { launchChild, rssMb, RssSampler, type Child } from './os.ts'
import { percentiles } from './receipt.ts'
import { hashSettings } from './receipt.ts'
import { recallSettingsOf, type RecallProfile } from './recall-profile.ts'
import { retryReasons, slope, slopeError, type ChartPoint, type RecallReceipt, type RetryAccount, type WaveRecord } from './recall-receipt.ts'
import { buildBody, checkStream, CLIENT_PATH, CLIENT_WIRE, parseStream, TOOLS, type ClientProto, type GotCall, type GotStream, type ProviderProto, type Said, type ToolAsk, type Turn } from './recall-wire.ts'
import { applyQuota, commit, cpuModel, healthProbe, live, ROOT, tearDown } from './run.ts'
import { notIdle, scrape } from './scrape.ts'

const BIN = join(ROOT, 'bin/sluice.ts')
const SIM_CHILD = join(ROOT, 'src/load/sim-child.ts')
const NODE = process.execPath
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
const deadline = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref())

/** The nine client -> provider pairs; session i runs PAIRS[i % 9]. */
export const PAIRS: ReadonlyArray<[ClientProto, ProviderProto]> = [
  ['responses', 'openai-chat'], ['chat', 'openai-chat'], ['messages', 'openai-chat'],
  ['responses', 'openai-responses'], ['chat', 'openai-responses'], ['messages', 'openai-responses'],
  ['responses', 'anthropic'], ['chat', 'anthropic'], ['messages', 'anthropic'],
]
const MODEL: Readonly<Record<ProviderProto, string>> = { 'openai-chat': 'rb-chat-model', 'openai-responses': 'rb-resp-model', anthropic: 'rb-msg-model' }
const PROVIDER_NAME: Readonly<Record<ProviderProto, string>> = { 'openai-chat': 'sim-chat', 'openai-responses': 'sim-responses', anthropic: 'sim-messages' }

/** Gauges that must not grow from one identical wave to the next (what a wave could leave behind). */
export const RETAINED_GAUGES = [
  'sluice_continuation_bytes', 'sluice_continuation_entries', 'sluice_continuation_blob_bytes', 'sluice_continuation_tombstones',
  'sluice_sessions', 'sluice_session_events_bytes', 'sluice_session_event_streams',
]

/** A deterministic draw in [0, 1) from the seed and some integers (identical waves draw the same). */
export function draw (...xs: number[]): number {
  let h = 0x811c9dc5
  for (const x of xs) {
    h = Math.imul(h ^ (x & 0xffff), 0x01000193)
    h = Math.imul(h ^ (x >>> 16), 0x01000193)
    h ^= h >>> 15
    h = Math.imul(h, 0x2c1b3c6d)
    h ^= h >>> 12
  }
  return (h >>> 0) / 2 ** 32
}

class Barrier {
  private readonly n: number
  private waiting: Array<() => void> = []
  releasedAt = 0
  constructor (n: number) { this.n = n }
  arrive (): Promise<void> {
    return new Promise((resolve) => {
      this.waiting.push(resolve)
      if (this.waiting.length === this.n) {
        this.releasedAt = performance.now()
        for (const w of this.waiting) w()
        this.waiting = []
      }
    })
  }
}

type Fault = 'reset-before-first-byte' | 'status-503' | 'status-429' | null

/** One client request as sent and what came back. */
interface Ex {
  wave: number
  session: number
  round: number
  phase: 'open' | 'recall'
  attempt: number
  client: ClientProto
  loadId: string
  marker: string
  asks: readonly ToolAsk[]
  fault: Fault
  cancelPlanned: boolean
  kind: string
  detail?: string
  status: number
  got: GotStream | null
  startMs: number
  sendAt: number
  ttfbMs: number
  totalMs: number
}

export interface RecallOptions {
  profile: RecallProfile
  smoke: boolean
  progress?: (line: string) => void
  quotaMethod?: 'taskset' | 'none'
}

export interface RecallOutput { receipt: RecallReceipt; points: ChartPoint[] }

export async function runRecall (opts: RecallOptions): Promise<RecallOutput> {
  const p = opts.profile
  const W = p.workload
  const T = p.timing
  const reasons: string[] = []
  const startIso = new Date().toISOString()
  const t0 = performance.now()
  const tmp = mkdtempSync(join(tmpdir(), 'sluice-recall-'))
  const key = 'sk-load-' + randomBytes(12).toString('hex')
  const agent = new Agent({ keepAliveTimeout: 10_000, headersTimeout: 120_000, bodyTimeout: 120_000, connections: 256 })
  const runHex = randomBytes(3).toString('hex')
  const tag = `sluice-recall-${process.pid}-${runHex}`

  // quota (as model-capacity: the best the host offers, or what --quota-method says)
  const { quota, quotaValue } = applyQuota(p, opts.quotaMethod, tag, reasons)

  const children: Child[] = []
  const upstreamSeen = new Map<string, number>()
  const said = new Map<string, Said>()
  let sim: Child | null = null
  let gw: Child | null = null
  let sampler: RssSampler | null = null
  let healthTimer: NodeJS.Timeout | null = null
  let progressTimer: NodeJS.Timeout | null = null
  const health: Array<{ t: number; ms: number; ok: boolean }> = []
  const healthPending: Promise<void>[] = []
  const waves: WaveRecord[] = []
  const points: ChartPoint[] = []
  const allEx: Array<Pick<Ex, 'phase' | 'kind' | 'ttfbMs' | 'totalMs' | 'fault' | 'detail'>> = []
  const faults: Record<string, number> = {}
  const idOwner = new Map<string, string>()
  const iso = { streams: 0, calls: 0, violations: 0, first: [] as string[] }
  let ledger: RecallReceipt['ledger'] = { admissions: NaN, releases: NaN, refusals: {}, notIdle: {} }
  let afterCommit: number | null = null
  const byReason: Record<string, number> = {}
  const faultsHit: Record<string, number> = {}
  const accountSeen = new Map<string, number>()
  const HIT_KIND: Record<number, string> = { 0: 'reset-before-first-byte', 503: 'status-503', 429: 'status-429' }
  // every provider's account keys (throwaway, this run's only), and which account each key is
  // accounts a, b, c, ...; the first W.faultyAccounts of each provider are the faulty ones
  const ACCOUNTS = Array.from({ length: p.sluice.accounts }, (_, k) => String.fromCharCode(97 + k))
  const FAULTY = new Set(ACCOUNTS.slice(0, W.faultyAccounts))
  if (!(W.faultyAccounts >= 1 && W.faultyAccounts < ACCOUNTS.length)) throw new Error(`faultyAccounts must be 1 to ${ACCOUNTS.length - 1} (one account at least must be free)`)
  const accountKeys = {} as Record<ProviderProto, Record<string, string>>
  const accountOfKey = new Map<string, string>()
  const accountEnv: Record<string, string> = {}
  const envOf = (pr: ProviderProto, a: string) => `SLUICE_RB_KEY_${PROVIDER_NAME[pr].replace('-', '_').toUpperCase()}_${a.toUpperCase()}`
  for (const pr of Object.keys(MODEL) as ProviderProto[]) {
    accountKeys[pr] = {}
    for (const a of ACCOUNTS) {
      const k = `sk-rb-${PROVIDER_NAME[pr]}-${a}-${randomBytes(8).toString('hex')}`
      accountKeys[pr][a] = k
      accountOfKey.set(k, `${PROVIDER_NAME[pr]}/${a}`)
      accountEnv[envOf(pr, a)] = k
    }
  }
  let peak = { sluice: NaN, sim: NaN }
  let quotaHeld = false
  let ran = false
  let throttled = ''
  const routes: RecallReceipt['routes'] = {}

  try {
    if (reasons.length > 0) throw new Refused()
    ran = true
    let simUrl!: (u: string) => void
    const simUrlP = new Promise<string>((resolve) => { simUrl = resolve })
    sim = launchChild('sim', [NODE, [SIM_CHILD, '--script']], (line) => {
      if (line.startsWith('{"req"')) {
        try {
          const j = JSON.parse(line) as { req: string; key: string | null }
          upstreamSeen.set(j.req, (upstreamSeen.get(j.req) ?? 0) + 1)
          const acct = (j.key === null ? undefined : accountOfKey.get(j.key)) ?? 'an unknown key'
          accountSeen.set(acct, (accountSeen.get(acct) ?? 0) + 1)
        } catch {}
      } else if (line.startsWith('{"fault"')) {
        try {
          const j = JSON.parse(line) as { fault: string; status: number; key: string | null }
          const kind = HIT_KIND[j.status] ?? `status-${j.status}`
          const acct = j.key === null ? undefined : accountOfKey.get(j.key)
          faultsHit[kind] = (faultsHit[kind] ?? 0) + 1
          if (acct === undefined || !FAULTY.has(acct.slice(acct.indexOf('/') + 1))) reasons.push(`the sim fired ${kind} for ${j.fault} on ${acct ?? 'an unknown key'}, not on a faulty account`)
        } catch {}
      } else if (line.startsWith('{"said"')) {
        try { const j = JSON.parse(line) as Said & { said: string }; said.set(j.said, { rid: j.rid, calls: j.calls, text: j.text }) } catch {}
      } else if (line.startsWith('{"url"')) simUrl((JSON.parse(line) as { url: string }).url)
    }, { keepInTail: (line) => !line.startsWith('{"req"') && !line.startsWith('{"said"') && !line.startsWith('{"fault"') })
    children.push(sim); live.children.add(sim)
    const simBase = await Promise.race([simUrlP, sim.exited.then(() => null), deadline(15_000).then(() => null)])
    if (simBase === null) throw new Error(`the sim did not start:\n${sim.tail}`)

    const cfgFile = join(tmp, 'sluice.json')
    writeFileSync(cfgFile, JSON.stringify({
      listen: { port: 0, adminPort: 0 },
      workers: p.sluice.workers,
      limits: p.sluice.limits,
      upstream: { forwardHeaders: ['x-load-id'], ...p.sluice.upstream },
      keys: [{ name: 'load', sha256: createHash('sha256').update(key).digest('hex'), models: ['*'] }],
      providers: (Object.keys(MODEL) as ProviderProto[]).map((pr) => ({
        name: PROVIDER_NAME[pr], protocol: pr, baseUrl: simBase, models: [MODEL[pr].replace('-model', '*')],
        accounts: ACCOUNTS.map((a) => ({ name: a, apiKeyEnv: envOf(pr, a) })),
      })),
    }))
    let ready!: (v: { port: number; adminPort: number }) => void
    const readyP = new Promise<{ port: number; adminPort: number }>((resolve) => { ready = resolve })
    gw = launchChild('sluice', quota.wrap(NODE, [...NODE_FLAGS, BIN, 'serve', '--config', cfgFile]), (line) => {
      if (!line.includes('"sluice ready"')) return
      try { const j = JSON.parse(line) as { port: number; adminPort: number }; ready({ port: j.port, adminPort: j.adminPort }) } catch {}
    }, { env: { ...process.env, ...accountEnv, SLUICE_SIGNING_KEY: randomBytes(32).toString('hex') }, keepInTail: (line) => !line.includes('"msg":"exchange"') })
    children.push(gw); live.children.add(gw)
    const ports = await Promise.race([readyP, gw.exited.then(() => null), deadline(30_000).then(() => null)])
    if (ports === null) throw new Error(`sluice did not start:\n${gw.tail}`)
    const gwUrl = `http://127.0.0.1:${ports.port}`
    const gwPid = gw.pid
    quotaHeld = p.quota !== null && quota.kind !== 'none' && quota.holds(gwPid)
    if (p.quota !== null && p.requireQuota && quota.kind !== 'none' && !quotaHeld) reasons.push(`the ${quota.detail} quota did not hold for the sluice process`)

    sampler = new RssSampler([gwPid, sim.pid], 100)
    sampler.window()
    healthTimer = setInterval(() => {
      const t = performance.now() - t0
      healthPending.push(healthProbe(ports.adminPort, p.health.guardMs * 5).then((r) => { health.push({ t: Math.round(t), ms: Math.round(r.ms * 10) / 10, ok: r.ok }) }))
    }, p.health.everyMs)

    let current = ''
    let done = 0
    progressTimer = setInterval(() => {
      opts.progress?.(`[${p.name}] ${current} ${done} exchanges | ${said.size} provider records | ${((performance.now() - t0) / 1000).toFixed(0)} s`)
    }, 1000)

    // ---- one exchange -------------------------------------------------------------------
    const send = async (x: Ex, body: Buffer, slow: boolean, cancelAfterMs: number | null): Promise<Ex> => {
      const ctl = new AbortController()
      let aborted = false
      let timer: NodeJS.Timeout | null = null
      const abort = () => { aborted = true; ctl.abort() }
      x.sendAt = performance.now()
      x.startMs = x.sendAt - t0
      // a recall's cancel may land before the first byte: it is armed at the send
      if (cancelAfterMs !== null && x.phase === 'recall') timer = setTimeout(abort, cancelAfterMs)
      const chunks: Buffer[] = []
      try {
        const res = await request(gwUrl + CLIENT_PATH[x.client], {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-session-id': `${tag}-w${x.wave}-s${x.session}`, 'x-load-id': x.loadId },
          body,
          dispatcher: agent,
          signal: ctl.signal,
        })
        x.status = res.statusCode
        for await (const c of res.body) {
          if (chunks.length === 0) {
            x.ttfbMs = performance.now() - x.sendAt
            if (cancelAfterMs !== null && x.phase === 'open') timer = setTimeout(abort, cancelAfterMs)
          }
          chunks.push(c as Buffer)
          if (slow) await sleep(p.workload.slowChunkMs)
        }
        x.totalMs = performance.now() - x.sendAt
        const bytes = Buffer.concat(chunks)
        if (res.statusCode === 200) {
          x.got = parseStream(x.client, bytes)
          x.kind = x.got.error !== null ? `stream-error:${x.got.error}` : x.got.terminal ? 'ok' : 'no-terminal'
        } else {
          let j: { code?: string } = {}
          try { j = JSON.parse(bytes.toString('utf8')) as { code?: string } } catch {}
          x.kind = typeof j.code === 'string' ? `refused:${j.code}` : `status-${res.statusCode}`
          x.detail = bytes.toString('utf8').slice(0, 200)
        }
      } catch (e) {
        x.totalMs = performance.now() - x.sendAt
        if (aborted) {
          x.kind = 'cancelled'
          if (x.status === 200) x.got = parseStream(x.client, Buffer.concat(chunks))
        } else { x.kind = 'error'; x.detail = (e as Error).message }
      } finally {
        if (timer !== null) clearTimeout(timer)
      }
      done++
      return x
    }

    // ---- one session --------------------------------------------------------------------
    const session = async (w: number, i: number, rounds: number, barriers: Barrier[], exs: Ex[], recallSends: number[][], completed: { n: number }): Promise<void> => {
      const [client, provider] = PAIRS[i % PAIRS.length]
      const model = MODEL[provider]
      const slow = W.slowEvery > 0 && i % W.slowEvery === W.slowEvery - 1
      const rateLimited = provider === 'anthropic' && i % 2 === 0
      const history: Turn[] = []
      const tools = TOOLS[client]
      for (let r = 0; r < rounds; r++) {
        const n = W.minCalls + Math.floor(draw(W.seed, i, r, 1) * (W.maxCalls - W.minCalls + 1))
        const off = Math.floor(draw(W.seed, i, r, 2) * tools.length)
        const asks = Array.from({ length: n }, (_, k) => tools[(off + k) % tools.length])
        const marker = `rb${runHex}-w${String(w).padStart(2, '0')}-s${String(i).padStart(3, '0')}-r${String(r).padStart(2, '0')}`
        const ttft = T.ttftMs[Math.floor(draw(W.seed, i, r, 3) * T.ttftMs.length)]
        const directive = `#sim ttft=${ttft} tokens=${T.tokens} interval=${T.intervalMs} tools=${n} call=${asks.map((a) => a.call).join(',')} parallel stagger args=${encodeURIComponent(JSON.stringify({ input: marker }))}`
        const user = `Round ${r + 1}: carry on with the task (${marker}).\n${directive}`
        const base = { wave: w, session: i, round: r, client, marker, kind: 'error', status: 0, got: null, startMs: 0, sendAt: 0, ttfbMs: NaN, totalMs: NaN }
        // opening: until a whole stream (the client sends again after a refusal or its own cancel)
        let calls: GotCall[] | null = null
        for (let a = 0; a < W.maxAttempts && calls === null; a++) {
          // every fault is the faulty account's only (fault_key): the gateway retries on another
          let fault: Fault = null
          if (r === W.outageRound && provider === 'openai-responses') fault = 'status-503'
          else if (a === 0 && rateLimited && draw(W.seed, i, r, 4) < W.rateLimitFraction) fault = 'status-429'
          else if (a === 0 && draw(W.seed, i, r, 5) < W.resetFraction) fault = 'reset-before-first-byte'
          const cancel = fault === null && a < 3 && draw(W.seed, i, r, 6, a) < W.cancelFraction ? Math.floor(draw(W.seed, i, r, 7, a) * 60) : null
          const text = fault === null ? user : `${user}\n#sim fault=${fault} fault_key=${[...FAULTY].map((a) => accountKeys[provider][a]).join(',')}`
          const x = await send({ ...base, phase: 'open', attempt: a, loadId: `${marker}-o${a}`, asks, fault, cancelPlanned: cancel !== null }, Buffer.from(JSON.stringify(buildBody(client, model, history, text, null))), slow, cancel)
          exs.push(x)
          if (fault !== null) faults[fault] = (faults[fault] ?? 0) + 1
          if (x.kind === 'ok' && x.got !== null) calls = x.got.calls
          else await sleep(W.retryBackoffMs * (1 + draw(W.seed, i, r, 8, a)))
        }
        // tools run (the client sleeps), then every session of the wave waits for the others
        if (calls !== null) await sleep(W.toolLatencyMs[0] + draw(W.seed, i, r, 9) * (W.toolLatencyMs[1] - W.toolLatencyMs[0]))
        // the recall is built before the barrier, so the sessions' sends leave together
        const outputs = calls === null ? [] : calls.map((c, k) => `exit 0: output ${k} of ${c.id} for ${marker}`)
        const body = calls === null ? null : Buffer.from(JSON.stringify(buildBody(client, model, history, user, { calls, outputs })))
        await barriers[r].arrive()
        if (calls === null || body === null) continue
        let answer: string | null = null
        for (let a = 0; a < W.maxAttempts && answer === null; a++) {
          const cancel = a < 3 && draw(W.seed, i, r, 10, a) < W.cancelFraction ? Math.floor(draw(W.seed, i, r, 11, a) * 25) : null
          if (a === 0) recallSends[r].push(performance.now())
          const x = await send({ ...base, phase: 'recall', attempt: a, loadId: `${marker}-c${a}`, asks: [], fault: null, cancelPlanned: cancel !== null }, body, slow, cancel)
          exs.push(x)
          if (x.kind === 'ok' && x.got !== null) answer = x.got.text
          else await sleep(W.retryBackoffMs * (1 + draw(W.seed, i, r, 12, a)))
        }
        if (answer === null) continue
        history.push({ user, calls, outputs, answer })
        completed.n++
      }
    }

    const waitGauge = async (pred: (m: Map<string, number>) => boolean, ms: number): Promise<Map<string, number>> => {
      const end = performance.now() + ms
      let m = new Map<string, number>()
      while (performance.now() < end) {
        try { m = await scrape(ports.adminPort); if (pred(m)) return m } catch {}
        await sleep(50)
      }
      return m
    }
    const idleRss = async (): Promise<number> => {
      const xs: number[] = []
      for (let k = 0; k < 5; k++) { xs.push(rssMb(gwPid)); await sleep(250) }
      return Math.round(xs.sort((a, b) => a - b)[2] * 10) / 10
    }

    // ---- one wave -----------------------------------------------------------------------
    let firstRetained: Record<string, number> | null = null
    let retriesBefore = 0
    const retriesOf = (mm: Map<string, number>) => [...mm].filter(([k]) => k.startsWith('sluice_retries_total{')).reduce((n, [, v]) => n + v, 0)
    // notIdle plus every account's in-flight gauge (sluice_provider_in_flight is in IDLE_GAUGES)
    const notIdleAll = (mm: Map<string, number>): Record<string, number> => {
      const bad = notIdle(mm)
      for (const [k, v] of mm) if (k.startsWith('sluice_provider_account_in_flight{') && v !== 0) bad[k] = v
      return bad
    }
    const wave = async (w: number, name: string, kind: WaveRecord['kind'], sessions: number, rounds: number): Promise<void> => {
      current = name
      const ws = performance.now()
      const barriers = Array.from({ length: rounds }, () => new Barrier(sessions))
      const exs: Ex[] = []
      const recallSends: number[][] = Array.from({ length: rounds }, () => [])
      const completed = { n: 0 }
      if (w === 0) for (let i = 0; i < Math.max(W.sessions, W.burstSessions); i++) {
        const [c, pr] = PAIRS[i % PAIRS.length]
        const k = `${c} -> ${pr}`
        routes[k] ??= { sessions: 0, burstSessions: 0, translated: CLIENT_WIRE[c] !== pr }
        if (i < W.sessions) routes[k].sessions++
        if (i < W.burstSessions) routes[k].burstSessions++
      }
      await Promise.all(Array.from({ length: sessions }, (_, i) => session(w, i, rounds, barriers, exs, recallSends, completed)))
      const durationMs = Math.round(performance.now() - ws)
      // settle: every application-owned gauge back at idle, admissions = releases
      const m = await waitGauge((mm) => Object.keys(notIdleAll(mm)).length === 0 && mm.get('sluice_admissions_total') === mm.get('sluice_releases_total'), 10_000)
      const bad = notIdleAll(m)
      const retriesNow = retriesOf(m)
      const waveRetries = retriesNow - retriesBefore
      retriesBefore = retriesNow
      const admissions = m.get('sluice_admissions_total') ?? NaN
      const releases = m.get('sluice_releases_total') ?? NaN
      if (Object.keys(bad).length > 0) reasons.push(`${name}: not back at idle 10 s after the wave: ${JSON.stringify(bad)}`)
      if (admissions !== releases) reasons.push(`${name}: admissions ${admissions} != releases ${releases} after the wave`)
      await sleep(p.rss.settleMs)
      const m2 = await scrape(ports.adminPort)
      const retained: Record<string, number> = {}
      for (const g of RETAINED_GAUGES) retained[g] = m2.get(g) ?? NaN
      if (firstRetained === null) firstRetained = retained
      else {
        const grew = RETAINED_GAUGES.filter((g) => retained[g] !== firstRetained![g])
        if (grew.length > 0) reasons.push(`${name}: retained state changed from the first wave's: ${grew.map((g) => `${g} ${firstRetained![g]} -> ${retained[g]}`).join(', ')}`)
      }
      const rss = await idleRss()
      // isolation: every stream against the provider's own record of that request
      let streams = 0
      let ncalls = 0
      let violations = 0
      const violate = (s: string) => { violations++; iso.violations++; if (iso.first.length < 10) iso.first.push(s) }
      for (const x of exs) {
        allEx.push({ phase: x.phase, kind: x.kind, ttfbMs: x.ttfbMs, totalMs: x.totalMs, fault: x.fault, detail: x.detail })
        points.push({ t: x.startMs + (Number.isFinite(x.totalMs) ? x.totalMs : 0), ms: Number.isFinite(x.totalMs) ? x.totalMs : 0, kind: x.kind, wave: name })
        if (x.got === null) continue
        const s = said.get(x.loadId)
        if (s === undefined) { violate(`${x.loadId}: a 200 stream the provider has no record of`); continue }
        streams++
        ncalls += x.got.calls.length
        for (const b of checkStream(x.got, s, x.asks, x.marker, x.kind === 'ok')) violate(`${x.loadId} (${x.client} -> ${PAIRS[x.session % PAIRS.length][1]}): ${b}`)
        for (const id of x.got.ids) {
          const owner = idOwner.get(id)
          if (owner === undefined) idOwner.set(id, x.marker)
          else if (owner !== x.marker) violate(`${x.loadId}: id ${id} was already seen by ${owner}`)
        }
      }
      for (const x of exs) said.delete(x.loadId) // checked: the driver keeps no record across waves
      iso.streams += streams
      iso.calls += ncalls
      const outcomes: Record<string, number> = {}
      for (const x of exs) outcomes[x.kind] = (outcomes[x.kind] ?? 0) + 1
      const spreads = recallSends.filter((s) => s.length > 1).map((s) => Math.max(...s) - Math.min(...s))
      waves.push({
        name, kind, sessions, rounds, durationMs, outcomes, roundsCompleted: completed.n,
        checked: { streams, calls: ncalls, violations }, notIdle: bad, retained, admissions, releases, rssMb: rss,
        recallSpreadMs: Math.round((spreads.length ? Math.max(...spreads) : 0) * 10) / 10,
        retries: waveRetries,
      })
      if (completed.n < sessions * rounds) reasons.push(`${name}: ${sessions * rounds - completed.n} of ${sessions * rounds} rounds did not complete within ${W.maxAttempts} attempts each`)
      if (gw!.gone) throw new Error(`sluice exited during ${name}:\n${gw!.tail}`)
    }

    let w = 0
    for (let k = 0; k < W.warmupWaves; k++) await wave(w++, `warmup${k + 1}`, 'warmup', W.sessions, W.rounds)
    for (let k = 0; k < W.sustainedWaves; k++) await wave(w++, `sustained${k + 1}`, 'sustained', W.sessions, W.rounds)
    for (let k = 0; k < W.burstWaves; k++) await wave(w++, `burst${k + 1}`, 'burst', W.burstSessions, W.burstRounds)

    const m = await scrape(ports.adminPort)
    const refusals: Record<string, number> = {}
    for (const [k, v] of m) {
      const r = /^sluice_refusals_total\{code="([^"]+)"\}$/.exec(k)
      if (r && v > 0) refusals[r[1]] = v
    }
    ledger = { admissions: m.get('sluice_admissions_total') ?? NaN, releases: m.get('sluice_releases_total') ?? NaN, refusals, notIdle: notIdle(m) }
    afterCommit = m.get('sluice_retries_after_commit_total') ?? null
    for (const [k, v] of m) {
      const r = /^sluice_retries_total\{reason="([^"]+)"\}$/.exec(k)
      if (r) byReason[r[1]] = v
    }
    if (gw.gone) reasons.push(`sluice exited during the run:\n${gw.tail}`)
    peak = { sluice: Math.round(sampler.peak(gwPid) * 10) / 10, sim: Math.round(sampler.peak(sim.pid) * 10) / 10 }
    throttled = quota.throttled()
  } catch (e) {
    if (!(e instanceof Refused)) reasons.push(`the run broke off: ${(e as Error).message}`)
  } finally {
    await tearDown({ timers: [healthTimer, progressTimer], sampler, healthPending, agent, children, quota, tmp, reasons })
  }

  // ---- checks over the whole run ---------------------------------------------------------
  if (iso.violations > 0) reasons.push(`isolation: ${iso.violations} streams carried something that was not the provider's answer to that session's request (first: ${iso.first.slice(0, 3).join(' | ')})`)
  const unexpected = allEx.filter((x) => x.kind !== 'ok' && x.kind !== 'cancelled' && x.fault === null)
  if (unexpected.length > 0) reasons.push(`${unexpected.length} exchanges without an injected fault or a client cancel did not complete: ${JSON.stringify(count(unexpected))} (first: ${unexpected[0].detail ?? ''})`)
  const unretried = allEx.filter((x) => x.fault !== null && x.kind !== 'ok')
  if (unretried.length > 0) reasons.push(`${unretried.length} exchanges carrying a fault of one account did not end whole (the gateway should have retried on another account): ${JSON.stringify(count(unretried))} (first: ${unretried[0].detail ?? ''})`)
  const maxUp = Math.max(0, ...upstreamSeen.values())
  let repeats = 0
  for (const n of upstreamSeen.values()) repeats += n - 1
  const accounts: Record<string, Record<string, number>> = {}
  for (const [k, v] of [...accountSeen].sort()) {
    const [pr, a] = k.includes('/') ? k.split('/') : [k, '?']
    ;(accounts[pr] ??= {})[a] = v
  }
  const account: RetryAccount = { byReason, afterCommit, faultsHit, upstreamRepeats: repeats }
  if (ran) reasons.push(...retryReasons(account))
  if (accountSeen.has('an unknown key')) reasons.push(`${accountSeen.get('an unknown key')} upstream requests carried no account key of this run`)
  const sustained = waves.filter((x) => x.kind === 'sustained')
  const samples = sustained.map((x) => x.rssMb)
  const s = slope(samples)
  const se = slopeError(samples)
  if (ran && sustained.length >= 2 && !(s <= p.rss.slopeToleranceMbPerWave)) reasons.push(`RSS grows ${s.toFixed(2)} MB per sustained wave after warm-up (${samples.join(', ')} MB), more than the ${p.rss.slopeToleranceMbPerWave} MB tolerance`)
  const hOver = health.filter((h) => h.ok && h.ms > p.health.guardMs).length
  const hFail = health.filter((h) => !h.ok).length
  if (ran && health.length === 0) reasons.push('no health probe ran')
  if (hFail > 0 || hOver > 0) reasons.push(`health guard: ${hFail} probes failed and ${hOver} took longer than ${p.health.guardMs} ms`)
  if (!ran && reasons.length > 0) reasons.push('the workload was not run')

  const outcomes: Record<string, number> = {}
  for (const x of allEx) outcomes[x.kind] = (outcomes[x.kind] ?? 0) + 1
  const okOf = (ph: string) => allEx.filter((x) => x.phase === ph && x.kind === 'ok')
  const hp = percentiles(health.map((h) => h.ms))
  const settings = recallSettingsOf(p)
  const qualification = !opts.smoke && p.quota !== null && p.requireQuota && quotaHeld && !(quota.kind === 'taskset' && p.quota.cpus < 1)
  const receipt: RecallReceipt = {
    receipt: 1,
    test: 'recall-burst',
    profile: `recall-burst-${p.name}`,
    qualification,
    settings,
    settingsHash: hashSettings(settings),
    hardware: { cpuModel: cpuModel(), cores: availableParallelism(), memoryMb: Math.round(totalmem() / 1024 / 1024), quotaMethod: quota.kind, quotaValue },
    quota: { method: quota.kind, detail: quota.detail, held: quotaHeld, fallbacks: quota.fallbacks, throttled },
    node: process.versions.node,
    commit: commit(),
    start: startIso,
    end: new Date().toISOString(),
    durationMs: Math.round(performance.now() - t0),
    routes,
    waves,
    outcomes,
    isolation: { streams: iso.streams, calls: iso.calls, ids: idOwner.size, violations: iso.violations, first: iso.first },
    rss: { samplesMb: samples, slopeMbPerWave: Number.isFinite(s) ? Math.round(s * 1000) / 1000 : NaN, slopeStdErrorMb: Number.isFinite(se) ? Math.round(se * 1000) / 1000 : NaN, toleranceMbPerWave: p.rss.slopeToleranceMbPerWave, peakMb: peak.sluice, simPeakMb: peak.sim },
    retriesAfterCommit: afterCommit,
    retries: { ...account, maxUpstreamPerClientRequest: maxUp, accounts },
    faults,
    latencyMs: {
      openingFirstByte: percentiles(okOf('open').map((x) => x.ttfbMs)),
      recallFirstByte: percentiles(okOf('recall').map((x) => x.ttfbMs)),
      recallTotal: percentiles(okOf('recall').map((x) => x.totalMs)),
      refusal: percentiles(allEx.filter((x) => x.kind.startsWith('refused:')).map((x) => x.totalMs)),
    },
    health: { probes: health.length, failures: hFail, overGuard: hOver, guardMs: p.health.guardMs, p50: hp.p50, p99: hp.p99, max: hp.max },
    ledger,
    peakRssMb: peak,
    passed: reasons.length === 0,
    reasons,
  }
  return { receipt, points }
}

function count (xs: Array<{ kind: string }>): Record<string, number> {
  const o: Record<string, number> = {}
  for (const x of xs) o[x.kind] = (o[x.kind] ?? 0) + 1
  return o
}

class Refused extends Error {}

