// Receipts and baselines of the load qualification: the receipt's shape, the settings hash,
// writing a receipt (never overwriting one), and comparing a receipt with the baseline of its
// profile, attributing each difference to changed settings, changed hardware, or neither (a
// regression). Pure apart from the file writes, so test/unit/load tests it directly.

import { createHash } from 'node:crypto'
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

export interface Percentiles { n: number; p50: number; p90: number; p99: number; max: number }

export interface Hardware {
  cpuModel: string
  cores: number
  memoryMb: number
  quotaMethod: string
  quotaValue: string
}

export interface Receipt {
  receipt: 1
  profile: string
  /** false for --smoke runs and runs whose quota did not hold. */
  qualification: boolean
  settings: Record<string, unknown>
  settingsHash: string
  hardware: Hardware
  quota: { method: string; detail: string; held: boolean; fallbacks: string[]; throttled: string }
  node: string
  commit: { sha: string; dirty: boolean }
  start: string
  end: string
  durationMs: number
  /** Outcome kind -> count, per phase ("team", "headroom", "burst") and in total. */
  outcomes: Record<string, Record<string, number>>
  latencyMs: {
    /** send -> the provider saw the request (queue wait plus the gateway's own time). */
    queueWait: Percentiles
    timeToFirstByte: Percentiles
    total: Percentiles
    /** The same per phase. */
    byPhase: Record<string, { queueWait: Percentiles; timeToFirstByte: Percentiles; total: Percentiles }>
  }
  health: { probes: number; failures: number; overGuard: number; guardMs: number; p50: number; p99: number; max: number }
  ledger: {
    admissions: number
    releases: number
    refusals: Record<string, number>
    /** Gauges not back at idle after the run (empty = all idle). */
    notIdle: Record<string, number>
  }
  peakRssMb: { sluice: number; sim: number }
  passed: boolean
  reasons: string[]
  /** Filled in by the comparison with the baseline. */
  baseline?: { file: string; attribution: string; differences: string[] } | null
}

export function percentiles (xs: number[]): Percentiles {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b)
  const at = (q: number) => s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]
  const r = (x: number) => Number.isFinite(x) ? Math.round(x * 10) / 10 : -1
  return { n: s.length, p50: r(at(0.5)), p90: r(at(0.9)), p99: r(at(0.99)), max: r(s.length ? s[s.length - 1] : NaN) }
}

