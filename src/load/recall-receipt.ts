// The recall-burst receipt (`sluice load recall-burst`): its shape, the least-squares RSS slope,
// the comparison with the profile's baseline (ops/load/baselines/recall-burst-<profile>.json:
// changed settings / changed hardware / neither = a regression), the printed summary and the
// SVG chart written next to the receipt. Receipts are written by receipt.ts's writeReceipt
// (never overwritten, failed runs kept), whose file name only needs `profile`, `start`, `passed`.

import { attributed, diffKeys, type Comparison, type Hardware, type Percentiles, type Receipt } from './receipt.ts'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'

export interface WaveRecord {
  name: string
  kind: 'warmup' | 'sustained' | 'burst'
  sessions: number
  rounds: number
  durationMs: number
  /** Exchange outcome kind -> count (ok, cancelled, refused:<code>, ...). */
  outcomes: Record<string, number>
  /** Rounds whose calls and recall all completed, of sessions x rounds. */
  roundsCompleted: number
  /** Streams checked against the provider's record, calls among them, and what was wrong. */
  checked: { streams: number; calls: number; violations: number }
  /** Application-owned gauges not back at idle after the wave (empty = idle). */
  notIdle: Record<string, number>
  /** Gauges that must not grow from wave to wave (the store, lanes, the event ring). */
  retained: Record<string, number>
  admissions: number
  releases: number
  /** sluice's RSS at idle after the wave (median of 3 samples), MB. */
  rssMb: number
  /** Widest spread of one round's recall sends across its sessions (the barrier), ms. */
  recallSpreadMs: number
  /** Retries the gateway counted during the wave (`sluice_retries_total`, all reasons). */
  retries: number
}

/** Which retry reason (`sluice_retries_total{reason}`) a provider fault the sim fired must show as. */
export const FAULT_RETRY_REASON: Readonly<Record<string, string>> = { 'reset-before-first-byte': 'reset', 'status-503': 'status', 'status-429': 'rate_limited' }

export interface RetryAccount {
  /** `sluice_retries_total{reason}` after the run (missing metric: absent). */
  byReason: Record<string, number>
  /** `sluice_retries_after_commit_total` after the run; null when the gateway does not expose it. */
  afterCommit: number | null
  /** Faults the sim really fired (on the faulty account's key), by kind. */
  faultsHit: Record<string, number>
  /** Upstream requests beyond the first per client request (x-load-id), as the sim saw them. */
  upstreamRepeats: number
}

/** The retry checks of a run: each a reason in the verdict (empty = they hold). */
export function retryReasons (a: RetryAccount): string[] {
  const out: string[] = []
  if (a.afterCommit === null) out.push('sluice_retries_after_commit_total is missing from the gateway\'s /metrics')
  else if (a.afterCommit !== 0) out.push(`retries after commit: sluice_retries_after_commit_total = ${a.afterCommit}`)
  if (Object.keys(a.byReason).length === 0) out.push('sluice_retries_total{reason} is missing from the gateway\'s /metrics')
  const total = Object.values(a.byReason).reduce((x, y) => x + y, 0)
  if (total !== a.upstreamRepeats) out.push(`the gateway counted ${total} retries but the provider saw ${a.upstreamRepeats} repeated requests`)
  const want: Record<string, number> = {}
  for (const [k, v] of Object.entries(a.faultsHit)) { const r = FAULT_RETRY_REASON[k] ?? `(${k})`; want[r] = (want[r] ?? 0) + v }
  for (const r of new Set([...Object.keys(want), ...Object.keys(a.byReason)])) {
    if ((a.byReason[r] ?? 0) !== (want[r] ?? 0)) out.push(`retries for ${r}: the gateway counted ${a.byReason[r] ?? 0}, the faults fired call for ${want[r] ?? 0}`)
  }
  return out
}

