// src/net/body-write.ts: a body chunk written as one buffer on the socket, on a real node:http
// server read by a raw TCP client, so the bytes on the wire are what is checked.
import t, { type Test } from 'tap'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'
import { writeBody, DIRECT_WRITE_MAX } from '../../src/net/body-write.ts'
import { ClientDrain } from '../../worker/relay.ts'

type Handler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>

async function serve (t: Test, handler: Handler): Promise<number> {
  const server: Server = createServer((req, res) => { void handler(req, res) })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return (server.address() as AddressInfo).port
}

/** Sends `raw` on one connection and reads until `done(bytes)` says the answer is whole. */
async function exchangeRaw (port: number, raw: string, done: (b: Buffer) => boolean): Promise<Buffer> {
  const socket = connect(port, '127.0.0.1')
  const parts: Buffer[] = []
  return await new Promise<Buffer>((resolve, reject) => {
    socket.on('data', (d: Buffer) => {
      parts.push(d)
      const all = Buffer.concat(parts)
      if (done(all)) { socket.destroy(); resolve(all) }
    })
    socket.on('error', reject)
    socket.write(raw)
  })
}

const REQ = (path: string) => `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`
const ENDS = (n: number) => (b: Buffer) => b.toString('latin1').split('\r\n0\r\n\r\n').length - 1 >= n

/** The bodies of the chunked responses in `wire`, decoded, in order; throws on a framing error. */
function decodeChunked (wire: Buffer): Buffer[] {
  const bodies: Buffer[] = []
  let at = 0
  while (at < wire.length) {
    const head = wire.indexOf('\r\n\r\n', at)
    if (head < 0) throw new Error(`no header end at ${at}`)
    const headText = wire.toString('latin1', at, head)
    if (!/^HTTP\/1\.1 200/.test(headText) || !/transfer-encoding: chunked/i.test(headText)) throw new Error(`not a chunked 200: ${headText}`)
    at = head + 4
    const parts: Buffer[] = []
    for (;;) {
      const eol = wire.indexOf('\r\n', at)
      const size = Number.parseInt(wire.toString('latin1', at, eol), 16)
      if (!Number.isInteger(size) || !/^[0-9a-f]+$/.test(wire.toString('latin1', at, eol))) throw new Error(`bad size line at ${at}`)
      at = eol + 2
      if (size === 0) { if (wire.toString('latin1', at, at + 2) !== '\r\n') throw new Error('bad last chunk'); at += 2; break }
      parts.push(wire.subarray(at, at + size))
      at += size
      if (wire.toString('latin1', at, at + 2) !== '\r\n') throw new Error(`no CRLF after a chunk at ${at}`)
      at += 2
    }
    bodies.push(Buffer.concat(parts))
  }
  return bodies
}

const SIZES = [1, 15, 16, 255, 256, 4095, 4096, DIRECT_WRITE_MAX, DIRECT_WRITE_MAX + 1, 70_000]
const chunkOf = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 31 + seed) & 255))
const tick = () => new Promise((resolve) => setImmediate(resolve))

t.test('the same bytes on the wire as res.write, small chunks in one socket write each', async (t) => {
  const calls = { resWrite: 0, socketWrite: 0 }
  const port = await serve(t, async (req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    const direct = req.url === '/direct'
    for (const [i, n] of SIZES.entries()) {
      const chunk = chunkOf(n, i)
      if (!direct) { res.write(chunk); await tick(); continue }
      const socket = res.socket!
      const rw = res.write
      const sw = socket.write
      let r = 0
      let s = 0
      res.write = function (this: ServerResponse, ...a: Parameters<ServerResponse['write']>) { r++; return rw.apply(this, a) } as ServerResponse['write']
      socket.write = function (this: Socket, ...a: Parameters<Socket['write']>) { s++; return sw.apply(this, a) } as Socket['write']
      writeBody(res, chunk)
      res.write = rw
      socket.write = sw
      if (i > 0 && n <= DIRECT_WRITE_MAX) { calls.socketWrite += s; t.equal(r, 0, `${n} bytes: not through res.write`); t.equal(s, 1, `${n} bytes: one socket write`) }
      if (i === 0 || n > DIRECT_WRITE_MAX) { calls.resWrite += r; t.equal(r, 1, `${i === 0 ? 'the first chunk (the header goes with it)' : `${n} bytes (over the copy limit)`}: through res.write`) }
      await tick()
    }
    res.end()
  })
  const wireRes = await exchangeRaw(port, REQ('/res'), ENDS(1))
  const viaRes = decodeChunked(wireRes)
  const wire = await exchangeRaw(port, REQ('/direct'), ENDS(1))
  const viaDirect = decodeChunked(wire)
  const expected = Buffer.concat(SIZES.map((n, i) => chunkOf(n, i)))
  t.ok(viaRes[0].equals(expected), 'res.write: the body')
  t.ok(viaDirect[0].equals(expected), 'writeBody: the same body')
  // The framing itself, byte for byte: size lines, CRLFs, the last chunk.
  const bodyOf = (w: Buffer) => w.subarray(w.indexOf('\r\n\r\n') + 4)
  t.ok(bodyOf(wire).equals(bodyOf(wireRes)), 'the body on the wire is res.write\'s, byte for byte')
  t.ok(bodyOf(wire).toString('latin1').startsWith('1\r\n'), 'a lowercase hex size line without padding')
  t.equal(calls.resWrite, 3, 'res.write for the first and the two over the limit')
  t.equal(calls.socketWrite, SIZES.filter((n, i) => i > 0 && n <= DIRECT_WRITE_MAX).length, 'one socket write for each of the others')
})

