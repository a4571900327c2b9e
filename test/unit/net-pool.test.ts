// src/net/pool.ts loads undici's Pool without the rest of undici: it must be undici's own Pool
// with undici's own request API, and work.
import t from 'tap'
import { createServer } from 'node:http'
import { once } from 'node:events'
import * as undici from 'undici'
import { Pool } from '../../src/net/pool.ts'

t.test('the same class the package exports, with the same request API', async (t) => {
  t.equal(Pool, undici.Pool, 'undici.Pool')
  const proto = Pool.prototype as unknown as Record<string, unknown>
  const api = undici.Dispatcher.prototype as unknown as Record<string, unknown>
  for (const m of ['request', 'stream', 'pipeline', 'upgrade', 'connect']) t.equal(proto[m], api[m], m)
})

t.test('a request through it', async (t) => {
  const srv = createServer((req, res) => { res.end(`${req.method} ${req.url}`) }).listen(0, '127.0.0.1')
  await once(srv, 'listening')
  t.teardown(() => srv.close())
  const pool = new Pool(`http://127.0.0.1:${(srv.address() as { port: number }).port}`, { connections: 1 })
  t.teardown(() => pool.close())
  const res = await pool.request({ method: 'GET', path: '/x' })
  t.equal(res.statusCode, 200)
  t.equal(await res.body.text(), 'GET /x')
})
