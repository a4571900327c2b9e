// Rows and reclaim (ledger.ts), on one thread: extra handles on the same buffer stand in for
// worker threads, and "death" is simulated by reclaiming a row whose handle is no longer used
// (its pending JS waiters are settled by hand, as a dead thread's would simply vanish).

import t from 'tap'
import { B_RESERVED, FREE, G_ACTIVE, G_QUEUED, GATE_EXCHANGE, GATE_PARSE, GRANTED, H_LOCK, R_STATE, ROW_DEAD, WAITING } from '../../../src/ledger/layout.ts'
import { assertIdle, makeLedger, outcome, rowHandle, Settlements, slotStates } from './helpers.ts'

t.test('the primary owns row 0 from creation; assignRow makes a row alive with a new generation', async (t) => {
  const primary = makeLedger()
  t.equal(primary.row, 0)
  t.match(primary.snapshot().rows[0], { state: 'alive', generation: 1 })
  t.match(primary.snapshot().rows[1], { state: 'unused', generation: 0 })
  t.equal(primary.assignRow(1, 77), 1)
  t.match(primary.snapshot().rows[1], { state: 'alive', generation: 1, threadId: 77 })
  t.throws(() => primary.assignRow(1), /still alive/, 'an alive row cannot be handed to a second thread')
  primary.setThreadId(1, 78)
  t.equal(primary.snapshot().rows[1].threadId, 78)
  primary.tryReclaimRow(1)!
  t.match(primary.snapshot().rows[1], { state: 'dead', generation: 1 })
  t.equal(primary.assignRow(1), 2, 'a restarted thread gets the next generation')
  t.match(primary.snapshot().rows[1], { state: 'alive', generation: 2, exchangeHeld: 0, parseHeld: 0, bytes: 0 })
  primary.tryReclaimRow(1)!
  t.throws(() => primary.tryReclaimRow(0)!, /own row/)
  assertIdle(t, primary)
})

t.test('reclaimRow returns exactly what a dead row held, once; a second reclaim returns zeros', async (t) => {
  const primary = makeLedger({ maxActive: 3, storageBytes: 1000 })
  const w = rowHandle(primary, 1)
  t.ok(w.exchange.tryAcquire())
  t.ok(w.exchange.tryAcquire())
  t.ok(w.parse.tryAcquire())
  w.storage.reserve(123)
  t.ok(primary.exchange.tryAcquire(), 'a live row\'s holdings are not touched')
  primary.storage.reserve(10)
  t.same(primary.tryReclaimRow(1)!, { exchange: 2, parse: 1, bytes: 123, lanes: 0, lockStolen: false })
  const s = primary.snapshot()
  t.match(s.rows[1], { state: 'dead', exchangeHeld: 0, parseHeld: 0, bytes: 0 })
  t.match(s.exchange, { active: 1, reclaimed: 2, admitted: 3, released: 0 })
  t.match(s.parse, { active: 0, reclaimed: 1 })
  t.match(s.storage, { reserved: 10, reclaimed: 123 })
  t.equal(s.rowReclaims, 1)
  t.equal(s.repairs, 0)
  t.match(s.rows[0], { exchangeHeld: 1, bytes: 10 })
  t.same(primary.tryReclaimRow(1)!, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false }, 'second reclaim finds nothing')
  t.same(primary.snapshot(), s, 'and changes nothing')
  primary.exchange.release()
  primary.storage.release(10)
  assertIdle(t, primary)
})

