// How much the fuzz tests run. `npm test` runs a bounded number of cases per property (a few
// seconds in all); `SLUICE_FUZZ_RUNS=20000` runs that many per property instead, and
// `SLUICE_FUZZ_SEED=<n>` replays one run (fast-check prints the seed and the shrunk
// counterexample's path when a property fails: pass both back with SLUICE_FUZZ_PATH).

import fc from 'fast-check'

function envInt (name: string): number | undefined {
  const v = process.env[name]
  if (v === undefined || v === '') return undefined
  const n = Number(v)
  if (!Number.isSafeInteger(n)) throw new Error(`${name} must be an integer, got ${v}`)
  return n
}

/** Cases per property: `bounded` in `npm test`, SLUICE_FUZZ_RUNS when set. */
export function numRuns (bounded: number): number {
  return envInt('SLUICE_FUZZ_RUNS') ?? bounded
}

/**
 * fast-check parameters for one property: runs, the seed and path to replay, no time limits.
 * `shrink: false` for properties over a live gateway: after a failure its state is suspect,
 * so the first counterexample is reported as found.
 */
export function fuzzParams<T> (bounded: number, opts: { shrink?: boolean } = {}): fc.Parameters<T> {
  const p: fc.Parameters<T> = { numRuns: numRuns(bounded), endOnFailure: opts.shrink === false }
  const seed = envInt('SLUICE_FUZZ_SEED')
  if (seed !== undefined) p.seed = seed
  const path = process.env.SLUICE_FUZZ_PATH
  if (path) p.path = path
  return p
}