export interface RecallReceipt {
  receipt: 1
  test: 'recall-burst'
  /** `recall-burst-<profile>` (the receipt and baseline file names start with it). */
  profile: string
  qualification: boolean
  settings: Record<string, unknown>
  settingsHash: string
  hardware: Hardware
  quota: Receipt['quota']
  node: string
  commit: { sha: string; dirty: boolean }
  start: string
  end: string
  durationMs: number
  /** Sessions per client -> provider protocol pair (translated or same-protocol): sustained waves, burst waves. */
  routes: Record<string, { sessions: number; burstSessions: number; translated: boolean }>
  waves: WaveRecord[]
  outcomes: Record<string, number>
  isolation: { streams: number; calls: number; ids: number; violations: number; first: string[] }
  rss: {
    /** sluice's idle RSS after each measured sustained wave, MB, in order. */
    samplesMb: number[]
    /** Least-squares slope of those samples, MB per wave. */
    slopeMbPerWave: number
    /** Standard error of the slope (from the samples' scatter about the fit), MB per wave. */
    slopeStdErrorMb: number
    toleranceMbPerWave: number
    peakMb: number
    simPeakMb: number
  }
  /** `sluice_retries_after_commit_total` read from the gateway after the run (null: missing, a failure). */
  retriesAfterCommit: number | null
  retries: RetryAccount & {
    /** Most upstream requests the sim saw for one client request (1 = not retried). */
    maxUpstreamPerClientRequest: number
    /** Upstream requests per provider account, as the sim saw their keys. */
    accounts: Record<string, Record<string, number>>
  }
  /** Fault directives sent (the client's side; a fault fires only on the faulty account: `retries.faultsHit`). */
  faults: Record<string, number>
  latencyMs: { openingFirstByte: Percentiles; recallFirstByte: Percentiles; recallTotal: Percentiles; refusal: Percentiles }
  health: { probes: number; failures: number; overGuard: number; guardMs: number; p50: number; p99: number; max: number }
  ledger: { admissions: number; releases: number; refusals: Record<string, number>; notIdle: Record<string, number> }
  peakRssMb: { sluice: number; sim: number }
  passed: boolean
  reasons: string[]
  baseline?: { file: string; attribution: string; differences: string[] } | null
}

/** Least-squares slope of ys over 0, 1, 2, ... (NaN with fewer than 2 points). */
export function slope (ys: number[]): number {
  const n = ys.length
  if (n < 2) return NaN
  const mx = (n - 1) / 2
  const my = ys.reduce((a, b) => a + b, 0) / n
  let num = 0
  let den = 0
  ys.forEach((y, x) => { num += (x - mx) * (y - my); den += (x - mx) ** 2 })
  return num / den
}

/** Standard error of that slope (NaN with fewer than 3 points): the residuals' spread over sqrt(sum (x - mean)^2). */
export function slopeError (ys: number[]): number {
  const n = ys.length
  if (n < 3) return NaN
  const b = slope(ys)
  const mx = (n - 1) / 2
  const my = ys.reduce((a, c) => a + c, 0) / n
  let ssr = 0
  let sxx = 0
  ys.forEach((y, x) => { ssr += (y - (my + b * (x - mx))) ** 2; sxx += (x - mx) ** 2 })
  return Math.sqrt(ssr / (n - 2) / sxx)
}

export function readRecallBaseline (dir: string, profile: string): RecallReceipt | null {
  const f = join(dir, `${profile}.json`)
  if (!existsSync(f)) return null
  const r = JSON.parse(readFileSync(f, 'utf8')) as RecallReceipt
  return r.test === 'recall-burst' ? r : null
}


/** The same verdict as model-capacity's (receipt.ts Comparison). */
export type RecallComparison = Comparison

/**
 * Compares with the baseline. Outcome counts are not compared one by one: cancels race the
 * stream's end, so a few land after the last byte from run to run; the pass conditions
 * (isolation, idle, retention, slope, retries) are absolute and checked by the run itself.
 * Compared: latency p50/p99, peak RSS, the RSS slope, and pass -> fail.
 */
