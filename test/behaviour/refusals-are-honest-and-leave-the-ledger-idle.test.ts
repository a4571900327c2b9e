// Every local refusal carries its catalogue code, status and Retry-After, names the local
// capacity that ran out, and leaves every permit and byte back at idle.

import t from 'tap'
import { request, type Dispatcher } from 'undici'
import { startGateway, waitIdle, until } from '../helpers/gateway.ts'

async function holdOpen (port: number, query = '', signal?: AbortSignal): Promise<Dispatcher.ResponseData> {
  const res = await request(`http://127.0.0.1:${port}/_test/hold?ms=60000${query}`, { signal })
  return res
}

t.test('queue: FIFO, full -> capacity_exhausted, deadline -> capacity_timeout, hang-up leaves the queue', async (t) => {
  const gw = await startGateway({ workers: 2, limits: { maxActiveExchanges: 2, maxQueuedExchanges: 2, queueWaitMs: 1500 } })
  t.teardown(() => gw.stop())
  const active = [new AbortController(), new AbortController()]
  const a0 = await holdOpen(gw.port, '', active[0].signal)
  const a1 = await holdOpen(gw.port, '', active[1].signal)
  t.equal(a0.statusCode, 200)
  t.equal(a1.statusCode, 200)
  a0.body.on('error', () => {}); a1.body.on('error', () => {})

  // Two more wait in the queue, unanswered.
  const q0 = new AbortController()
  const queued0 = holdOpen(gw.port, '', q0.signal).catch((e) => e)
  await until(async () => (await gw.metrics()).get('sluice_exchanges_queued') === 1, 'first queued')
  const queued1 = holdOpen(gw.port, '&ms=1')
  await until(async () => (await gw.metrics()).get('sluice_exchanges_queued') === 2, 'second queued')

  // The queue is full: immediate, honest refusal.
  const t0 = Date.now()
  const full = await request(`http://127.0.0.1:${gw.port}/_test/hold`)
  const fullBody = await full.body.json() as Record<string, unknown>
  t.ok(Date.now() - t0 < 1000, 'refused at once')
  t.equal(full.statusCode, 503)
  t.equal(full.headers['retry-after'], '1')
  t.equal(fullBody.code, 'capacity_exhausted')
  t.equal(fullBody.limit, 2)
  t.equal(fullBody.queueLimit, 2)
  t.match(String(fullBody.error), /local model capacity/, 'names the local capacity')

  // The first queued caller hangs up: it leaves the queue at once; the active work is untouched.
  q0.abort()
  t.ok((await queued0) instanceof Error)
  await until(async () => (await gw.metrics()).get('sluice_exchanges_queued') === 1, 'cancelled waiter removed')
  t.equal((await gw.metrics()).get('sluice_exchanges_active'), 2, 'a cancel never releases active work')

  // Releasing one active permit hands it to the remaining waiter (FIFO), which then finishes.
  active[0].abort()
  const granted = await queued1
  t.equal(granted.statusCode, 200, 'the waiter got the released permit')
  await granted.body.text()

  // Now one active (a1) + one free: fill it, then a waiter that times out.
  const a2c = new AbortController()
  const a2 = await holdOpen(gw.port, '', a2c.signal)
  a2.body.on('error', () => {})
  const w0 = Date.now()
  const timedOut = await request(`http://127.0.0.1:${gw.port}/_test/hold`)
  const toBody = await timedOut.body.json() as Record<string, unknown>
  t.equal(timedOut.statusCode, 503)
  t.equal(toBody.code, 'capacity_timeout')
  t.equal(toBody.limit, 2)
  t.equal(toBody.queueLimit, 2, 'names the queue that was waited in')
  t.ok(Date.now() - w0 >= 1400, 'waited the whole deadline')
  t.equal((await gw.metrics()).get('sluice_exchanges_active'), 2, 'a timeout never releases active work')

  active[1].abort()
  a2c.abort()
  t.same(await waitIdle(gw), {}, 'ledger idle after every refusal')
  const m = await gw.metrics()
  t.equal(m.get('sluice_refusals_total{code="capacity_exhausted"}'), 1)
  t.equal(m.get('sluice_refusals_total{code="capacity_timeout"}'), 1)
  t.equal(m.get('sluice_permit_wait_outcomes_total{gate="exchange",outcome="cancel"}'), 1)
  t.equal(m.get('sluice_admissions_total'), m.get('sluice_releases_total'), 'every admission released')
})

t.test('storage: too large for the whole budget -> 413, no room now -> 503; heap over its limit -> 503', async (t) => {
  const gw = await startGateway({ workers: 1, limits: { storageBytes: 1000 } })
  t.teardown(() => gw.stop())
  const big = await request(`http://127.0.0.1:${gw.port}/_test/hold?bytes=5000&ms=1`)
  const bigBody = await big.body.json() as Record<string, unknown>
  t.equal(big.statusCode, 413)
  t.equal(bigBody.code, 'storage_request_too_large')
  t.notOk(big.headers['retry-after'], 'no Retry-After: a retry can never fit')

  const ac = new AbortController()
  const holder = await request(`http://127.0.0.1:${gw.port}/_test/hold?bytes=800&ms=60000`, { signal: ac.signal })
  holder.body.on('error', () => {})
  const noRoom = await request(`http://127.0.0.1:${gw.port}/_test/hold?bytes=300&ms=1`)
  const noRoomBody = await noRoom.body.json() as Record<string, unknown>
  t.equal(noRoom.statusCode, 503)
  t.equal(noRoomBody.code, 'storage_budget_exhausted')
  t.equal(noRoom.headers['retry-after'], '1')
  ac.abort()
  t.same(await waitIdle(gw), {}, 'ledger idle: the refused exchanges released their permits')
})

t.test('worker heap above its admission limit -> worker_heap_exhausted, nothing held', async (t) => {
  const gw = await startGateway({ workers: 1, limits: { workerHeapAdmitFraction: 0.001 } })
  t.teardown(() => gw.stop())
  const res = await request(`http://127.0.0.1:${gw.port}/_test/hold?ms=1`)
  const body = await res.body.json() as Record<string, unknown>
  t.equal(res.statusCode, 503)
  t.equal(body.code, 'worker_heap_exhausted')
  t.ok(Number(body.heapUsed) > Number(body.admitLimit))
  t.same(await waitIdle(gw), {})
  t.equal((await gw.metrics()).get('sluice_admissions_total'), 0, 'never admitted')
})
