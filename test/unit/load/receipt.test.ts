import t from 'tap'
import { mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { canonical, compare, hashSettings, percentiles, writeReceipt, type Receipt } from '../../../src/load/receipt.ts'
import { loadProfile, merge, settingsOf, smokeOf } from '../../../src/load/profile.ts'
import { steer } from '../../../src/load/run.ts'

const P = { n: 10, p50: 100, p90: 150, p99: 200, max: 250 }
function receipt (over: Partial<Receipt> = {}): Receipt {
  return {
    receipt: 1, profile: 'x', qualification: true, settings: { a: 1, b: { c: 2 } }, settingsHash: hashSettings({ a: 1, b: { c: 2 } }),
    hardware: { cpuModel: 'cpu', cores: 2, memoryMb: 1000, quotaMethod: 'cgroup-v1', quotaValue: '50000/100000' },
    quota: { method: 'cgroup-v1', detail: '', held: true, fallbacks: [], throttled: '' },
    node: '24', commit: { sha: 'abc', dirty: false }, start: '2026-01-01T00:00:00.000Z', end: '', durationMs: 1,
    outcomes: { total: { ok: 10 } },
    latencyMs: { queueWait: P, timeToFirstByte: P, total: P, byPhase: {} },
    health: { probes: 10, failures: 0, overGuard: 0, guardMs: 1000, p50: 1, p99: 5, max: 10 },
    ledger: { admissions: 10, releases: 10, refusals: {}, notIdle: {} },
    peakRssMb: { sluice: 100, sim: 50 }, passed: true, reasons: [],
    ...over,
  }
}
const tol = { latencyFactor: 1.5, latencySlackMs: 100, rssFactor: 1.25 }

t.test('percentiles and the canonical settings hash', async (t) => {
  t.same(percentiles([5, 1, 4, 2, 3]), { n: 5, p50: 3, p90: 5, p99: 5, max: 5 })
  t.equal(percentiles([]).n, 0)
  t.equal(canonical({ b: 1, a: [{ d: 1, c: 2 }] }), '{"a":[{"c":2,"d":1}],"b":1}')
  t.equal(hashSettings({ a: 1, b: 2 }), hashSettings({ b: 2, a: 1 }))
})

t.test('the comparison attributes differences', async (t) => {
  const base = receipt()
  t.equal(compare(base, receipt(), tol).attribution, 'neither (within tolerance)')
  const slow = receipt({ latencyMs: { ...base.latencyMs, total: { ...P, p99: 900 } } })
  const c = compare(base, slow, tol)
  t.equal(c.attribution, 'regression')
  t.ok(c.regression)
  t.match(c.worse.join(), /total p99 200 -> 900/)
  const s2 = { a: 1, b: { c: 3 } }
  const cs = compare(base, receipt({ settings: s2, settingsHash: hashSettings(s2), latencyMs: slow.latencyMs }), tol)
  t.equal(cs.attribution, 'changed settings')
  t.notOk(cs.regression, 'a worse figure with changed settings is not called a regression')
  t.match(cs.settingsChanged.join(), /b\.c: 2 -> 3/)
  const ch = compare(base, receipt({ hardware: { ...base.hardware, cores: 4 } }), tol)
  t.equal(ch.attribution, 'changed hardware')
  t.match(ch.hardwareChanged.join(), /cores: 2 -> 4/)
  t.match(compare(base, receipt({ outcomes: { total: { ok: 9, error: 1 } } }), tol).worse.join(), /outcome error: 0 -> 1/)
})

t.test('receipts are never overwritten', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-receipts-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const a = writeReceipt(dir, receipt())
  const b = writeReceipt(dir, receipt())
  t.not(a, b)
  t.equal(readdirSync(dir).length, 2)
})

t.test('profiles: both exist, the smoke overlay drops the quota, settings exclude names', async (t) => {
  for (const name of ['half-vcpu', 'one-vcpu']) {
    const p = loadProfile(name)
    t.ok(p.quota !== null && p.requireQuota, `${name} asks for a quota`)
    t.equal(p.sluice.limits.maxActiveExchanges, 32)
    t.equal(p.workload.engineers * p.workload.threadsPerEngineer, 20)
    t.equal(p.workload.headroomThreads, 12)
    const s = smokeOf(p)
    t.equal(s.quota, null)
    t.equal(s.sluice.limits.maxActiveExchanges, 4)
    t.equal(s.sluice.workers, p.sluice.workers, 'the overlay merges')
    t.notOk('name' in settingsOf(p))
    t.notOk('tolerance' in settingsOf(p), 'the tolerance is not a run setting')
  }
  t.equal(loadProfile('half-vcpu').quota!.cpus, 0.5)
  t.same(merge({ a: { b: 1, c: 2 } }, { a: { c: 3 } }), { a: { b: 1, c: 3 } })
  t.throws(() => loadProfile('../x'))
})

t.test('steer puts the directive in the last user turn, not after tool results', async (t) => {
  t.equal(steer({ input: 'hi' }, '#sim x').body.input, 'hi\n#sim x')
  const chat = steer({ messages: [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }, { role: 'user', content: 'c' }] }, '#sim x')
  t.equal((chat.body.messages as Array<{ content: string }>)[2].content, 'c\n#sim x')
  const parts = steer({ messages: [{ role: 'user', content: [{ type: 'text', text: 'q' }] }] }, '#sim y')
  t.same((parts.body.messages as Array<{ content: unknown }>)[0].content, [{ type: 'text', text: 'q\n#sim y' }])
  t.notOk(steer({ messages: [{ role: 'user', content: [{ type: 'tool_result', content: 'r' }] }] }, '#sim z').steered)
  t.notOk(steer({ input: [{ role: 'user', content: 'q' }, { type: 'function_call_output', output: 'o' }] }, '#sim z').steered)
})
