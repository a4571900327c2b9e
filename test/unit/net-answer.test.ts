// src/net/answer.ts: a provider's answer through undici's dispatch(), its body an AnswerBody.
// A real node:http upstream and a real undici Pool; each case checks the body's contract (the
// events, in order, 'close' exactly once) and what the upstream saw of the connection.
import t, { type Test } from 'tap'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { EventEmitter, once } from 'node:events'
import type { Socket } from 'node:net'
import { Pool } from '../../src/net/pool.ts'
import { dispatchAnswer, type AnswerSource, type UpstreamAnswer } from '../../src/net/answer.ts'
import { pumpChunks, STOP } from '../../src/net/chunks.ts'

interface Upstream {
  pool: Pool
  /** Requests as they arrive, with their response. */
  held: Array<{ req: IncomingMessage; res: ServerResponse }>
  /** Sockets the upstream saw close. */
  closed: number
  arrived (n: number): Promise<void>
}

async function upstream (t: Test, answer?: (req: IncomingMessage, res: ServerResponse) => void): Promise<Upstream> {
  const u: Upstream = {
    pool: null as unknown as Pool,
    held: [],
    closed: 0,
    async arrived (n) { while (u.held.length < n) await new Promise((r) => setTimeout(r, 2)) },
  }
  const srv = createServer((req, res) => { if (answer) answer(req, res); else u.held.push({ req, res }) })
  srv.on('connection', (s: Socket) => s.on('close', () => { u.closed++ }))
  srv.listen(0, '127.0.0.1')
  await once(srv, 'listening')
  u.pool = new Pool(`http://127.0.0.1:${(srv.address() as { port: number }).port}`, { connections: 4 })
  t.teardown(async () => { await u.pool.destroy(); srv.closeAllConnections(); srv.close() })
  return u
}

const post = (u: Upstream, abort: AbortSignal | (EventEmitter & { reason: unknown }) | null = null, opts: { bodyTimeout?: number } = {}): Promise<UpstreamAnswer> =>
  dispatchAnswer(u.pool, { method: 'POST', path: '/v1/x', headers: { 'content-type': 'application/json' }, body: '{}', ...opts }, abort)

/** Records a body's events in order; `closes` counts 'close'. */
function watch (body: AnswerSource): { events: string[]; closes: () => number; closed: Promise<void> } {
  const events: string[] = []
  let closes = 0
  body.on('error', (e: Error) => events.push(`error:${(e as { code?: string }).code ?? e.message}`))
  const closed = new Promise<void>((resolve) => body.on('close', () => { closes++; events.push('close'); resolve() }))
  return { events, closes: () => closes, closed }
}

const tick = () => new Promise((r) => setImmediate(r))

/** An upstream, one request answered 200 with `first` written: the answer and the upstream's side. */
async function started (t: Test, first: string, opts: { bodyTimeout?: number } = {}): Promise<{ u: Upstream; req: IncomingMessage; res: ServerResponse; a: UpstreamAnswer }> {
  const u = await upstream(t)
  const p = post(u, null, opts)
  await u.arrived(1)
  const { req, res } = u.held[0]
  res.writeHead(200)
  res.write(first)
  return { u, req, res, a: await p }
}

t.test('chunks in order, then end, then close once; the connection is kept for the next request', async (t) => {
  const u = await upstream(t)
  const p = post(u)
  await u.arrived(1)
  const { res } = u.held[0]
  res.writeHead(200, { 'content-type': 'text/event-stream', 'x-a': 'b' })
  res.write('one ')
  const a = await p
  t.equal(a.statusCode, 200)
  t.equal(a.headers['x-a'], 'b', 'headers parsed')
  const w = watch(a.body)
  // Nothing flows before a consumer resumes: what came waits, undici paused.
  await tick()
  res.write('two ')
  await tick()
  t.notOk(a.body.readableEnded)
  const got: string[] = []
  const pumped = pumpChunks(a.body, (c) => { got.push(c.toString()) })
  res.end('three')
  await pumped
  t.same(got.join(''), 'one two three', 'every byte, in order')
  t.ok(a.body.readableEnded, 'ended')
  await w.closed
  await tick()
  t.same(w.events, ['close'], 'no error; close once')
  t.equal(w.closes(), 1)
  t.ok(a.body.closed && a.body.destroyed)
  // Reused: a second request on the same (single idle) connection, nothing closed.
  const p2 = post(u)
  await u.arrived(2)
  u.held[1].res.end('{}')
  const a2 = await p2
  await pumpChunks(a2.body, () => {})
  t.equal(u.closed, 0, 'no connection closed: the first was complete')
})

t.test('a consumer that waits: nothing is emitted meanwhile; then every chunk that came, in order', async (t) => {
  const u = await upstream(t)
  const p = post(u)
  await u.arrived(1)
  const { res } = u.held[0]
  res.writeHead(200)
  res.flushHeaders()
  const a = await p
  const got: string[] = []
  let release!: () => void
  let waiting = false
  const pumped = pumpChunks(a.body, (c) => {
    got.push(c.toString())
    if (got.length === 1) { waiting = true; return new Promise<void>((r) => { release = () => { waiting = false; r() } }) }
  })
  res.write('a')
  while (!waiting) await tick()
  for (const s of ['b', 'c', 'd']) { res.write(s); await new Promise((r) => setTimeout(r, 5)) }
  t.same(got, ['a'], 'nothing while the consumer waits')
  release()
  res.end('e')
  await pumped
  t.same(got.join(''), 'abcde', 'every byte after the wait, in order')
})

