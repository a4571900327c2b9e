// Exhaustive model check of the ledger protocol, with spin: src/ledger/model/ledger.pml (the
// lock, the gates, the byte budget, reclaim) and src/ledger/model/lanes.pml (session lanes).
//
//   npm run verify:model [-- options]
//
// For every run below: `spin -a` (with the run's -D settings) in a temporary directory, gcc,
// then the verifier (safety: assertions and invalid end states; -DNOREDUCE, no partial order
// reduction, every interleaving), its output parsed into one table row. Each run names its
// model (ledger.pml unless it says lanes.pml). A property run (and
// a proposed fix, and an equivalent mutant) must complete with no error; a known defect and a
// mutant must FAIL, on the property named for it. Then a vacuity check: every `@cover` event
// of each model must be reached by some property run of that model that compiles it. Exit 0 only when all of
// that holds; 1 otherwise (or when spin or gcc is missing); 2 on a bad option.
//
// Options:
//   --mutants        run the mutants (the default: they take a few seconds)
//   --no-mutants     skip them
//   --full           also the larger configurations (about 2 minutes more, up to 2 GB each)
//   --only a,b       only the runs whose names start with one of these (no coverage check)
//   --jobs N         verifiers in parallel (default: min(2, cores))
//   --trail          print a readable replay of every counterexample, expected ones included
//   --keep           keep the temporary directory (pan.c, pan, *.trail) and print its path
//   --list           list the runs and exit
//
// Environment: SPIN, CC override the commands; SLUICE_MODEL_MEMLIM the per-verifier memory
// bound in MB (default 2048).

