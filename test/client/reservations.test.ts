// The SDK's local per-session count through session.fetch and prompt(), against a real HTTP
// server that counts what reaches it: a local refusal sends nothing, and every way a request
// can end releases its reservation exactly once.
//
// Exactly once, not at least once: each test keeps one other request of the same session open
// (the sentinel), so a path that released twice would show pending 0 instead of 1.
import t from 'tap'
import type { ServerResponse } from 'node:http'
import { PendingPromptLimitError, SluiceClient, SluiceRequestError, SluiceResponseError, type SluiceSession } from '../../src/client/index.ts'
import { fullGc } from '../helpers/platform.ts'
import { json, sleep, startServer, until, type TestServer } from './server.ts'

const KEY = 'sk-client-test'
const held: ServerResponse[] = []
let srv: TestServer

t.before(async () => {
  srv = await startServer(async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://x')
    switch (url.searchParams.get('mode')) {
      case 'hold': // head and one chunk now, the rest when the test says
        res.writeHead(200, { 'content-type': 'text/plain' })
        res.write('first chunk;')
        held.push(res)
        return
      case 'destroy': // the connection dies before any answer
        req.socket.destroy()
        return
      case 'cut': // part of the body, then the connection dies
        res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '100' })
        res.write('partial')
        await sleep(20)
        req.socket.destroy()
        return
      case 'slow-head':
        await sleep(2000)
        if (!res.destroyed) json(res, 200, { late: true })
        return
      case 'text':
        res.writeHead(200, { 'content-type': 'text/plain' })
        res.end('this is not JSON')
        return
      case 'refuse':
        json(res, 503, { code: 'prompt_queue_full', error: 'this session already has the maximum number of pending exchanges', sessionId: req.headers['x-session-id'], limit: 5, pendingCount: 5 }, { 'retry-after': '5' })
        return
      case 'nobody':
        res.writeHead(204)
        res.end()
        return
      case 'stream':
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        for (let i = 0; i < 3; i++) {
          res.write(`data: ${i}\n\n`)
          await sleep(5)
        }
        res.end()
        return
      default:
        json(res, 200, { ok: true, path: url.pathname, sessionId: req.headers['x-session-id'] ?? null })
    }
  })
})
t.teardown(async () => {
  for (const r of held.splice(0)) r.destroy()
  await srv.close()
})

