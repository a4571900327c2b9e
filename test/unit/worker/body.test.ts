// readBody (worker/body.ts) on real HTTP requests (and, through body-now.test.ts, every test
// here again with the body read as runExchange reads it: bodyNotInHand's one microtask, then
// readBodyNow, else readBody): a node:http server on 127.0.0.1 hands each
// request to readBody with a real ExchangeScope on a real ledger; the client is a raw TCP
// socket, so the test decides exactly which bytes arrive and when. Two cases Node's own HTTP
// parser never lets through (a body longer than its Content-Length, a Content-Length that is
// not a number) are driven through a real IncomingMessage fed by hand.

import t, { type Test } from 'tap'
import { IncomingMessage } from 'node:http'
import { connect, Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { SluiceError } from '../../../src/errors.ts'
import type { Ledger } from '../../../src/ledger/ledger.ts'
import { assertIdle, makeLedger } from '../ledger/helpers.ts'
import { readBody, type BodyLimits } from '../../../worker/body.ts'

/** How every test here reads a body: readBody, or what body-now.test.ts sets. */
const read: typeof readBody = (globalThis as { sluiceBodyRead?: typeof readBody }).sluiceBodyRead ?? readBody
import { ExchangeScope } from '../../../worker/scope.ts'
import { startServer, type TestServer } from './helpers.ts'

const LIMITS: BodyLimits = { maxBodyBytes: 64, bodyIdleMs: 10_000, bodyReadMs: 20_000 }

interface Read {
  body: Buffer | null
  /** The ArrayBuffer's own size: the body is sized to it, ready to be transferred. */
  bufferBytes: number
  error: SluiceError | null
  /** scope.heldBytes when readBody settled. */
  held: number
}

interface Rig { ledger: Ledger; server: TestServer; next (): Promise<Read> }

/**
 * A server whose every request goes through readBody; the outcome is answered (200 with the
 * body's length, or the refusal's status) and reported to the test. The scope is discarded
 * after the answer, as an exchange's refusal would be. Every answer closes the connection.
 */
async function rig (t: Test, limits: Partial<BodyLimits> = {}, storageBytes = 1_000, signalFor?: (req: IncomingMessage) => AbortSignal, before?: (req: IncomingMessage) => Promise<void>): Promise<Rig> {
  const ledger = makeLedger({ storageBytes })
  const reads: Read[] = []
  const waiters: Array<(r: Read) => void> = []
  const server = await startServer((req, res) => {
    const scope = new ExchangeScope(ledger)
    const signal = signalFor?.(req) ?? new AbortController().signal
    void (before ? before(req) : Promise.resolve()).then(() => read(req, scope, { ...LIMITS, ...limits }, signal)).then(
      (u8) => ({ body: Buffer.from(u8.buffer, u8.byteOffset, u8.byteLength), bufferBytes: u8.buffer.byteLength, error: null, held: scope.heldBytes }),
      (err) => ({ body: null, bufferBytes: 0, error: SluiceError.from(err), held: scope.heldBytes }),
    ).then((r) => {
      if (r.error) res.writeHead(r.error.status, { 'content-type': 'application/json', connection: 'close' }).end(JSON.stringify(r.error.toBody()))
      else res.writeHead(200, { 'content-type': 'text/plain', connection: 'close' }).end(String(r.body!.length))
      scope.discard()
      const w = waiters.shift()
      if (w) w(r)
      else reads.push(r)
    })
  })
  t.teardown(() => server.close())
  return {
    ledger,
    server,
    next: () => {
      const r = reads.shift()
      return r ? Promise.resolve(r) : new Promise((resolve) => waiters.push(resolve))
    },
  }
}

/** A raw HTTP/1.1 client: the head, then body parts (a number pauses that many ms). */
interface Raw { socket: Socket; response: Promise<string> }
function raw (port: number, head: string): Raw {
  const socket = connect(port, '127.0.0.1')
  socket.write(head)
  const response = new Promise<string>((resolve) => {
    let text = ''
    socket.setEncoding('utf8')
    socket.on('data', (d: string) => { text += d })
    socket.on('close', () => resolve(text))
    socket.on('error', () => {})
  })
  return { socket, response }
}

function post (headers: Record<string, string | number>): string {
  return 'POST /x HTTP/1.1\r\nhost: unit\r\n' + Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('') + '\r\n'
}

function chunk (s: string): string { return `${Buffer.byteLength(s).toString(16)}\r\n${s}\r\n` }

/** 'hello world' sent in three parts under its Content-Length: the exact bytes, in one buffer of that size, all of it reserved. */
async function expectHelloWorld (t: Test, r: Rig): Promise<void> {
  const c = raw(r.server.port, post({ 'content-length': 11 }))
  for (const part of ['hel', 'lo ', 'world']) { await sleep(5); c.socket.write(part) }
  const read = await r.next()
  t.equal(read.error, null)
  t.equal(read.body?.toString(), 'hello world')
  t.equal(read.bufferBytes, 11)
  t.equal(read.held, 11, 'reserved: exactly what is held')
  t.match(await closeAfter(c), /^HTTP\/1\.1 200/)
  assertIdle(t, r.ledger)
}

t.test('content-length: the exact bytes, in one buffer of that size, all of it reserved', async (t) => {
  await expectHelloWorld(t, await rig(t))
})

t.test('content-length 0 reads nothing and holds nothing', async (t) => {
  const r = await rig(t)
  const c = raw(r.server.port, post({ 'content-length': 0 }))
  const read = await r.next()
  t.equal(read.body?.length, 0)
  t.equal(read.held, 0)
  await closeAfter(c)
  assertIdle(t, r.ledger)
})

t.test('bytes past the Content-Length are not the body (Node starts a new request with them)', async (t) => {
  const r = await rig(t)
  const c = raw(r.server.port, post({ 'content-length': 5 }) + 'helloEXTRA BYTES')
  const read = await r.next()
  t.equal(read.body?.toString(), 'hello')
  t.equal(read.held, 5)
  await closeAfter(c)
  assertIdle(t, r.ledger)
})

t.test('a body longer than its Content-Length is refused (a hand-fed IncomingMessage)', async (t) => {
  const ledger = makeLedger()
  const scope = new ExchangeScope(ledger)
  const req = new IncomingMessage(new Socket())
  req.headers = { 'content-length': '3' }
  req.push(Buffer.from('ab'))
  req.push(Buffer.from('cd'))
  req.push(null)
  const err = await read(req, scope, LIMITS, new AbortController().signal).then(() => null, (e) => SluiceError.from(e))
  t.equal(err?.code, 'invalid_request')
  t.match(err?.message, /longer than its Content-Length/)
  t.equal(scope.heldBytes, 3, 'the declared size is reserved until the scope is released')
  scope.discard()
  assertIdle(t, ledger)
})

t.test('a Content-Length that is not a number is invalid_request, nothing reserved', async (t) => {
  const ledger = makeLedger()
  for (const v of ['abc', '-1', '1.5', '99999999999999999999']) {
    const scope = new ExchangeScope(ledger)
    const req = new IncomingMessage(new Socket())
    req.headers = { 'content-length': v }
    const err = await read(req, scope, LIMITS, new AbortController().signal).then(() => null, (e) => SluiceError.from(e))
    t.equal(err?.code, 'invalid_request', v)
    t.equal(scope.heldBytes, 0)
    scope.discard()
  }
  assertIdle(t, ledger)
})

t.test('a body shorter than declared (the client went away) is client_closed', async (t) => {
  const r = await rig(t)
  const c = raw(r.server.port, post({ 'content-length': 10 }) + 'abcd')
  await sleep(20)
  c.socket.destroy()
  const read = await r.next()
  t.equal(read.error?.code, 'client_closed')
  t.equal(read.held, 10, 'the declared size was reserved up front')
  assertIdle(t, r.ledger)
})

t.test('a declared size over maxBodyBytes is refused before anything is read or reserved', async (t) => {
  const r = await rig(t)
  const c = raw(r.server.port, post({ 'content-length': 65 }))
  const read = await r.next()
  t.equal(read.error?.code, 'payload_too_large')
  t.same(read.error?.details, { limit: 64, declared: 65 })
  t.equal(read.held, 0)
  t.match(await closeAfter(c), /^HTTP\/1\.1 413/)
  assertIdle(t, r.ledger)
})

t.test('chunked: the chunks are assembled into one exact buffer; held = its size', async (t) => {
  const r = await rig(t)
  const parts = ['{"a":', '"chunked', ' body"', '}']
  const c = raw(r.server.port, post({ 'transfer-encoding': 'chunked' }))
  for (const p of parts) { await sleep(5); c.socket.write(chunk(p)) }
  c.socket.write('0\r\n\r\n')
  const read = await r.next()
  t.equal(read.body?.toString(), parts.join(''))
  t.equal(read.bufferBytes, parts.join('').length)
  t.equal(read.held, parts.join('').length, 'the chunks went back once copied: held = the body')
  await closeAfter(c)
  assertIdle(t, r.ledger)
})

t.test('chunked past maxBodyBytes is payload_too_large; only the chunks kept are reserved', async (t) => {
  const r = await rig(t)
  const c = raw(r.server.port, post({ 'transfer-encoding': 'chunked' }))
  c.socket.write(chunk('x'.repeat(40)))
  await sleep(10)
  c.socket.write(chunk('y'.repeat(30)))
  const read = await r.next()
  t.equal(read.error?.code, 'payload_too_large')
  t.same(read.error?.details, { limit: 64 })
  t.equal(read.held, 40, 'the chunk that crossed the cap was never reserved')
  t.match(await closeAfter(c), /^HTTP\/1\.1 413/)
  assertIdle(t, r.ledger)
})

t.test('the storage budget refuses a body that does not fit (declared and chunked)', async (t) => {
  const r = await rig(t, { maxBodyBytes: 10_000 }, 100)
  const whole = raw(r.server.port, post({ 'content-length': 101 }))
  const rw = await r.next()
  t.equal(rw.error?.code, 'storage_request_too_large', 'more than the whole budget')
  t.equal(rw.held, 0)
  await closeAfter(whole)
  const other = new ExchangeScope(r.ledger)
  other.reserve(50) // another exchange holds half of the budget
  const a = raw(r.server.port, post({ 'content-length': 60 }))
  const ra = await r.next()
  t.equal(ra.error?.code, 'storage_budget_exhausted')
  t.equal(ra.held, 0)
  await closeAfter(a)
  const b = raw(r.server.port, post({ 'transfer-encoding': 'chunked' }))
  b.socket.write(chunk('x'.repeat(30)))
  await sleep(10)
  b.socket.write(chunk('y'.repeat(30)))
  const rb = await r.next()
  t.equal(rb.error?.code, 'storage_budget_exhausted')
  t.equal(rb.held, 30)
  await closeAfter(b)
  other.discard()
  // Chunked needs room for the chunks and the copy at once: 2 x 60 does not fit in 100.
  const c = raw(r.server.port, post({ 'transfer-encoding': 'chunked' }) + chunk('z'.repeat(60)) + '0\r\n\r\n')
  const rc = await r.next()
  t.equal(rc.error?.code, 'storage_budget_exhausted')
  t.equal(rc.held, 60)
  await closeAfter(c)
  assertIdle(t, r.ledger)
})

t.test('no byte for bodyIdleMs: body_timeout (idle), and the refusal still reaches the client', async (t) => {
  const r = await rig(t, { bodyIdleMs: 80 })
  const c = raw(r.server.port, post({ 'content-length': 20 }) + 'abc')
  const read = await r.next()
  t.equal(read.error?.code, 'body_timeout')
  t.same(read.error?.details, { reason: 'idle', limitMs: 80, received: 3 })
  t.equal(read.held, 20)
  const answer = await c.response
  t.match(answer, /^HTTP\/1\.1 408/, 'the request was paused, not destroyed: the answer was written')
  t.match(answer, /"code":"body_timeout"/)
  assertIdle(t, r.ledger)
})

t.test('bytes that keep trickling past bodyReadMs: body_timeout (deadline)', async (t) => {
  const r = await rig(t, { bodyIdleMs: 5_000, bodyReadMs: 150 })
  const c = raw(r.server.port, post({ 'content-length': 64 }))
  let sent = 0
  const trickle = setInterval(() => { if (sent < 60 && !c.socket.destroyed) { c.socket.write('x'); sent++ } }, 15)
  const read = await r.next()
  clearInterval(trickle)
  t.equal(read.error?.code, 'body_timeout')
  t.equal(read.error?.details.reason, 'deadline')
  t.equal(read.error?.details.limitMs, 150)
  t.ok(typeof read.error?.details.received === 'number' && read.error.details.received < 64, 'the body was not complete')
  t.match(await c.response, /^HTTP\/1\.1 408/)
  assertIdle(t, r.ledger)
})

t.test('the signal: aborted before the read, or during it, is client_closed', async (t) => {
  let during!: (ac: AbortController) => void
  const duringRead = new Promise<AbortController>((resolve) => { during = resolve })
  const r = await rig(t, {}, 1_000, (req) => {
    const ac = new AbortController()
    if (req.headers['x-abort'] === 'before') ac.abort()
    else setImmediate(() => during(ac)) // once readBody is under way
    return ac.signal
  })
  const a = raw(r.server.port, post({ 'content-length': 5, 'x-abort': 'before' }) + 'hello')
  const ra = await r.next()
  t.equal(ra.error?.code, 'client_closed')
  await closeAfter(a)
  const b = raw(r.server.port, post({ 'content-length': 5, 'x-abort': 'during' }) + 'he')
  const ac = await duringRead
  ac.abort()
  const rb = await r.next()
  t.equal(rb.error?.code, 'client_closed')
  t.equal(rb.held, 5)
  await closeAfter(b)
  assertIdle(t, r.ledger)
})

/** The whole answer: every response here closes its connection. */
function closeAfter (c: Raw): Promise<string> { return c.response }

/** Until Node's parser has the whole request (the body lies in the request's buffer). */
async function untilComplete (req: IncomingMessage): Promise<void> {
  while (!req.complete) await sleep(2)
}

t.test('a body already complete when the read begins (a request that waited for its permit) is read out of the buffer at once', async (t) => {
  await expectHelloWorld(t, await rig(t, {}, 1_000, undefined, untilComplete))

  // chunked, several chunks buffered: assembled into one exact buffer
  const r2 = await rig(t, {}, 1_000, undefined, untilComplete)
  const c2 = raw(r2.server.port, post({ 'transfer-encoding': 'chunked' }))
  for (const part of ['ab', 'cde', 'f']) { await sleep(5); c2.socket.write(chunk(part)) }
  c2.socket.write('0\r\n\r\n')
  const read2 = await r2.next()
  t.equal(read2.body?.toString(), 'abcdef')
  t.equal(read2.bufferBytes, 6)
  t.equal(read2.held, 6)
  await closeAfter(c2)
  assertIdle(t, r2.ledger)

  // over the cap: still refused, and nothing held past the refusal
  const r3 = await rig(t, { maxBodyBytes: 4 }, 1_000, undefined, untilComplete)
  const c3 = raw(r3.server.port, post({ 'transfer-encoding': 'chunked' }) + chunk('abc') + chunk('def') + '0\r\n\r\n')
  const read3 = await r3.next()
  t.equal(read3.error?.code, 'payload_too_large')
  await closeAfter(c3)
  assertIdle(t, r3.ledger)
})

t.test('a complete request destroyed before its read (the caller went away) is client_closed, never a short body', async (t) => {
  const r = await rig(t, {}, 1_000, undefined, async (req) => { await untilComplete(req); req.destroy() })
  const c = raw(r.server.port, post({ 'transfer-encoding': 'chunked' }) + chunk('abc') + '0\r\n\r\n')
  const read = await r.next()
  t.equal(read.error?.code, 'client_closed')
  t.equal(read.held, 0)
  c.socket.destroy()
  assertIdle(t, r.ledger)
})

t.test('a request whose caller went away mid-body before the read began is client_closed at once, not after bodyIdleMs', async (t) => {
  const r = await rig(t, {}, 1_000, undefined, async (req) => { if (!req.destroyed) await new Promise((resolve) => req.once('close', resolve)) })
  const c = raw(r.server.port, post({ 'content-length': 11 }) + 'hel')
  await sleep(20)
  c.socket.destroy()
  const started = Date.now()
  const read = await r.next()
  t.equal(read.error?.code, 'client_closed')
  t.ok(Date.now() - started < LIMITS.bodyIdleMs / 2, 'settled at once')
  assertIdle(t, r.ledger)
})

t.test('a declared body that came with its headers is read in the request\'s own turn: no listener, no timer, no wait for the end of message', async (t) => {
  const ledger = makeLedger({ storageBytes: 1_000 })
  const seen: Array<{ body: string; endedAtRead: boolean; dataListeners: number; ended: Promise<void>; held: number }> = []
  const server = await startServer((req, res) => {
    const scope = new ExchangeScope(ledger)
    // Called synchronously in the 'request' event, as the exchange route does.
    void read(req, scope, LIMITS, new AbortController().signal).then((u8) => {
      const ended = new Promise<void>((resolve) => { if (req.readableEnded) resolve(); else req.once('end', () => resolve()) })
      seen.push({ body: Buffer.from(u8).toString(), endedAtRead: req.readableEnded, dataListeners: req.listenerCount('data'), ended, held: scope.heldBytes })
      scope.discard()
      res.writeHead(200, { connection: 'close' }).end('ok')
    })
  })
  t.teardown(() => server.close())
  const c = raw(server.port, post({ 'content-length': 11 }) + 'hello world')
  t.match(await c.response, /^HTTP\/1.1 200/)
  const s = seen[0]!
  t.equal(s.body, 'hello world')
  t.equal(s.held, 11, 'every byte reserved')
  // The pump would have resolved only at 'end' (readableEnded), with its 'data' listener gone.
  t.equal(s.endedAtRead, false, 'read before the parser ended the message')
  t.equal(s.dataListeners, 0)
  await s.ended // the request still ends (it was resumed), as after a pump
  assertIdle(t, ledger)
})
