// Load profiles: data in ops/load/profiles/<name>.json (quota, sluice limits, workload sizes,
// timing). `--smoke` overlays the profile's own `smoke` section (smaller limits, no quota):
// the same phases and checks in seconds, which is not a qualification.

import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT_URL } from '../modules.ts'

export interface Profile {
  name: string
  description: string
  /** CPU for sluice in vCPUs (0.5, 1); null = no quota (smoke only). */
  quota: { cpus: number; periodUs: number } | null
  /** The run is a qualification only if this quota (a CFS share when cpus < 1) really held. */
  requireQuota: boolean
  /** What goes into the sluice config besides listen/keys/providers. */
  sluice: { workers: number; limits: Record<string, number>; upstream?: Record<string, number> }
  workload: {
    engineers: number
    threadsPerEngineer: number
    exchangesPerThread: number
    headroomThreads: number
    headroomExchangesPerThread: number
    /** Burst: of the maxActive first exchanges, how many are short (they recycle queued ones). */
    burstShort: number
    /** Burst: exchanges sent once active and queue are full (each must be refused at once). */
    burstExtra: number
  }
  timing: {
    /** Provider time to first byte, ms, chosen per exchange from this list. */
    ttftMs: number[]
    /** Text deltas per reply, chosen per exchange from this list. */
    tokens: number[]
    /** ms between provider events. */
    intervalMs: number
    /** Duration of a short burst exchange (the ones that free slots for queued ones). */
    burstShortMs: number
    /** Long burst exchanges last queueWaitMs plus this, so queued ones really time out. */
    burstLongMarginMs: number
  }
  health: { everyMs: number; guardMs: number }
  /**
   * Baseline comparison tolerances: worse by more than factor x AND more than slackMs
   * (healthSlackMs for the health maximum). Not a run setting: not hashed.
   */
  tolerance: { latencyFactor: number; latencySlackMs: number; rssFactor: number; healthSlackMs?: number }
  smoke?: Partial<Omit<Profile, 'smoke' | 'name'>> & { [k: string]: unknown }
}

export const PROFILE_DIR = new URL('ops/load/profiles/', ROOT_URL).pathname

export function profileNames (dir = PROFILE_DIR): string[] {
  return readdirSync(dir).filter((f) => f.endsWith('.json')).map((f) => f.slice(0, -5)).sort()
}

export function loadProfile (name: string, dir = PROFILE_DIR): Profile {
  if (!/^[a-z0-9-]+$/.test(name)) throw new Error(`bad profile name ${JSON.stringify(name)}`)
  let text: string
  try { text = readFileSync(join(dir, `${name}.json`), 'utf8') } catch {
    throw new Error(`no profile ${JSON.stringify(name)} (have: ${profileNames(dir).join(', ')})`)
  }
  const p = JSON.parse(text) as Profile
  p.name = name
  return p
}

function isObj (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/** Deep merge (objects merge, everything else replaces). */
export function merge<T> (base: T, over: unknown): T {
  if (!isObj(base) || !isObj(over)) return (over === undefined ? base : over) as T
  const out: Record<string, unknown> = { ...base }
  for (const [k, v] of Object.entries(over)) out[k] = merge(out[k], v)
  return out as T
}

/** The profile with its smoke overlay applied (and the overlay removed). */
export function smokeOf (p: Profile): Profile {
  const { smoke, ...rest } = p
  return { ...merge(rest as Profile, smoke ?? {}), name: `${p.name}-smoke` }
}

/** The settings that define a run (hashed into the receipt): everything but name, description and the comparison tolerance. */
export function settingsOf (p: Profile): Record<string, unknown> {
  const { smoke: _s, description: _d, name: _n, tolerance: _t, ...rest } = p
  return rest
}