t.test('a chunk written in the same tick as one res.write queued waits behind it (order kept)', async (t) => {
  const port = await serve(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write('first;') // queued in the response until the next tick (node:http corks)
    writeBody(res, Buffer.from('second;')) // the header is not out yet, the response holds bytes: behind them
    setImmediate(() => {
      writeBody(res, Buffer.from('third;')) // the plain state: straight on the socket
      res.cork()
      res.write('fourth;') // held by the response while its owner corks it
      writeBody(res, Buffer.from('fifth;')) // the response holds bytes: must go behind them
      res.uncork()
      res.socket!.cork() // corked on the socket only (as holdForEnd does): still in order
      writeBody(res, Buffer.from('sixth;'))
      res.end('seventh', () => {})
    })
  })
  const [body] = decodeChunked(await exchangeRaw(port, REQ('/'), ENDS(1)))
  t.equal(body.toString(), 'first;second;third;fourth;fifth;sixth;seventh')
})

t.test('pipelined requests: the second response does not write into the first one\'s stream', async (t) => {
  let second: (() => void) | null = null
  const port = await serve(t, (req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    if (req.url === '/one') {
      res.write('one-a;')
      // /two's handler runs while /one still streams (its socket is not /two's yet)
      setTimeout(() => { second?.(); setTimeout(() => { writeBody(res, Buffer.from('one-b;')); writeBody(res, Buffer.from('one-c;')); res.end() }, 30) }, 30)
    } else {
      second = () => {
        t.equal(res.socket, null, 'the second response has no socket yet')
        res.write('two-a;')
        writeBody(res, Buffer.from('two-b;'))
        setTimeout(() => { writeBody(res, Buffer.from('two-c;')); res.end() }, 100)
      }
    }
  })
  const bodies = decodeChunked(await exchangeRaw(port, REQ('/one') + REQ('/two'), ENDS(2)))
  t.same(bodies.map(String), ['one-a;one-b;one-c;', 'two-a;two-b;two-c;'], 'each response whole, one after the other')
})

t.test('a full socket: writeBody says so, and a ClientDrain wait ends on the socket\'s drain', async (t) => {
  let waited: Promise<string> | null = null
  let written = 0
  let refusedAt = -1
  const port = await serve(t, async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write('start;')
    await tick()
    const drain = new ClientDrain(res, new AbortController().signal, 10_000)
    const chunk = Buffer.alloc(4096, 97)
    // Written until the socket reports a full buffer (the client is not reading yet).
    for (let i = 0; i < 100_000; i++) {
      written += chunk.length
      if (!writeBody(res, chunk)) { refusedAt = written; break }
    }
    waited = drain.wait().then(() => 'drained', (e: Error) => `failed: ${e.message}`)
    const outcome = await waited
    drain.close()
    t.equal(res.socket!.listenerCount('drain'), 1, 'close() took its socket listener back (node:http\'s own is left)')
    res.end(outcome)
  })
  const socket = connect(port, '127.0.0.1')
  socket.pause()
  socket.write(REQ('/'))
  // Let the server fill the socket while nothing is read.
  const start = Date.now()
  while (refusedAt < 0 && Date.now() - start < 10_000) await new Promise((r) => setTimeout(r, 20))
  t.ok(refusedAt > 0, `writeBody refused after ${refusedAt} bytes`)
  const parts: Buffer[] = []
  socket.on('data', (d: Buffer) => parts.push(d))
  socket.resume()
  await new Promise<void>((resolve) => socket.on('data', () => { if (Buffer.concat(parts).toString('latin1').endsWith('\r\n0\r\n\r\n')) resolve() }))
  socket.destroy()
  const [body] = decodeChunked(Buffer.concat(parts))
  t.equal(body.length, 'start;'.length + written + 'drained'.length, 'every byte arrived')
  t.ok(body.toString('latin1').endsWith('drained'), 'the wait ended on the drain, not a stall or an error')
})

t.test('chunks written in one turn leave in one writev, and the socket is uncorked at the turn\'s end', async (t) => {
  const seen: Array<{ turn: string, writev: number, write: number, corkedAfter: number }> = []
  const port = await serve(t, async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write('head;')
    await tick()
    const socket = res.socket!
    const count = { writev: 0, write: 0 }
    const wv = socket._writev!
    const w = socket._write
    socket._writev = function (this: Socket, ...a: Parameters<NonNullable<Socket['_writev']>>) { count.writev++; return wv.apply(this, a) }
    socket._write = function (this: Socket, ...a: Parameters<Socket['_write']>) { count.write++; return w.apply(this, a) }
    const turn = async (name: string, n: number) => {
      count.writev = 0
      count.write = 0
      for (let i = 0; i < n; i++) writeBody(res, Buffer.from(`${name}${i};`))
      const corkedIn = socket.writableCorked
      await Promise.resolve() // the turn's end: the microtask checkpoint
      await tick()
      seen.push({ turn: `${name} (corked during it: ${corkedIn})`, writev: count.writev, write: count.write, corkedAfter: socket.writableCorked })
    }
    await turn('five', 5)
    await turn('one', 1)
    socket._writev = wv
    socket._write = w
    res.end()
  })
  const [body] = decodeChunked(await exchangeRaw(port, REQ('/'), ENDS(1)))
  t.equal(body.toString(), 'head;five0;five1;five2;five3;five4;one0;')
  t.same(seen, [
    { turn: 'five (corked during it: 1)', writev: 1, write: 0, corkedAfter: 0 },
    { turn: 'one (corked during it: 1)', writev: 0, write: 1, corkedAfter: 0 },
  ], 'five chunks in one writev, one chunk in one write; never left corked')
})
