// The load qualification's smoke variant (`sluice load model-capacity --profile one-vcpu
// --smoke`): the same phases and checks as the full profile with small limits (4 active, 4
// queued, 1.5 s queue wait) and no CPU quota, in seconds. It must pass, exit 0 and write a
// receipt (into a temporary directory here, never into ops/load/receipts).

import t from 'tap'
import { runLoad } from '../helpers/load.ts'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Receipt } from '../../src/load/receipt.ts'


const run = runLoad

t.test('the smoke variant passes, writes its receipt and compares with a baseline it recorded', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-load-smoke-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const receipts = join(dir, 'receipts')
  const baselines = join(dir, 'baselines')
  const started = Date.now()
  const first = await run(['model-capacity', '--profile', 'one-vcpu', '--smoke', '--record-baseline', '--no-chart', '--receipts-dir', receipts, '--baselines-dir', baselines])
  t.equal(first.code, 0, `exit 0\n${first.out}`)
  t.ok(Date.now() - started < 30_000, `took ${Date.now() - started} ms`)
  t.match(first.out, /verdict: PASS \(not a qualification: smoke run\)/)
  t.match(first.out, /baseline recorded: /)
  const files = readdirSync(receipts)
  t.equal(files.length, 1, 'one receipt')
  t.match(files[0], /^one-vcpu-smoke-.*-pass\.json$/)
  const r = JSON.parse(readFileSync(join(receipts, files[0]), 'utf8')) as Receipt
  t.equal(r.passed, true)
  t.equal(r.qualification, false, 'a smoke run is not a qualification')
  t.equal(r.quota.method, 'none', 'no quota asked for, and the receipt says so')
  t.match(r.settingsHash, /^[0-9a-f]{64}$/)
  t.same(r.ledger.notIdle, {}, 'the ledger is idle after the run')
  t.equal(r.ledger.admissions, r.ledger.releases, 'admissions = releases')
  t.equal(r.outcomes.team.ok, 18, 'every team exchange completed with exact bytes')
  t.ok(r.outcomes.burst['queued:capacity_timeout'] >= 1, 'the queue timed out')
  t.ok(r.outcomes.burst['queued:ok'] >= 1, 'the queue admitted')
  t.equal(r.outcomes.burst['extra:capacity_exhausted'], 2, 'immediate refusals past the queue')
  t.equal(r.health.overGuard + r.health.failures, 0, 'the health guard held')
  t.ok(r.health.probes >= 20, `${r.health.probes} health probes`)

  // a second run is compared with the recorded baseline: same settings and hardware
  const second = await run(['model-capacity', '--profile', 'one-vcpu', '--smoke', '--no-chart', '--receipts-dir', receipts, '--baselines-dir', baselines])
  t.match(second.out, /baseline: .*one-vcpu-smoke\.json: (neither \(within tolerance\)|regression)/, second.out)
  t.equal(readdirSync(receipts).length, 2, 'receipts are never overwritten')
})

t.test('a half-vcpu run without a CFS quota is refused, and the failed receipt is kept', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-load-refused-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const r = await run(['model-capacity', '--profile', 'half-vcpu', '--quota-method', 'none', '--no-chart', '--receipts-dir', dir, '--baselines-dir', join(dir, 'b')])
  t.equal(r.code, 1, r.out)
  t.match(r.out, /no CPU quota could be applied.*this is not a half-vcpu run/)
  const files = readdirSync(dir)
  t.equal(files.length, 1)
  t.match(files[0], /^half-vcpu-.*-fail\.json$/)
  const receipt = JSON.parse(readFileSync(join(dir, files[0]), 'utf8')) as Receipt
  t.equal(receipt.qualification, false)
  t.equal(receipt.hardware.quotaMethod, 'none')
})

t.test('usage errors exit 2', async (t) => {
  t.equal((await run(['model-capacity'])).code, 2, 'no --profile')
  t.equal((await run(['model-capacity', '--profile', 'nope'])).code, 2, 'unknown profile')
  t.equal((await run(['other'])).code, 2, 'unknown test')
})
