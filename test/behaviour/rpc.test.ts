// JSON-RPC 2.0 at POST /rpc through the real gateway: capabilities (the same JSON as
// GET /v1/capabilities), session/prompt (blocking; the provider's JSON as the result),
// session/cancel. Every failure is HTTP 200 with one stable shape,
// { jsonrpc, id, error: { code, message, data: { errorKind, status, retryAfterSeconds, ...details } } },
// the id echoed whenever the request's id could be read. Session lanes are the same lanes as
// the HTTP transports': one count per (gateway key, session id).

import t from 'tap'
import { request } from 'undici'
import { KEY, chatBody, messagesBody, startRig, type Rig } from '../helpers/exchange.ts'
import { until, waitIdle } from '../helpers/gateway.ts'
import { blocking, dataOf, dropConnections, endsExchange, openEvents, postJson, rpc, submit, type Answer } from '../helpers/sse.ts'

const LIMIT = 3

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 2, limits: { maxPendingPromptsPerSession: LIMIT } }) })
// Client connections first: see dropConnections.
t.teardown(async () => { await dropConnections(); await rig.close() })

const TAG = 'x-test-tag'
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

function reached (tag: string): boolean {
  return rig.requests.some((r) => r.headers[TAG] === tag)
}

async function metric (name: string): Promise<number> {
  return (await rig.gw.metrics()).get(name) ?? NaN
}

/** A raw /rpc call (any body, any headers). */
function rawRpc (body: unknown, headers: Record<string, string> = { authorization: `Bearer ${KEY}` }): Promise<Answer> {
  return postJson(rig.url, '/rpc', body, headers)
}

type RpcError = { code: number; message: string; data: Record<string, unknown> }
function errorOf (a: Answer): RpcError {
  return a.json.error as RpcError
}

/** A blocking HTTP exchange in a session, left running; resolves with its whole answer. */
function blockingInSession (session: string, text: string, tag: string): Promise<Answer> {
  return postJson(rig.url, '/v1/chat/completions', chatBody(text), { authorization: `Bearer ${KEY}`, 'x-session-id': session, [TAG]: tag })
}

