// A worker that dies while holding exchange permits and storage bytes has them reclaimed
// exactly once by the primary; the other worker keeps serving on the shared port meanwhile.

import t from 'tap'
import { request } from 'undici'
import { clientOnRow, startGateway, until, waitIdle, type Gateway } from '../helpers/gateway.ts'
import type { Client } from 'undici'

async function hold (c: Client, bytes: number): Promise<void> {
  const res = await c.request({ method: 'GET', path: `/_test/hold?bytes=${bytes}&ms=60000` })
  if (res.statusCode !== 200) throw new Error(`hold refused: ${res.statusCode} ${await res.body.text()}`)
  // Read the first line: the holdings are now taken. Keep the stream open.
  await new Promise<void>((resolve) => res.body.once('data', () => resolve()))
  res.body.on('error', () => {})
}

for (const death of ['oom', 'exit'] as const) {
  t.test(`worker killed by ${death} while holding: reclaimed once, port keeps serving`, async (t) => {
    const gw: Gateway = await startGateway({ workers: 2, limits: { storageBytes: 10_000_000, workerHeapMb: 32, workerYoungGenMb: 8 } })
    t.teardown(() => gw.stop())
    const holders = [await clientOnRow(gw.port, 1), await clientOnRow(gw.port, 1), await clientOnRow(gw.port, 2)]
    await hold(holders[0], 1_000_000)
    await hold(holders[1], 2_000_000)
    await hold(holders[2], 500_000)
    let m = await gw.metrics()
    t.equal(m.get('sluice_exchanges_active'), 3)
    t.equal(m.get('sluice_storage_bytes_reserved'), 3_500_000)
    t.equal(m.get('sluice_worker_exchanges_held{worker="1"}'), 2)

    // Keep the other worker busy with traffic while row 1 dies.
    let served = 0
    let failures = 0
    let stop = false
    const c = await clientOnRow(gw.port, 2)
    const traffic = (async () => {
      while (!stop) {
        const ok = await c.request({ method: 'GET', path: '/_test/whoami' })
          .then(async (res) => { await res.body.dump(); return res.statusCode === 200 }, () => false)
        if (ok) served++
        else failures++
      }
      await c.close()
    })()

    const killer = await clientOnRow(gw.port, 1)
    // The worker dies right after answering; its answer may or may not arrive first.
    await killer.request({ method: 'GET', path: `/_test/${death}` }).then((res) => res.body.dump(), () => {})
    await until(() => gw.logs.some((l) => l.includes('"worker exited"') && l.includes('"worker":1')), 'worker 1 exit', 20_000)
    const exitLine = JSON.parse(gw.logs.find((l) => l.includes('"worker exited"') && l.includes('"worker":1'))!)
    t.same(exitLine.reclaimed, { exchange: 2, parse: 0, bytes: 3_000_000, lanes: 0, lockStolen: false }, 'exactly what the dead worker held')
    if (death === 'oom') t.equal(exitLine.error, 'ERR_WORKER_OUT_OF_MEMORY', 'died of its heap limit, cleanly')

    m = await gw.metrics()
    t.equal(m.get('sluice_exchanges_active'), 1, 'only the live worker\'s permit remains')
    t.equal(m.get('sluice_storage_bytes_reserved'), 500_000)
    t.equal(m.get('sluice_permits_reclaimed_total{gate="exchange"}'), 2)
    t.equal(m.get('sluice_storage_bytes_reclaimed_total'), 3_000_000)
    t.equal(m.get('sluice_worker_reclaims_total'), 1, 'one reclaim for one death')

    // The worker comes back on the same row with a new generation.
    await until(async () => (await gw.metrics()).get('sluice_worker_up{worker="1"}') === 1, 'worker 1 restarted', 20_000)
    stop = true
    await traffic
    t.ok(served > 0, `the other worker kept serving (${served} requests)`)
    t.equal(failures, 0, 'no request to the live worker failed')

    for (const c of holders) await c.destroy().catch(() => {})
    t.same(await waitIdle(gw), {}, 'ledger back at idle')
    m = await gw.metrics()
    t.equal(m.get('sluice_permits_reclaimed_total{gate="exchange"}'), 2, 'no second reclaim')
    t.equal(m.get('sluice_admissions_total'), 3)
    t.equal(m.get('sluice_releases_total'), 1, 'the live holder released its own permit once')
    // The restarted worker admits again.
    const again = await request(`http://127.0.0.1:${gw.port}/_test/hold?ms=1&bytes=10`)
    t.equal(again.statusCode, 200)
    await again.body.dump()
    t.same(await waitIdle(gw), {}, 'idle after a fresh exchange')
  })
}
