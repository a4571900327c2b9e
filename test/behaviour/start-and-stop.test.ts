// Start-up refusals and graceful shutdown.

import t from 'tap'
import { spawn } from 'node:child_process'
import { request } from 'undici'
import { BIN, NODE, startGateway, writeConfig } from '../helpers/gateway.ts'

function run (args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const p = spawn(NODE, [BIN, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''; let err = ''
    p.stdout.on('data', (d) => { out += d })
    p.stderr.on('data', (d) => { err += d })
    const timer = setTimeout(() => p.kill('SIGKILL'), 15_000)
    p.on('exit', (code) => { clearTimeout(timer); resolve({ code, out, err }) })
  })
}

t.test('a second sluice on the same port refuses to start (reusePort would hide it)', async (t) => {
  const gw = await startGateway({ workers: 1 })
  t.teardown(() => gw.stop())
  const cfg = writeConfig({ listen: { port: gw.port, adminPort: 0 } })
  const r = await run(['serve', '--config', cfg])
  t.equal(r.code, 1)
  t.match(r.err, new RegExp(`port 127\\.0\\.0\\.1:${gw.port} is already served`))
  // The first one still serves.
  const res = await request(`http://127.0.0.1:${gw.port}/_test/whoami`)
  t.equal(res.statusCode, 200)
  await res.body.dump()
})

t.test('SIGTERM drains: active exchanges finish, new ones are refused, exit 0', async (t) => {
  const gw = await startGateway({ workers: 1, limits: { drainMs: 10_000 } })
  const res = await request(`http://127.0.0.1:${gw.port}/_test/hold?ms=700`)
  const body = res.body.text()
  gw.proc.kill('SIGTERM')
  await new Promise((r) => setTimeout(r, 150))
  const late = await request(`http://127.0.0.1:${gw.adminPort}/readyz`)
  t.equal(late.statusCode, 503, 'not ready while draining')
  t.equal((await late.body.json() as { draining: boolean }).draining, true)
  const fresh = await request(`http://127.0.0.1:${gw.port}/_test/hold?ms=1`).then(
    async (r) => ({ status: r.statusCode, body: await r.body.json() as { code?: string } }),
    (err: NodeJS.ErrnoException) => ({ status: 0, body: { code: err.code } }),
  )
  t.ok(fresh.status === 0 ? fresh.body.code === 'ECONNREFUSED' : fresh.status === 503 && fresh.body.code === 'shutting_down',
    `a new exchange during the drain is refused (${fresh.status} ${fresh.body.code})`)
  t.match(await body, /released/, 'the active exchange finished')
  t.equal(await gw.exited, 0)
  t.ok(gw.logs.some((l) => l.includes('"stopped"') && l.includes('"abandonedActive":0')), 'nothing abandoned')
})

t.test('a second signal exits at once', async (t) => {
  const gw = await startGateway({ workers: 1, limits: { drainMs: 60_000 } })
  const res = await request(`http://127.0.0.1:${gw.port}/_test/hold?ms=60000`)
  res.body.on('error', () => {})
  res.body.resume()
  gw.proc.kill('SIGTERM')
  await new Promise((r) => setTimeout(r, 200))
  const t0 = Date.now()
  gw.proc.kill('SIGTERM')
  t.equal(await gw.exited, 1)
  t.ok(Date.now() - t0 < 5000, 'did not wait for the drain')
})
