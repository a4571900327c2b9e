// Gate (gate.ts) on one thread, both gates: fast path, queueing, strict FIFO by ticket,
// refusal when the queue is full, timeout, abort before and while queued, the grant-vs-abort
// and grant-vs-timeout races, release without a permit, exact totals. Several rows are
// simulated with extra handles on the same buffer (rowHandle). Every test ends at idle.

import t from 'tap'
import { SluiceError } from '../../../src/errors.ts'
import type { Gate, GateSnapshot } from '../../../src/ledger/gate.ts'
import { addLocked as bump, read as readTotal } from '../../../src/ledger/pair64.ts'
import { FREE, GRANTED, G_NEXT_TICKET, G_TOTALS, GT_ADMITTED, WAITING } from '../../../src/ledger/layout.ts'
import type { Ledger } from '../../../src/ledger/ledger.ts'
import { assertIdle, makeLedger, outcome, rowHandle, Settlements, slotStates, turn, unitOptions } from './helpers.ts'

interface GateCase {
  name: 'exchange' | 'parse'
  g: number
  pick: (l: Ledger) => Gate
  full: string
  timeout: string
  max: number
  queue: number
}

const cases: GateCase[] = [
  { name: 'exchange', g: 0, pick: (l) => l.exchange, full: 'capacity_exhausted', timeout: 'capacity_timeout', max: unitOptions.maxActive, queue: unitOptions.maxQueued },
  { name: 'parse', g: 1, pick: (l) => l.parse, full: 'parse_capacity_exhausted', timeout: 'parse_capacity_timeout', max: unitOptions.parsePermits, queue: unitOptions.parseQueue },
]

/** The totals of a snapshot, for exact comparison. */
function totals (s: GateSnapshot): Record<string, number> {
  const { admitted, released, queuedTotal, refusedFull, timeouts, cancels, cancelsAfterGrant, reclaimed } = s
  return { admitted, released, queuedTotal, refusedFull, timeouts, cancels, cancelsAfterGrant, reclaimed }
}

const zero = { admitted: 0, released: 0, queuedTotal: 0, refusedFull: 0, timeouts: 0, cancels: 0, cancelsAfterGrant: 0, reclaimed: 0 }

function saturate (t: { ok (v: unknown, ...m: [] | [string]): boolean }, gate: Gate, n: number): void {
  for (let i = 0; i < n; i++) t.ok(gate.tryAcquire(), `fast path permit ${i + 1}/${n}`)
}

function releaseAll (gate: Gate): void {
  while (gate.heldByMe > 0) gate.release()
}