t.test('permits freed by a reclaim are handed to waiters in FIFO (ticket) order', async (t) => {
  const primary = makeLedger({ maxActive: 2, maxQueued: 4 })
  const w = rowHandle(primary, 1)
  t.ok(w.exchange.tryAcquire())
  t.ok(w.exchange.tryAcquire())
  t.ok(w.parse.tryAcquire())
  const s = new Settlements()
  const ac = new AbortController()
  s.add('x0', primary.exchange.acquire({ signal: ac.signal })) // slot 0
  s.add('x1', primary.exchange.acquire()) // slot 1
  s.add('x2', primary.exchange.acquire()) // slot 2
  ac.abort()
  t.equal(await s.next(), 'x0:client_closed')
  s.add('x3', primary.exchange.acquire()) // reuses slot 0, youngest ticket
  s.add('x4', primary.exchange.acquire()) // slot 3
  s.add('p0', primary.parse.acquire())
  s.add('p1', primary.parse.acquire())
  t.same(primary.tryReclaimRow(1)!, { exchange: 2, parse: 1, bytes: 0, lanes: 0, lockStolen: false })
  t.same(slotStates(primary, GATE_EXCHANGE).slice(0, 4), [WAITING, GRANTED, GRANTED, WAITING], 'the two oldest (x1, x2) got the permits, not x3 in slot 0')
  t.same(slotStates(primary, GATE_PARSE).slice(0, 2), [GRANTED, WAITING])
  t.match(primary.snapshot().exchange, { active: 2, queued: 2, admitted: 4, reclaimed: 2 })
  const granted = [await s.next(), await s.next(), await s.next()].sort()
  t.same(granted, ['p0:granted', 'x1:granted', 'x2:granted'])
  t.same(s.pendingLabels.sort(), ['p1', 'x3', 'x4'])
  primary.exchange.release()
  t.equal(await s.next(), 'x3:granted')
  primary.exchange.release()
  t.equal(await s.next(), 'x4:granted')
  primary.parse.release()
  t.equal(await s.next(), 'p1:granted')
  primary.exchange.release()
  primary.exchange.release()
  primary.parse.release()
  assertIdle(t, primary)
})

t.test('a dead row\'s WAITING slots are freed and it is skipped; the live waiter behind it is served', async (t) => {
  const primary = makeLedger({ maxActive: 1, maxQueued: 4 })
  const holder = rowHandle(primary, 2)
  const dead = rowHandle(primary, 1)
  t.ok(holder.exchange.tryAcquire())
  const zombie = new AbortController()
  const z = outcome(dead.exchange.acquire({ signal: zombie.signal }))
  const live = outcome(primary.exchange.acquire())
  t.same(slotStates(primary, GATE_EXCHANGE).slice(0, 2), [WAITING, WAITING])
  t.same(primary.tryReclaimRow(1)!, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false }, 'a waiter slot is not a permit')
  t.same(slotStates(primary, GATE_EXCHANGE).slice(0, 2), [FREE, WAITING], 'the dead row\'s slot is freed')
  t.match(primary.snapshot().exchange, { active: 1, queued: 1, reclaimed: 0 })
  zombie.abort() // the dead thread's JS would be gone; settle it here
  t.equal(await z, 'client_closed')
  t.match(primary.snapshot().exchange, { queued: 1, cancels: 0 }, 'settling the zombie touches nothing')
  holder.exchange.release()
  t.equal(await live, 'granted')
  primary.exchange.release()
  primary.tryReclaimRow(2)!
  assertIdle(t, primary)
})

t.test('a permit granted to a dead row but never claimed is reclaimed and passed on', async (t) => {
  const primary = makeLedger({ maxActive: 1, maxQueued: 4 })
  const holder = rowHandle(primary, 2)
  const dead = rowHandle(primary, 1)
  t.ok(holder.exchange.tryAcquire())
  const zombie = new AbortController()
  const z = outcome(dead.exchange.acquire({ signal: zombie.signal }))
  const live = outcome(primary.exchange.acquire())
  holder.exchange.release() // hands the permit to the dead row's slot: GRANTED, unclaimed
  t.same(slotStates(primary, GATE_EXCHANGE).slice(0, 2), [GRANTED, WAITING])
  t.same(primary.tryReclaimRow(1)!, { exchange: 1, parse: 0, bytes: 0, lanes: 0, lockStolen: false })
  t.same(slotStates(primary, GATE_EXCHANGE).slice(0, 2), [FREE, GRANTED], 'passed on to the next waiter')
  zombie.abort()
  t.equal(await z, 'client_closed')
  t.equal(await live, 'granted')
  t.equal(dead.exchange.heldByMe, 0, 'nothing landed in the dead row')
  t.match(primary.snapshot().exchange, { admitted: 3, released: 1, reclaimed: 1, cancelsAfterGrant: 0 })
  primary.exchange.release()
  t.same(primary.tryReclaimRow(1)!, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false })
  primary.tryReclaimRow(2)!
  assertIdle(t, primary)
})