import { spawn, spawnSync } from 'node:child_process'
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { availableParallelism, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..')
export const MODEL = join(ROOT, 'src/ledger/model/ledger.pml')
export const LANES_MODEL = join(ROOT, 'src/ledger/model/lanes.pml')
export type ModelName = 'ledger' | 'lanes'
export const MODELS: Readonly<Record<ModelName, string>> = { ledger: MODEL, lanes: LANES_MODEL }
/** The model a run checks. */
export const modelOf = (spec: RunSpec): ModelName => spec.model ?? 'ledger'

export type Kind = 'property' | 'known-defect' | 'proposed-fix' | 'mutant' | 'equivalent'

export interface RunSpec {
  readonly name: string
  readonly kind: Kind
  /** The model file (default: ledger.pml). */
  readonly model?: ModelName
  /** -D settings for spin -a (the model's configuration and mutants). */
  readonly defines: readonly string[]
  readonly expect: 'pass' | 'fail'
  /** For an expected failure: the property names that may report it. */
  readonly catches?: readonly string[]
  /** Non-progress-cycle search (-DNP, -l) instead of the safety search. */
  readonly np?: boolean
  /** Only with --full. */
  readonly full?: boolean
  /** Store states compressed (-DCOLLAPSE): slower, about a third of the memory. */
  readonly collapse?: boolean
  /** This run's memory bound in MB (default: SLUICE_MODEL_MEMLIM or 2048). */
  readonly memlim?: number
  readonly what: string
}

// ---- the runs ---------------------------------------------------------------------------

const G2x2 = ['MAXP=2', 'QMAX=2', 'NW=3', 'OPS=1', 'OPS1=2']
const G1x2 = ['MAXP=1', 'QMAX=2', 'NW=3', 'OPS=1', 'OPS1=2']
const G1x1 = ['MAXP=1', 'QMAX=1', 'NW=3', 'OPS=1', 'OPS1=2']
const LIVE = ['MAX_DEATHS=0', 'PATIENT=1']           // no deaths; waiters may have no deadline
const DEATH = ['MAX_DEATHS=1', 'PATIENT=0']          // a death anywhere; every waiter has a deadline
const SMALL = ['MAXP=1', 'QMAX=2', 'NW=2', 'OPS=1', 'OPS1=2', ...LIVE]
const SMALL_DEATH = ['MAXP=1', 'QMAX=2', 'NW=3', 'OPS=1', ...DEATH]
const FIFO3 = ['MAXP=1', 'QMAX=2', 'NW=3', 'OPS=2', ...LIVE]

const P = (name: string, defines: string[], what: string, extra: Partial<RunSpec> = {}): RunSpec =>
  ({ name, kind: 'property', defines, expect: 'pass', what, ...extra })
const M = (name: string, defines: string[], catches: string[], what: string): RunSpec =>
  ({ name: `mutant:${name}`, kind: 'mutant', defines, expect: 'fail', catches, what })

// Session lanes (lanes.pml). Workers run one exchange at a time (OPS each), in a session they
// pick; callers are patient (no abort), abort at any moment while queued (racing the
// promotion), or (STREAMS) run until a cancel request reaches them.
const L_LIVE = ['MAX_DEATHS=0']
const L_DEATH = ['MAX_DEATHS=1']
const L_FIFO = ['NW=3', 'NSESS=1', 'OPS=1', 'OPS1=2', 'CAP=0', 'NE=3']   // worker 1 twice: entry reuse, 2 queued
const L_TWO = ['NW=3', 'NSESS=2', 'CAP=2', 'NE=3']
const L_ONE = ['NW=3', 'NSESS=1', 'CAP=3', 'NE=3']
const L_SMALL = ['NW=2', 'NSESS=1', 'CAP=0', 'NE=2']
const L_CANCEL = ['NW=2', 'NC=1', 'NSESS=1', 'CAP=0', 'NE=2', 'STREAMS=1', 'CANCELS=1']
const LP = (name: string, defines: string[], what: string, extra: Partial<RunSpec> = {}): RunSpec =>
  ({ name: `lanes-${name}`, model: 'lanes', kind: 'property', defines, expect: 'pass', what, ...extra })
const LM = (name: string, defines: string[], catches: string[], what: string): RunSpec =>
  ({ name: `mutant:lanes-${name}`, model: 'lanes', kind: 'mutant', defines, expect: 'fail', catches, what })

const LANE_RUNS: readonly RunSpec[] = [
  LP('fifo', [...L_FIFO, ...L_LIVE, 'SPURIOUS=1'], '1 session, 3 workers (one enters twice): FIFO behind the active one, aborts racing promotions, entry reuse, stray wake-ups'),
  LP('two-sessions', [...L_TWO, ...L_LIVE], '2 sessions, pending cap 2: refusals at the cap, sessions independent'),
  LP('death', [...L_ONE, ...L_DEATH], '1 session, cap 3, a worker dies at any step (inside the lock too); patient waiters'),
  LP('entries-death', ['NW=3', 'NSESS=2', 'CAP=2', 'NE=2', ...L_DEATH], '2 sessions, a table of 2 entries (capacity refusals), a death'),
  LP('cancel-death', [...L_CANCEL, ...L_DEATH], 'cancel requests (all of a session or one exchange) from a canceller; long exchanges end only by a cancel; anyone dies (D4)'),
  LP('two-deaths', ['NW=3', 'NSESS=1', 'CAP=0', 'NE=3', 'MAX_DEATHS=2', 'ABORTS=0'], 'two of three workers die, exits in any order; patient waiters'),
  LP('active2-death', [...L_ONE, 'AMAX=2', ...L_DEATH], 'two active per session (activePerSession = 2), a death'),
  LP('termination', [...L_TWO, ...L_LIVE], 'no cycle: every execution ends, so "no invalid end state" is liveness', { np: true }),
  LP('two-sessions-death', [...L_TWO, ...L_DEATH], '2 sessions, cap 2, 3 workers, a death', { full: true }),
  LP('two-deaths-aborts', ['NW=3', 'NSESS=1', 'CAP=3', 'NE=3', 'MAX_DEATHS=2'], 'two deaths, waiters patient or aborting', { full: true }),
  LP('fifo-deep', ['NW=3', 'NSESS=1', 'OPS=2', 'CAP=0', 'NE=3', ...L_LIVE], 'every worker enters twice', { full: true }),
  LP('cancel-two-sessions', ['NW=2', 'NC=1', 'NSESS=2', 'CAP=0', 'NE=2', 'STREAMS=1', 'CANCELS=1', ...L_DEATH], 'cancel requests across two sessions (a wrong session flags nothing), a death', { full: true }),
  LP('cancel-twice', ['NW=2', 'NC=1', 'NSESS=1', 'CAP=0', 'NE=2', 'STREAMS=1', 'CANCELS=2', 'ABORTS=0', ...L_DEATH], 'two cancel requests (the second finds the entries flagged), a death', { full: true }),

  LM('naive-wait', [...L_SMALL, ...L_LIVE, 'MUT_NAIVE_WAIT'], ['invalid end state'], 'waitActive: "QUEUED?" then sleep, as two steps: lost wake-up'),
  LM('reclaim-no-renotify', [...L_SMALL, ...L_DEATH, 'ABORTS=0', 'MUT_RECLAIM_NO_RENOTIFY'], ['invalid end state'], 'reclaim notifies only what it promotes: a promoter that died before its notify strands a patient waiter'),
  LM('promote-by-index', [...L_FIFO, ...L_LIVE, 'MUT_PROMOTE_BY_INDEX'], ['F1_fifo'], 'promotion takes the session\'s first QUEUED entry by index, not the oldest ticket'),
  LM('promote-any-session', [...L_TWO, ...L_LIVE, 'MUT_PROMOTE_ANY_SESSION'], ['N1_one_active'], 'promotion takes the oldest QUEUED entry of any session'),
  LM('withdraw-no-promote', ['NW=3', 'NSESS=1', 'CAP=0', 'NE=3', ...L_LIVE, 'MUT_WITHDRAW_NO_PROMOTE'], ['N3_no_lost_wakeup'], 'an abort that lost the race to a promotion frees the entry without promoting the next'),
  LM('release-no-promote', [...L_SMALL, ...L_LIVE, 'MUT_RELEASE_NO_PROMOTE'], ['N3_no_lost_wakeup'], 'release frees the entry without promoting the next'),
  LM('cap-off-by-one', [...L_ONE, 'CAP=2', ...L_LIVE, 'MUT_CAP_OFF_BY_ONE'], ['N2_pending_cap'], 'enter() refuses only when pending > cap'),
  LM('reclaim-no-recompute', [...L_SMALL, ...L_DEATH, 'ABORTS=0', 'MUT_RECLAIM_NO_RECOMPUTE'], ['N4_derived_counters'], 'reclaim adjusts LN_PENDING by what it freed instead of counting the entries'),
  LM('reclaim-keeps-hwm', [...L_SMALL, ...L_DEATH, 'ABORTS=0', 'MUT_RECLAIM_KEEPS_HWM'], ['N4_derived_counters'], 'reclaim keeps LN_HWM (a death inside enter() or freeLocked leaves it stale)'),
  LM('reclaim-no-promote', [...L_SMALL, ...L_DEATH, 'ABORTS=0', 'MUT_RECLAIM_NO_PROMOTE'], ['N3_no_lost_wakeup'], 'reclaim frees a dead row\'s ACTIVE entry without promoting the next'),
  LM('d4-no-cancel-notify', ['NW=1', 'NC=1', 'NSESS=1', 'CAP=0', 'NE=2', 'STREAMS=1', 'PATIENT=0', 'ABORTS=0', ...L_DEATH, 'MUT_RECLAIM_NO_CANCEL_NOTIFY'], ['invalid end state'], 'the code before the D4 fix: a cancel request whose requester died before its notify never reaches the exchange'),
  // Equivalent, like fast-path-ignores-queue: N3 (a QUEUED entry implies its session runs
  // AMAX) makes enter()'s `queued === 0` test redundant outside the lock.
  { name: 'equivalent:lanes-enter-ignores-queue', model: 'lanes', kind: 'equivalent', expect: 'pass', defines: [...L_ONE, 'CAP=0', ...L_DEATH, 'MUT_ENTER_IGNORES_QUEUE'],
    what: 'enter() runs at once when active < max, whoever queues (no barging is possible anyway: N3)' },
]

export const RUNS: readonly RunSpec[] = [
  // Properties P1-P5 (and the budget's B1) on several gate sizes, without and with a death.
  P('gate-2x2', [...G2x2, ...LIVE, 'SPURIOUS=1'], '2 permits, queue 2, 3 workers (one acquires twice), stray wake-ups'),
  P('gate-2x2-death', [...G2x2, ...DEATH], 'same, a worker dies at any step (inside the lock too)'),
  P('gate-1x2', [...G1x2, ...LIVE, 'SPURIOUS=1'], '1 permit, queue 2: FIFO among two waiters, queue-full refusal'),
  P('gate-1x2-death', ['MAXP=1', 'QMAX=2', 'NW=3', 'OPS=1', ...DEATH], 'same with a death (each worker acquires once)'),
  P('gate-1x1', [...G1x1, ...LIVE, 'SPURIOUS=1'], '1 permit, queue 1'),
  P('gate-1x1-death', [...G1x1, ...DEATH], 'same, with a death'),
  P('budget', ['BUDGET', 'NW=3', 'OPS=2', 'OPS1=3', 'MAX_DEATHS=1'], 'byte budget: limit 3, reserve 1-2, release, a death'),
  P('gate-2x2-termination', [...G2x2, ...LIVE, 'SPURIOUS=1'], 'no cycle at all: every execution ends, so "no invalid end state" is liveness', { np: true }),
  P('gate-1x2-death-deep', [...G1x2, ...DEATH], '1 permit, queue 2, a death, one worker acquires twice', { full: true }),
  P('gate-2x2-deep', ['MAXP=2', 'QMAX=2', 'NW=3', 'OPS=2', ...LIVE], 'every worker acquires twice', { full: true }),
  P('gate-2x2-wide', ['MAXP=2', 'QMAX=2', 'NW=4', 'OPS=1', ...LIVE], '4 workers: two hold, two wait', { full: true }),
  P('budget-wide', ['BUDGET', 'NW=4', 'OPS=2', 'MAX_DEATHS=1'], 'byte budget, 4 workers', { full: true }),

  // Two deaths at once (supervisor.stop() terminates every worker): reclaimRow must never
  // park the primary (commit 38d7ed3: retry on a later turn, steal from any row in the dead set).
  P('gate-two-deaths', ['MAXP=2', 'QMAX=1', 'NW=3', 'OPS=1', 'MAX_DEATHS=2', 'PATIENT=0'], 'two of three workers die, exits handled in any order, one perhaps holding the lock'),
  P('gate-1x2-two-deaths', ['MAXP=1', 'QMAX=2', 'NW=3', 'OPS=1', 'MAX_DEATHS=2', 'PATIENT=0'], '1 permit, queue 2, two deaths', { full: true }),
  P('budget-two-deaths', ['BUDGET', 'NW=3', 'OPS=2', 'MAX_DEATHS=2'], 'byte budget, two deaths'),

  // D1 (README.md "Findings"), fixed in gate.ts: the reclaim notifies every GRANTED slot, so
  // patient waiters (no deadline) survive a waker's death; the unfixed code is a mutant below.
  P('gate-d1-waker-dies', ['MAXP=1', 'QMAX=2', 'NW=3', 'OPS=1', 'MAX_DEATHS=1', 'PATIENT=1'], 'a releaser dies between its GRANTED store and its notify: the reclaim wakes the waiter'),
  P('gate-d1-two-deaths', ['MAXP=1', 'QMAX=2', 'NW=3', 'OPS=1', 'MAX_DEATHS=2', 'PATIENT=1'], 'the same with two deaths', { full: true }),
  // A hazard of use (not of the code as written): it must still reproduce.
  { name: 'hazard:D3-primary-takes-the-lock', kind: 'known-defect', expect: 'fail', catches: ['invalid end state'],
    defines: ['MAXP=1', 'QMAX=1', 'NW=2', 'OPS=1', 'MAX_DEATHS=1', 'PATIENT=0', 'PRIMARY_OPS=1'],
    what: 'if the primary ever calls lock() itself, a dead holder parks the thread that must repair it' },

  // Mutants: a deliberate bug each; the named property must catch it.
  M('naive-wait', [...SMALL, 'MUT_NAIVE_WAIT'], ['invalid end state'], 'check WAITING, then sleep (two steps): lost wake-up'),
  M('d1-no-granted-notify', ['MAXP=1', 'QMAX=2', 'NW=2', 'OPS=1', 'MAX_DEATHS=1', 'PATIENT=1', 'MUT_D1_NO_GRANTED_NOTIFY'], ['invalid end state'], 'the code before the D1 fix: a waiter granted by a dying releaser sleeps until its deadline'),
  M('no-handoff', [...SMALL, 'MUT_NO_HANDOFF'], ['P3_no_lost_wakeup', 'invalid end state'], 'release returns the permit to the pool while someone waits'),
  M('handoff-by-index', [...FIFO3, 'MUT_HANDOFF_BY_INDEX'], ['P4_fifo'], 'hand-off to the first WAITING slot, not the oldest ticket'),
  M('cancel-granted-leak', [...SMALL, 'MUT_CANCEL_GRANTED_LEAK'], ['P1_never_over_admitted', 'P2_permit_exactly_once'], 'abort after grant frees the slot, never puts the permit back'),
  M('putback-to-pool', [...SMALL, 'MUT_PUTBACK_TO_POOL'], ['P3_no_lost_wakeup', 'invalid end state'], 'abort after grant returns the permit to the pool, not to the next waiter'),
  M('timeout-drops-grant', [...SMALL, 'MUT_TIMEOUT_DROPS_GRANT'], ['P1_never_over_admitted', 'P2_permit_exactly_once'], 'timeout after grant treats the slot as still WAITING'),
  M('overadmit', [...SMALL, 'MUT_OVERADMIT'], ['P1_never_over_admitted'], 'fast path tests active <= max'),
  M('reclaim-no-zero', [...SMALL_DEATH, 'MUT_RECLAIM_NO_ZERO'], ['P5_reclaim_exactly_once', 'P2_permit_exactly_once'], 'reclaim reads the dead row without zeroing it'),
  M('reclaim-no-recompute', [...SMALL_DEATH, 'MUT_RECLAIM_NO_RECOMPUTE'], ['P1_never_over_admitted', 'P2_permit_exactly_once'], 'reclaim adjusts counters instead of recomputing them from the truth'),
  M('reclaim-no-handoff', [...SMALL_DEATH, 'MUT_RECLAIM_NO_HANDOFF'], ['P3_no_lost_wakeup'], 'reclaim does not hand freed permits to waiters'),
  M('steal-any', [...SMALL_DEATH, 'MUT_STEAL_ANY'], ['L1_lock_discipline', 'P1_never_over_admitted', 'P2_permit_exactly_once'], 'tryLockForRepair steals the lock from a live holder too'),
  M('repair-parks', ['MAXP=1', 'QMAX=1', 'NW=2', 'OPS=1', 'MAX_DEATHS=2', 'PATIENT=0', 'MUT_REPAIR_PARKS'], ['invalid end state'], 'the former lockForRepair: parks until the lock is free or its own row holds it'),
  M('budget-no-recompute', ['BUDGET', 'NW=3', 'OPS=2', 'MAX_DEATHS=1', 'MUT_BUDGET_NO_RECOMPUTE'], ['B1_budget'], 'reclaim never recomputes B_RESERVED, even after stealing the lock'),
  M('budget-over-limit', ['BUDGET', 'NW=3', 'OPS=2', 'MAX_DEATHS=0', 'MUT_BUDGET_NO_LIMIT'], ['B1_budget'], 'tryReserve lets the total reach limit + 1'),
  // An equivalent mutant: it must PASS. The fast path's `queued === 0` test is implied by G3
  // (a free permit never coexists with a waiter outside the lock), so dropping it changes no
  // behaviour; it stays in the code as defence in depth.
  { name: 'equivalent:fast-path-ignores-queue', kind: 'equivalent', expect: 'pass', defines: [...SMALL_DEATH, 'MUT_BARGE'],
    what: 'the fast path tests only active < max (no barging is possible anyway: G3)' },

  // ---- session lanes (lanes.pml): N1-N4, F1, E1, R1 ----
  ...LANE_RUNS,
]

// ---- running spin -----------------------------------------------------------------------

export interface Outcome {
  spec: RunSpec
  ok: boolean
  /** 'pass' | 'FAIL' | 'caught' | 'reproduced' | 'NOT CAUGHT' | 'INCOMPLETE' | 'ERROR' */
  result: string
  errors: number | null
  states: number | null
  depth: number | null
  seconds: number | null
  memoryMb: number | null
  /** The violated property, or why the run is not conclusive. */
  detail: string
  unreached: Set<number>
  compiled: Set<number>
  dir: string
  trail?: string
}

export interface PanReport {
  errors: number | null
  states: number | null
  depth: number | null
  seconds: number | null
  memoryMb: number | null
  /** 'max search depth too small', 'memory bound reached', 'search not completed', ... */
  incomplete: string | null
  /** The first violation line (without "pan:1: "), or null. */
  violation: string | null
  /** The property it names: P1_..., B1_budget, L1_..., 'invalid end state', 'non-progress cycle'. */
  property: string | null
  unreached: Set<number>
}

const PROPERTY_NAME = /\b(P[1-5]_[a-z_]+|B1_budget|L1_lock_discipline|S1_slot_ownership|N[1-4]_[a-z_]+|F1_fifo|E1_[a-z_]+|R1_[a-z_]+|S2_entry_ownership)\b/

/** Parses a pan run's standard output. */
export function parsePan (out: string): PanReport {
  const num = (re: RegExp): number | null => {
    const m = re.exec(out)
    return m ? Number(m[1]) : null
  }
  let incomplete: string | null = null
  if (/max search depth too small/.test(out)) incomplete = 'max search depth too small'
  else if (/reached -DMEMLIM bound|out of memory/i.test(out)) incomplete = 'memory bound reached'
  else if (/Search not completed/.test(out)) incomplete = 'search not completed'
  const v = /^pan:\d+: (.*?)(?: \(at depth \d+\))?$/m.exec(out)
  const violation = v ? v[1] : null
  let property: string | null = null
  if (violation) {
    const p = PROPERTY_NAME.exec(violation)
    if (p) property = p[1]
    else if (/invalid end state/.test(violation)) property = 'invalid end state'
    else if (/non-progress cycle/.test(violation)) property = 'non-progress cycle'
    else if (/acceptance cycle/.test(violation)) property = 'acceptance cycle'
    else property = violation
  }
  const unreached = new Set<number>()
  const at = out.indexOf('unreached in ')
  if (at >= 0) for (const m of out.slice(at).matchAll(/\.pml:(\d+), state \d+/g)) unreached.add(Number(m[1]))
  return {
    errors: num(/errors: (\d+)/),
    states: num(/(\d+) states, stored/),
    depth: num(/depth reached (\d+)/),
    seconds: num(/pan: elapsed time ([\d.e+]+) seconds/),
    memoryMb: num(/([\d.]+)\s+total actual memory usage/),
    incomplete,
    violation,
    property,
    unreached,
  }
}

/** Lines of the model the verifier was generated from: the src_ln tables of spin's pan.c
    (state -> source line), the same numbering pan uses for its "unreached" report. */
export function parseCompiledLines (panC: string): Set<number> {
  const lines = new Set<number>()
  for (const table of panC.matchAll(/short src_ln\d+ \[\] = \{([^}]*)\}/g)) {
    for (const n of table[1].split(',')) {
      const line = Number(n.trim())
      if (line > 0) lines.add(line)
    }
  }
  return lines
}