for (const c of cases) {
  t.test(`${c.name}: fast path takes every permit, then refuses without waiting`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    let queuedCalls = 0
    await gate.acquire({ onQueued: () => { queuedCalls++ } })
    t.equal(queuedCalls, 0, 'a free permit does not queue')
    for (let i = 1; i < c.max; i++) t.ok(gate.tryAcquire())
    t.equal(gate.heldByMe, c.max)
    t.equal(gate.snapshot().active, c.max)
    t.equal(gate.tryAcquire(), false, 'no permit left')
    t.equal(gate.snapshot().active, c.max, 'a failed tryAcquire changes nothing')
    t.same(totals(gate.snapshot()), { ...zero, admitted: c.max })
    releaseAll(gate)
    t.same(totals(gate.snapshot()), { ...zero, admitted: c.max, released: c.max })
    t.equal(gate.heldByMe, 0)
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: a waiter queues, and a release hands it the permit directly`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    let queuedCalls = 0
    const p = gate.acquire({ onQueued: () => { queuedCalls++ } })
    t.equal(queuedCalls, 1, 'onQueued called once')
    t.match(gate.snapshot(), { active: c.max, queued: 1, queuedTotal: 1 })
    t.same(slotStates(ledger, c.g).filter((s) => s !== FREE), [WAITING])
    gate.release()
    t.match(gate.snapshot(), { active: c.max, queued: 0 }, 'G_ACTIVE does not drop during a hand-off')
    t.same(slotStates(ledger, c.g).filter((s) => s !== FREE), [GRANTED], 'the slot is GRANTED before the waiter wakes')
    t.equal(gate.heldByMe, c.max - 1, 'the permit is not in the row until claimed')
    await p
    t.equal(gate.heldByMe, c.max, 'claimed into the row')
    t.equal(queuedCalls, 1)
    t.same(slotStates(ledger, c.g).filter((s) => s !== FREE), [])
    releaseAll(gate)
    t.same(totals(gate.snapshot()), { ...zero, admitted: c.max + 1, released: c.max + 1, queuedTotal: 1 })
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: grants go in arrival (FIFO) order`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    const s = new Settlements()
    for (let i = 0; i < c.queue; i++) s.add(`w${i}`, gate.acquire())
    t.equal(gate.snapshot().queued, c.queue)
    for (let i = 0; i < c.queue; i++) {
      gate.release()
      t.equal(await s.next(), `w${i}:granted`, `release ${i + 1} grants w${i}`)
      await turn()
      t.same(s.pendingLabels, Array.from({ length: c.queue - i - 1 }, (_, k) => `w${i + 1 + k}`), 'the others still wait')
    }
    t.equal(gate.heldByMe, c.max)
    releaseAll(gate)
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: FIFO follows tickets, not slot positions (a reused slot goes to the back)`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    const s = new Settlements()
    const ac = new AbortController()
    s.add('a', gate.acquire({ signal: ac.signal })) // slot 0
    s.add('b', gate.acquire()) // slot 1
    s.add('c', gate.acquire()) // slot 2
    ac.abort()
    t.equal(await s.next(), 'a:client_closed')
    t.equal(slotStates(ledger, c.g)[0], FREE, 'a\'s slot is free again')
    s.add('d', gate.acquire()) // reuses slot 0, but arrives last
    t.equal(slotStates(ledger, c.g)[0], WAITING, 'd took slot 0')
    const order: string[] = []
    for (let i = 0; i < 3; i++) {
      gate.release()
      order.push(await s.next())
    }
    t.same(order, ['b:granted', 'c:granted', 'd:granted'])
    releaseAll(gate)
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: FIFO holds across the Int32 ticket wrap`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    Atomics.store(ledger.core.i32, ledger.core.layout.gate32[c.g] + G_NEXT_TICKET, 0x7ffffffe)
    saturate(t, gate, c.max)
    const s = new Settlements()
    const n = c.queue // 3 or 4 waiters: tickets 0x7ffffffe, 0x7fffffff, -0x80000000, ...
    for (let i = 0; i < n; i++) s.add(`w${i}`, gate.acquire())
    const order: string[] = []
    for (let i = 0; i < n; i++) {
      gate.release()
      order.push(await s.next())
    }
    t.same(order, Array.from({ length: n }, (_, i) => `w${i}:granted`))
    releaseAll(gate)
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: no barging: a permit handed to a sleeping waiter is not taken by a newcomer`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    const s = new Settlements()
    s.add('a', gate.acquire())
    gate.release() // handed to a; a has not woken yet
    t.equal(gate.tryAcquire(), false, 'tryAcquire does not barge')
    let queued = false
    s.add('newcomer', gate.acquire({ onQueued: () => { queued = true } }))
    t.equal(queued, true, 'acquire queues behind the sleeping waiter')
    t.equal(await s.next(), 'a:granted')
    gate.release()
    t.equal(await s.next(), 'newcomer:granted')
    releaseAll(gate)
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: a full queue refuses at once with its code and leaves the gate unchanged`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    const s = new Settlements()
    for (let i = 0; i < c.queue; i++) s.add(`w${i}`, gate.acquire())
    const before = gate.snapshot()
    const slotsBefore = slotStates(ledger, c.g)
    let queuedCalls = 0
    let err: unknown
    try {
      await gate.acquire({ onQueued: () => { queuedCalls++ } })
    } catch (e) {
      err = e
    }
    t.ok(err instanceof SluiceError, 'a SluiceError')
    const e = err as SluiceError
    t.equal(e.code, c.full)
    t.equal(e.status, 503)
    t.equal(e.side, 'local')
    t.same(e.details, { gate: c.name, limit: c.max, queueLimit: c.queue })
    t.equal(queuedCalls, 0, 'a refused acquire never reports itself queued')
    t.same(gate.snapshot(), { ...before, refusedFull: before.refusedFull + 1 }, 'only the refusal total moved')
    t.same(slotStates(ledger, c.g), slotsBefore, 'no slot touched')
    t.equal(gate.heldByMe, c.max)
    for (let i = 0; i < c.queue; i++) {
      gate.release()
      t.equal(await s.next(), `w${i}:granted`)
    }
    releaseAll(gate)
    t.equal(gate.snapshot().refusedFull, 1)
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: a timeout removes only that waiter and never releases active work`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    const s = new Settlements()
    s.add('first', gate.acquire())
    s.add('short', gate.acquire({ deadline: Date.now() + 20 }))
    s.add('last', gate.acquire())
    const r = await s.next()
    t.equal(r, `short:${c.timeout}`)
    t.equal(gate.heldByMe, c.max, 'the holder still holds every permit')
    t.match(gate.snapshot(), { active: c.max, queued: 2, timeouts: 1, released: 0 })
    t.same(s.pendingLabels, ['first', 'last'], 'the other waiters keep their places')
    gate.release()
    t.equal(await s.next(), 'first:granted')
    gate.release()
    t.equal(await s.next(), 'last:granted')
    releaseAll(gate)
    t.same(totals(gate.snapshot()), { ...zero, admitted: c.max + 2, released: c.max + 2, queuedTotal: 3, timeouts: 1 })
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: a timeout rejects with the gate's code and details`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    let err: unknown
    try {
      await gate.acquire({ deadline: Date.now() - 1000 })
    } catch (e) {
      err = e
    }
    const e = err as SluiceError
    t.equal(e.code, c.timeout, 'a deadline already past still times out (after queueing)')
    t.equal(e.status, 503)
    t.same(e.details, { gate: c.name, limit: c.max, queueLimit: c.queue })
    t.match(gate.snapshot(), { queued: 0, queuedTotal: 1, timeouts: 1 })
    releaseAll(gate)
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: without a deadline the gate's default wait applies`, async (t) => {
    const ledger = makeLedger({ queueWaitMs: 15, parseWaitMs: 15 })
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    t.equal(await outcome(gate.acquire()), c.timeout)
    releaseAll(gate)
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: an already-aborted signal is refused before counting, even with a free permit`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    let queuedCalls = 0
    t.equal(await outcome(gate.acquire({ signal: AbortSignal.abort(), onQueued: () => { queuedCalls++ } })), 'client_closed')
    t.same(totals(gate.snapshot()), zero, 'no total moved')
    saturate(t, gate, c.max)
    t.equal(await outcome(gate.acquire({ signal: AbortSignal.abort() })), 'client_closed')
    t.equal(queuedCalls, 0)
    t.same(totals(gate.snapshot()), { ...zero, admitted: c.max })
    releaseAll(gate)
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: aborting while queued removes the waiter (client_closed), the next one is served`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    const s = new Settlements()
    const ac = new AbortController()
    s.add('a', gate.acquire({ signal: ac.signal }))
    s.add('b', gate.acquire())
    ac.abort()
    t.equal(await s.next(), 'a:client_closed')
    t.match(gate.snapshot(), { active: c.max, queued: 1, cancels: 1, cancelsAfterGrant: 0 })
    t.equal(gate.heldByMe, c.max, 'an abort never releases active work')
    gate.release()
    t.equal(await s.next(), 'b:granted')
    releaseAll(gate)
    t.same(totals(gate.snapshot()), { ...zero, admitted: c.max + 1, released: c.max + 1, queuedTotal: 2, cancels: 1 })
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: grant vs abort: the grant is put back and handed to the next waiter`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    const s = new Settlements()
    const ac = new AbortController()
    s.add('a', gate.acquire({ signal: ac.signal }))
    s.add('b', gate.acquire())
    gate.release() // a's slot is GRANTED; a has not woken
    t.equal(slotStates(ledger, c.g)[0], GRANTED)
    ac.abort() // the abort loses the race to the grant
    t.equal(slotStates(ledger, c.g)[0], FREE, 'a\'s slot freed')
    t.equal(slotStates(ledger, c.g)[1], GRANTED, 'the permit went straight on to b')
    t.match(gate.snapshot(), { active: c.max, queued: 0, cancelsAfterGrant: 1, cancels: 0 })
    t.equal(await s.next(), 'a:client_closed', 'the aborted caller still gets its rejection')
    t.equal(await s.next(), 'b:granted')
    t.equal(gate.heldByMe, c.max, 'a holds nothing, b holds one, the primary its other permits')
    releaseAll(gate)
    t.same(totals(gate.snapshot()), { ...zero, admitted: c.max + 2, released: c.max + 2, queuedTotal: 2, cancelsAfterGrant: 1 })
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: grant vs abort with nobody behind: the permit returns to the pool`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    const ac = new AbortController()
    const p = outcome(gate.acquire({ signal: ac.signal }))
    gate.release()
    ac.abort()
    t.equal(await p, 'client_closed')
    t.match(gate.snapshot(), { active: c.max - 1, queued: 0, cancelsAfterGrant: 1 })
    t.equal(gate.tryAcquire(), true, 'the put-back permit is free for anyone')
    releaseAll(gate)
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: grant vs timeout: a grant that landed before the deadline is processed is kept`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    // Record the slot state the timeout finds, to prove the race branch was taken.
    const seen: string[] = []
    const spied = gate as unknown as { cancel: (w: { slot: number }, why: string) => void }
    const original = spied.cancel
    spied.cancel = function (this: Gate, w: { slot: number }, why: string) {
      seen.push(`${why}:${slotStates(ledger, c.g)[w.slot]}`)
      return original.call(this, w, why)
    }
    saturate(t, gate, c.max)
    const result = await new Promise<string>((resolve) => {
      // In a check-phase callback: the deadline timer and the wake-up are both due when the
      // loop comes round, and timers run before the wake-up's task.
      setImmediate(() => {
        const p = outcome(gate.acquire({ deadline: Date.now() + 2 }))
        const until = Date.now() + 10
        while (Date.now() < until) { /* let the deadline pass */ }
        gate.release() // grant lands; its wake-up is queued behind the expired timer
        resolve(p)
      })
    })
    t.same(seen, [`timeout:${GRANTED}`], 'the timeout found the slot GRANTED')
    t.equal(result, 'granted', 'the acquire settles as granted')
    t.equal(gate.heldByMe, c.max)
    t.match(gate.snapshot(), { active: c.max, queued: 0, timeouts: 0, cancelsAfterGrant: 0 })
    releaseAll(gate)
    t.same(totals(gate.snapshot()), { ...zero, admitted: c.max + 1, released: c.max + 1, queuedTotal: 1 })
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: release without a held permit throws and changes nothing`, async (t) => {
    const primary = makeLedger()
    const worker = rowHandle(primary, 1)
    t.throws(() => c.pick(primary).release(), /release without a held permit/)
    t.ok(c.pick(primary).tryAcquire())
    const before = c.pick(primary).snapshot()
    t.throws(() => c.pick(worker).release(), /release without a held permit/, 'a permit held by another row is not mine to release')
    t.same(c.pick(primary).snapshot(), before)
    c.pick(primary).release()
    t.throws(() => c.pick(primary).release(), /release without a held permit/, 'double release')
    t.same(totals(c.pick(primary).snapshot()), { ...zero, admitted: 1, released: 1 })
    assertIdle(t, primary)
  })

  t.test(`${c.name}: waiters of several rows are served in arrival order, into their own rows`, async (t) => {
    const primary = makeLedger()
    const holder = rowHandle(primary, 3)
    const r1 = rowHandle(primary, 1)
    const r2 = rowHandle(primary, 2)
    saturate(t, c.pick(holder), c.max)
    const s = new Settlements()
    const who = [r2, primary, r1].slice(0, c.queue)
    who.forEach((h, i) => s.add(`row${h.row}#${i}`, c.pick(h).acquire()))
    c.pick(holder).release() // one permit starts a chain: each granted waiter releases to the next
    for (let i = 0; i < who.length; i++) {
      t.equal(await s.next(), `row${who[i].row}#${i}:granted`)
      t.equal(c.pick(who[i]).heldByMe, 1, `the permit is in row ${who[i].row}`)
      t.equal(primary.snapshot().rows[who[i].row][c.name === 'exchange' ? 'exchangeHeld' : 'parseHeld'], 1, 'and the row snapshot says so')
      c.pick(who[i]).release()
    }
    releaseAll(c.pick(holder))
    assertIdle(t, primary)
  })

  t.test(`${c.name}: totals are exact over a scripted sequence`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    saturate(t, gate, c.max) //                              admitted +max
    const s = new Settlements()
    const abortQueued = new AbortController()
    const abortGranted = new AbortController()
    s.add('cancelled', gate.acquire({ signal: abortQueued.signal })) // queued +1
    abortQueued.abort() //                                    cancels +1
    t.equal(await s.next(), 'cancelled:client_closed')
    s.add('timeout', gate.acquire({ deadline: Date.now() + 5 })) // queued +1
    t.equal(await s.next(), `timeout:${c.timeout}`) //        timeouts +1
    s.add('raced', gate.acquire({ signal: abortGranted.signal })) // queued +1
    s.add('served', gate.acquire()) //                        queued +1
    gate.release() //                                         released +1, admitted +1 (raced)
    abortGranted.abort() //                                   cancelsAfterGrant +1, released +1, admitted +1 (served)
    t.equal(await s.next(), 'raced:client_closed')
    t.equal(await s.next(), 'served:granted')
    t.equal(await outcome(gate.acquire({ signal: abortQueued.signal })), 'client_closed') // pre-aborted: no totals
    // fill the queue and overflow it once
    for (let i = 0; i < c.queue; i++) s.add(`q${i}`, gate.acquire()) // queued +queue
    t.equal(await outcome(gate.acquire()), c.full) //         refusedFull +1
    for (let i = 0; i < c.queue; i++) {
      gate.release() //                                       released +1, admitted +1
      t.equal(await s.next(), `q${i}:granted`)
    }
    releaseAll(gate) //                                       released +max
    t.same(totals(gate.snapshot()), {
      admitted: c.max + 2 + c.queue,
      released: 2 + c.queue + c.max,
      queuedTotal: 4 + c.queue,
      refusedFull: 1,
      timeouts: 1,
      cancels: 1,
      cancelsAfterGrant: 1,
      reclaimed: 0,
    })
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: an onQueued callback that throws leaves the gate as if the call never happened`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    let err: unknown
    try {
      await gate.acquire({ onQueued: () => { throw new Error('tracer broke') } })
    } catch (e) {
      err = e
    }
    t.match(err, { message: 'tracer broke' }, 'the caller sees the callback\'s error')
    t.equal(gate.snapshot().queued, 0, 'no waiter is left behind in the queue')
    t.same(slotStates(ledger, c.g).filter((st) => st !== FREE), [], 'no slot left WAITING')
    releaseAll(gate)
    await turn()
    t.equal(gate.snapshot().active, 0, 'every permit returned (none handed to an orphaned slot)')
    t.equal(gate.tryAcquire(), true)
    releaseAll(gate)
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: aborting from inside onQueued rejects with client_closed, not at the deadline`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    const ac = new AbortController()
    const r = await outcome(gate.acquire({ signal: ac.signal, deadline: Date.now() + 200, onQueued: () => ac.abort() }))
    t.equal(r, 'client_closed')
    t.match(gate.snapshot(), { queued: 0, cancels: 1, timeouts: 0 })
    releaseAll(gate)
    assertIdle(t, ledger)
  })

  t.test(`${c.name}: a deadline beyond the timer range does not expire at once`, async (t) => {
    const ledger = makeLedger()
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    const p = outcome(gate.acquire({ deadline: Date.now() + 2 ** 31 + 60_000 }))
    await new Promise((resolve) => setTimeout(resolve, 30))
    t.equal(gate.snapshot().queued, 1, 'still queued after the 1 ms an overflowed timer would allow')
    gate.release()
    t.equal(await p, 'granted')
    releaseAll(gate)
    assertIdle(t, ledger)
  })
}

