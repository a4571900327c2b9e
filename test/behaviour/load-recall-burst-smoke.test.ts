// The recall-burst qualification's smoke variant (`sluice load recall-burst --profile one-vcpu
// --smoke`): seed 003's workload, small (9 sessions x 2 rounds, identical waves, an 18-session
// burst; 4 active exchanges so the barrier-synchronised recalls queue) and without a CPU quota,
// on loopback, in seconds. Every protocol pair is driven, translated and same-protocol, with
// client cancels, and resets before the first byte, a 503 outage and 429s of one account of the
// three each provider has (retried by the gateway on another before the first byte). It must pass, exit 0 and
// write its receipt and chart (into a temporary directory here, never into ops/load/receipts).
// (The comparison with a baseline is test/unit/load/recall-wire.test.ts's: a second run here
// would double the time.)

import t from 'tap'
import { runLoad } from '../helpers/load.ts'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { RecallReceipt } from '../../src/load/recall-receipt.ts'


const run = runLoad

t.test('the recall-burst smoke variant passes every check and writes its receipt and chart', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-recall-smoke-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const receipts = join(dir, 'receipts')
  const baselines = join(dir, 'baselines')
  const first = await run(['recall-burst', '--profile', 'one-vcpu', '--smoke', '--record-baseline', '--receipts-dir', receipts, '--baselines-dir', baselines])
  t.equal(first.code, 0, `exit 0\n${first.out}`)
  t.match(first.out, /verdict: PASS \(not a qualification: smoke run\)/)
  t.match(first.out, /baseline recorded: .*recall-burst-one-vcpu-smoke\.json/)
  const files = readdirSync(receipts).sort()
  t.same(files.map((f) => f.replace(/-\d{4}-.*-pass/, '-STAMP-pass')), ['recall-burst-one-vcpu-smoke-STAMP-pass.json', 'recall-burst-one-vcpu-smoke-STAMP-pass.svg'], 'the receipt and its chart')
  t.match(readFileSync(join(receipts, files[1]), 'utf8'), /^<svg /)
  const r = JSON.parse(readFileSync(join(receipts, files[0]), 'utf8')) as RecallReceipt
  t.equal(r.test, 'recall-burst')
  t.equal(r.passed, true, r.reasons.join('\n'))
  t.equal(r.qualification, false, 'a smoke run is not a qualification')
  t.equal(r.quota.method, 'none')

  // every pair of client and provider protocol, six of them translated
  const routes = Object.entries(r.routes)
  t.equal(routes.length, 9, 'nine client -> provider pairs')
  t.equal(routes.filter(([, v]) => v.translated).length, 6, 'six translated')
  t.ok(routes.every(([, v]) => v.sessions >= 1 && v.burstSessions >= 1), 'each pair has sessions in the sustained and the burst waves')

  // waves: warm-up, identical sustained waves, the burst; every one idle and complete after
  t.same(r.waves.map((w) => w.kind), ['warmup', 'sustained', 'sustained', 'burst'])
  for (const w of r.waves) {
    t.same(w.notIdle, {}, `${w.name}: every application-owned gauge back at idle`)
    t.equal(w.admissions, w.releases, `${w.name}: admissions = releases`)
    t.equal(w.roundsCompleted, w.sessions * w.rounds, `${w.name}: every round completed`)
    t.equal(w.checked.violations, 0, `${w.name}: no stream carried another's ids, arguments or text`)
    t.ok(w.checked.calls > w.checked.streams, `${w.name}: ${w.checked.calls} calls in ${w.checked.streams} streams checked`)
    t.same(w.retained, r.waves[0].retained, `${w.name}: nothing retained from wave to wave`)
  }
  t.equal(r.isolation.violations, 0)
  t.ok(r.isolation.ids > 100, `${r.isolation.ids} distinct ids, each seen by one session only`)

  // the faults and cancels really happened, and were answered honestly
  t.ok(r.faults['reset-before-first-byte'] >= 1, 'resets before the first byte')
  t.ok(r.faults['status-503'] >= 1, 'a 503 outage')
  t.ok(r.faults['status-429'] >= 1, '429s')
  t.ok(r.outcomes.cancelled >= 5, `${r.outcomes.cancelled} client cancels`)
  // each fault is one account's (fault_key): the gateway retried it on another before the first
  // byte, so the client saw only whole answers and its own cancels
  t.same(Object.keys(r.outcomes).sort(), ['cancelled', 'ok'], `only whole answers and the client's cancels: ${JSON.stringify(r.outcomes)}`)
  for (const [kind, reason] of [['reset-before-first-byte', 'reset'], ['status-503', 'status'], ['status-429', 'rate_limited']] as const) {
    t.ok(r.retries.faultsHit[kind] >= 1, `${kind} fired on the faulty account (${r.retries.faultsHit[kind]})`)
    t.equal(r.retries.byReason[reason], r.retries.faultsHit[kind], `sluice_retries_total{reason="${reason}"}: one retry per ${kind} fired`)
  }
  t.equal(r.retries.upstreamRepeats, Object.values(r.retries.byReason).reduce((a, b) => a + b, 0), 'every retry reached the provider as a repeat of its request')
  t.ok(r.retries.maxUpstreamPerClientRequest >= 2, 'a client request reached the provider twice')
  t.equal(r.retriesAfterCommit, 0, 'sluice_retries_after_commit_total, read from the gateway: 0')
  for (const p of ['sim-chat', 'sim-responses', 'sim-messages']) t.same(Object.keys(r.retries.accounts[p] ?? {}).sort(), ['a', 'b', 'c'], `${p}: every account served requests`)
  t.ok(r.waves.some((w) => w.retries > 0), 'retries counted per wave')

  t.equal(r.rss.samplesMb.length, 2, 'one RSS sample per measured sustained wave')
  t.ok(Number.isFinite(r.rss.slopeMbPerWave), 'the fitted slope is in the receipt')
  t.equal(r.health.overGuard + r.health.failures, 0, 'the health guard held')

})

t.test('recall-burst usage errors exit 2', async (t) => {
  t.equal((await run(['recall-burst'])).code, 2, 'no --profile')
  t.equal((await run(['recall-burst', '--profile', 'nope'])).code, 2, 'unknown profile')
})