/** Decides a run's outcome from its report. */
export function judge (spec: RunSpec, r: PanReport): { ok: boolean; result: string; detail: string } {
  const found = (r.errors ?? 0) > 0
  if (r.errors === null) return { ok: false, result: 'ERROR', detail: 'no verifier summary in the output' }
  if (spec.expect === 'pass') {
    if (found) return { ok: false, result: 'FAIL', detail: describe(r) }
    if (r.incomplete) return { ok: false, result: 'INCOMPLETE', detail: r.incomplete }
    return { ok: true, result: 'pass', detail: '' }
  }
  if (!found) {
    if (r.incomplete) return { ok: false, result: 'INCOMPLETE', detail: r.incomplete }
    return {
      ok: false,
      result: 'NOT CAUGHT',
      detail: spec.kind === 'known-defect'
        ? 'the defect no longer reproduces: fix the model like the code, then make this a property run'
        : 'the mutant survived: a property is too weak',
    }
  }
  const ok = !spec.catches || spec.catches.some((c) => r.property === c)
  return {
    ok,
    result: ok ? (spec.kind === 'known-defect' ? 'reproduced' : 'caught') : 'WRONG PROPERTY',
    detail: ok ? describe(r) : `${describe(r)} (expected ${spec.catches?.join(' or ')})`,
  }
}

