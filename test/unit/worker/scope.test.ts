// ExchangeScope (worker/scope.ts), the one owner of an exchange's release, on a real ledger:
// real turn pins (TurnPins on the run table), real session-lane tickets, the real exchange and
// parse gates and the real byte budget. Every case ends with the ledger idle (idleProblems).

import t from 'tap'
import { randomUUID } from 'node:crypto'
import { PassThrough } from 'node:stream'
import { SluiceError } from '../../../src/errors.ts'
import type { Ledger } from '../../../src/ledger/ledger.ts'
import { RG_INSPECTOR_BYTES, RG_PENDING_BYTES } from '../../../src/ledger/layout.ts'
import { rng } from '../../stress/harness.ts'
import { assertIdle, idleProblems, makeLedger, outcome, turn } from '../ledger/helpers.ts'
import { enterLane } from '../../../worker/lane-ticket.ts'
import { ALL_PARTIES, ExchangeScope, FLOATING_SPARE_MAX, FLOATING_STEP, type LaneHold, type Party } from '../../../worker/scope.ts'
import { TurnPins } from '../../../worker/turns.ts'
import { KEY_NAME, permutations, turnsTaken, unitConfig } from './helpers.ts'

const key = unitConfig({}, { maxTurnsPerRun: 3 }).keys[0]

interface Rig { ledger: Ledger; pins: TurnPins }

function rig (over: Parameters<typeof makeLedger>[0] = {}): Rig {
  const ledger = makeLedger(over)
  return { ledger, pins: new TurnPins(ledger) }
}

/** A lane ticket wrapped to count how often the scope calls release() on it. */
function countedLane (ledger: Ledger, session: string): { hold: LaneHold; calls: () => number } {
  const ticket = enterLane(ledger, KEY_NAME, session, randomUUID(), false)
  let n = 0
  return { hold: { release () { n++; ticket.release() } }, calls: () => n }
}

/** A scope holding one of everything: turn, lane, exchange permit, bytes, a floating part. */
async function fullScope (r: Rig, runId: string, session: string, parties: readonly Party[] = ALL_PARTIES): Promise<ExchangeScope> {
  const scope = new ExchangeScope(r.ledger, parties)
  scope.tookTurn(r.pins.take(key, runId))
  scope.tookLane(enterLane(r.ledger, KEY_NAME, session, randomUUID(), false))
  if (!r.ledger.exchange.tryAcquire()) throw new Error('no exchange permit free')
  scope.tookExchange()
  scope.reserve(100)
  scope.setFloating(10, 20)
  t.equal(await scope.underParse(undefined, () => 7), 7)
  return scope
}

function holdings (ledger: Ledger): Record<string, number> {
  const s = ledger.snapshot()
  const g = ledger.gauges()
  return {
    exchange: s.exchange.active,
    parse: s.parse.active,
    bytes: s.storage.reserved,
    laneActive: s.lanes.active,
    inspector: g[RG_INSPECTOR_BYTES],
    pending: g[RG_PENDING_BYTES],
  }
}

const HELD = { exchange: 1, parse: 0, bytes: 130, laneActive: 1, inspector: 10, pending: 20 }
const NONE = { exchange: 0, parse: 0, bytes: 0, laneActive: 0, inspector: 0, pending: 0 }

for (const order of permutations(ALL_PARTIES)) {
  t.test(`settled ${order.join(' -> ')}: released exactly once, only after the last`, async (t) => {
    const r = rig()
    const scope = await fullScope(r, 'run-order', 'session-order')
    let released = 0
    scope.onRelease(() => { released++ })
    t.same(holdings(r.ledger), HELD)
    for (let i = 0; i < order.length; i++) {
      // Each party settles on its own turn of the event loop, as they do in an exchange.
      await turn()
      t.ok(scope.pendingParty(order[i]))
      scope.settle(order[i])
      t.notOk(scope.pendingParty(order[i]))
      if (i < order.length - 1) {
        t.equal(scope.isReleased, false, `not released after ${order.slice(0, i + 1).join(', ')}`)
        t.equal(released, 0)
        t.same(holdings(r.ledger), HELD, 'everything still held')
      }
    }
    t.equal(scope.isReleased, true)
    t.equal(released, 1, 'onRelease ran once')
    t.same(holdings(r.ledger), NONE)
    t.equal(scope.heldBytes, 0)
    t.equal(turnsTaken(r.ledger, KEY_NAME, 'run-order'), 1, 'the turn is spent, not given back, by a release')
    let late = 0
    scope.onRelease(() => { late++ })
    t.equal(late, 1, 'onRelease after the release runs at once')
    t.throws(() => scope.settle(order[0]), /settled twice/)
    t.equal(released, 1)
    assertIdle(t, r.ledger)
  })
}