t.test('assignRow refuses a row that still holds something: reclaim first', async (t) => {
  const primary = makeLedger()
  const w = rowHandle(primary, 1)
  const at = primary.core.layout.row32(1) + R_STATE
  t.ok(w.exchange.tryAcquire())
  Atomics.store(primary.core.i32, at, ROW_DEAD) // the thread died, nobody reclaimed
  t.throws(() => primary.assignRow(1), /still holds permits/)
  primary.tryReclaimRow(1)!
  primary.assignRow(1)
  w.storage.reserve(5)
  Atomics.store(primary.core.i32, at, ROW_DEAD)
  t.throws(() => primary.assignRow(1), /still holds bytes/)
  t.equal(primary.tryReclaimRow(1)!.bytes, 5)
  t.equal(primary.assignRow(1), 3)
  primary.tryReclaimRow(1)!
  assertIdle(t, primary)
})

t.test('a lock held by a dead row is stolen and every derived counter rebuilt from the truth', async (t) => {
  const primary = makeLedger({ maxActive: 1, maxQueued: 4, parsePermits: 1, storageBytes: 1000 })
  const dying = rowHandle(primary, 2)
  const other = rowHandle(primary, 1)
  t.ok(dying.exchange.tryAcquire())
  t.ok(other.parse.tryAcquire())
  dying.storage.reserve(40)
  other.storage.reserve(60)
  const waiter = outcome(primary.exchange.acquire())
  const { i32, i64, layout } = primary.core
  // Row 2 dies inside a critical section, half-way through its writes:
  Atomics.store(i32, H_LOCK, dying.core.token)
  i32[layout.gate32[GATE_EXCHANGE] + G_ACTIVE] += 1 // G_ACTIVE bumped, row cell not yet
  i32[layout.gate32[GATE_EXCHANGE] + G_QUEUED] += 2
  i32[layout.gate32[GATE_PARSE] + G_ACTIVE] = 0
  i64[layout.budget64 + B_RESERVED] += 7n // B_RESERVED bumped, row cell not yet
  const r = primary.tryReclaimRow(2)!
  t.same(r, { exchange: 1, parse: 0, bytes: 40, lanes: 0, lockStolen: true })
  t.equal(Atomics.load(i32, H_LOCK), 0, 'the lock is free again')
  const s = primary.snapshot()
  t.match(s.exchange, { active: 1, queued: 0, reclaimed: 1 }, 'G1/G2 rebuilt; the freed permit went to the waiter (G3)')
  t.match(s.parse, { active: 1, queued: 0 }, 'G1 rebuilt from row 1\'s truth')
  t.match(s.storage, { reserved: 60, reclaimed: 40 }, 'B1 rebuilt as the sum of the rows')
  t.equal(s.repairs, 1)
  t.equal(await waiter, 'granted')
  primary.exchange.release()
  other.parse.release()
  other.storage.release(60)
  t.same(primary.tryReclaimRow(2)!, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false })
  t.equal(primary.snapshot().repairs, 1, 'counted once')
  primary.tryReclaimRow(1)!
  assertIdle(t, primary)
})