t.test('resume() never emits inside itself: what waited comes on a later tick', async (t) => {
  const { a } = await started(t, 'waited')
  await new Promise((r) => setTimeout(r, 20))
  const got: string[] = []
  a.body.on('data', (c: Buffer) => got.push(c.toString()))
  a.body.resume()
  t.same(got, [], 'nothing during resume()')
  await tick()
  t.same(got, ['waited'], 'then the chunk that waited')
  a.body.destroy()
})

t.test('destroy() before the end: the request is aborted (the upstream sees its connection close), close once', async (t) => {
  const { u, req, a } = await started(t, 'x')
  const w = watch(a.body)
  await pumpChunks(a.body, () => STOP)
  t.ok(a.body.destroyed, 'destroyed by STOP')
  await once(req.socket, 'close')
  t.equal(u.closed, 1, 'the upstream connection closed')
  await w.closed
  await tick()
  t.equal(w.closes(), 1, 'close once')
  t.same(w.events, ['close'], 'a destroy without an error emits none')
  a.body.destroy()
  await tick()
  t.equal(w.closes(), 1, 'a second destroy does nothing')
})

t.test('destroy() after the end, chunks still waiting: no abort, close once', async (t) => {
  const u = await upstream(t)
  const p = post(u)
  await u.arrived(1)
  u.held[0].res.writeHead(200)
  u.held[0].res.end('all of it')
  const a = await p
  await new Promise((r) => setTimeout(r, 20)) // the body has ended in undici, unread
  const w = watch(a.body)
  a.body.destroy()
  await w.closed
  await tick()
  t.equal(w.closes(), 1)
  t.equal(u.closed, 0, 'a complete answer keeps its connection')
})

t.test('an empty body: end comes on resume, then close', async (t) => {
  const u = await upstream(t)
  const p = post(u)
  await u.arrived(1)
  u.held[0].res.writeHead(204)
  u.held[0].res.end()
  const a = await p
  const w = watch(a.body)
  let chunks = 0
  await pumpChunks(a.body, () => { chunks++ })
  t.equal(chunks, 0)
  t.ok(a.body.readableEnded)
  await w.closed
  t.equal(w.closes(), 1)
})

t.test('a transport failure after the headers: error (to a listener), then close once; the pump rejects with it', async (t) => {
  const { req, a } = await started(t, 'part')
  const w = watch(a.body)
  const pumped = pumpChunks(a.body, () => {})
  await tick()
  req.socket.destroy()
  await t.rejects(pumped, /other side closed|socket/i, 'the pump rejects with the transport error')
  await w.closed
  await tick()
  t.equal(w.closes(), 1)
  t.equal(w.events.filter((e) => e.startsWith('error:')).length, 1, 'one error event')
  t.ok(a.body.errored, 'errored kept')
})

t.test('a failure before any consumer: errored, destroyed, closed; a pump started later rejects', async (t) => {
  const { req, a } = await started(t, 'part')
  const closed = new Promise((r) => a.body.once('close', r))
  req.socket.destroy()
  await closed
  t.ok(a.body.destroyed && a.body.closed && a.body.errored !== null)
  await t.rejects(pumpChunks(a.body, () => {}))
})

t.test('the abort source: before the headers the promise rejects with its reason; after them the body errs with it', async (t) => {
  const u = await upstream(t)
  // An EventEmitter source (worker/upstream.ts UpstreamAbort's shape).
  const early = Object.assign(new EventEmitter(), { reason: undefined as unknown })
  const p = post(u, early)
  await u.arrived(1)
  const why = new Error('the exchange aborted')
  early.reason = why
  early.emit('abort')
  await t.rejects(p, why, 'rejected with the reason')
  await once(u.held[0].req.socket, 'close')
  t.equal(early.listenerCount('abort'), 0, 'its listener removed')

  const ac = new AbortController()
  const p2 = post(u, ac.signal)
  await u.arrived(2)
  u.held[1].res.writeHead(200)
  u.held[1].res.write('x')
  const a = await p2
  const w = watch(a.body)
  const pumped = pumpChunks(a.body, () => {})
  await tick()
  const late = new Error('late abort')
  ac.abort(late)
  await t.rejects(pumped, late, 'the pump rejects with the reason')
  await w.closed
  await tick()
  t.equal(w.closes(), 1)
  await once(u.held[1].req.socket, 'close')

  // Already aborted: never answered.
  const done = new AbortController()
  done.abort(new Error('before'))
  await t.rejects(post(u, done.signal), /before/)
})

t.test('a body that goes idle past bodyTimeout fails with undici\'s timeout error', async (t) => {
  const { a } = await started(t, 'x', { bodyTimeout: 100 })
  await t.rejects(pumpChunks(a.body, () => {}), { code: 'UND_ERR_BODY_TIMEOUT' })
})

t.test('informational 1xx answers are skipped: the promise resolves at the final status', async (t) => {
  const u = await upstream(t, (_req, res) => {
    res.writeProcessing()
    setTimeout(() => { res.writeHead(201, { 'x-final': '1' }); res.end('done') }, 10)
  })
  const a = await post(u)
  t.equal(a.statusCode, 201)
  t.equal(a.headers['x-final'], '1')
  let s = ''
  await pumpChunks(a.body, (c) => { s += c.toString() })
  t.equal(s, 'done')
})
