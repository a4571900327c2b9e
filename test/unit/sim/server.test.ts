// Routes, keys, the model list, events and counters, and the CLI entry.
import t from 'tap'
import OpenAI from 'openai'
import Anthropic from '@anthropic-ai/sdk'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { nextExchange, rawRequest, startSim, type SimEndEvent, type SimFirstEvent, type SimRequestEvent } from '../../../src/sim/index.ts'

const KEY = 'sk-sim-secret'
const sim = await startSim({ apiKey: KEY })
t.teardown(() => sim.close())

const chatBody = { model: 'gpt-4o-mini', messages: [{ role: 'user' as const, content: '#sim tokens=2' }] }
const messagesBody = { model: 'claude-opus-5-5', max_tokens: 10, messages: [{ role: 'user' as const, content: '#sim tokens=2' }] }

t.test('a missing or wrong key gets 401 in the route protocol error format', async t => {
  const chat = await rawRequest(sim.url, { path: '/v1/chat/completions', body: chatBody })
  t.equal(chat.status, 401)
  t.equal(JSON.parse(chat.body.toString()).error.code, 'invalid_api_key')
  const msgs = await rawRequest(sim.url, { path: '/v1/messages?beta=true', body: messagesBody, headers: { 'x-api-key': 'sk-wrong' } })
  t.equal(msgs.status, 401)
  const err = JSON.parse(msgs.body.toString())
  t.equal(err.type, 'error')
  t.equal(err.error.type, 'authentication_error')
  const models = await rawRequest(sim.url, { path: '/v1/models', headers: { authorization: 'Bearer nope' } })
  t.equal(models.status, 401)
  const e = await new OpenAI({ baseURL: sim.url + '/v1', apiKey: 'sk-wrong', maxRetries: 0 }).chat.completions.create(chatBody).catch((x: unknown) => x)
  t.ok(e instanceof OpenAI.AuthenticationError, 'openai SDK raises AuthenticationError')
})

t.test('the right key works as Bearer or x-api-key, and the request event records it', async t => {
  const seen: SimRequestEvent[] = []
  const onRequest = (e: SimRequestEvent): void => {
    seen.push(e)
  }
  sim.events.on('request', onRequest)
  t.teardown(() => sim.events.off('request', onRequest))
  const a = await new OpenAI({ baseURL: sim.url + '/v1', apiKey: KEY, maxRetries: 0 }).chat.completions.create(chatBody)
  t.equal(a.object, 'chat.completion')
  const b = await new Anthropic({ baseURL: sim.url, apiKey: KEY, maxRetries: 0 }).messages.create(messagesBody)
  t.equal(b.type, 'message')
  // Claude Code's way: x-api-key (the 1.14 SDK itself sends even apiKey as a Bearer token).
  const c = await rawRequest(sim.url, { path: '/v1/messages?beta=true', body: messagesBody, headers: { 'x-api-key': KEY, 'anthropic-version': '2023-06-01' } })
  t.equal(c.status, 200)
  t.same(seen.map(e => [e.method, e.path, e.protocol, e.endpoint, e.apiKey]), [
    ['POST', '/v1/chat/completions', 'openai-chat', 'chat.completions', KEY],
    ['POST', '/v1/messages', 'anthropic', 'messages', KEY],
    ['POST', '/v1/messages', 'anthropic', 'messages', KEY],
  ])
  t.equal(seen[1].headers.authorization, `Bearer ${KEY}`)
  t.equal(seen[2].headers['x-api-key'], KEY)
  t.ok(seen.every((e, i) => i === 0 || e.id > seen[i - 1].id), 'ids increase')
})

