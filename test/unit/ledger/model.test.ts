// The model check's own tests (scripts/verify-model.ts, src/ledger/model/ledger.pml and
// lanes.pml): the pan output parser and the verdicts, so an incomplete or failed search can
// never pass; the run table against each model (every mutant macro is exercised, every run
// names real macros of its model); the models' state numbering against layout.ts; and, when
// spin and gcc are installed, real property runs that hold and mutants that must be caught
// on both models. The full exhaustive check is `npm run verify:model`.

import t from 'tap'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { coverage, findTools, judge, MODEL, MODELS, modelOf, type ModelName, type Outcome, parseCompiledLines, parsePan, type RunSpec, RUNS, verify } from '../../../scripts/verify-model.ts'
import { FREE, GRANTED, LANE_ACTIVE, LANE_FREE, LANE_QUEUED, WAITING } from '../../../src/ledger/layout.ts'

const CLEAN = `
(Spin Version 6.5.2 -- 6 December 2019)
	+ Partial Order Reduction

Full statespace search for:
	never claim         	- (none specified)
	assertion violations	+
	cycle checks       	- (disabled by -DSAFETY)
	invalid end states	+

State-vector 148 byte, depth reached 307, errors: 0
  2484561 states, stored
  5049411 states, matched
   524.903	total actual memory usage

unreached in proctype Worker
	ledger.pml:348, state 45, "mode = 1"
	ledger.pml:414, state 149, "assert((S1_slot_ownership&&0))"
	(2 of 365 states)

pan: elapsed time 3.61 seconds
pan: rate 688244.1 states/second
`

const ASSERTION = `pan:1: assertion violated (P4_fifo&&((sticket[handed]+1)>lastGrant)) (at depth 188)
pan: wrote ledger.pml.trail
Warning: Search not completed
State-vector 140 byte, depth reached 359, errors: 1
   209132 states, stored
pan: elapsed time 0.3 seconds
`

const END_STATE = `pan:1: invalid end state (at depth 116)
pan: wrote ledger.pml.trail
Warning: Search not completed
State-vector 116 byte, depth reached 151, errors: 1
     1680 states, stored
`

const TOO_SHALLOW = `error: max search depth too small
State-vector 148 byte, depth reached 99, errors: 0
   100000 states, stored
`

const OUT_OF_MEMORY = `pan: reached -DMEMLIM bound
Warning: Search not completed
State-vector 136 byte, depth reached 425, errors: 0
 56891538 states, stored
`

const spec = (over: Partial<RunSpec>): RunSpec => ({ name: 'x', kind: 'property', defines: [], expect: 'pass', what: '', ...over })

t.test('parsePan reads a clean run', async (t) => {
  const r = parsePan(CLEAN)
  t.equal(r.errors, 0)
  t.equal(r.states, 2484561)
  t.equal(r.depth, 307)
  t.equal(r.seconds, 3.61)
  t.equal(r.memoryMb, 524.903)
  t.equal(r.incomplete, null)
  t.equal(r.violation, null)
  t.same([...r.unreached].sort(), [348, 414])
  t.same(judge(spec({}), r), { ok: true, result: 'pass', detail: '' })
})

t.test('parsePan names the violated property', async (t) => {
  const a = parsePan(ASSERTION)
  t.equal(a.errors, 1)
  t.equal(a.property, 'P4_fifo')
  t.equal(judge(spec({}), a).ok, false, 'an error fails a property run')
  t.equal(judge(spec({ kind: 'mutant', expect: 'fail', catches: ['P4_fifo'] }), a).result, 'caught')
  t.equal(judge(spec({ kind: 'mutant', expect: 'fail', catches: ['P1_never_over_admitted'] }), a).result, 'WRONG PROPERTY')
  const e = parsePan(END_STATE)
  t.equal(e.property, 'invalid end state')
  t.equal(judge(spec({ kind: 'known-defect', expect: 'fail', catches: ['invalid end state'] }), e).result, 'reproduced')
})

t.test('an incomplete search never passes', async (t) => {
  for (const out of [TOO_SHALLOW, OUT_OF_MEMORY]) {
    const r = parsePan(out)
    t.not(r.incomplete, null)
    t.same(judge(spec({}), r).ok, false)
    t.same(judge(spec({ kind: 'mutant', expect: 'fail' }), r).result, 'INCOMPLETE')
  }
  t.equal(parsePan('garbage').errors, null)
  t.equal(judge(spec({}), parsePan('garbage')).result, 'ERROR', 'no summary: an error, not a pass')
})

t.test('a surviving mutant or a vanished defect fails the check', async (t) => {
  const r = parsePan(CLEAN)
  t.equal(judge(spec({ kind: 'mutant', expect: 'fail' }), r).result, 'NOT CAUGHT')
  t.equal(judge(spec({ kind: 'known-defect', expect: 'fail' }), r).ok, false)
})