t.test('a scope of two parties releases on the second; a third party is refused', async (t) => {
  const r = rig()
  const scope = await fullScope(r, 'run-2', 'session-2', ['processing', 'http'])
  t.throws(() => scope.settle('upstream'), /not a party/)
  scope.settle('http')
  t.equal(scope.isReleased, false)
  scope.settle('processing')
  t.equal(scope.isReleased, true)
  assertIdle(t, r.ledger)
})

t.test('settling a party twice throws and changes nothing', async (t) => {
  const r = rig()
  const scope = await fullScope(r, 'run-twice', 'session-twice')
  scope.settle('upstream')
  t.throws(() => scope.settle('upstream'), /'upstream' settled twice/)
  t.equal(scope.isReleased, false)
  t.same(holdings(r.ledger), HELD)
  scope.settle('processing')
  scope.settle('http')
  assertIdle(t, r.ledger)
})

t.test('taking anything after the release throws; nothing is taken', async (t) => {
  const r = rig()
  const scope = await fullScope(r, 'run-after', 'session-after')
  for (const p of ALL_PARTIES) scope.settle(p)
  t.throws(() => scope.reserve(1), /reserve after the release/)
  t.throws(() => scope.tryReserve(1), /tryReserve after the release/)
  t.throws(() => scope.setFloating(5, 0), /after the release/)
  t.throws(() => scope.tookExchange(), /tookExchange after the release/)
  t.throws(() => scope.tookTurn({ giveBack () {} }), /tookTurn after the release/)
  t.throws(() => scope.tookLane({ release () {} }), /tookLane after the release/)
  let ran = false
  await t.rejects(scope.underParse(undefined, () => { ran = true }), /underParse after the release/)
  t.equal(ran, false, 'fn never ran')
  t.throws(() => scope.unreserve(1), /unreserve 1 > held 0/)
  // What is idempotent stays so, and gives nothing back twice.
  scope.releaseLane()
  scope.giveBackTurn()
  scope.discard()
  t.equal(turnsTaken(r.ledger, KEY_NAME, 'run-after'), 1, 'a released scope has no turn to give back')
  assertIdle(t, r.ledger)
})

t.test('a second exchange permit throws; the first is released once', async (t) => {
  const r = rig()
  const scope = new ExchangeScope(r.ledger)
  t.ok(r.ledger.exchange.tryAcquire())
  scope.tookExchange()
  t.throws(() => scope.tookExchange(), /a second exchange permit/)
  t.equal(scope.holdsExchange, true)
  scope.discard()
  t.equal(scope.holdsExchange, false)
  t.equal(r.ledger.snapshot().exchange.released, 1)
  assertIdle(t, r.ledger)
})

t.test('unreserve of more than is held throws and returns nothing', async (t) => {
  const r = rig()
  const scope = new ExchangeScope(r.ledger)
  scope.reserve(40)
  t.throws(() => scope.unreserve(41), /unreserve 41 > held 40/)
  t.equal(r.ledger.snapshot().storage.reserved, 40)
  // The floating part is the relay's: unreserve may not take it.
  scope.setFloating(5, 5)
  t.equal(scope.heldBytes, 50)
  t.throws(() => scope.unreserve(41), /unreserve 41 > held 40/)
  scope.unreserve(15)
  t.equal(scope.heldBytes, 35)
  t.equal(r.ledger.snapshot().storage.reserved, 35)
  scope.setFloating(0, 0)
  t.equal(scope.heldBytes, 25)
  t.equal(r.ledger.snapshot().storage.reserved, 25)
  scope.discard()
  assertIdle(t, r.ledger)
})

t.test('reserve past the budget throws storage_budget_exhausted and takes nothing', async (t) => {
  const r = rig() // storageBytes 1000
  const scope = new ExchangeScope(r.ledger)
  scope.reserve(900)
  const err = t.throws(() => scope.reserve(101)) as unknown
  t.ok(err instanceof SluiceError && err.code === 'storage_budget_exhausted', 'the catalogue refusal')
  t.equal(scope.tryReserve(101), false)
  t.throws(() => scope.setFloating(60, 60), 'a floating growth that does not fit')
  t.same(holdings(r.ledger), { ...NONE, bytes: 900 }, 'floating and gauges unchanged by the refused growth')
  t.equal(scope.heldBytes, 900)
  t.equal(scope.tryReserve(100), true)
  scope.discard()
  assertIdle(t, r.ledger)
})