const CHAT = '/v1/chat/completions'
function post (s: SluiceSession, mode: string, init: RequestInit = {}, path = CHAT): Promise<Response> {
  return s.fetch(`${srv.url}${path}?mode=${mode}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}', ...init })
}
function endHeld (): void {
  for (const r of held.splice(0)) r.end('end')
}

let n = 0
/** A fresh session with one open request (the sentinel) already counted. */
async function withSentinel (client: SluiceClient): Promise<{ s: SluiceSession, sentinel: Response }> {
  const s = client.session(`sess-${++n}`)
  const sentinel = await post(s, 'hold')
  return { s, sentinel }
}

t.test('a local refusal sends nothing, on every entry point', async (t) => {
  const client = new SluiceClient({ baseURL: srv.url, apiKey: KEY, maxPendingPromptsPerSession: 2 })
  const s = client.session('full')
  const a = await post(s, 'hold')
  const b = await post(s, 'hold')
  t.equal(s.pending, 2)
  const before = srv.requests.length

  const err = await post(s, 'json').catch((e: unknown) => e)
  t.ok(err instanceof PendingPromptLimitError, 'fetch refused locally')
  const e = err as PendingPromptLimitError
  t.match(e, { code: 'prompt_queue_full', local: true, sessionId: 'full', limit: 2, pendingCount: 2, name: 'PendingPromptLimitError' })
  await t.rejects(s.prompt('chat', { model: 'm', messages: [] }), PendingPromptLimitError, 'prompt refused locally')
  await t.rejects(s.submit('chat', { model: 'm', messages: [] }), PendingPromptLimitError, 'submit refused locally')
  await sleep(50)
  t.equal(srv.requests.length, before, 'not one request reached the server')
  t.equal(s.pending, 2, 'a refusal takes nothing')

  const other = client.session('other')
  t.same(await (await post(other, 'json')).json(), { ok: true, path: CHAT, sessionId: 'other' }, 'another session has its own count')
  t.equal(client.pending('other'), 0)

  endHeld()
  await a.text()
  await b.text()
  t.equal(s.pending, 0)
  t.equal(client.pending('full'), 0)
  await post(s, 'json').then((r) => r.text())
  t.equal(s.pending, 0, 'room again once the two were read')
})

t.test('every end path releases exactly once', async (t) => {
  const client = new SluiceClient({ baseURL: srv.url, apiKey: KEY, maxPendingPromptsPerSession: null })

  t.test('blocking completion: the body read to its end', async (t) => {
    const { s, sentinel } = await withSentinel(client)
    const res = await post(s, 'json')
    t.equal(s.pending, 2, 'held while the body is unread')
    t.match(await res.json(), { ok: true })
    t.equal(s.pending, 1)
    const streamed = await post(s, 'stream')
    const chunks: string[] = []
    for await (const c of streamed.body as unknown as AsyncIterable<Uint8Array>) {
      chunks.push(Buffer.from(c).toString())
      t.equal(s.pending, 2, 'held while the stream runs')
    }
    t.equal(chunks.join(''), 'data: 0\n\ndata: 1\n\ndata: 2\n\n', 'the bytes pass unchanged')
    t.equal(s.pending, 1)
    endHeld()
    await sentinel.text()
    t.equal(s.pending, 0)
  })

  t.test('the body cancelled', async (t) => {
    const { s, sentinel } = await withSentinel(client)
    const res = await post(s, 'hold')
    const closed = srv.requests.at(-1)!.closed
    await res.body!.cancel()
    t.equal(s.pending, 1)
    await closed
    t.pass('the server saw the connection close')
    await res.body!.cancel().catch(() => {})
    t.equal(s.pending, 1, 'a second cancel releases nothing')
    endHeld()
    await sentinel.text()
    t.equal(s.pending, 0)
  })

  t.test('fetch rejects: the server destroys the socket', async (t) => {
    const { s, sentinel } = await withSentinel(client)
    await t.rejects(post(s, 'destroy'), TypeError)
    t.equal(s.pending, 1)
    endHeld()
    await sentinel.text()
    t.equal(s.pending, 0)
  })

  t.test('the body errors: the connection dies mid-body', async (t) => {
    const { s, sentinel } = await withSentinel(client)
    const res = await post(s, 'cut')
    await t.rejects(res.text())
    t.equal(s.pending, 1)
    endHeld()
    await sentinel.text()
    t.equal(s.pending, 0)
  })

  t.test('abort before send: nothing counted, nothing sent', async (t) => {
    const { s, sentinel } = await withSentinel(client)
    const before = srv.requests.length
    const ac = new AbortController()
    ac.abort()
    await t.rejects(post(s, 'json', { signal: ac.signal }), { name: 'AbortError' })
    await t.rejects(s.prompt('chat', {}, { signal: ac.signal }), { name: 'AbortError' })
    t.equal(s.pending, 1)
    await sleep(50)
    t.equal(srv.requests.length, before, 'no request reached the server')
    endHeld()
    await sentinel.text()
    t.equal(s.pending, 0)
  })

  t.test('abort while waiting for the response head', async (t) => {
    const { s, sentinel } = await withSentinel(client)
    const ac = new AbortController()
    const p = post(s, 'slow-head', { signal: ac.signal })
    await srv.next('/v1/chat/completions?mode=slow-head')
    t.equal(s.pending, 2)
    ac.abort()
    t.equal(s.pending, 1, 'released at the abort itself')
    await t.rejects(p, { name: 'AbortError' })
    t.equal(s.pending, 1)
    endHeld()
    await sentinel.text()
    t.equal(s.pending, 0)
  })

  t.test('abort mid-stream releases at once, even if nobody reads again', async (t) => {
    const { s, sentinel } = await withSentinel(client)
    const ac = new AbortController()
    const res = await post(s, 'hold', { signal: ac.signal })
    const reader = res.body!.getReader()
    t.equal(Buffer.from((await reader.read()).value!).toString(), 'first chunk;')
    t.equal(s.pending, 2)
    ac.abort()
    t.equal(s.pending, 1)
    await t.rejects(reader.read(), { name: 'AbortError' })
    await reader.cancel().catch(() => {})
    t.equal(s.pending, 1, 'the later read error and cancel release nothing more')
    endHeld()
    await sentinel.text()
    t.equal(s.pending, 0)
  })

  t.test('a response without a body releases at once', async (t) => {
    const { s, sentinel } = await withSentinel(client)
    const res = await post(s, 'nobody')
    t.equal(res.status, 204)
    t.equal(res.body, null)
    t.equal(s.pending, 1)
    endHeld()
    await sentinel.text()
    t.equal(s.pending, 0)
  })

  t.test('prompt(): a 2xx that is not JSON is a parse failure', async (t) => {
    const { s, sentinel } = await withSentinel(client)
    t.match(await s.prompt('chat', {}), { ok: true }, 'the same session, answered in JSON (control)')
    const bad = new SluiceClient({ baseURL: `${srv.url}`, apiKey: KEY, maxPendingPromptsPerSession: null, fetch: (input, init) => fetch(String(input) + '?mode=text', init) })
    const bs = bad.session(s.id)
    await t.rejects(bs.prompt('chat', { model: 'm' }), SluiceResponseError)
    t.equal(bs.pending, 0)
    t.equal(s.pending, 1)
    endHeld()
    await sentinel.text()
    t.equal(s.pending, 0)
  })

  t.test('prompt(): a refusal is a SluiceRequestError and releases', async (t) => {
    const refusing = new SluiceClient({ baseURL: srv.url, apiKey: KEY, fetch: (input, init) => fetch(String(input) + '?mode=refuse', init) })
    const s = refusing.session('refused')
    const err = await s.prompt('messages', { model: 'm' }).catch((e: unknown) => e)
    t.ok(err instanceof SluiceRequestError)
    t.match(err, { code: 'prompt_queue_full', status: 503, retryAfterSeconds: 5, local: false, body: { code: 'prompt_queue_full', sessionId: 'refused', limit: 5, pendingCount: 5 } })
    t.equal(s.pending, 0)
  })

  t.test('a body nobody reads or cancels is released when it is collected', async (t) => {
    const { s, sentinel } = await withSentinel(client)
    await (async () => { await post(s, 'hold') })()
    t.equal(s.pending, 2)
    await until(() => { fullGc(); return s.pending === 1 }, 'the unread body collected')
    t.equal(s.pending, 1)
    endHeld()
    await sentinel.text()
    t.equal(s.pending, 0)
  })
})

t.test('prompt() returns the parsed answer of the route', async (t) => {
  const client = new SluiceClient({ baseURL: srv.url + '/', apiKey: KEY })
  const s = client.session('p')
  t.same(await s.prompt('chat', { model: 'm' }), { ok: true, path: '/v1/chat/completions', sessionId: 'p' })
  t.same(await s.prompt('responses', { model: 'm' }), { ok: true, path: '/v1/responses', sessionId: 'p' })
  t.same(await s.prompt('messages', { model: 'm' }), { ok: true, path: '/v1/messages', sessionId: 'p' })
  const last = srv.requests.at(-1)!
  t.equal(last.method, 'POST')
  t.equal(last.headers['content-type'], 'application/json')
  t.same(JSON.parse(last.body), { model: 'm' })
  await t.rejects(s.prompt('chat', { stream: true }), TypeError, 'a streaming body is refused before sending')
  await t.rejects(s.prompt('nope' as 'chat', {}), TypeError)
  t.equal(s.pending, 0)
})

t.test('headers', async (t) => {
  const client = new SluiceClient({ baseURL: srv.url, apiKey: KEY })
  const s = client.session('hdr')
  await (await post(s, 'json')).text()
  let h = srv.requests.at(-1)!.headers
  t.equal(h['x-session-id'], 'hdr')
  t.equal(h.authorization, `Bearer ${KEY}`, 'the client key when the request has none')

  await (await post(s, 'json', { headers: { 'x-api-key': 'sk-own', 'x-session-id': 'spoof' } })).text()
  h = srv.requests.at(-1)!.headers
  t.equal(h['x-api-key'], 'sk-own')
  t.equal(h.authorization, undefined, 'an x-api-key request gets no added authorization')
  t.equal(h['x-session-id'], 'hdr', 'the session id is the session\'s')

  await (await post(s, 'json', { headers: { authorization: 'Bearer sk-own' } })).text()
  t.equal(srv.requests.at(-1)!.headers.authorization, 'Bearer sk-own', 'an explicit authorization is kept')

  const keyless = new SluiceClient({ baseURL: srv.url }).session('nokey')
  await (await post(keyless, 'json')).text()
  t.equal(srv.requests.at(-1)!.headers.authorization, undefined)

  // A Request object as input: headers merged, counted, released.
  const res = await s.fetch(new Request(`${srv.url}${CHAT}?mode=hold`, { method: 'POST', body: '{}', headers: { 'x-custom': '1' } }))
  h = srv.requests.at(-1)!.headers
  t.equal(h['x-custom'], '1')
  t.equal(h['x-session-id'], 'hdr')
  t.equal(s.pending, 1, 'a Request input is counted')
  endHeld()
  await res.text()
  t.equal(s.pending, 0)
})

t.test('only the routes the gateway lanes are counted', async (t) => {
  const client = new SluiceClient({ baseURL: srv.url, apiKey: KEY, maxPendingPromptsPerSession: 2 })
  const s = client.session('routes')
  const counted = await post(s, 'hold', {}, '/v1/messages')
  const tokens = await post(s, 'hold', {}, '/v1/messages/count_tokens')
  t.equal(s.pending, 2, 'messages and count_tokens (an exchange on the gateway too) are counted')
  const models = await s.fetch(`${srv.url}/v1/models?mode=hold`)
  const getChat = await s.fetch(`${srv.url}${CHAT}?mode=hold`)
  t.equal(s.pending, 2, 'GET /v1/models and a GET of a prompt path take no reservation')
  t.equal(srv.requests.at(-1)!.headers['x-session-id'], 'routes', 'but carry the session header')
  endHeld()
  await Promise.all([counted.text(), models.text(), tokens.text(), getChat.text()])
  t.equal(s.pending, 0)
})

t.test('sessions: one object per id; ids that cannot be a header are refused', async (t) => {
  const client = new SluiceClient({ baseURL: srv.url })
  t.equal(client.session('x'), client.session('x'))
  t.not(client.session('x'), client.session('y'))
  t.equal(client.pending('never-used'), 0)
  for (const bad of ['', 'a\nb', 'a\rb', ' padded', 'nul\0', 'tab\t', 'x'.repeat(257)]) t.throws(() => client.session(bad), TypeError, JSON.stringify(bad).slice(0, 20))
  t.equal(client.session('x'.repeat(256)).id.length, 256, 'the gateway takes up to 256')
})
