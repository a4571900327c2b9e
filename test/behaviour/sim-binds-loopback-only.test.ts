// The embedded simulated provider checks no key: it binds loopback (127.0.0.1) whatever
// listen.host says, so a gateway served on another address never serves the sim there.
// (127.0.0.2 stands in for "another address": it is loopback too, so nothing leaves the host.)

import t from 'tap'
import { connect } from 'node:net'
import { sha256Hex } from '../../src/config/load.ts'
import { request } from 'undici'
import { startGateway, waitIdle } from '../helpers/gateway.ts'

t.test('the sim ignores listen.host and binds 127.0.0.1 only', async (t) => {
  const gw = await startGateway({
    listen: { host: '127.0.0.2', port: 0, adminPort: 0 },
    workers: 1,
    sim: { enabled: true, port: 0 },
    keys: [{ name: 'test', sha256: sha256Hex('sk-sim-loopback-test-key'), models: ['*'] }],
    providers: [{ name: 'sim', protocol: 'openai-chat', baseUrl: 'sim', models: ['gpt-4o*'] }],
  })
  t.teardown(() => gw.stop())
  const ready = gw.logs.map((l) => { try { return JSON.parse(l) } catch { return {} } }).find((j) => j.msg === 'sluice ready')
  const url = new URL(String(ready?.sim))
  t.equal(url.hostname, '127.0.0.1', `the sim's address (${url.href})`)
  const reach = (host: string) => new Promise<boolean>((resolve) => {
    const s = connect(Number(url.port), host)
    s.once('connect', () => { s.destroy(); resolve(true) })
    s.once('error', () => resolve(false))
  })
  t.equal(await reach('127.0.0.1'), true, 'served on loopback')
  t.equal(await reach('127.0.0.2'), false, 'not on listen.host')
  const r = await request(`http://127.0.0.2:${gw.port}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: 'Bearer sk-sim-loopback-test-key', 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
  })
  await r.body.text()
  t.equal(r.statusCode, 200, 'the gateway on listen.host still reaches its sim')
  t.same(await waitIdle(gw), {}, 'ledger idle')
})
