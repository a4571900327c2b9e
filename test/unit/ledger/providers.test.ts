// The providers block (src/ledger/providers.ts): account selection (affinity, least loaded,
// cooldown, caps, tried accounts), circuit breakers (threshold, one probe, close, re-open,
// a probe given back), and reclaim of a dead row's claims and probe.

import t from 'tap'
import { dimsOf } from '../../../src/ledger/layout.ts'
import { nowDs, type AccountRef } from '../../../src/ledger/providers.ts'
import { makeLedger, rowHandle } from './helpers.ts'

const refs = (n: number, cap: number | null = null): AccountRef[] => Array.from({ length: n }, (_, index) => ({ index, maxConcurrent: cap }))
const S1 = [11, 12] as const
const S2 = [21, 22] as const

t.test('a session selection without affinity slots leaves the rest of the ledger alone', async (t) => {
  const ledger = makeLedger({ accounts: 2, breakers: 1 })
  const dims = dimsOf(ledger.init.sab)
  for (let i = 0; i < 10; i++) {
    const s = ledger.providers.select(refs(2), { session: S1 })
    t.ok(s.ok)
    if (s.ok) ledger.providers.release(s.account)
  }
  t.same(dimsOf(ledger.init.sab), dims, 'the header (magic, version, dims) is intact')
  t.same(ledger.providers.snapshot().accounts.map((a) => a.inflight), [0, 0])
})

t.test('least loaded, ties to the lowest index, and the claim counts at once', async (t) => {
  const p = makeLedger({ accounts: 3, breakers: 1 }).providers
  const got = Array.from({ length: 7 }, () => { const s = p.select(refs(3)); return s.ok ? s.account : -1 })
  t.same(got, [0, 1, 2, 0, 1, 2, 0])
  t.same(p.snapshot().accounts.map((a) => a.inflight), [3, 2, 2])
  for (const a of got) p.release(a)
  t.same(p.snapshot().accounts.map((a) => a.inflight), [0, 0, 0], 'released')
})

t.test('recent failures and first-byte latency steer the choice', async (t) => {
  const p = makeLedger({ accounts: 2, breakers: 1 }).providers
  p.observe(0, true, null)
  const s = p.select(refs(2))
  t.ok(s.ok && s.account === 1, 'the account that failed recently costs more')
  if (s.ok) p.release(s.account)
  p.observe(1, false, 3000)
  const s2 = p.select(refs(2))
  t.ok(s2.ok && s2.account === 0, 'three seconds of first-byte latency outweigh one recent failure')
})

t.test('a cap is never exceeded; every account at its cap is busy', async (t) => {
  const p = makeLedger({ accounts: 2, breakers: 1 }).providers
  const got = Array.from({ length: 4 }, () => p.select(refs(2, 2)))
  t.same(got.map((s) => s.ok), [true, true, true, true])
  t.same(p.select(refs(2, 2)), { ok: false, reason: 'busy' })
  t.same(p.snapshot().accounts.map((a) => a.inflight), [2, 2])
})

t.test('a cooling account is skipped; all cooling gives the soonest retry', async (t) => {
  const p = makeLedger({ accounts: 2, breakers: 1 }).providers
  const now = Date.now()
  p.coolDown(0, 30, now)
  const s = p.select(refs(2), { now })
  t.ok(s.ok && s.account === 1, 'the other account')
  if (s.ok) p.release(s.account)
  p.coolDown(1, 12, now)
  t.same(p.select(refs(2), { now }), { ok: false, reason: 'cooling', retryAfterSeconds: 12 })
  p.coolDown(1, 5, now)
  t.equal(p.coolingSeconds(1, now), 12, 'a shorter cooldown never shortens a running one')
  const later = p.select(refs(2), { now: now + 12_100 })
  t.ok(later.ok && later.account === 1, 'eligible again once its Retry-After passed')
})

t.test('tried accounts: another one first, the same only when allowed', async (t) => {
  const p = makeLedger({ accounts: 2, breakers: 1 }).providers
  const s = p.select(refs(2), { exclude: new Set([0]) })
  t.ok(s.ok && s.account === 1)
  t.same(p.select(refs(1), { exclude: new Set([0]) }), { ok: false, reason: 'busy' }, 'no other account')
  const same = p.select(refs(1), { exclude: new Set([0]), allowExcluded: true })
  t.ok(same.ok && same.account === 0, 'sameAccount: the tried one')
})

