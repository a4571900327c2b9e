// prepare() with an envelope: non-blocking `{ route, body }` and JSON-RPC requests. The
// exchange body comes out re-serialised (aliases applied), the route and the call's scalars
// come out beside it, and every malformed envelope is a catalogue refusal naming the field
// (with the JSON-RPC id when one was read, so the error can echo it).

import t from 'tap'
import { prepare, type PrepareTask } from '../../../src/json/prepare.ts'
import { frameText as readFrame } from '../../../src/sse/fields.ts'

const enc = new TextEncoder()
const dec = new TextDecoder()
const LIMITS = { maxDepth: 128, maxNodes: 1_000_000 }
const task = (value: unknown, envelope: 'exchange' | 'rpc', over: Partial<PrepareTask> = {}): PrepareTask =>
  ({ body: enc.encode(typeof value === 'string' ? value : JSON.stringify(value)), route: 'chat', envelope, limits: LIMITS, aliases: {}, ...over })

t.test('exchange envelope: route, prepared body, alias applied', async (t) => {
  const r = prepare(task({ route: 'responses', body: { model: 'fast', input: 'hi', stream: true } }, 'exchange', { aliases: { fast: 'gpt-5.5' } }))
  if (!r.ok) { t.fail(JSON.stringify(r)); return }
  t.same(r.envelope, { route: 'responses' })
  t.equal(r.model, 'gpt-5.5')
  t.equal(r.requestedModel, 'fast')
  t.equal(r.rewritten, true)
  t.equal(r.stream, true)
  t.same(JSON.parse(dec.decode(r.body)), { model: 'gpt-5.5', input: 'hi', stream: true })
})

t.test('exchange envelope refusals name the field', async (t) => {
  const cases: Array<[unknown, string, string]> = [
    ['{"route":', 'invalid_json', ''],
    [[1, 2], 'invalid_request', 'body'],
    [{ body: { model: 'm' } }, 'invalid_request', 'route'],
    [{ route: 'images', body: { model: 'm' } }, 'invalid_request', 'route'],
    [{ route: 'chat', body: 'text' }, 'invalid_request', 'body'],
    [{ route: 'chat', body: { messages: [] } }, 'invalid_request', 'body.model'],
    [{ route: 'chat', body: { model: 'm', stream: 'yes' } }, 'invalid_request', 'body.stream'],
  ]
  for (const [value, code, field] of cases) {
    const r = prepare(task(value, 'exchange'))
    if (r.ok) { t.fail(`accepted ${JSON.stringify(value)}`); continue }
    t.equal(r.error.code, code, JSON.stringify(value))
    if (field) t.equal(r.error.details.field, field, `field of ${JSON.stringify(value)}`)
    t.notOk('rpcId' in r.error.details, 'no rpc id outside JSON-RPC')
  }
  const deep = prepare(task({ route: 'chat', body: { model: 'm', x: [[[[[[1]]]]]] } }, 'exchange', { limits: { maxDepth: 4, maxNodes: 100 } }))
  t.equal(deep.ok ? 'ok' : deep.error.code, 'json_too_deep', 'the bounds apply to the whole envelope')
})

t.test('JSON-RPC: calls without an exchange, session/prompt, and refusals carrying the id', async (t) => {
  const caps = prepare(task({ jsonrpc: '2.0', id: 1, method: 'capabilities' }, 'rpc'))
  t.same(caps.ok && caps.envelope, { rpc: { id: 1, method: 'capabilities', params: {} } })
  const cancel = prepare(task({ jsonrpc: '2.0', id: 'c', method: 'session/cancel', params: { sessionId: 's', exchangeId: 'e', nested: { x: 1 } } }, 'rpc'))
  t.same(cancel.ok && cancel.envelope, { rpc: { id: 'c', method: 'session/cancel', params: { sessionId: 's', exchangeId: 'e' } } }, 'only scalar params travel')
  const prompt = prepare(task({ jsonrpc: '2.0', id: 2, method: 'session/prompt', params: { sessionId: 's', route: 'messages', body: { model: 'claude-x', max_tokens: 5, messages: [] } } }, 'rpc'))
  if (!prompt.ok) { t.fail(JSON.stringify(prompt)); return }
  t.same(prompt.envelope, { route: 'messages', rpc: { id: 2, method: 'session/prompt', params: { sessionId: 's', route: 'messages' } } })
  t.equal(prompt.model, 'claude-x')
  const refusals: Array<[unknown, string, string, unknown]> = [
    [{ jsonrpc: '1.0', id: 3, method: 'capabilities' }, 'invalid_request', 'jsonrpc', 3],
    [{ jsonrpc: '2.0', id: 4 }, 'invalid_request', 'method', 4],
    [{ jsonrpc: '2.0', id: 5, method: 'x', params: [1] }, 'invalid_request', 'params', 5],
    [{ jsonrpc: '2.0', id: { no: 1 }, method: 'x' }, 'invalid_request', 'id', undefined],
    [{ jsonrpc: '2.0', id: 6, method: 'session/prompt', params: { sessionId: 's', body: { model: 'm' } } }, 'invalid_request', 'params.route', 6],
    [{ jsonrpc: '2.0', id: 7, method: 'session/prompt', params: { sessionId: 's', route: 'chat', body: {} } }, 'invalid_request', 'params.body.model', 7],
  ]
  for (const [value, code, field, id] of refusals) {
    const r = prepare(task(value, 'rpc'))
    if (r.ok) { t.fail(`accepted ${JSON.stringify(value)}`); continue }
    t.equal(r.error.code, code)
    t.equal(r.error.details.field, field, JSON.stringify(value))
    t.equal(r.error.details.rpcId, id, 'the id, when one was read')
  }
})

t.test('readFrame: event name and joined data lines; comment frames are nothing', async (t) => {
  t.same(readFrame(Buffer.from('event: message_start\ndata: {"a":1}')), { event: 'message_start', data: '{"a":1}' })
  t.same(readFrame(Buffer.from('data: one\r\ndata: two')), { event: null, data: 'one\ntwo' })
  t.same(readFrame(Buffer.from('data:no-space')), { event: null, data: 'no-space' })
  t.equal(readFrame(Buffer.from(': ping')), null)
})