t.test('the floating reservation moves in steps; the gauges stay exact', async (t) => {
  const ledger = makeLedger({ maxActive: 8, storageBytes: 1024 * 1024, laneEntries: 64 })
  const scope = new ExchangeScope(ledger)
  const at = (inspector: number, pending: number): [number, number, number, number] => {
    scope.setFloating(inspector, pending)
    const g = ledger.gauges()
    return [scope.floatingBytes, ledger.snapshot().storage.reserved, g[RG_INSPECTOR_BYTES], g[RG_PENDING_BYTES]]
  }
  t.same(at(0, 100), [FLOATING_STEP, FLOATING_STEP, 0, 100], 'a small need reserves one step')
  t.same(at(20, 280), [FLOATING_STEP, FLOATING_STEP, 20, 280], 'a need within the step moves nothing in the budget')
  t.same(at(0, FLOATING_STEP + 1), [2 * FLOATING_STEP, 2 * FLOATING_STEP, 0, FLOATING_STEP + 1], 'past it: the next step')
  t.same(at(0, 100), [2 * FLOATING_STEP, 2 * FLOATING_STEP, 0, 100], 'less than two steps below: kept')
  t.same(at(0, 5 * FLOATING_STEP), [5 * FLOATING_STEP, 5 * FLOATING_STEP, 0, 5 * FLOATING_STEP], 'an exact multiple is not rounded up')
  t.same(at(0, 3 * FLOATING_STEP + 1), [5 * FLOATING_STEP, 5 * FLOATING_STEP, 0, 3 * FLOATING_STEP + 1], 'less than two steps below: still kept')
  t.same(at(0, 2 * FLOATING_STEP + 1), [3 * FLOATING_STEP, 3 * FLOATING_STEP, 0, 2 * FLOATING_STEP + 1], 'two steps below or more: shrunk to the need, rounded up')
  t.same(at(0, 0), [0, 0, 0, 0], 'no need: nothing held')
  t.equal(ledger.snapshot().storage.refused, 0)
  scope.discard()
  assertIdle(t, ledger)
  t.throws(() => scope.setFloating(5, 0), /after the release/, 'no growth after the release, even where a step would fit')
  scope.setFloating(0, 0)
  assertIdle(t, ledger)
})

t.test('a floating step that does not fit is no refusal: the exact need is reserved, and only its refusal counts', async (t) => {
  const ledger = makeLedger({ maxActive: 8, storageBytes: 10_000, laneEntries: 64 })
  const scope = new ExchangeScope(ledger)
  scope.reserve(5_000)
  scope.setFloating(0, 100)
  t.equal(scope.floatingBytes, FLOATING_STEP, 'a step fits')
  scope.setFloating(0, 4_500)
  t.equal(scope.floatingBytes, 4_500, 'the next step does not fit (13,192 > 10,000): the exact need instead')
  t.equal(ledger.snapshot().storage.reserved, 9_500)
  t.equal(ledger.snapshot().storage.refused, 0, 'nothing refused')
  const err = t.throws(() => scope.setFloating(0, 5_200)) as unknown
  t.ok(err instanceof SluiceError && err.code === 'storage_budget_exhausted', 'a need that does not fit exactly either is refused')
  t.same([scope.floatingBytes, ledger.snapshot().storage.reserved, ledger.snapshot().storage.refused], [4_500, 9_500, 1], 'unchanged by the refusal, and counted once')
  scope.setFloating(0, 4_000)
  t.equal(scope.floatingBytes, 4_500, 'within two steps: kept as it is')
  t.ok(FLOATING_SPARE_MAX < 2 * FLOATING_STEP)
  scope.discard()
  assertIdle(t, ledger)
})

t.test('a budget smaller than a step: every floating reservation is exact', async (t) => {
  const ledger = makeLedger({ maxActive: 8, storageBytes: 1_000, laneEntries: 64 })
  const scope = new ExchangeScope(ledger)
  scope.setFloating(10, 20)
  t.same([scope.floatingBytes, ledger.snapshot().storage.reserved, ledger.snapshot().storage.refused], [30, 30, 0])
  const err = t.throws(() => scope.setFloating(0, 1_001)) as unknown
  t.ok(err instanceof SluiceError && err.code === 'storage_budget_exhausted', 'a growth that does not fit: the refusal it always was')
  t.same([scope.floatingBytes, ledger.snapshot().storage.reserved, ledger.snapshot().storage.refused], [30, 30, 1])
  scope.discard()
  assertIdle(t, ledger)
})

