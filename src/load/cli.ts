// `sluice load model-capacity --profile <name>|all [--smoke] [--record-baseline]
//   [--receipts-dir DIR] [--baselines-dir DIR] [--no-chart]`
// (`npm run load -- model-capacity --profile half-vcpu`). Runs each profile (src/load/run.ts),
// writes its receipt under ops/load/receipts/ (never overwritten; failed runs kept), compares
// it with ops/load/baselines/<profile>.json and prints the differences with their attribution
// (changed settings, changed hardware, or neither: a regression), a compact table and the
// verdict. Exit 0 only when every run passed. `sluice load recall-burst --profile <name>|all`
// (same options) runs seed 003's workload instead (src/load/recall.ts), with its own profiles
// (ops/load/profiles/recall-burst/), receipts `recall-burst-<profile>-...` and baselines
// `recall-burst-<profile>.json`. See ops/load/README.md.

import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { loadProfile, profileNames, smokeOf, type Profile } from './profile.ts'
import { compare, readBaseline, recordBaseline, writeReceipt, type Percentiles, type Receipt } from './receipt.ts'
import { killAllSync, ROOT, runProfile, type RunOutput } from './run.ts'
import { chartSvg } from './chart.ts'
import { loadRecallProfile, recallProfileNames, recallSmokeOf, type RecallProfile } from './recall-profile.ts'
import { compareRecall, readRecallBaseline, recallChartSvg, recallSummary, type RecallReceipt } from './recall-receipt.ts'
import { runRecall } from './recall.ts'

export const USAGE = `usage: sluice load model-capacity|recall-burst --profile <name>|all [options]

  model-capacity       the team workload, headroom and a burst past capacity
  recall-burst         seed 003: agent sessions recalling in synchronised bursts through every
                       protocol pair, with cancels and provider faults

  --profile NAME       a profile in ops/load/profiles/ (${safeNames()}; recall-burst:
                       ops/load/profiles/recall-burst/), or all
  --smoke              the short variant (smaller limits, no CPU quota): not a qualification
  --record-baseline    record this run's receipt as the profile's baseline (only if it passed)
  --receipts-dir DIR   where receipts go (default ops/load/receipts)
  --baselines-dir DIR  where baselines live (default ops/load/baselines)
  --no-chart           do not write the SVG chart next to the receipt
  --quota-method M     taskset or none instead of the best the host offers (a half-vcpu run
                       then fails: it is refused without a real CFS quota)
`

function safeNames (): string {
  try { return profileNames().join(', ') } catch { return '?' }
}

const f = (x: number) => !Number.isFinite(x) || x < 0 ? 'n/a' : x >= 100 ? x.toFixed(0) : x.toFixed(1)
const pc = (p: Percentiles) => `${f(p.p50)} / ${f(p.p90)} / ${f(p.p99)} / ${f(p.max)}`

function table (rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)))
  return rows.map((r) => r.map((c, i) => i === r.length - 1 ? c : c.padEnd(widths[i])).join('  ').trimEnd()).join('\n')
}

export function summary (r: Receipt): string {
  const rows: string[][] = [['phase', 'outcomes', 'queue wait p50/p90/p99/max ms', 'TTFB p50/p90/p99/max ms', 'total p50/p90/p99/max ms']]
  for (const ph of ['team', 'headroom', 'burst']) {
    const o = r.outcomes[ph]
    if (o === undefined) continue
    const l = r.latencyMs.byPhase[ph]
    rows.push([ph, Object.entries(o).map(([k, v]) => `${k} ${v}`).join(', '), pc(l.queueWait), pc(l.timeToFirstByte), pc(l.total)])
  }
  const lines = [table(rows)]
  lines.push(`health: ${r.health.probes} probes, p50 ${f(r.health.p50)} ms, p99 ${f(r.health.p99)} ms, max ${f(r.health.max)} ms; ${r.health.failures} failed, ${r.health.overGuard} over the ${r.health.guardMs} ms guard`)
  lines.push(`ledger: ${r.ledger.admissions} admissions, ${r.ledger.releases} releases, refusals ${JSON.stringify(r.ledger.refusals)}, after the run ${Object.keys(r.ledger.notIdle).length === 0 ? 'all idle' : 'NOT idle ' + JSON.stringify(r.ledger.notIdle)}`)
  lines.push(`peak RSS: sluice ${f(r.peakRssMb.sluice)} MB, sim ${f(r.peakRssMb.sim)} MB; quota: ${r.quota.detail} (${r.quota.held ? 'held' : 'not held'})${r.quota.throttled ? `, ${r.quota.throttled}` : ''}`)
  lines.push(`hardware: ${r.hardware.cpuModel}, ${r.hardware.cores} cores, ${r.hardware.memoryMb} MB; Node ${r.node}; commit ${r.commit.sha.slice(0, 12)}${r.commit.dirty ? ' (dirty)' : ''}; settings ${r.settingsHash.slice(0, 12)}; ${(r.durationMs / 1000).toFixed(1)} s`)
  return lines.join('\n')
}

