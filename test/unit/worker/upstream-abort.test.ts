// UpstreamAbort (worker/upstream.ts): the exchange's abort as undici hears it, an EventEmitter
// signal instead of the AbortSignal. Against a real undici Pool and a real server: fired
// while the request waits for its answer, or while its body streams, the provider's connection
// is closed; fired before the request, nothing is sent; fired twice, it is heard once; and no
// listener is left on it once a request has settled.

import t from 'tap'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { once } from 'node:events'
import { Pool } from '../../../src/net/pool.ts'
import { UpstreamAbort } from '../../../worker/upstream.ts'

async function server (handler: (req: IncomingMessage, res: ServerResponse) => void) {
  const requests: IncomingMessage[] = []
  const srv = createServer((req, res) => { requests.push(req); handler(req, res) })
  srv.listen(0, '127.0.0.1')
  await once(srv, 'listening')
  const origin = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`
  return { srv, origin, requests, close: () => { srv.closeAllConnections(); return new Promise((resolve) => srv.close(resolve)) } }
}

t.test('fired while the request waits for its answer: rejected, the connection closed', async (t) => {
  const s = await server(() => {}) // never answers
  const pool = new Pool(s.origin, { connections: 1 })
  t.teardown(async () => { await pool.destroy(); await s.close() })
  const abort = new UpstreamAbort()
  const p = pool.request({ method: 'POST', path: '/x', body: 'hello', signal: abort })
  while (s.requests.length === 0) await new Promise((resolve) => setTimeout(resolve, 2))
  const closed = once(s.requests[0].socket, 'close')
  const reason = new Error('the caller went away')
  abort.fire(reason)
  await t.rejects(p, reason, 'the request rejects with the exchange\'s reason')
  await closed
  t.pass('the provider saw its connection close')
  t.equal(abort.listenerCount('abort'), 0, 'no listener left')
})

t.test('fired while the body streams: the body is destroyed, the connection closed', async (t) => {
  const s = await server((_req, res) => { res.writeHead(200, { 'content-type': 'text/event-stream' }); res.write('data: 1\n\n') })
  const pool = new Pool(s.origin, { connections: 1 })
  t.teardown(async () => { await pool.destroy(); await s.close() })
  const abort = new UpstreamAbort()
  const up = await pool.request({ method: 'POST', path: '/x', body: 'hello', signal: abort })
  t.equal(up.statusCode, 200)
  const closed = once(s.requests[0].socket, 'close')
  let bodyError: Error | null = null
  up.body.on('error', (err) => { bodyError = err })
  const bodyClosed = new Promise((resolve) => up.body.once('close', resolve))
  abort.fire(new Error('cut'))
  await bodyClosed
  t.ok(up.body.destroyed, 'the body is destroyed')
  t.equal((bodyError as Error | null)?.message, 'cut', 'with the exchange\'s reason')
  await closed
  t.pass('the provider saw its connection close')
  t.equal(abort.listenerCount('abort'), 0, 'no listener left')
})

t.test('fired before the request: refused at once, nothing reaches the provider', async (t) => {
  const s = await server((_req, res) => { res.end('ok') })
  const pool = new Pool(s.origin, { connections: 1 })
  t.teardown(async () => { await pool.destroy(); await s.close() })
  const abort = new UpstreamAbort()
  const reason = new Error('already gone')
  abort.fire(reason)
  t.ok(abort.fired)
  await t.rejects(pool.request({ method: 'POST', path: '/x', body: 'hello', signal: abort }), reason)
  await new Promise((resolve) => setTimeout(resolve, 20))
  t.equal(s.requests.length, 0, 'the provider never saw it')
  t.equal(abort.listenerCount('abort'), 0)
})

t.test('fired twice, heard once; a settled request leaves no listener behind', async (t) => {
  const s = await server((_req, res) => { res.end('ok') })
  const pool = new Pool(s.origin, { connections: 1 })
  t.teardown(async () => { await pool.destroy(); await s.close() })
  const abort = new UpstreamAbort()
  for (let i = 0; i < 3; i++) {
    const up = await pool.request({ method: 'POST', path: '/x', body: 'hello', signal: abort })
    t.equal(await up.body.text(), 'ok')
    await new Promise((resolve) => setImmediate(resolve)) // the body's 'close' follows its end
  }
  t.equal(abort.listenerCount('abort'), 0, 'three requests answered and read: no listener left')
  let heard = 0
  abort.on('abort', () => { heard++ })
  abort.fire(new Error('one'))
  abort.fire(new Error('two'))
  t.equal(heard, 1)
  t.equal((abort.reason as Error).message, 'one', 'the first reason stands')
  t.notOk('aborted' in abort, 'no `aborted` property: undici must not take it for an AbortSignal')
})
