// A provider request that finds no free connection in its pool queues inside undici: that
// wait must be reported (worker/app.ts counts it in sluice_upstream_connection_waits_total and
// logs it), never silent. Real undici pools against a real local server.

import t from 'tap'
import { createServer, type ServerResponse } from 'node:http'
import { once } from 'node:events'
import { upstreamSchema } from '../../src/config/schema.ts'
import { Upstreams } from '../../worker/upstream.ts'
import { Router, type ResolvedProvider } from '../../src/routing.ts'
import { pumpChunks } from '../../src/net/chunks.ts'
import type { UpstreamAnswer } from '../../src/net/answer.ts'

/** The whole body of an answer, as text. */
async function text (a: UpstreamAnswer): Promise<string> {
  let s = ''
  await pumpChunks(a.body, (c) => { s += c.toString() })
  return s
}

async function server (): Promise<{ url: string; held: ServerResponse[]; close: () => void }> {
  const held: ServerResponse[] = []
  const srv = createServer((req, res) => { req.resume(); req.on('end', () => held.push(res)) }).listen(0, '127.0.0.1')
  await once(srv, 'listening')
  return { url: `http://127.0.0.1:${(srv.address() as { port: number }).port}`, held, close: () => { srv.closeAllConnections(); srv.close() } }
}

const provider = (baseUrl: string): ResolvedProvider => new Router([{ name: 'p', protocol: 'openai-chat', baseUrl, apiKeyEnv: null, models: ['*'], aliases: {}, translate: true }], null, {}).resolve('any')
const req = (p: ResolvedProvider) => ({ provider: p, path: '/v1/chat/completions', clientHeaders: {}, body: new Uint8Array([123, 125]), signal: new AbortController().signal })

for (const connections of [1, 2]) {
  t.test(`${connections} connection(s): the requests beyond them are reported as waiting, the others not`, async (t) => {
    const s = await server()
    t.teardown(s.close)
    const waits: Array<{ origin: string; queued: number; connections: number }> = []
    const up = new Upstreams(upstreamSchema.parse({ connections }), { onConnectionWait: (origin, st) => waits.push({ origin, queued: st.queued, connections: st.connections }) })
    t.teardown(() => up.close())
    const p = provider(s.url)
    const first = Array.from({ length: connections }, () => up.send(req(p)))
    while (s.held.length < connections) await new Promise((r) => setTimeout(r, 5))
    t.equal(waits.length, 0, 'a request that found a connection did not wait')
    const extra = [up.send(req(p)), up.send(req(p))]
    t.same(waits, [{ origin: s.url, queued: 1, connections }, { origin: s.url, queued: 2, connections }], 'each queued request reported, with the pool figures')
    // Answer whatever arrives until every request has been answered (the queued ones get a
    // connection as the earlier ones finish).
    let done = false
    const all = Promise.all([...first, ...extra].map(async (p) => text(await p))).finally(() => { done = true })
    while (!done) {
      for (const res of s.held.splice(0)) res.end('{}')
      await new Promise((r) => setTimeout(r, 5))
    }
    t.equal((await all).length, connections + 2, 'all answered')
    t.equal(waits.length, 2, 'nothing more')
    await new Promise((r) => setImmediate(r)) // 'close' follows 'end'
    t.equal(up.inFlightTo(s.url), 0, 'every request counted out of flight once its body was read')
  })
}

t.test('the in-flight count (which decides when the pool figures are read) comes back to 0 after a body destroyed, an abort and a refused connection', async (t) => {
  const s = await server()
  t.teardown(s.close)
  const waits: number[] = []
  const up = new Upstreams(upstreamSchema.parse({ connections: 1 }), { onConnectionWait: (_o, st) => waits.push(st.queued) })
  t.teardown(() => up.close())
  const p = provider(s.url)
  // A body the relay leaves early: destroyed before its end.
  const first = up.send(req(p))
  while (s.held.length < 1) await new Promise((r) => setTimeout(r, 5))
  s.held[0].write('{"partial":')
  const r1 = await first
  t.equal(up.inFlightTo(s.url), 1, 'in flight while its body is open')
  r1.body.on('error', () => {}) // undici reports its own abort
  const closed = new Promise((resolve) => r1.body.once('close', resolve))
  r1.body.destroy()
  await closed
  t.equal(up.inFlightTo(s.url), 0, 'out once the body is destroyed')
  s.held.splice(0)
  // Aborted while waiting for the answer.
  const ac = new AbortController()
  const aborted = up.send({ ...req(p), signal: ac.signal })
  while (s.held.length < 1) await new Promise((r) => setTimeout(r, 5))
  ac.abort()
  await aborted.then(() => t.fail('answered'), () => {})
  await new Promise((r) => setImmediate(r))
  t.equal(up.inFlightTo(s.url), 0, 'out once the request was aborted')
  s.held.splice(0)
  // Nobody listening at all.
  const dead = provider('http://127.0.0.1:1')
  await up.send(req(dead)).then(() => t.fail('answered'), () => {})
  t.equal(up.inFlightTo('http://127.0.0.1:1'), 0, 'out once the connection was refused')
  // With nothing in flight, a request that finds the connection free is not reported.
  const again = up.send(req(p))
  while (s.held.length < 1) await new Promise((r) => setTimeout(r, 5))
  s.held[0].end('{}')
  await text(await again)
  await new Promise((r) => setImmediate(r)) // 'close' follows 'end'
  t.same(waits, [], 'no wait reported for a free connection')
  t.equal(up.inFlightTo(s.url), 0)
})
