// The admin plane lives on the primary and reads the ledger directly: it answers within the
// one-second health guard while every HTTP worker busy-loops.

import t from 'tap'
import { request } from 'undici'
import { clientOnRow, startGateway } from '../helpers/gateway.ts'

t.test('healthz, metrics and capabilities answer while every worker is stuck', async (t) => {
  const gw = await startGateway({ workers: 2 })
  t.teardown(() => gw.stop())
  const busyMs = 2500
  // Pin a connection to each worker first: once one worker spins, finding the other takes
  // as long as the spin (connections that land on the busy one wait).
  const clients = [await clientOnRow(gw.port, 1), await clientOnRow(gw.port, 2)]
  for (const c of clients) {
    const res = await c.request({ method: 'GET', path: `/_test/busy?ms=${busyMs}` })
    await res.body.dump()
  }
  for (const c of clients) void c.close()
  // Both workers are now spinning. Prove it: a data-plane request does not answer quickly.
  const stuck = await Promise.race([
    request(`http://127.0.0.1:${gw.port}/_test/whoami`).then(async (r) => { await r.body.dump(); return 'answered' }),
    new Promise((r) => setTimeout(() => r('stuck'), 800)),
  ])
  t.equal(stuck, 'stuck', 'the data plane is blocked')
  const worst: Record<string, number> = {}
  const end = Date.now() + busyMs - 1000
  let probes = 0
  while (Date.now() < end) {
    for (const path of ['/healthz', '/metrics', '/capabilities', '/readyz']) {
      const t0 = performance.now()
      const res = await request(`http://127.0.0.1:${gw.adminPort}${path}`, { headersTimeout: 1000, bodyTimeout: 1000 })
      await res.body.dump()
      const ms = performance.now() - t0
      worst[path] = Math.max(worst[path] ?? 0, ms)
      if (path === '/healthz') t.equal(res.statusCode, 200)
      probes++
    }
    await new Promise((r) => setTimeout(r, 50))
  }
  t.ok(probes >= 8, `probed ${probes} times`)
  for (const [path, ms] of Object.entries(worst)) t.ok(ms < 1000, `${path} worst ${ms.toFixed(1)} ms, inside the 1 s guard`)
})