export function compareRecall (base: RecallReceipt, now: RecallReceipt, tol: { latencyFactor: number; latencySlackMs: number; rssFactor: number }): RecallComparison {
  const settingsChanged = base.settingsHash === now.settingsHash ? [] : diffKeys(base.settings, now.settings)
  if (base.settingsHash !== now.settingsHash && settingsChanged.length === 0) settingsChanged.push('settings hash changed')
  const hardwareChanged = diffKeys(base.hardware, now.hardware)
  const worse: string[] = []
  const better: string[] = []
  for (const k of ['openingFirstByte', 'recallFirstByte', 'recallTotal'] as const) {
    for (const q of ['p50', 'p99'] as const) {
      const b = base.latencyMs[k][q]
      const n = now.latencyMs[k][q]
      if (!(b >= 0) || !(n >= 0)) continue
      if (n > b * tol.latencyFactor && n - b > tol.latencySlackMs) worse.push(`${k} ${q} ${b} -> ${n} ms`)
      else if (b > n * tol.latencyFactor && b - n > tol.latencySlackMs) better.push(`${k} ${q} ${b} -> ${n} ms`)
    }
  }
  if (now.rss.peakMb > base.rss.peakMb * tol.rssFactor) worse.push(`peak RSS ${base.rss.peakMb} -> ${now.rss.peakMb} MB`)
  else if (base.rss.peakMb > now.rss.peakMb * tol.rssFactor) better.push(`peak RSS ${base.rss.peakMb} -> ${now.rss.peakMb} MB`)
  if (base.passed && !now.passed) worse.push('the baseline passed, this run failed')
  return attributed(settingsChanged, hardwareChanged, worse, better)
}

const f = (x: number) => !Number.isFinite(x) || x < 0 ? 'n/a' : Math.abs(x) >= 100 ? x.toFixed(0) : x.toFixed(1)
const pc = (p: Percentiles) => `${f(p.p50)} / ${f(p.p90)} / ${f(p.p99)} / ${f(p.max)}`

function table (rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)))
  return rows.map((r) => r.map((c, i) => i === r.length - 1 ? c : c.padEnd(widths[i])).join('  ').trimEnd()).join('\n')
}

export function recallSummary (r: RecallReceipt): string {
  const rows: string[][] = [['wave', 'sessions x rounds', 'rounds done', 'streams checked / calls / violations', 'idle after', 'RSS MB', 'recall spread ms', 'retries', 'outcomes']]
  for (const w of r.waves) {
    rows.push([w.name, `${w.sessions} x ${w.rounds}`, String(w.roundsCompleted), `${w.checked.streams} / ${w.checked.calls} / ${w.checked.violations}`,
      Object.keys(w.notIdle).length === 0 ? 'idle' : 'NOT ' + JSON.stringify(w.notIdle), f(w.rssMb), f(w.recallSpreadMs), String(w.retries),
      Object.entries(w.outcomes).map(([k, v]) => `${k} ${v}`).join(', ')])
  }
  const lines = [table(rows)]
  lines.push(`routes (sessions sustained/burst): ${Object.entries(r.routes).map(([k, v]) => `${k}${v.translated ? ' (translated)' : ''} ${v.sessions}/${v.burstSessions}`).join(', ')}`)
  lines.push(`isolation: ${r.isolation.streams} streams, ${r.isolation.calls} calls, ${r.isolation.ids} distinct ids checked against the provider's record; ${r.isolation.violations} violations`)
  lines.push(`RSS after warm-up: ${r.rss.samplesMb.map(f).join(', ')} MB; slope ${r.rss.slopeMbPerWave.toFixed(2)} ± ${Number.isFinite(r.rss.slopeStdErrorMb) ? r.rss.slopeStdErrorMb.toFixed(2) : 'n/a'} MB/wave (tolerance ${r.rss.toleranceMbPerWave}); peak ${f(r.rss.peakMb)} MB (sim ${f(r.rss.simPeakMb)} MB)`)
  lines.push(`retries after commit: ${r.retriesAfterCommit ?? 'MISSING'} (sluice_retries_after_commit_total)`)
  lines.push(`faults sent: ${Object.entries(r.faults).map(([k, v]) => `${k} ${v}`).join(', ')}; fired (on the faulty account): ${Object.entries(r.retries.faultsHit).map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}`)
  lines.push(`retries (sluice_retries_total): ${Object.entries(r.retries.byReason).map(([k, v]) => `${k} ${v}`).join(', ')}; the provider saw ${r.retries.upstreamRepeats} repeats, at most ${r.retries.maxUpstreamPerClientRequest} requests per client request`)
  lines.push(`upstream requests per account: ${Object.entries(r.retries.accounts).map(([p, a]) => `${p} ${Object.entries(a).map(([k, v]) => `${k}:${v}`).join(' ')}`).join(', ')}`)
  lines.push(`first byte p50/p90/p99/max ms: opening ${pc(r.latencyMs.openingFirstByte)}; recall ${pc(r.latencyMs.recallFirstByte)}; recall total ${pc(r.latencyMs.recallTotal)}`)
  lines.push(`health: ${r.health.probes} probes, p99 ${f(r.health.p99)} ms, max ${f(r.health.max)} ms; ${r.health.failures} failed, ${r.health.overGuard} over the ${r.health.guardMs} ms guard`)
  lines.push(`ledger: ${r.ledger.admissions} admissions, ${r.ledger.releases} releases, refusals ${JSON.stringify(r.ledger.refusals)}`)
  lines.push(`quota: ${r.quota.detail} (${r.quota.held ? 'held' : 'not held'})${r.quota.throttled ? `, ${r.quota.throttled}` : ''}; hardware: ${r.hardware.cpuModel}, ${r.hardware.cores} cores; Node ${r.node}; commit ${r.commit.sha.slice(0, 12)}${r.commit.dirty ? ' (dirty)' : ''}; ${(r.durationMs / 1000).toFixed(1)} s`)
  return lines.join('\n')
}