t.test('affinity: a session goes back to its account while it is eligible', async (t) => {
  const p = makeLedger({ accounts: 2, breakers: 1, affinity: 16 }).providers
  const first = p.select(refs(2), { session: S1 })
  t.ok(first.ok && first.account === 0 && !first.affinity)
  const other = p.select(refs(2), { session: S2 })
  t.ok(other.ok && other.account === 1, 'another session: least loaded')
  const busy = p.select(refs(2))
  t.ok(busy.ok && busy.account === 0)
  const again = p.select(refs(2), { session: S1 })
  t.ok(again.ok && again.account === 0 && again.affinity, 'back to its account although it is the busier one')
  p.coolDown(0, 30)
  const moved = p.select(refs(2), { session: S1 })
  t.ok(moved.ok && moved.account === 1 && !moved.affinity, 'its account cooling: least loaded instead')
})

t.test('breaker: opens at the threshold, one probe, closes on success', async (t) => {
  const p = makeLedger({ accounts: 1, breakers: 2 }).providers
  const now = Date.now()
  t.same(p.admit(0, 1000, now), { ok: true, probe: false }, 'closed')
  t.equal(p.failure(0, false, 3, 1000, now), null)
  t.equal(p.success(0, false), null, 'a success resets the count')
  t.equal(p.failure(0, false, 3, 1000, now), null)
  t.equal(p.failure(0, false, 3, 1000, now), null)
  t.same(p.failure(0, false, 3, 1000, now), { from: 'closed', to: 'open' }, 'the third consecutive failure opens it')
  t.same(p.admit(0, 1000, now), { ok: false, state: 'open', retryAfterSeconds: 1 }, 'refused while open')
  t.same(p.admit(1, 1000, now), { ok: true, probe: false }, 'another model\'s breaker is not affected')
  const probe = p.admit(0, 1000, now + 1000)
  t.same(probe, { ok: true, probe: true, transition: { from: 'open', to: 'half-open' } }, 'due: one probe')
  t.match(p.admit(0, 1000, now + 1000), { ok: false, state: 'half-open' }, 'a second exchange is refused while the probe is out')
  t.same(p.success(0, true), { from: 'half-open', to: 'closed' })
  t.same(p.admit(0, 1000, now + 1000), { ok: true, probe: false }, 'closed again')
  t.equal(p.snapshot().breakers[0].transitions, 3)
})

t.test('breaker: a failed probe re-opens it; a probe with no verdict is given back', async (t) => {
  const p = makeLedger({ accounts: 1, breakers: 1 }).providers
  const now = Date.now()
  p.failure(0, false, 1, 1000, now)
  t.ok(p.admit(0, 1000, now + 1000).ok)
  t.same(p.failure(0, true, 1, 1000, now + 1000), { from: 'half-open', to: 'open' })
  t.notOk(p.admit(0, 1000, now + 1500).ok, 'open for another openMs')
  t.match(p.admit(0, 1000, now + 2100), { ok: true, probe: true })
  t.same(p.abandonProbe(0, now + 2100), { from: 'half-open', to: 'open' })
  t.match(p.admit(0, 1000, now + 2100), { ok: true, probe: true }, 'the next exchange probes at once')
})

t.test('a dead row\'s claims and probe come back once', async (t) => {
  const ledger = makeLedger({ accounts: 2, breakers: 1 })
  const w = rowHandle(ledger, 1)
  w.providers.select(refs(2))
  w.providers.select(refs(2))
  w.providers.failure(0, false, 1, 1000, Date.now() - 2000)
  t.match(w.providers.admit(0, 1000), { ok: true, probe: true })
  const r = await ledger.reclaimRow(1)
  t.equal(r.accountClaims, 2)
  t.same(ledger.providers.snapshot().accounts.map((a) => a.inflight), [0, 0])
  t.match(ledger.providers.admit(0, 1000), { ok: true, probe: true }, 'the dead row\'s probe was given back')
  t.equal((await ledger.reclaimRow(1)).accountClaims, undefined, 'a second reclaim finds nothing')
  t.ok(nowDs() > 0)
})