t.test('capabilities: the same JSON as GET /v1/capabilities', async (t) => {
  const r = await rpc(rig.url, KEY, 'capabilities', undefined, 'caps-1')
  t.equal(r.status, 200)
  t.same(Object.keys(r.json).sort(), ['id', 'jsonrpc', 'result'])
  t.equal(r.json.jsonrpc, '2.0')
  t.equal(r.json.id, 'caps-1', 'the id is echoed')
  const res = await request(`${rig.url}/v1/capabilities`, { headers: { authorization: `Bearer ${KEY}` } })
  const http = await res.body.json()
  t.strictSame(r.json.result, http, 'identical to GET /v1/capabilities')
  const result = r.json.result as { limits: Record<string, unknown>; features: string[] }
  t.equal(result.limits.maxPendingPromptsPerSession, LIMIT, 'the pending cap, as a number')
  for (const f of ['session-lanes', 'non-blocking-exchanges', 'session-events', 'exchange-cancel', 'json-rpc']) {
    t.ok(result.features.includes(f), `feature ${f}`)
  }
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('capabilities with the pending cap disabled: null', async (t) => {
  const open = await startRig({ workers: 1, limits: { maxPendingPromptsPerSession: 0 } })
  t.teardown(async () => { await dropConnections(); await open.close() })
  const r = await rpc(open.url, KEY, 'capabilities')
  t.equal((r.json.result as { limits: Record<string, unknown> }).limits.maxPendingPromptsPerSession, null)
})

t.test('session/prompt: the result carries what the blocking call returns; ids echoed', async (t) => {
  const cases: Array<[string | number, string, Record<string, unknown>]> = [
    [0, 'chat', chatBody('rpc prompt chat')],
    ['prompt-abc', 'messages', messagesBody('rpc prompt messages')],
    [4711, 'responses', { model: 'gpt-5.5', input: 'rpc prompt responses' }],
  ]
  for (const [id, route, body] of cases) {
    const r = await rpc(rig.url, KEY, 'session/prompt', { sessionId: 'rpc-prompt', route, body }, id)
    t.equal(r.status, 200, `${route}: HTTP 200`)
    t.same(Object.keys(r.json).sort(), ['id', 'jsonrpc', 'result'], `${route}: a result, no error (${r.text.slice(0, 200)})`)
    t.strictSame(r.json.id, id, `${route}: id ${JSON.stringify(id)} echoed`)
    const result = r.json.result as Record<string, unknown>
    t.same(Object.keys(result).sort(), ['body', 'exchangeId', 'sessionId', 'status', 'usage'], `${route}: result fields`)
    t.match(result.exchangeId, UUID, `${route}: exchangeId`)
    t.equal(result.sessionId, 'rpc-prompt')
    t.equal(result.status, 200)
    t.ok(result.usage !== null && typeof result.usage === 'object', `${route}: usage`)
    const direct = await blocking(rig.url, KEY, route, body)
    t.strictSame(result.body, JSON.parse(direct.text), `${route}: body equals the blocking JSON`)
  }
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

const ERRORS: Array<[string, () => Promise<Answer>, number, string, unknown, Record<string, unknown>]> = [
  // name, call, JSON-RPC code, errorKind, echoed id, data details (matched)
  ['bad JSON', () => rawRpc('{"jsonrpc":"2.0","id":1,'), -32700, 'invalid_json', null, { status: 400, retryAfterSeconds: null }],
  ['not an object', () => rawRpc('[1,2]'), -32600, 'invalid_request', null, { status: 400 }],
  ['jsonrpc 1.0', () => rawRpc({ jsonrpc: '1.0', id: 'v1', method: 'capabilities' }), -32600, 'invalid_request', 'v1', { field: 'jsonrpc' }],
  ['no method', () => rawRpc({ jsonrpc: '2.0', id: 2 }), -32600, 'invalid_request', 2, { field: 'method' }],
  ['params an array', () => rawRpc({ jsonrpc: '2.0', id: 3, method: 'session/prompt', params: [] }), -32602, 'invalid_request', 3, { field: 'params' }],
  ['unknown method', () => rpc(rig.url, KEY, 'session/explode', {}, 'm'), -32601, 'not_found', 'm', { status: 404 }],
  ['no sessionId', () => rpc(rig.url, KEY, 'session/prompt', { route: 'chat', body: chatBody('x') }, 5), -32602, 'invalid_request', 5, { field: 'params.sessionId' }],
  ['empty sessionId', () => rpc(rig.url, KEY, 'session/prompt', { sessionId: '', route: 'chat', body: chatBody('x') }, 6), -32602, 'invalid_request', 6, { field: 'params.sessionId' }],
  ['stream: true', () => rpc(rig.url, KEY, 'session/prompt', { sessionId: 's', route: 'chat', body: chatBody('x', { stream: true }) }, 7), -32602, 'invalid_request', 7, { field: 'params.body.stream' }],
  ['no route', () => rpc(rig.url, KEY, 'session/prompt', { sessionId: 's', body: chatBody('x') }, 8), -32602, 'invalid_request', 8, { field: 'params.route' }],
  ['body not an object', () => rpc(rig.url, KEY, 'session/prompt', { sessionId: 's', route: 'chat', body: 'hi' }, 9), -32602, 'invalid_request', 9, { field: 'params.body' }],
  ['cancel, bad exchangeId', () => rpc(rig.url, KEY, 'session/cancel', { sessionId: 's', exchangeId: '' }, 10), -32602, 'invalid_request', 10, { field: 'params.exchangeId' }],
  // The key is checked before the body is read (DESIGN.md: auth before the body), so the
  // request's id is not known yet: null, as for a parse error.
  ['no key', () => rpc(rig.url, null, 'capabilities', undefined, 11), -32002, 'unauthorized', null, { status: 401, retryAfterSeconds: null }],
  ['wrong key', () => rpc(rig.url, 'sk-wrong', 'session/prompt', { sessionId: 's', route: 'chat', body: chatBody('x') }, 12), -32002, 'unauthorized', null, { status: 401 }],
  ['unknown model', () => rpc(rig.url, KEY, 'session/prompt', { sessionId: 's', route: 'chat', body: chatBody('x', { model: 'llama-9' }) }, 13), -32002, 'model_not_found', 13, { status: 404 }],
]

t.test('each error: HTTP 200, the JSON-RPC code, the catalogue errorKind, the id echoed; nothing upstream', async (t) => {
  for (const [name, call, code, kind, id, details] of ERRORS) {
    const sent = rig.requests.length
    const r = await call()
    t.equal(r.status, 200, `${name}: HTTP 200`)
    t.same(Object.keys(r.json).sort(), ['error', 'id', 'jsonrpc'], `${name}: an error, no result (${r.text.slice(0, 200)})`)
    t.equal(r.json.jsonrpc, '2.0', `${name}: jsonrpc`)
    t.strictSame(r.json.id, id, `${name}: id ${JSON.stringify(id)}`)
    const e = errorOf(r)
    t.equal(e.code, code, `${name}: code ${code}`)
    t.equal(typeof e.message, 'string', `${name}: message`)
    t.equal(e.data.errorKind, kind, `${name}: errorKind ${kind}`)
    t.equal(typeof e.data.status, 'number', `${name}: data.status`)
    t.ok('retryAfterSeconds' in e.data, `${name}: data.retryAfterSeconds present`)
    t.match(e.data, details, `${name}: details`)
    t.notOk('rpcId' in e.data, `${name}: no internal fields`)
    t.equal(rig.requests.length, sent, `${name}: nothing reached the provider`)
  }
  await until(async () => await metric('sluice_session_pending') === 0, 'nothing counted in any session', 2000)
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('a provider failure: -32003 with the provider code, signed', async (t) => {
  const r = await rpc(rig.url, KEY, 'session/prompt', { sessionId: 'rpc-fault', route: 'chat', body: chatBody('#sim fault=status-503') }, 'f')
  const direct = await blocking(rig.url, KEY, 'chat', chatBody('#sim fault=status-503'))
  t.equal(r.status, 200)
  t.equal(r.json.id, 'f')
  const e = errorOf(r)
  t.equal(e.code, -32003)
  t.equal(e.data.errorKind, direct.json.code, `the blocking call's code (${String(direct.json.code)})`)
  t.equal(e.data.status, direct.status, 'the blocking call\'s status')
  t.equal(e.data.retryAfterSeconds, 5)
  t.equal(r.headers['retry-after'], '5', 'Retry-After still set')
  t.type(e.data.signature, 'string', 'signed like the blocking refusal')
  // The failure did not poison the session.
  const next = await rpc(rig.url, KEY, 'session/prompt', { sessionId: 'rpc-fault', route: 'chat', body: chatBody('after') })
  t.ok('result' in next.json, 'the session\'s next prompt runs')
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('a full session: -32001 prompt_queue_full with the seed-002 data; session/cancel ends blocking HTTP callers with 499', async (t) => {
  const session = 'rpc-full'
  // One after the other, so hold-0 runs and the others queue behind it in this order.
  const calls: Array<Promise<Answer>> = []
  for (let i = 0; i < LIMIT; i++) {
    calls.push(blockingInSession(session, `hold ${i}\n#sim ttft=20000`, `hold-${i}`))
    await until(async () => await metric('sluice_session_pending') === i + 1, `blocking exchange ${i + 1} pending in the session`)
  }
  await until(() => reached('hold-0'), 'the first one reached the provider')

  const sent = rig.requests.length
  const r = await rpc(rig.url, KEY, 'session/prompt', { sessionId: session, route: 'chat', body: chatBody('one too many') }, 'full')
  t.equal(r.status, 200, 'HTTP 200: JSON-RPC is the transport')
  t.equal(r.headers['retry-after'], '5', 'Retry-After 5')
  t.equal(r.json.id, 'full', 'id echoed')
  const e = errorOf(r)
  t.equal(e.code, -32001, 'local capacity')
  t.equal(typeof e.message, 'string')
  t.strictSame(e.data, { errorKind: 'prompt_queue_full', status: 503, retryAfterSeconds: 5, sessionId: session, limit: LIMIT, pendingCount: LIMIT }, 'exactly the seed-002 data')
  t.equal(rig.requests.length, sent, 'nothing reached the provider')
  t.equal(await metric('sluice_session_pending'), LIMIT, 'the refusal counted nothing')

  // Cancel the session's exchanges: the running one and the queued ones, all blocking HTTP.
  const c = await rpc(rig.url, KEY, 'session/cancel', { sessionId: session }, 'cancel')
  t.strictSame(c.json, { jsonrpc: '2.0', id: 'cancel', result: { sessionId: session, cancelled: LIMIT } })
  const answers = await Promise.all(calls)
  for (const [i, a] of answers.entries()) {
    t.equal(a.status, 499, `caller ${i}: 499`)
    t.match(a.json, { code: 'exchange_cancelled', error: String }, `caller ${i}: exchange_cancelled`)
  }
  t.same(await waitIdle(rig.gw), {}, 'idle')
  t.ok(reached('hold-0'), 'the running one had reached the provider')
  for (let i = 1; i < LIMIT; i++) t.notOk(reached(`hold-${i}`), `queued caller ${i} never reached the provider`)
  const again = await rpc(rig.url, KEY, 'session/cancel', { sessionId: session }, 'again')
  t.strictSame(again.json.result, { sessionId: session, cancelled: 0 }, 'nothing left to cancel')
  const unknown = await rpc(rig.url, KEY, 'session/cancel', { sessionId: session, exchangeId: 'no-such-exchange' })
  t.strictSame(unknown.json.result, { sessionId: session, cancelled: 0 }, 'an unknown exchange: 0')
})

t.test('session/cancel with an exchangeId cancels that one exchange only, across transports', async (t) => {
  const session = 'rpc-cancel-one'
  const es = await openEvents(rig.url, session, { key: KEY })
  const ahead = await submit(rig.url, KEY, session, 'chat', chatBody('ahead\n#sim ttft=20000'), { headers: { [TAG]: 'one-ahead' } })
  const target = await submit(rig.url, KEY, session, 'chat', chatBody('target'), { headers: { [TAG]: 'one-target' } })
  await until(async () => await metric('sluice_session_queued') === 1, 'the target queued')
  const http = blockingInSession(session, 'blocking, behind both', 'one-http')
  await until(async () => await metric('sluice_session_queued') === 2, 'a blocking HTTP exchange queued behind it')

  const tid = target.json.exchangeId as string
  const c = await rpc(rig.url, KEY, 'session/cancel', { sessionId: session, exchangeId: tid }, 'one')
  t.strictSame(c.json, { jsonrpc: '2.0', id: 'one', result: { sessionId: session, cancelled: 1 } })
  const err = (await es.until(endsExchange(tid))).pop()!
  t.equal(err.event, 'turn_error')
  t.match(dataOf(err), { exchangeId: tid, code: 'exchange_cancelled', status: 499 })
  t.equal(await metric('sluice_session_pending'), 2, 'the others are still pending')

  const aid = ahead.json.exchangeId as string
  t.equal(((await rpc(rig.url, KEY, 'session/cancel', { sessionId: session, exchangeId: aid })).json.result as Record<string, unknown>).cancelled, 1)
  await es.until(endsExchange(aid))
  es.close()
  const h = await http
  t.equal(h.status, 200, 'the blocking HTTP exchange behind them runs')
  t.same(await waitIdle(rig.gw), {}, 'idle')
  t.notOk(reached('one-target'), 'the cancelled exchange never reached the provider')
  t.ok(reached('one-http'), 'the blocking one did')
})

t.test('a prompt cancelled by session/cancel: -32002 exchange_cancelled; the lane is shared with HTTP', async (t) => {
  const session = 'rpc-shared'
  // A blocking HTTP exchange runs in the session; a JSON-RPC prompt queues behind it.
  const http = blockingInSession(session, 'http first\n#sim ttft=20000', 'shared-http')
  await until(async () => await metric('sluice_session_active') === 1, 'the HTTP exchange active')
  const prompt = rpc(rig.url, KEY, 'session/prompt', { sessionId: session, route: 'chat', body: chatBody('rpc behind') }, 'behind')
  await until(async () => await metric('sluice_session_queued') === 1, 'the prompt queued behind it in the same lane')
  const c = await rpc(rig.url, KEY, 'session/cancel', { sessionId: session })
  t.equal((c.json.result as Record<string, unknown>).cancelled, 2)
  const [h, p] = await Promise.all([http, prompt])
  t.equal(h.status, 499)
  t.equal(h.json.code, 'exchange_cancelled')
  t.equal(p.status, 200)
  t.equal(p.json.id, 'behind')
  const e = errorOf(p)
  t.equal(e.code, -32002, 'a caller-side code')
  t.match(e.data, { errorKind: 'exchange_cancelled', status: 499 })
  t.same(await waitIdle(rig.gw), {}, 'idle')
})