function describe (r: PanReport): string {
  if (!r.property) return r.violation ?? ''
  if (r.property === 'invalid end state') return 'invalid end state: a thread blocked forever'
  return r.property
}

interface Exec { code: number | null; stdout: string; stderr: string }

function exec (cmd: string, args: readonly string[], cwd: string): Promise<Exec> {
  return new Promise((resolvePromise) => {
    const child = spawn(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] })
    const out: Buffer[] = []
    const err: Buffer[] = []
    child.stdout.on('data', (b: Buffer) => out.push(b))
    child.stderr.on('data', (b: Buffer) => err.push(b))
    child.on('error', (e) => resolvePromise({ code: -1, stdout: '', stderr: String(e) }))
    child.on('close', (code) => resolvePromise({ code, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() }))
  })
}

export interface Tools { spin: string; cc: string; memlim: number }

export async function verify (spec: RunSpec, base: string, tools: Tools, wantTrail: boolean): Promise<Outcome> {
  const dir = join(base, spec.name.replace(/[^a-zA-Z0-9_.-]/g, '_'))
  mkdirSync(dir, { recursive: true })
  const file = `${modelOf(spec)}.pml`
  copyFileSync(MODELS[modelOf(spec)], join(dir, file))
  const dflags = spec.defines.map((d) => `-D${d}`)
  const blank = { errors: null, states: null, depth: null, seconds: null, memoryMb: null, unreached: new Set<number>(), compiled: new Set<number>(), dir }
  const gen = await exec(tools.spin, ['-a', ...dflags, file], dir)
  if (gen.code !== 0) return { spec, ok: false, result: 'ERROR', detail: `spin -a: ${(gen.stdout + gen.stderr).trim().split('\n')[0]}`, ...blank }
  const big = spec.expect === 'pass'
  const cflags = [big ? '-O1' : '-O0', '-w', `-DMEMLIM=${spec.memlim ?? tools.memlim}`, '-DNOREDUCE', ...(spec.collapse ? ['-DCOLLAPSE'] : []),
    ...(spec.np ? ['-DNP'] : ['-DSAFETY']), '-o', 'pan', 'pan.c']
  const cc = await exec(tools.cc, cflags, dir)
  if (cc.code !== 0) return { spec, ok: false, result: 'ERROR', detail: `${tools.cc}: ${(cc.stdout + cc.stderr).trim().split('\n')[0]}`, ...blank }
  const pan = await exec('./pan', ['-m100000', ...(spec.np ? ['-l'] : [])], dir)
  const report = parsePan(pan.stdout)
  const verdict = judge(spec, report)
  let compiled = new Set<number>()
  if (spec.kind === 'property' && verdict.ok) compiled = parseCompiledLines(readFileSync(join(dir, 'pan.c'), 'utf8'))
  const outcome: Outcome = {
    spec, ...verdict, ...blank,
    errors: report.errors, states: report.states, depth: report.depth, seconds: report.seconds, memoryMb: report.memoryMb,
    unreached: report.unreached, compiled,
  }
  if ((report.errors ?? 0) > 0 && (wantTrail || !verdict.ok)) outcome.trail = await replay(spec, dir, tools)
  return outcome
}