t.test('a stolen lock is repaired even when the dead row held nothing', async (t) => {
  const primary = makeLedger()
  rowHandle(primary, 3)
  Atomics.store(primary.core.i32, H_LOCK, 4)
  t.same(primary.tryReclaimRow(3)!, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: true })
  t.equal(primary.snapshot().repairs, 1)
  t.equal(primary.snapshot().rowReclaims, 1)
  t.ok(primary.exchange.tryAcquire(), 'the ledger is usable again')
  primary.exchange.release()
  assertIdle(t, primary)
})

t.test('heap figures and the draining flag are visible in the snapshot', async (t) => {
  const primary = makeLedger()
  const w = rowHandle(primary, 2)
  const before = Date.now()
  w.reportHeap(1234.9, 64 * 2 ** 20, 2 ** 33)
  const row = primary.snapshot().rows[2]
  t.match(row, { heapUsed: 1234, heapLimit: 64 * 2 ** 20, external: 2 ** 33 })
  t.ok(row.updatedMs >= before && row.updatedMs <= Date.now())
  t.equal(primary.snapshot().draining, false)
  primary.setDraining(true)
  t.equal(w.draining, true, 'every handle sees it')
  primary.setDraining(false)
  t.equal(primary.snapshot().draining, false)
  primary.tryReclaimRow(2)!
  assertIdle(t, primary)
})

t.test('a waiter granted by a thread that died before its notify is woken by the reclaim (D1)', async (t) => {
  const primary = makeLedger({ maxActive: 1, maxQueued: 2 })
  const waker = rowHandle(primary, 2)
  const waiter = rowHandle(primary, 1)
  t.ok(waker.exchange.tryAcquire(), 'row 2 holds the only permit')
  let granted = false
  const p = waiter.exchange.acquire({ deadline: Date.now() + 10_000 }).then(() => { granted = true })
  t.same(slotStates(primary, GATE_EXCHANGE).filter((s) => s === WAITING).length, 1, 'row 1 waits')
  // Row 2's release() up to its unlock — then it dies before Atomics.notify.
  const { i32, layout } = primary.core
  const base = layout.gate32[GATE_EXCHANGE]
  const slot = slotStates(primary, GATE_EXCHANGE).indexOf(WAITING)
  waker.core.lock()
  i32[layout.row32(2) + 3 + GATE_EXCHANGE]-- // R_HELD + gate
  Atomics.store(i32, layout.slot32[GATE_EXCHANGE] + slot * 3, GRANTED)
  i32[base + G_QUEUED]--
  waker.core.unlock()
  await new Promise((r) => setTimeout(r, 50))
  t.notOk(granted, 'without a notify the waiter still sleeps on its granted slot')
  t.same(primary.tryReclaimRow(2)!, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false })
  const woke = await Promise.race([p.then(() => 'woken'), new Promise((r) => setTimeout(() => r('still asleep'), 2000))])
  t.equal(woke, 'woken', 'the reclaim woke it long before its 10 s deadline')
  t.equal(Atomics.load(i32, base + G_ACTIVE), 1)
  waiter.exchange.release()
  primary.tryReclaimRow(1)
  assertIdle(t, primary)
})

t.test('a late reclaim of an earlier life leaves the restarted row alone', async (t) => {
  const primary = makeLedger()
  const first = rowHandle(primary, 1)
  const gen1 = primary.snapshot().rows[1].generation
  t.ok(first.exchange.tryAcquire())
  t.same(primary.tryReclaimRow(1, undefined, gen1)!, { exchange: 1, parse: 0, bytes: 0, lanes: 0, lockStolen: false })
  const second = rowHandle(primary, 1) // the restarted worker, a new generation
  t.ok(second.exchange.tryAcquire())
  t.same(primary.tryReclaimRow(1, undefined, gen1)!, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false }, 'the old life\'s reclaim changes nothing')
  t.equal(second.exchange.heldByMe, 1, 'the new life keeps its permit')
  second.exchange.release()
  primary.tryReclaimRow(1)
  assertIdle(t, primary)
})