t.test('discard gives the turn back and releases everything, whatever was settled', async (t) => {
  for (const before of [[], ['processing'], ['http', 'upstream']] as Party[][]) {
    const r = rig()
    const scope = await fullScope(r, 'run-discard', 'session-discard')
    t.equal(turnsTaken(r.ledger, KEY_NAME, 'run-discard'), 1)
    let released = 0
    scope.onRelease(() => { released++ })
    for (const p of before) scope.settle(p)
    scope.discard()
    t.equal(scope.isReleased, true, `released (settled before: ${before.join(', ') || 'none'})`)
    t.equal(released, 1)
    t.equal(turnsTaken(r.ledger, KEY_NAME, 'run-discard'), 0, 'the turn went back')
    for (const p of ALL_PARTIES) t.throws(() => scope.settle(p), /settled twice/, `${p} is settled`)
    assertIdle(t, r.ledger)
  }
})

t.test('giveBackTurn gives the turn back once; the release does not give it again', async (t) => {
  const r = rig()
  const s1 = await fullScope(r, 'run-give', 'session-give-1')
  const s2 = new ExchangeScope(r.ledger)
  s2.tookTurn(r.pins.take(key, 'run-give'))
  t.equal(turnsTaken(r.ledger, KEY_NAME, 'run-give'), 2)
  s1.giveBackTurn()
  s1.giveBackTurn()
  t.equal(turnsTaken(r.ledger, KEY_NAME, 'run-give'), 1, 'one turn back, not two')
  for (const p of ALL_PARTIES) s1.settle(p)
  t.equal(turnsTaken(r.ledger, KEY_NAME, 'run-give'), 1)
  for (const p of ALL_PARTIES) s2.settle(p)
  t.equal(turnsTaken(r.ledger, KEY_NAME, 'run-give'), 1, "s2's turn is spent")
  assertIdle(t, r.ledger)
})

t.test('releaseLane early lets the session go on; the release does not release the lane again', async (t) => {
  const r = rig()
  const scope = new ExchangeScope(r.ledger)
  const lane = countedLane(r.ledger, 'session-early')
  scope.tookLane(lane.hold)
  t.ok(r.ledger.exchange.tryAcquire())
  scope.tookExchange()
  scope.reserve(10)
  // The session's next exchange queues behind this one.
  const next = enterLane(r.ledger, KEY_NAME, 'session-early', randomUUID(), false)
  t.equal(next.ranAtOnce, false)
  const ac = new AbortController()
  const waiting = outcome(next.wait(ac.signal))
  scope.releaseLane()
  t.equal(lane.calls(), 1)
  t.equal(await waiting, 'granted', 'the next exchange of the session is active before this one released the rest')
  t.same(holdings(r.ledger), { ...NONE, exchange: 1, bytes: 10, laneActive: 1 })
  scope.releaseLane()
  for (const p of ALL_PARTIES) scope.settle(p)
  t.equal(lane.calls(), 1, 'the lane was released once')
  t.equal(r.ledger.snapshot().lanes.released, 1, "the ledger saw one release of this exchange's entry")
  next.release()
  assertIdle(t, r.ledger)
})

t.test('the lane goes last in the release', async (t) => {
  const r = rig()
  const scope = new ExchangeScope(r.ledger)
  let seen: Record<string, number> | null = null
  scope.tookLane({ release () { seen = holdings(r.ledger) } })
  t.ok(r.ledger.exchange.tryAcquire())
  scope.tookExchange()
  scope.reserve(10)
  scope.setFloating(3, 4)
  scope.discard()
  t.same(seen, NONE, 'permit, bytes and gauges were back before the lane slot')
  assertIdle(t, r.ledger)
})