/** Model lines that are bookkeeping (loop counters, ghosts, syntax), left out of a replay. */
const NOISE = /^(od|fi|do|if|\}|\};|skip|else|::|fi \}|od \}|od;|fi;|k\+\+|k = 0;?|:: k < N[SR] ->|:: else -> (skip|break|k = 0; break)|best = NONE;|slot = NONE; k = 0;|g = 0; wt = 0; k = 0;|d_step \{ x = 0; y = 0 \}|s = NONE;|#.*|assert\(.*|lastGrant = .*|if :: dead\[sowner.*|op = 0; slot = 0;.*|believe\[me\] = 0; sleeping.*|:: k < NS && .*|:: k < NE ->.*|if :: cmask .*|j = 0;|j\+\+|:: j < NE && j < HWM ->|:: else -> j = 0; break|nmask = 0; cmask = 0;|snap.*|k = 0; do .*|d_step \{|w = 0 \}|reclaim_end: skip|reclaims\[w\]\+\+; r = 0; stolen = 0 \}|:: else ->|:: k >= NE.*)$/

/** A readable counterexample: one line per (thread, model line), with the code's function. */
async function replay (spec: RunSpec, dir: string, tools: Tools): Promise<string> {
  const file = `${modelOf(spec)}.pml`
  const t = await exec(tools.spin, ['-t', '-p', ...spec.defines.map((d) => `-D${d}`), file], dir)
  const src = readFileSync(join(dir, file), 'utf8').split('\n')
  const steps = [...t.stdout.matchAll(/^\s*\d+:\s+proc\s+(\d+)\s+\(([^)]*)\)\s+\S+\.pml:(\d+)/gm)]
  const initPid = steps.find((m) => m[2].startsWith(':init:'))?.[1]
  const who = (pid: string, name: string): string => {
    if (name.startsWith(':init:')) return 'primary'
    if (name.startsWith('Worker') && initPid !== undefined) return `worker ${Number(pid) - Number(initPid)}`
    return name.replace(/:\d+$/, '')
  }
  const textOf = (line: number): string => {
    const code = src[line - 1] ?? ''
    const comment = /\/\*\s*(.*?)\s*(?:@cover [\w-]+\s*)?\*\//.exec(code)?.[1]
    return (comment && comment.length > 0 ? comment : code.trim()).replace(/\s+/g, ' ').slice(0, 110)
  }
  const lines: string[] = []
  let last = ''
  for (const m of steps) {
    const key = `${m[1]}:${m[3]}`
    if (key === last || m[2].startsWith('Monitor')) continue
    last = key
    const text = textOf(Number(m[3]))
    if (NOISE.test(text)) continue
    lines.push(`    ${who(m[1], m[2]).padEnd(9)} ${file}:${m[3].padEnd(4)} ${text}`)
  }
  const end: string[] = []
  for (const l of t.stdout.split('\n')) {
    const m = /^\s*\d+:\s+proc\s+(\d+)\s+\(([^)]*)\)\s+\S+\.pml:(\d+)\s+\(state \d+\)( <valid end state>)?\s*$/.exec(l)
    if (m) end.push(`    ${who(m[1], m[2]).padEnd(9)} ${m[4] ? 'ended' : 'BLOCKED'} at ${file}:${m[3]}  ${textOf(Number(m[3]))}`)
  }
  return [...lines, '    -- where every thread stopped:', ...end].join('\n')
}