t.test('GET /v1/models in OpenAI list shape, accepted by both SDKs', async t => {
  const r = await rawRequest(sim.url, { path: '/v1/models', headers: { 'x-api-key': KEY } })
  t.equal(r.status, 200)
  const list = JSON.parse(r.body.toString())
  t.equal(list.object, 'list')
  t.ok(list.data.length > 0)
  for (const m of list.data) {
    t.equal(m.object, 'model')
    t.type(m.id, 'string')
    t.type(m.created, 'number')
    t.type(m.owned_by, 'string')
  }
  const oa: string[] = []
  for await (const m of new OpenAI({ baseURL: sim.url + '/v1', apiKey: KEY }).models.list()) oa.push(m.id)
  t.same(oa, list.data.map((m: { id: string }) => m.id))
  const one = await rawRequest(sim.url, { path: `/v1/models/${oa[0]}`, headers: { 'x-api-key': KEY } })
  t.equal(JSON.parse(one.body.toString()).id, oa[0])
  const missing = await rawRequest(sim.url, { path: '/v1/models/no-such-model', headers: { 'x-api-key': KEY } })
  t.equal(missing.status, 404)
  const custom = await startSim({ models: ['alpha', 'beta'] })
  t.teardown(() => custom.close())
  const ids: string[] = []
  for await (const m of new Anthropic({ baseURL: custom.url, apiKey: 'k' }).models.list()) ids.push(m.id)
  t.same(ids, ['alpha', 'beta'])
})

t.test('unknown route 404, wrong method 405, bad JSON 400, oversized body 413', async t => {
  const h = { 'x-api-key': KEY }
  t.equal((await rawRequest(sim.url, { path: '/v1/engines', headers: h })).status, 404)
  const anth404 = await rawRequest(sim.url, { path: '/v2/messages', headers: { ...h, 'anthropic-version': '2023-06-01' } })
  t.equal(JSON.parse(anth404.body.toString()).error.type, 'not_found_error', 'anthropic callers get anthropic errors')
  const get = await rawRequest(sim.url, { method: 'GET', path: '/v1/chat/completions', headers: h })
  t.equal(get.status, 405)
  t.equal(get.headers.allow, 'POST')
  t.equal((await rawRequest(sim.url, { path: '/v1/responses', body: '{"model":', headers: h })).status, 400)
  t.equal((await rawRequest(sim.url, { path: '/v1/messages', body: '[1,2]', headers: h })).status, 400)
  const small = await startSim({ maxBodyBytes: 1000 })
  t.teardown(() => small.close())
  const big = await rawRequest(small.url, { path: '/v1/messages', body: { messages: [{ role: 'user', content: 'x'.repeat(5000) }] } })
  t.equal(big.status, 413)
})

t.test('count_tokens grows with the input', async t => {
  const count = async (text: string): Promise<number> => {
    const r = await rawRequest(sim.url, { path: '/v1/messages/count_tokens?beta=true', body: { model: 'm', messages: [{ role: 'user', content: text }] }, headers: { 'x-api-key': KEY } })
    t.equal(r.status, 200)
    return JSON.parse(r.body.toString()).input_tokens
  }
  const short = await count('hi')
  const long = await count('hi '.repeat(400))
  t.ok(short > 0 && long > short + 200, `${short} < ${long}`)
})

t.test('events and counters: one request and one end per exchange', async t => {
  const other = await startSim()
  t.teardown(() => other.close())
  const ends: SimEndEvent[] = []
  other.events.on('end', e => ends.push(e))
  const body = (text: string) => ({ model: 'm', stream: true, max_tokens: 5, messages: [{ role: 'user', content: text }] })
  const ex = nextExchange(other)
  await rawRequest(other.url, { path: '/v1/messages', body: body('#sim tokens=4') })
  const end = await ex.end
  t.equal(end.outcome, 'completed')
  t.equal(end.status, 200)
  t.equal(end.eventsSent, 10, 'message_start, block start, ping, 4 deltas, block stop, message_delta, message_stop')
  t.ok(end.durationMs >= 0)
  await rawRequest(other.url, { path: '/v1/messages', body: body('#sim fault=status-503') })
  const slow = nextExchange(other)
  const pending = rawRequest(other.url, { path: '/v1/messages', body: body('#sim ttft=2000'), abortAfterMs: 150 })
  await slow.request
  t.equal(other.stats().active, 1, 'active while waiting for ttft')
  await pending
  await slow.end
  t.same(other.stats(), { requests: 3, active: 0, completed: 1, clientClosed: 1, faults: 1 })
  t.same(ends.map(e => e.outcome), ['completed', 'fault', 'client-closed'])
})