export interface LoadDirs { receipts: string; baselines: string }

export async function runOne (p: Profile, smoke: boolean, dirs: LoadDirs, opts: { recordBaseline: boolean; chart: boolean; out: (s: string) => void; progress: (s: string) => void; quotaMethod?: 'taskset' | 'none' }): Promise<{ receipt: Receipt; file: string; output: RunOutput }> {
  const out = opts.out
  out(`${p.name}: ${p.description}`)
  if (smoke) out('  (smoke variant: smaller limits, no CPU quota asked for — this is not a qualification)')
  const output = await runProfile({ profile: p, smoke, progress: opts.progress, quotaMethod: opts.quotaMethod })
  const r = output.receipt
  const base = readBaseline(dirs.baselines, p.name)
  if (base === null) {
    r.baseline = null
  } else {
    const c = compare(base, r, p.tolerance)
    const differences = [
      ...c.settingsChanged.map((d) => `setting ${d}`),
      ...c.hardwareChanged.map((d) => `hardware ${d}`),
      ...c.worse.map((d) => `worse: ${d}`),
      ...c.better.map((d) => `better: ${d}`),
    ]
    r.baseline = { file: join(dirs.baselines, `${p.name}.json`), attribution: c.attribution, differences }
    if (c.regression) {
      r.reasons.push(`regression against the baseline of ${base.start} (same settings, same hardware): ${c.worse.join('; ')}`)
      r.passed = false
    }
  }
  const file = writeReceipt(dirs.receipts, r)
  if (opts.chart) {
    try { writeFileSync(file.replace(/\.json$/, '.svg'), chartSvg(output, p)) } catch {}
  }
  out('')
  out(summary(r))
  if (r.baseline === null) out(`baseline: none for ${p.name} in ${dirs.baselines} (record one with --record-baseline)`)
  else {
    out(`baseline: ${r.baseline.file}: ${r.baseline.attribution}`)
    for (const d of r.baseline.differences) out(`  ${d}`)
  }
  out(`receipt: ${file}`)
  if (opts.recordBaseline) {
    if (r.passed && (r.qualification || smoke)) out(`baseline recorded: ${recordBaseline(dirs.baselines, file, p.name)}`)
    else out(`baseline NOT recorded: ${r.passed ? 'the run is not a qualification (its quota did not hold)' : 'the run failed'}`)
  }
  out(`verdict: ${r.passed ? 'PASS' : 'FAIL'}${r.passed && !r.qualification ? ' (not a qualification: ' + (smoke ? 'smoke run' : 'no quota held') + ')' : ''}`)
  for (const reason of r.reasons) out(`  - ${reason}`)
  return { receipt: r, file, output }
}

export async function loadMain (argv: string[]): Promise<number> {
  const [sub, ...rest] = argv
  if (sub !== 'model-capacity' && sub !== 'recall-burst') {
    process.stderr.write(`sluice load: unknown or missing test ${JSON.stringify(sub ?? '')}\n\n${USAGE}`)
    return 2
  }
  let values
  try {
    values = parseArgs({
      args: rest,
      strict: true,
      options: {
        profile: { type: 'string' },
        smoke: { type: 'boolean', default: false },
        'record-baseline': { type: 'boolean', default: false },
        'receipts-dir': { type: 'string' },
        'baselines-dir': { type: 'string' },
        'no-chart': { type: 'boolean', default: false },
        'quota-method': { type: 'string' },
      },
    }).values
  } catch (e) {
    process.stderr.write(`sluice load: ${(e as Error).message}\n\n${USAGE}`)
    return 2
  }
  const qm = values['quota-method']
  if (qm !== undefined && qm !== 'taskset' && qm !== 'none') { process.stderr.write(`sluice load: --quota-method must be taskset or none\n\n${USAGE}`); return 2 }
  if (values.profile === undefined) { process.stderr.write(`sluice load: --profile is required\n\n${USAGE}`); return 2 }
  const dirs: LoadDirs = {
    receipts: values['receipts-dir'] ?? join(ROOT, 'ops/load/receipts'),
    baselines: values['baselines-dir'] ?? join(ROOT, 'ops/load/baselines'),
  }
  if (sub === 'recall-burst') {
    let rps: RecallProfile[]
    try {
      rps = (values.profile === 'all' ? recallProfileNames() : [values.profile]).map((n) => loadRecallProfile(n))
    } catch (e) {
      process.stderr.write(`sluice load: ${(e as Error).message}\n`)
      return 2
    }
    if (values.smoke) rps = rps.map(recallSmokeOf)
    return runAll(rps.map((p) => (io: Io) => runRecallOne(p, values.smoke, dirs, { recordBaseline: values['record-baseline'], chart: !values['no-chart'], quotaMethod: qm, ...io }).then((r) => [p.name, r.receipt.passed] as [string, boolean])))
  }
  let profiles: Profile[]
  try {
    profiles = (values.profile === 'all' ? profileNames() : [values.profile]).map((n) => loadProfile(n))
  } catch (e) {
    process.stderr.write(`sluice load: ${(e as Error).message}\n`)
    return 2
  }
  if (values.smoke) profiles = profiles.map(smokeOf)
  return runAll(profiles.map((p) => (io: Io) => runOne(p, values.smoke, dirs, { recordBaseline: values['record-baseline'], chart: !values['no-chart'], quotaMethod: qm, ...io }).then((r) => [p.name, r.receipt.passed] as [string, boolean])))
}