t.test('underParse holds the parse permit around fn and returns it when fn throws or rejects', async (t) => {
  const r = rig()
  const scope = new ExchangeScope(r.ledger)
  t.equal(await scope.underParse(undefined, () => {
    t.equal(r.ledger.snapshot().parse.active, 1, 'held while fn runs')
    return 'sync'
  }), 'sync')
  t.equal(r.ledger.snapshot().parse.active, 0)
  await t.rejects(scope.underParse(undefined, () => { throw new Error('parser threw') }), /parser threw/)
  t.equal(r.ledger.snapshot().parse.active, 0, 'returned after a throw')
  await t.rejects(scope.underParse(undefined, async () => {
    await turn()
    t.equal(r.ledger.snapshot().parse.active, 1, 'held across the await')
    throw new Error('parser rejected')
  }), /parser rejected/)
  t.equal(r.ledger.snapshot().parse.active, 0, 'returned after a rejection')
  t.equal(await scope.underParse(undefined, async () => { await turn(); return 5 }), 5)
  scope.discard()
  assertIdle(t, r.ledger)
})

t.test('underParse: a second hold at once throws; a wait is FIFO and its abort leaves nothing', async (t) => {
  const r = rig() // one parse permit
  const a = new ExchangeScope(r.ledger)
  const b = new ExchangeScope(r.ledger)
  let finishA!: () => void
  const holdA = a.underParse(undefined, () => new Promise<void>((resolve) => { finishA = resolve }))
  await turn()
  await t.rejects(a.underParse(undefined, () => 1), /the parse permit taken twice/)
  const ac = new AbortController()
  let ranB = false
  const waitB = outcome(b.underParse(ac.signal, () => { ranB = true }))
  await turn()
  t.equal(r.ledger.snapshot().parse.queued, 1, 'b waits for the permit')
  ac.abort()
  t.equal(await waitB, 'client_closed')
  t.equal(ranB, false)
  let ranC = false
  const waitC = b.underParse(undefined, () => { ranC = true; return r.ledger.snapshot().parse.active })
  await turn()
  t.equal(ranC, false, 'c waits while a holds the permit')
  finishA()
  await holdA
  t.equal(await waitC, 1, 'c ran under the permit a returned')
  a.discard()
  b.discard()
  assertIdle(t, r.ledger)
})

t.test('settleOnClose binds http to the stream closing (or to it having closed)', async (t) => {
  const r = rig()
  const scope = new ExchangeScope(r.ledger)
  scope.reserve(5)
  const s = new PassThrough()
  scope.settleOnClose(s)
  scope.settle('processing')
  scope.settle('upstream')
  t.equal(scope.pendingParty('http'), true)
  s.destroy()
  await new Promise((resolve) => s.once('close', resolve))
  t.equal(scope.isReleased, true)
  const closed = new PassThrough()
  closed.destroy()
  await new Promise((resolve) => closed.once('close', resolve))
  const other = new ExchangeScope(r.ledger, ['http'])
  other.reserve(5)
  other.settleOnClose(closed)
  t.equal(other.isReleased, true, 'settled at once')
  assertIdle(t, r.ledger)
})