t.test('a queue of size 0 refuses every contended acquire at once', async (t) => {
  const ledger = makeLedger({ maxQueued: 0, parseQueue: 0 })
  for (const c of cases) {
    const gate = c.pick(ledger)
    saturate(t, gate, c.max)
    t.equal(await outcome(gate.acquire()), c.full)
    t.match(gate.snapshot(), { queued: 0, queuedTotal: 0, refusedFull: 1 })
    releaseAll(gate)
  }
  assertIdle(t, ledger)
})

t.test('the two gates are independent', async (t) => {
  const ledger = makeLedger()
  saturate(t, ledger.exchange, unitOptions.maxActive)
  t.ok(ledger.parse.tryAcquire(), 'a full exchange gate does not block parsing')
  t.equal(ledger.parse.snapshot().active, 1)
  t.equal(ledger.exchange.snapshot().active, unitOptions.maxActive)
  ledger.parse.release()
  releaseAll(ledger.exchange)
  assertIdle(t, ledger)
})

t.test('totals are (lo, hi) pairs: they carry past 2^32 and read back whole', async (t) => {
  const ledger = makeLedger()
  const i32 = ledger.core.i32
  const at = ledger.core.layout.gate32[0] + G_TOTALS + GT_ADMITTED
  i32[at] = -1 // lo = 0xffffffff
  t.equal(readTotal(i32, at), 0xffffffff)
  bump(i32, at)
  t.equal(readTotal(i32, at), 2 ** 32)
  bump(i32, at, 5)
  t.equal(readTotal(i32, at), 2 ** 32 + 5)
  i32[at] = -2
  bump(i32, at, 3) // crosses again: hi 2, lo 1
  t.equal(readTotal(i32, at), 2 * 2 ** 32 + 1)
  t.equal(ledger.exchange.snapshot().admitted, 2 * 2 ** 32 + 1, 'snapshots read the pair')
  i32[at] = 0
  i32[at + 1] = 0
  assertIdle(t, ledger)
})