interface Io { out: (s: string) => void; progress: (s: string) => void }

/** Runs each profile in turn with the shared output, cleanup and exit code. */
async function runAll (runs: Array<(io: Io) => Promise<[string, boolean]>>): Promise<number> {
  process.on('exit', killAllSync)
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.once(sig, () => { killAllSync(); process.exit(130) })
  const tty = process.stderr.isTTY === true
  let lastLine = 0
  const progress = (line: string) => {
    if (tty) process.stderr.write(`\r${line.slice(0, (process.stderr.columns ?? 200) - 1)}\x1b[K`)
    else if (performance.now() - lastLine >= 5000) { lastLine = performance.now(); process.stderr.write(line + '\n') }
  }
  const out = (s: string) => {
    if (tty) process.stderr.write('\r\x1b[K')
    process.stdout.write(s + '\n')
  }
  const verdicts: Array<[string, boolean]> = []
  for (const run of runs) {
    verdicts.push(await run({ out, progress }))
    out('')
  }
  if (verdicts.length > 1) out(`overall: ${verdicts.map(([n, ok]) => `${n} ${ok ? 'PASS' : 'FAIL'}`).join(', ')}`)
  return verdicts.every(([, ok]) => ok) ? 0 : 1
}

/** One recall-burst profile: run, compare with its baseline, write the receipt and chart, print. */
export async function runRecallOne (p: RecallProfile, smoke: boolean, dirs: LoadDirs, opts: { recordBaseline: boolean; chart: boolean; out: (s: string) => void; progress: (s: string) => void; quotaMethod?: 'taskset' | 'none' }): Promise<{ receipt: RecallReceipt; file: string }> {
  const out = opts.out
  out(`recall-burst ${p.name}: ${p.description}`)
  if (smoke) out('  (smoke variant: small, no CPU quota asked for — this is not a qualification)')
  const { receipt: r, points } = await runRecall({ profile: p, smoke, progress: opts.progress, quotaMethod: opts.quotaMethod })
  const base = readRecallBaseline(dirs.baselines, r.profile)
  if (base === null) r.baseline = null
  else {
    const c = compareRecall(base, r, p.tolerance)
    r.baseline = {
      file: join(dirs.baselines, `${r.profile}.json`),
      attribution: c.attribution,
      differences: [...c.settingsChanged.map((d) => `setting ${d}`), ...c.hardwareChanged.map((d) => `hardware ${d}`), ...c.worse.map((d) => `worse: ${d}`), ...c.better.map((d) => `better: ${d}`)],
    }
    if (c.regression) {
      r.reasons.push(`regression against the baseline of ${base.start} (same settings, same hardware): ${c.worse.join('; ')}`)
      r.passed = false
    }
  }
  const file = writeReceipt(dirs.receipts, r as unknown as Receipt)
  if (opts.chart) {
    try { writeFileSync(file.replace(/\.json$/, '.svg'), recallChartSvg(r, points)) } catch {}
  }
  out('')
  out(recallSummary(r))
  if (r.baseline === null) out(`baseline: none for ${r.profile} in ${dirs.baselines} (record one with --record-baseline)`)
  else {
    out(`baseline: ${r.baseline.file}: ${r.baseline.attribution}`)
    for (const d of r.baseline.differences) out(`  ${d}`)
  }
  out(`receipt: ${file}`)
  if (opts.recordBaseline) {
    if (r.passed && (r.qualification || smoke)) out(`baseline recorded: ${recordBaseline(dirs.baselines, file, r.profile)}`)
    else out(`baseline NOT recorded: ${r.passed ? 'the run is not a qualification (its quota did not hold)' : 'the run failed'}`)
  }
  out(`verdict: ${r.passed ? 'PASS' : 'FAIL'}${r.passed && !r.qualification ? ' (not a qualification: ' + (smoke ? 'smoke run' : 'no quota held') + ')' : ''}`)
  for (const reason of r.reasons) out(`  - ${reason}`)
  return { receipt: r, file }
}