export interface ChartPoint { t: number; ms: number; kind: string; wave: string }

/** Each exchange's total time by end time (green ok, grey cancelled, orange refused, red other) and idle RSS per wave. */
export function recallChartSvg (r: RecallReceipt, points: ChartPoint[]): string {
  const W = 960
  const H1 = 260
  const H2 = 150
  const pad = 50
  const endT = Math.max(1, ...points.map((p) => p.t))
  const maxMs = Math.max(1, ...points.map((p) => p.ms))
  const x = (t: number) => pad + (t / endT) * (W - 2 * pad)
  const y1 = (ms: number) => 20 + H1 - (ms / maxMs) * H1
  const colour = (k: string) => k === 'ok' ? '#2a9d2a' : k === 'cancelled' ? '#999' : k.startsWith('refused:') ? '#e08a00' : '#d22'
  const dots = points.map((p) => `<circle cx="${x(p.t).toFixed(1)}" cy="${y1(p.ms).toFixed(1)}" r="1.6" fill="${colour(p.kind)}"/>`)
  const waves = r.waves
  const rss = waves.map((w) => w.rssMb).filter(Number.isFinite)
  const lo = Math.min(...rss) - 5
  const hi = Math.max(...rss) + 5
  const xw = (i: number) => pad + (waves.length <= 1 ? 0 : (i / (waves.length - 1)) * (W - 2 * pad))
  const y2 = (mb: number) => H1 + 70 + H2 - ((mb - lo) / Math.max(1, hi - lo)) * H2
  const rssDots = waves.map((w, i) => `<circle cx="${xw(i).toFixed(1)}" cy="${y2(w.rssMb).toFixed(1)}" r="3" fill="${w.kind === 'sustained' ? '#2060c0' : '#aaa'}"><title>${w.name} ${w.rssMb} MB</title></circle><text x="${xw(i).toFixed(1)}" y="${(H1 + H2 + 88).toFixed(1)}" text-anchor="middle">${w.name}</text>`)
  const H = H1 + H2 + 110
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">
<rect width="100%" height="100%" fill="white"/>
<text x="${pad}" y="14">${r.profile}: exchange time (ms) by end time, max ${maxMs.toFixed(0)} ms; green ok, grey cancelled by the client, orange provider refusal, red other</text>
<line x1="${pad}" y1="${y1(0)}" x2="${W - pad}" y2="${y1(0)}" stroke="#999"/>
${dots.join('\n')}
<text x="${pad}" y="${H1 + 58}">sluice RSS at idle after each wave (MB, ${f(lo)}..${f(hi)}); blue: measured sustained waves, slope ${r.rss.slopeMbPerWave.toFixed(2)} MB/wave (tolerance ${r.rss.toleranceMbPerWave})</text>
${rssDots.join('\n')}
<text x="${pad}" y="${H - 4}">0 s</text><text x="${W - pad - 30}" y="${H - 4}">${(endT / 1000).toFixed(1)} s</text>
</svg>
`
}
