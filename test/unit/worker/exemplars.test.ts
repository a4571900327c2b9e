// worker/exemplars.ts: what is kept is scrubbed in place (request headers in all their forms,
// the provider's answer headers), nothing else is changed, and only the last exchange is kept:
// the one before it is free to be collected.
import t from 'tap'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { connect, type AddressInfo } from 'node:net'
import { Exemplars, distinctSymbolsFound, scrubRequest } from '../../../worker/exemplars.ts'
import { collectGarbage } from '../../../src/idle-gc.ts'

/** One real request through node:http with these raw header lines; resolves with its req/res once the response has closed. */
async function exchange (headerLines: string[]): Promise<{ req: IncomingMessage, res: ServerResponse }> {
  let got: { req: IncomingMessage, res: ServerResponse } | null = null
  const server = createServer((req, res) => {
    void req.headersDistinct // cached by Node under a symbol once read (worker/session-id.ts reads it)
    got = { req, res }
    req.resume()
    req.on('end', () => res.end('ok'))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  const sock = connect(port, '127.0.0.1')
  sock.end(['POST / HTTP/1.1', 'host: x', 'connection: close', 'content-length: 2', ...headerLines, '', 'hi'].join('\r\n'))
  sock.resume()
  await new Promise((resolve) => sock.once('close', resolve))
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return got!
}

t.test('credential headers are overwritten in headers, rawHeaders and headersDistinct; the rest stays', async (t) => {
  const { req } = await exchange(['Authorization: Bearer sk-one', 'X-Api-Key: sk-two', 'Cookie: s=sk-three', 'X-Other: keep-me', 'User-Agent: ua'])
  t.equal(req.headers.authorization, 'Bearer sk-one', 'as received')
  scrubRequest(req)
  t.same([req.headers.authorization, req.headers['x-api-key'], req.headers.cookie], ['[redacted]', '[redacted]', '[redacted]'])
  t.same([req.headers['x-other'], req.headers['user-agent']], ['keep-me', 'ua'], 'other headers untouched')
  t.same(req.rawHeaders.filter((_, i) => i % 2 === 1), ['x', 'close', '2', '[redacted]', '[redacted]', '[redacted]', 'keep-me', 'ua'], 'raw values, names kept')
  t.same(req.rawHeaders.filter((_, i) => i % 2 === 0).slice(3, 5), ['Authorization', 'X-Api-Key'])
  t.same(req.headersDistinct.authorization, ['[redacted]'], 'the cached distinct form too')
  t.notMatch(JSON.stringify([req.headers, req.rawHeaders, req.headersDistinct]), /sk-/)
})

t.test('trailers: a chunked request\'s credential trailers are overwritten in all their forms; found by the cached symbols', async (t) => {
  t.ok(distinctSymbolsFound, 'this Node caches headersDistinct / trailersDistinct under symbols found once')
  let got: IncomingMessage | null = null
  const server = createServer((req, res) => {
    got = req
    req.resume()
    req.on('end', () => { void req.trailersDistinct; res.end('ok') })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  const sock = connect(port, '127.0.0.1')
  sock.end(['POST / HTTP/1.1', 'host: x', 'connection: close', 'transfer-encoding: chunked', 'authorization: Bearer sk-head', '', '2', 'hi', '0', 'X-Api-Key: sk-trailer', 'X-Fine: ok', '', ''].join('\r\n'))
  sock.resume()
  await new Promise((resolve) => sock.once('close', resolve))
  await new Promise<void>((resolve) => server.close(() => resolve()))
  const req = got! as IncomingMessage
  t.equal(req.trailers['x-api-key'], 'sk-trailer', 'as received')
  scrubRequest(req)
  t.equal(req.trailers['x-api-key'], '[redacted]')
  t.equal(req.trailers['x-fine'], 'ok', 'other trailers untouched')
  t.same(req.rawTrailers, ['X-Api-Key', '[redacted]', 'X-Fine', 'ok'])
  t.same(req.trailersDistinct['x-api-key'], ['[redacted]'], 'the cached distinct form too')
  t.notMatch(JSON.stringify([req.headers, req.rawHeaders, req.trailers, req.rawTrailers, req.trailersDistinct]), /sk-/)
})

t.test('the provider answer is kept with its credential headers scrubbed; a refused exchange keeps the last answer', async (t) => {
  const ex = new Exemplars()
  const a = await exchange(['Authorization: Bearer sk-a'])
  const upstream = { headers: { 'content-type': 'text/event-stream', 'set-cookie': ['a=sk-secret', 'b=sk-other'] }, body: {} }
  ex.keepExchange({ ...a, upstream, own: [] })
  t.same(upstream.headers, { 'content-type': 'text/event-stream', 'set-cookie': ['[redacted]', '[redacted]'] })
  t.equal(ex.kept.upstream, upstream)
  const b = await exchange(['Authorization: Bearer sk-b'])
  ex.keepExchange({ ...b, upstream: null, own: [] })
  t.equal(ex.kept.exchange?.req, b.req, 'the newer exchange')
  t.equal(ex.kept.upstream, upstream, 'and the last answer there was')
  t.equal(b.req.headers.authorization, '[redacted]')
})

t.test('only the last exchange is kept: the one before is collected', async (t) => {
  const ex = new Exemplars()
  let first: { req: IncomingMessage, res: ServerResponse } | null = await exchange(['Authorization: Bearer sk-1'])
  const weak = new WeakRef(first.req)
  ex.keepExchange({ ...first, upstream: null, own: [] })
  first = null
  await collectGarbage()
  t.ok(weak.deref() !== undefined, 'kept while it is the last')
  ex.keepExchange({ ...(await exchange(['Authorization: Bearer sk-2'])), upstream: null, own: [] })
  await new Promise((resolve) => setImmediate(resolve)) // WeakRef targets live to the end of the job that read them
  await collectGarbage()
  t.equal(weak.deref(), undefined, 'replaced, then collected')
})