/** JSON with object keys sorted at every level, so equal settings hash equally. */
export function canonical (v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`
  if (typeof v === 'object' && v !== null) {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`).join(',')}}`
  }
  return JSON.stringify(v)
}

export function hashSettings (settings: unknown): string {
  return createHash('sha256').update(canonical(settings)).digest('hex')
}

/** Writes the receipt under `dir` with a new name (never overwrites); returns the path. */
export function writeReceipt (dir: string, r: Receipt): string {
  mkdirSync(dir, { recursive: true })
  const stamp = r.start.replace(/[:.]/g, '-')
  const base = `${r.profile}-${stamp}-${r.passed ? 'pass' : 'fail'}`
  for (let i = 0; ; i++) {
    const file = join(dir, `${base}${i === 0 ? '' : `-${i}`}.json`)
    try {
      writeFileSync(file, JSON.stringify(r, null, 2) + '\n', { flag: 'wx' })
      return file
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e
    }
  }
}

export function baselineFile (dir: string, profile: string): string {
  return join(dir, `${profile}.json`)
}

export function readBaseline (dir: string, profile: string): Receipt | null {
  const f = baselineFile(dir, profile)
  if (!existsSync(f)) return null
  return JSON.parse(readFileSync(f, 'utf8')) as Receipt
}

export function recordBaseline (dir: string, receiptPath: string, profile: string): string {
  mkdirSync(dir, { recursive: true })
  const f = baselineFile(dir, profile)
  copyFileSync(receiptPath, f)
  return f
}

export interface Tolerance { latencyFactor: number; latencySlackMs: number; rssFactor: number; healthSlackMs?: number }

export interface Comparison {
  settingsChanged: string[]
  hardwareChanged: string[]
  /** Figures worse than the baseline beyond the tolerance. */
  worse: string[]
  /** Figures better than the baseline beyond the tolerance (reported, never a failure). */
  better: string[]
  /** "changed settings", "changed hardware", "changed settings and hardware", "regression", "neither (within tolerance)" */
  attribution: string
  regression: boolean
}

function flatten (v: unknown, prefix = '', out: Record<string, string> = {}): Record<string, string> {
  if (typeof v === 'object' && v !== null && !Array.isArray(v)) {
    for (const [k, x] of Object.entries(v)) flatten(x, prefix ? `${prefix}.${k}` : k, out)
  } else out[prefix] = JSON.stringify(v)
  return out
}

/** What differs between two settings or hardware records, one `key: old -> new` a line. */
export function diffKeys (a: unknown, b: unknown): string[] {
  const fa = flatten(a)
  const fb = flatten(b)
  const keys = [...new Set([...Object.keys(fa), ...Object.keys(fb)])].sort()
  return keys.filter((k) => fa[k] !== fb[k]).map((k) => `${k}: ${fa[k] ?? 'absent'} -> ${fb[k] ?? 'absent'}`)
}

/** Compares `now` with `base`. Outcome counts must match exactly; latency, health and RSS within the tolerance. */
export function compare (base: Receipt, now: Receipt, tol: Tolerance): Comparison {
  const settingsChanged = base.settingsHash === now.settingsHash ? [] : diffKeys(base.settings, now.settings)
  if (base.settingsHash !== now.settingsHash && settingsChanged.length === 0) settingsChanged.push(`settings hash ${base.settingsHash.slice(0, 12)} -> ${now.settingsHash.slice(0, 12)}`)
  const hardwareChanged = diffKeys(base.hardware, now.hardware)
  const worse: string[] = []
  const better: string[] = []
  const lat = (what: string, b: number, n: number, slack = tol.latencySlackMs) => {
    if (!(b >= 0) || !(n >= 0)) return
    if (n > b * tol.latencyFactor && n - b > slack) worse.push(`${what} ${b} -> ${n} ms`)
    else if (b > n * tol.latencyFactor && b - n > slack) better.push(`${what} ${b} -> ${n} ms`)
  }
  for (const k of ['queueWait', 'timeToFirstByte', 'total'] as const) {
    for (const q of ['p50', 'p99'] as const) lat(`${k} ${q}`, base.latencyMs[k][q], now.latencyMs[k][q])
  }
  // a single slow probe is noise well below the guard: its own, larger slack
  lat('health max', base.health.max, now.health.max, tol.healthSlackMs ?? tol.latencySlackMs)
  if (now.health.overGuard > base.health.overGuard) worse.push(`health probes over the guard ${base.health.overGuard} -> ${now.health.overGuard}`)
  if (now.health.failures > base.health.failures) worse.push(`health probe failures ${base.health.failures} -> ${now.health.failures}`)
  const ob = flatten(base.outcomes.total)
  const on = flatten(now.outcomes.total)
  for (const k of [...new Set([...Object.keys(ob), ...Object.keys(on)])].sort()) {
    if (ob[k] !== on[k]) worse.push(`outcome ${k}: ${ob[k] ?? 0} -> ${on[k] ?? 0}`)
  }
  if (now.peakRssMb.sluice > base.peakRssMb.sluice * tol.rssFactor) worse.push(`peak RSS ${base.peakRssMb.sluice} -> ${now.peakRssMb.sluice} MB`)
  else if (base.peakRssMb.sluice > now.peakRssMb.sluice * tol.rssFactor) better.push(`peak RSS ${base.peakRssMb.sluice} -> ${now.peakRssMb.sluice} MB`)
  if (base.passed && !now.passed) worse.push('the baseline passed, this run failed')

  return attributed(settingsChanged, hardwareChanged, worse, better)
}

/**
 * The comparison's verdict: a difference is put down to changed settings, changed hardware,
 * both, or (neither having changed) a regression; never silently (DESIGN.md "Qualification").
 */
export function attributed (settingsChanged: string[], hardwareChanged: string[], worse: string[], better: string[]): Comparison {
  const s = settingsChanged.length > 0
  const h = hardwareChanged.length > 0
  const attribution = s && h ? 'changed settings and hardware' : s ? 'changed settings' : h ? 'changed hardware'
    : worse.length > 0 ? 'regression' : 'neither (within tolerance)'
  return { settingsChanged, hardwareChanged, worse, better, attribution, regression: !s && !h && worse.length > 0 }
}
