// Profiles of the recall-burst qualification (`sluice load recall-burst`): data in
// ops/load/profiles/recall-burst/<name>.json, the same names and CPU quotas as the
// model-capacity profiles (profile.ts), with seed 003's workload instead of the team one.
// `--smoke` overlays the profile's `smoke` section (small, no quota: not a qualification).

import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT_URL } from '../modules.ts'
import { merge } from './profile.ts'

export interface RecallProfile {
  name: string
  description: string
  /** CPU for sluice in vCPUs; null = no quota (smoke only). */
  quota: { cpus: number; periodUs: number } | null
  requireQuota: boolean
  /** accounts: each sim provider's accounts (a, b, c, ...; each its own key). */
  sluice: { workers: number; limits: Record<string, number>; upstream?: Record<string, number>; accounts: number }
  workload: {
    /** Sustained sessions per wave and the rounds each runs. */
    sessions: number
    rounds: number
    /** Sustained waves before the measured ones (RSS slope is fitted after them). */
    warmupWaves: number
    /** Identical sustained waves measured (retention and RSS per wave). */
    sustainedWaves: number
    /** The burst: sessions, rounds each, and how many identical burst waves. */
    burstSessions: number
    burstRounds: number
    burstWaves: number
    /** Parallel calls per round, drawn in [minCalls, maxCalls]. */
    minCalls: number
    maxCalls: number
    /** Simulated tool latency, ms, drawn in [min, max] per round. */
    toolLatencyMs: [number, number]
    /** Fraction of streams the client aborts mid-stream (then sends again). */
    cancelFraction: number
    /** Every slowEvery-th session reads slowly: slowChunkMs after each chunk. */
    slowEvery: number
    slowChunkMs: number
    /** Fraction of opening requests carrying a reset before the first byte. */
    resetFraction: number
    /** In this round of each wave the faulty accounts of the Responses provider are out (503). */
    outageRound: number
    /** Fraction of opening requests of rate-limited sessions carrying a 429 (the Messages provider). */
    rateLimitFraction: number
    /**
     * How many accounts of each provider are faulty (the first ones): every injected fault is
     * theirs only (`fault_key`), so the gateway's retry on another account answers it.
     */
    faultyAccounts: number
    /** Client attempts per request before the session gives the round up. */
    maxAttempts: number
    /** Client wait before sending again after a refusal or a cancel, ms. */
    retryBackoffMs: number
    /** Seed of every random choice (identical waves draw identically). */
    seed: number
  }
  timing: { ttftMs: number[]; tokens: number; intervalMs: number }
  health: { everyMs: number; guardMs: number }
  rss: {
    /** Idle time after a wave before RSS is sampled (median of 3 samples 200 ms apart). */
    settleMs: number
    /** Largest fitted RSS slope per measured wave that passes, MB (see ops/load/README.md). */
    slopeToleranceMbPerWave: number
  }
  /** Baseline comparison: worse by more than factor x AND more than slackMs. Not hashed. */
  tolerance: { latencyFactor: number; latencySlackMs: number; rssFactor: number }
  smoke?: Record<string, unknown>
}

// From the repository root (src/modules.ts), whether run from the sources or from dist/.
export const RECALL_PROFILE_DIR = new URL('ops/load/profiles/recall-burst/', ROOT_URL).pathname

export function recallProfileNames (dir = RECALL_PROFILE_DIR): string[] {
  return readdirSync(dir).filter((f) => f.endsWith('.json')).map((f) => f.slice(0, -5)).sort()
}

export function loadRecallProfile (name: string, dir = RECALL_PROFILE_DIR): RecallProfile {
  if (!/^[a-z0-9-]+$/.test(name)) throw new Error(`bad profile name ${JSON.stringify(name)}`)
  let text: string
  try { text = readFileSync(join(dir, `${name}.json`), 'utf8') } catch {
    throw new Error(`no recall-burst profile ${JSON.stringify(name)} (have: ${recallProfileNames(dir).join(', ')})`)
  }
  const p = JSON.parse(text) as RecallProfile
  p.name = name
  return p
}

export function recallSmokeOf (p: RecallProfile): RecallProfile {
  const { smoke, ...rest } = p
  return { ...merge(rest as RecallProfile, smoke ?? {}), name: `${p.name}-smoke` }
}

export function recallSettingsOf (p: RecallProfile): Record<string, unknown> {
  const { smoke: _s, description: _d, name: _n, tolerance: _t, ...rest } = p
  return rest
}