t.test('the run table matches the models', async (t) => {
  const names = RUNS.map((r) => r.name)
  t.equal(new Set(names).size, names.length, 'run names are unique')
  t.equal(MODELS.ledger, MODEL)
  for (const name of Object.keys(MODELS) as ModelName[]) {
    const model = readFileSync(MODELS[name], 'utf8')
    const runs = RUNS.filter((r) => modelOf(r) === name)
    t.ok(runs.some((r) => r.kind === 'property'), `${name}.pml has property runs`)
    const mutantsInModel = new Set([...model.matchAll(/\b(MUT_[A-Z0-9_]+)\b/g)].map((m) => m[1]))
    const mutantsRun = new Set(runs.flatMap((r) => r.defines.filter((d) => d.startsWith('MUT_'))))
    t.same([...mutantsRun].sort(), [...mutantsInModel].sort(), `every mutant of ${name}.pml is run, and only those`)
    for (const r of runs) {
      for (const d of r.defines) {
        const macro = d.split('=')[0]
        t.ok(new RegExp(`\\b${macro}\\b`).test(model), `${r.name}: ${macro} is a macro of ${name}.pml`)
      }
      if (r.kind === 'mutant') t.ok(r.defines.some((d) => d.startsWith('MUT_')) && r.expect === 'fail', `${r.name} is a mutant that must fail`)
      if (r.kind === 'known-defect') t.equal(r.expect, 'fail')
    }
    const events = coverage(model, [], name)
    t.ok(events.length >= 20, `${name}.pml marks its events for the vacuity check`)
    t.ok(events.every((e) => !e.reached), 'no run, nothing reached')
  }
})

t.test('the models number the states as layout.ts does', async (t) => {
  const define = (model: string, macro: string): number => {
    const m = new RegExp(`^#define ${macro} (\\d+)\\b`, 'm').exec(model)
    return m ? Number(m[1]) : NaN
  }
  const ledger = readFileSync(MODELS.ledger, 'utf8')
  t.same([define(ledger, 'FREE'), define(ledger, 'WAITING'), define(ledger, 'GRANTED')], [FREE, WAITING, GRANTED], 'ledger.pml: waiter slot states')
  const lanes = readFileSync(MODELS.lanes, 'utf8')
  t.same([define(lanes, 'L_FREE'), define(lanes, 'L_QUEUED'), define(lanes, 'L_ACTIVE')], [LANE_FREE, LANE_QUEUED, LANE_ACTIVE], 'lanes.pml: lane entry states')
})

t.test('coverage counts only the runs of its own model', async (t) => {
  const model = '/* @cover here */\n'
  const ran = (m: ModelName): Outcome => ({
    spec: { name: m, kind: 'property', defines: [], expect: 'pass', what: '', model: m },
    ok: true, result: 'pass', errors: 0, states: 1, depth: 1, seconds: 0, memoryMb: 0, detail: '',
    unreached: new Set(), compiled: new Set([1]), dir: '',
  })
  t.equal(coverage(model, [ran('lanes')], 'ledger')[0].reached, false, 'a lanes run reaches nothing in ledger.pml')
  t.equal(coverage(model, [ran('lanes')], 'lanes')[0].reached, true)
})

t.test('compiled lines come from pan.c', async (t) => {
  const lines = parseCompiledLines('short src_ln1 [] = {\n\t  0, 523, 524, \n\t  0, };\nshort src_ln0 [] = {\n 0, 12, };')
  t.same([...lines].sort(), [12, 523, 524])
})

const tools = findTools()
t.test('spin end to end: a property holds, a mutant is caught', { skip: typeof tools === 'string' ? 'spin or gcc is not installed' : false }, async (t) => {
  if (typeof tools === 'string') return
  const base = mkdtempSync(join(tmpdir(), 'sluice-model-test-'))
  t.teardown(() => rmSync(base, { recursive: true, force: true }))
  const small = ['MAXP=1', 'QMAX=1', 'NW=2', 'OPS=1', 'MAX_DEATHS=1', 'PATIENT=0']
  const pass: Outcome = await verify(spec({ name: 'small', defines: small }), base, tools, false)
  t.equal(pass.result, 'pass', pass.detail)
  t.ok((pass.states ?? 0) > 100)
  t.ok(pass.compiled.size > 100, 'compiled lines read from pan.c')
  const mutant = await verify(spec({ name: 'mutant', kind: 'mutant', expect: 'fail', catches: ['P2_permit_exactly_once', 'P1_never_over_admitted'], defines: [...small, 'MUT_CANCEL_GRANTED_LEAK'] }), base, tools, true)
  t.equal(mutant.result, 'caught', mutant.detail)
  t.match(mutant.trail ?? '', /worker \d/, 'a readable replay of the counterexample')

  // lanes.pml: two workers, one session, a death anywhere; a lost wake-up mutant
  const lanes = ['NW=2', 'NSESS=1', 'CAP=0', 'NE=2', 'MAX_DEATHS=1', 'ABORTS=0']
  const lpass = await verify(spec({ name: 'lanes-small', model: 'lanes', defines: lanes }), base, tools, false)
  t.equal(lpass.result, 'pass', lpass.detail)
  t.ok((lpass.states ?? 0) > 100)
  const lmutant = await verify(spec({ name: 'lanes-mutant', model: 'lanes', kind: 'mutant', expect: 'fail', catches: ['invalid end state'], defines: [...lanes, 'MUT_RECLAIM_NO_RENOTIFY'] }), base, tools, true)
  t.equal(lmutant.result, 'caught', lmutant.detail)
  t.match(lmutant.trail ?? '', /lanes\.pml:\d+/, 'the replay names lanes.pml lines')
})