// ---- the vacuity check ------------------------------------------------------------------

export interface CoverEvent { name: string; line: number; reached: boolean; compiled: boolean }

/** `@cover name` markers of a model's text; reached = some passing property run of that model
    (`name`, default ledger) compiled the line and did not report it unreached. */
export function coverage (model: string, outcomes: readonly Outcome[], name: ModelName = 'ledger'): CoverEvent[] {
  const events: CoverEvent[] = []
  model.split('\n').forEach((text, i) => {
    for (const m of text.matchAll(/@cover ([\w-]+)/g)) events.push({ name: m[1], line: i + 1, reached: false, compiled: false })
  })
  for (const o of outcomes) {
    if (o.spec.kind !== 'property' || !o.ok || o.spec.np || modelOf(o.spec) !== name) continue
    for (const e of events) {
      if (!o.compiled.has(e.line)) continue
      e.compiled = true
      if (!o.unreached.has(e.line)) e.reached = true
    }
  }
  return events
}

// ---- the command ------------------------------------------------------------------------

/** The spin and C compiler commands, or the message to print when one is missing. */
export function findTools (): Tools | string {
  const spin = process.env.SPIN ?? 'spin'
  const s = spawnSync(spin, ['-V'], { encoding: 'utf8' })
  if (s.error || s.status !== 0) {
    return `verify-model: \`${spin}\` not found. Install the model checker: apt-get install -y spin`
  }
  const cc = process.env.CC ?? 'gcc'
  const c = spawnSync(cc, ['--version'], { encoding: 'utf8' })
  if (c.error || c.status !== 0) return `verify-model: no C compiler (\`${cc}\`). Install one: apt-get install -y gcc`
  const memlim = Number(process.env.SLUICE_MODEL_MEMLIM ?? 2048)
  return { spin, cc, memlim: Number.isFinite(memlim) && memlim > 0 ? Math.floor(memlim) : 2048 }
}