t.test('close() ends stalled streams and frees the port', async t => {
  const s = await startSim()
  const ex = nextExchange(s)
  const stalled = rawRequest(s.url, { path: '/v1/chat/completions', body: { model: 'm', stream: true, messages: [{ role: 'user', content: '#sim fault=stall at=1' }] } })
  await ex.request
  await new Promise(r => setTimeout(r, 50))
  await s.close()
  const r = await stalled
  t.ok(r.error, 'the stalled client sees the connection end')
  t.equal((await ex.end).outcome, 'client-closed')
  const again = await rawRequest(s.url, { path: '/v1/models' })
  t.equal(again.error?.code, 'ECONNREFUSED')
})

t.test('CLI: prints its URL, serves, exits 0 on SIGTERM', async t => {
  const cli = new URL('../../../src/sim/cli.ts', import.meta.url).href
  const child = spawn(process.execPath, ['--input-type=module', '-e', `import { simMain } from '${cli}'; await simMain(['--port', '0', '--host', '127.0.0.1'])`], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL')
  })
  let out = ''
  child.stdout.setEncoding('utf8')
  const line = await new Promise<string>(resolve => {
    child.stdout.on('data', (d: string) => {
      out += d
      if (out.includes('\n')) resolve(out.split('\n')[0])
    })
  })
  const m = /^sluice sim listening on (http:\/\/127\.0\.0\.1:(\d+))$/.exec(line)
  t.ok(m, line)
  const r = await rawRequest(m![1], { path: '/v1/models' })
  t.equal(r.status, 200)
  child.kill('SIGTERM')
  const [code, signal] = await once(child, 'exit')
  t.equal(code, 0)
  t.equal(signal, null)
})

t.test('CLI arguments', async t => {
  const { parseSimArgs } = await import('../../../src/sim/index.ts')
  t.same(parseSimArgs([]), { host: '127.0.0.1', port: 8089, apiKey: undefined })
  t.same(parseSimArgs(['--port=9000', '--host', '0.0.0.0', '--api-key', 'k']), { host: '0.0.0.0', port: 9000, apiKey: 'k' })
  t.throws(() => parseSimArgs(['--port', 'x']))
  t.throws(() => parseSimArgs(['--port']))
  t.throws(() => parseSimArgs(['--verbose']))
})

t.test('a streamed answer reports its first write once, between the request and the end; a JSON answer none', async t => {
  const order: string[] = []
  const onRequest = (e: SimRequestEvent): void => { order.push(`request ${e.id}`) }
  const onFirst = (e: SimFirstEvent): void => { order.push(`first ${e.id}`) }
  const onEnd = (e: SimEndEvent): void => { order.push(`end ${e.id}`) }
  sim.events.on('request', onRequest)
  sim.events.on('first', onFirst)
  sim.events.on('end', onEnd)
  t.teardown(() => { sim.events.off('request', onRequest); sim.events.off('first', onFirst); sim.events.off('end', onEnd) })
  const streamed = await rawRequest(sim.url, { path: '/v1/chat/completions', body: { ...chatBody, stream: true, messages: [{ role: 'user', content: '#sim tokens=3 interval=5' }] }, headers: { authorization: `Bearer ${KEY}` } })
  t.equal(streamed.status, 200)
  t.match(streamed.body.toString(), /data: \[DONE\]/)
  const json = await rawRequest(sim.url, { path: '/v1/chat/completions', body: chatBody, headers: { authorization: `Bearer ${KEY}` } })
  t.equal(json.status, 200)
  await new Promise((resolve) => setTimeout(resolve, 20)) // 'end' follows the close
  const ids = [...new Set(order.map((o) => Number(o.split(' ')[1])))]
  t.equal(ids.length, 2, 'two exchanges')
  const [s, j] = ids
  t.same(order.filter((o) => o.endsWith(` ${s}`)), [`request ${s}`, `first ${s}`, `end ${s}`], 'the stream: request, its first write once, end')
  t.same(order.filter((o) => o.endsWith(` ${j}`)), [`request ${j}`, `end ${j}`], 'the JSON answer: no first-write event')
})