// Two budgets: one smaller than a floating step (every floating reservation is exact), one
// where steps fit until the budget nears full (steps, their shrinking, the exact fallback).
for (const { seed, storageBytes, maxReserve, maxFloat } of [
  { seed: 0x5c09e, storageBytes: 4_000, maxReserve: 300, maxFloat: 200 },
  { seed: 0xf10a7, storageBytes: 60_000, maxReserve: 4_000, maxFloat: 12_000 },
]) t.test(`random interleavings over many scopes (seeded) keep the books and end idle (budget ${storageBytes})`, async (t) => {
  const rand = rng(seed)
  const pick = (n: number): number => Math.floor(rand() * n)
  const ledger = makeLedger({ maxActive: 8, storageBytes, laneEntries: 64 })
  const pins = new TurnPins(ledger)
  interface Live { scope: ExchangeScope; run: string; turnBack: boolean; discarded: boolean; lane: boolean; released: number; floating: number }
  const live: Live[] = []
  const done: Live[] = []
  let made = 0
  let lastOp = ""
  const check = (step: number): void => {
    const s = ledger.snapshot()
    const bytes = live.reduce((n, l) => n + l.scope.heldBytes, 0)
    const permits = live.filter((l) => l.scope.holdsExchange).length
    const lanes = live.filter((l) => l.lane && !l.scope.isReleased).length
    if (s.storage.reserved !== bytes || s.exchange.active !== permits || s.lanes.active !== lanes || s.parse.active !== 0) {
      t.fail(`step ${step} (seed ${seed}, ${lastOp}): ledger ${s.storage.reserved} bytes / ${s.exchange.active} permits / ${s.lanes.active} lanes, scopes ${bytes} / ${permits} / ${lanes}`)
      throw new Error('books out of step')
    }
  }
  const finish = (l: Live): void => {
    if (l.scope.isReleased) {
      t.equal(l.released, 1, `${l.run} released once`)
      live.splice(live.indexOf(l), 1)
      l.lane = false
      done.push(l)
    }
  }
  for (let step = 0; step < 3000; step++) {
    if (made < 300 && (live.length === 0 || (live.length < 8 && rand() < 0.15))) {
      const run = `run-${made}`
      const scope = new ExchangeScope(ledger)
      const l: Live = { scope, run, turnBack: false, discarded: false, lane: true, released: 0, floating: 0 }
      scope.tookTurn(pins.take(key, run))
      scope.tookLane(enterLane(ledger, KEY_NAME, `session-${made}`, randomUUID(), false))
      if (ledger.exchange.tryAcquire()) scope.tookExchange()
      scope.onRelease(() => { l.released++ })
      live.push(l)
      made++
      check(step)
      continue
    }
    if (live.length === 0) break
    const l = live[pick(live.length)]
    const s = l.scope
    const op = pick(9)
    lastOp = `${op} on ${l.run}`
    switch (op) {
      case 0: { const n = 1 + pick(maxReserve); try { s.reserve(n) } catch (err) { t.equal(SluiceError.from(err).code, 'storage_budget_exhausted') } break }
      case 1: s.tryReserve(1 + pick(maxReserve)); break
      case 2: { const free = s.heldBytes - s.floatingBytes; if (free > 0) s.unreserve(1 + pick(free)); t.throws(() => s.unreserve(s.heldBytes - s.floatingBytes + 1), /unreserve/); break }
      case 3: {
        const a = pick(maxFloat); const b = pick(rand() < 0.2 ? 1 : maxFloat)
        const refusedBefore = ledger.snapshot().storage.refused
        try {
          s.setFloating(a, b)
          l.floating = a + b
          // The reservation covers the need, and holds at most FLOATING_SPARE_MAX more (0 when the need is 0).
          if (s.floatingBytes < a + b || s.floatingBytes - (a + b) > FLOATING_SPARE_MAX || (a + b === 0 && s.floatingBytes !== 0)) {
            t.fail(`step ${step}: floating ${s.floatingBytes} for a need of ${a + b}`)
          }
          // A step that did not fit is no refusal: only a refused exact need counts.
          if (ledger.snapshot().storage.refused !== refusedBefore) t.fail(`step ${step}: a refusal counted for a floating growth that was granted`)
        } catch (err) {
          t.equal(SluiceError.from(err).code, 'storage_budget_exhausted')
          // Refused only when the exact growth does not fit either.
          const s2 = ledger.snapshot().storage
          if (s2.limit - s2.reserved >= a + b - s.floatingBytes) t.fail(`step ${step}: refused a growth of ${a + b - s.floatingBytes} with ${s2.limit - s2.reserved} free`)
        }
        break
      }
      case 4: s.releaseLane(); l.lane = false; break
      case 5: if (!l.turnBack && rand() < 0.3) { s.giveBackTurn(); l.turnBack = true } break
      case 6: {
        const fail = rand() < 0.5
        const p = s.underParse(undefined, async () => { if (rand() < 0.5) await turn(); if (fail) throw new Error('boom'); return 1 })
        t.equal(await outcome(p), fail ? 'error: boom' : 'granted')
        break
      }
      case 7: if (rand() < 0.1) { s.discard(); l.discarded = true; l.turnBack = true } break
      default: {
        const pending = ALL_PARTIES.filter((p) => s.pendingParty(p))
        s.settle(pending[pick(pending.length)])
      }
    }
    check(step)
    finish(l)
  }
  // Whatever is still open settles in a random order.
  for (const l of [...live]) {
    for (const p of ALL_PARTIES.filter((p) => l.scope.pendingParty(p)).sort(() => rand() - 0.5)) l.scope.settle(p)
    finish(l)
  }
  t.equal(live.length, 0)
  t.equal(done.length, made)
  t.ok(made >= 100, `${made} scopes`)
  t.ok(done.some((l) => l.discarded) && done.some((l) => !l.turnBack), 'both endings were exercised')
  const wrongTurns = done.filter((l) => turnsTaken(ledger, KEY_NAME, l.run) !== (l.turnBack ? 0 : 1)).map((l) => l.run)
  t.same(wrongTurns, [], 'every run kept exactly its spent turn')
  t.same(idleProblems(ledger), [], `idle (seed ${seed})`)
})