function fmtInt (n: number | null): string {
  if (n === null) return '-'
  return n.toLocaleString('en-US')
}

function table (rows: string[][]): string {
  const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)))
  return rows.map((r) => r.map((cell, c) => (c >= 4 && c <= 7 ? cell.padStart(widths[c]) : cell.padEnd(widths[c]))).join('  ').trimEnd()).join('\n')
}

async function pool<T, R> (items: readonly T[], jobs: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length)
  let next = 0
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++
      out[i] = await fn(items[i])
    }
  }
  await Promise.all(Array.from({ length: Math.min(jobs, items.length) }, worker))
  return out
}

async function main (argv: readonly string[]): Promise<number> {
  const has = (f: string): boolean => argv.includes(f)
  const value = (f: string): string | undefined => { const i = argv.indexOf(f); return i >= 0 ? argv[i + 1] : undefined }
  const known = new Set(['--mutants', '--no-mutants', '--full', '--only', '--jobs', '--trail', '--keep', '--list'])
  for (let i = 0; i < argv.length; i++) {
    if (!known.has(argv[i])) { console.error(`verify-model: unknown option ${argv[i]}`); return 2 }
    if (argv[i] === '--only' || argv[i] === '--jobs') i++
  }
  const only = value('--only')?.split(',').filter(Boolean)
  const mutants = !has('--no-mutants') || has('--mutants')
  let runs = RUNS.filter((r) => (has('--full') || !r.full) && (mutants || (r.kind !== 'mutant' && r.kind !== 'equivalent')))
  if (only) runs = RUNS.filter((r) => only.some((o) => r.name.startsWith(o)))
  if (has('--list')) {
    for (const r of RUNS) console.log(`${r.name.padEnd(48)} ${`${modelOf(r)}.pml`.padEnd(11)} ${r.kind.padEnd(12)} expect ${r.expect.padEnd(4)} ${r.full ? '(--full) ' : ''}${r.what}`)
    return 0
  }
  if (runs.length === 0) { console.error('verify-model: no run selected'); return 2 }
  const tools = findTools()
  if (typeof tools === 'string') { console.error(tools); return 1 }
  const jobs = Math.max(1, Number(value('--jobs') ?? Math.min(2, availableParallelism())) || 1)
  const base = mkdtempSync(join(tmpdir(), 'sluice-model-'))
  const interrupted = (): void => {
    if (!has('--keep')) rmSync(base, { recursive: true, force: true })
    process.exit(130)
  }
  process.once('SIGINT', interrupted)
  process.once('SIGTERM', interrupted)
  const started = Date.now()
  let outcomes: Outcome[]
  try {
    const files = [...new Set(runs.map((r) => MODELS[modelOf(r)].slice(ROOT.length + 1)))].join(' and ')
    console.log(`verify-model: ${runs.length} runs of ${files} (${jobs} in parallel; safety search, -DNOREDUCE, exhaustive)`)
    outcomes = await pool(runs, jobs, (spec) => verify(spec, base, tools, has('--trail')))
  } finally {
    if (has('--keep')) console.log(`verify-model: kept ${base}`)
    else rmSync(base, { recursive: true, force: true })
  }
  const rows = [['run', 'kind', 'expect', 'result', 'states', 'depth', 'time s', 'MB', 'detail']]
  for (const o of outcomes) {
    rows.push([o.spec.name, o.spec.kind, o.spec.expect, o.result, fmtInt(o.states), fmtInt(o.depth),
      o.seconds === null ? '-' : o.seconds.toFixed(1), o.memoryMb === null ? '-' : o.memoryMb.toFixed(0), o.detail])
  }
  console.log(table(rows))
  for (const o of outcomes) {
    if (o.trail) console.log(`\n${o.spec.name}: ${o.detail}\n${o.trail}`)
  }
  let ok = outcomes.every((o) => o.ok)
  const props = outcomes.filter((o) => o.spec.kind === 'property')
  const totalStates = props.reduce((s, o) => s + (o.states ?? 0), 0)
  console.log('')
  if (props.length > 0) console.log(`properties: ${props.filter((o) => o.ok).length}/${props.length} runs hold, ${fmtInt(totalStates)} states`)
  const defects = outcomes.filter((o) => o.spec.kind === 'known-defect')
  if (defects.length > 0) console.log(`known defects: ${defects.filter((o) => o.ok).length}/${defects.length} reproduce (see src/ledger/model/README.md, Findings)`)
  const fixes = outcomes.filter((o) => o.spec.kind === 'proposed-fix')
  if (fixes.length > 0) console.log(`proposed fixes: ${fixes.filter((o) => o.ok).length}/${fixes.length} hold on the model`)
  const muts = outcomes.filter((o) => o.spec.kind === 'mutant')
  if (muts.length > 0) console.log(`mutants: ${muts.filter((o) => o.ok).length}/${muts.length} caught`)
  if (!only) {
    for (const name of Object.keys(MODELS) as ModelName[]) {
      const events = coverage(readFileSync(MODELS[name], 'utf8'), outcomes, name)
      const missed = events.filter((e) => !e.reached)
      console.log(`coverage: ${events.length - missed.length}/${events.length} @cover events of ${name}.pml reached by its property runs`)
      for (const e of missed) console.log(`  NOT REACHED: ${e.name} (${name}.pml:${e.line}${e.compiled ? '' : ', compiled in no run'}): the properties hold vacuously there`)
      if (missed.length > 0) ok = false
    }
  }
  console.log(`verify-model: ${ok ? 'OK' : 'FAILED'} in ${((Date.now() - started) / 1000).toFixed(1)} s`)
  return ok ? 0 : 1
}

if (import.meta.main) {
  main(process.argv.slice(2)).then((code) => { process.exitCode = code }, (err: unknown) => {
    console.error(err)
    process.exitCode = 1
  })
}
