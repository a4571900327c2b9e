// Same-protocol exchanges through sluice are exact: the official SDKs get the same results,
// and the raw bytes equal the provider's, as when they talk to the provider directly.

import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import OpenAI from 'openai'
import Anthropic from '@anthropic-ai/sdk'
import { request } from 'undici'
import { KEY, PROVIDER_KEY, chatBody, messagesBody, responsesBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 2 }) })
t.teardown(() => rig.close())

async function raw (base: string, key: string, path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await request(base + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  })
  return { status: res.statusCode, headers: res.headers, body: Buffer.from(await res.body.arrayBuffer()) }
}

const cases: Array<[string, string, Record<string, unknown>]> = []
for (const stream of [true, false]) {
  for (const d of ['#sim tokens=12', '#sim tokens=5 tools=2', '#sim tokens=3 tools=3 parallel', '#sim tokens=4 thinking=2 tools=1', '#sim tokens=200 bytes=40']) {
    cases.push(['/v1/chat/completions', `chat ${stream ? 'stream' : 'json'} ${d}`, chatBody(`hello\n${d}`, { stream, stream_options: stream ? { include_usage: true } : undefined, tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } } }] })])
    cases.push(['/v1/responses', `responses ${stream ? 'stream' : 'json'} ${d}`, responsesBody(`hello\n${d}`, { stream, tools: [{ type: 'function', name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } }] })])
    cases.push(['/v1/messages', `messages ${stream ? 'stream' : 'json'} ${d}`, messagesBody(`hello\n${d}`, { stream, tools: [{ name: 'lookup', input_schema: { type: 'object', properties: { q: { type: 'string' } } } }] })])
  }
}

t.test('raw bytes through sluice equal the provider\'s, every protocol, streaming and not', async (t) => {
  for (const [path, name, body] of cases) {
    const via = await raw(rig.url, KEY, path, body)
    const direct = await raw(rig.sim.url, PROVIDER_KEY, path, body)
    t.equal(via.status, 200, `${name}: status`)
    t.ok(via.body.length > 100, `${name}: a real body (${via.body.length} bytes)`)
    t.ok(via.body.equals(direct.body), `${name}: identical bytes`)
    t.equal(via.headers['content-type'], direct.headers['content-type'], `${name}: content-type`)
    t.match(String(via.headers['x-sluice-exchange-id']), /^[0-9a-f-]{36}$/, `${name}: exchange id`)
  }
})

t.test('captured client requests (Codex CLI, Claude Code, SDKs) pass through exactly', async (t) => {
  const dir = new URL('../../ops/load/fixtures/', import.meta.url)
  const files = readdirSync(dir).filter((f) => f.endsWith('.request.json'))
  t.ok(files.length >= 12, `${files.length} captured requests`)
  for (const f of files) {
    const { url, body } = JSON.parse(readFileSync(new URL(f, dir), 'utf8')) as { url: string; body: unknown }
    const path = url.split('?')[0]
    const via = await raw(rig.url, KEY, url, body, { 'x-api-key': KEY })
    const direct = await raw(rig.sim.url, PROVIDER_KEY, path, body)
    t.equal(via.status, 200, `${f}: ${via.status} ${via.status !== 200 ? via.body.toString().slice(0, 200) : ''}`)
    t.ok(via.body.equals(direct.body), `${f}: identical bytes`)
  }
})

t.test('the official openai SDK gets the same results through sluice', async (t) => {
  const via = new OpenAI({ apiKey: KEY, baseURL: rig.url + '/v1', maxRetries: 0 })
  const direct = new OpenAI({ apiKey: PROVIDER_KEY, baseURL: rig.sim.url + '/v1', maxRetries: 0 })
  const tools = [{ type: 'function' as const, function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } } }]
  const msg = (d: string) => [{ role: 'user' as const, content: `hi\n${d}` }]

  const a = await via.chat.completions.create({ model: 'gpt-4o-mini', messages: msg('#sim tokens=6') })
  const b = await direct.chat.completions.create({ model: 'gpt-4o-mini', messages: msg('#sim tokens=6') })
  t.same(a, b, 'chat, non-streaming')
  t.ok(a.choices[0].message.content!.length > 0)

  const s1 = via.chat.completions.stream({ model: 'gpt-4o-mini', messages: msg('#sim tokens=3 tools=3 parallel'), tools })
  const s2 = direct.chat.completions.stream({ model: 'gpt-4o-mini', messages: msg('#sim tokens=3 tools=3 parallel'), tools })
  const [f1, f2] = [await s1.finalChatCompletion(), await s2.finalChatCompletion()]
  t.same(f1, f2, 'chat stream with interleaved parallel tool calls')
  t.equal(f1.choices[0].message.tool_calls?.length, 3)
  for (const c of f1.choices[0].message.tool_calls!) t.ok(c.type === 'function' && JSON.parse(c.function.arguments), 'arguments parse')

  const r1 = await via.responses.create({ model: 'gpt-5.5', input: 'hi\n#sim tokens=5 tools=1', tools: [{ type: 'function', name: 'lookup', parameters: { type: 'object', properties: {} }, strict: false }] })
  const r2 = await direct.responses.create({ model: 'gpt-5.5', input: 'hi\n#sim tokens=5 tools=1', tools: [{ type: 'function', name: 'lookup', parameters: { type: 'object', properties: {} }, strict: false }] })
  t.same(r1, r2, 'responses, non-streaming')

  const rs1 = via.responses.stream({ model: 'gpt-5.5', input: 'hi\n#sim tokens=9 thinking=1' })
  const rs2 = direct.responses.stream({ model: 'gpt-5.5', input: 'hi\n#sim tokens=9 thinking=1' })
  const [fr1, fr2] = [await rs1.finalResponse(), await rs2.finalResponse()]
  t.same(fr1, fr2, 'responses stream')
  t.ok(fr1.output_text.length > 0)
  t.equal(fr1.status, 'completed')
})

t.test('the official anthropic SDK gets the same results through sluice', async (t) => {
  const via = new Anthropic({ apiKey: KEY, baseURL: rig.url, maxRetries: 0 })
  const direct = new Anthropic({ apiKey: PROVIDER_KEY, baseURL: rig.sim.url, maxRetries: 0 })
  const tools = [{ name: 'lookup', input_schema: { type: 'object' as const, properties: { q: { type: 'string' } } } }]
  const m1 = await via.messages.create({ model: 'claude-opus-5-5', max_tokens: 100, messages: [{ role: 'user', content: 'hi\n#sim tokens=7' }] })
  const m2 = await direct.messages.create({ model: 'claude-opus-5-5', max_tokens: 100, messages: [{ role: 'user', content: 'hi\n#sim tokens=7' }] })
  t.same(m1, m2, 'messages, non-streaming')
  const s1 = via.messages.stream({ model: 'claude-opus-5-5', max_tokens: 100, tools, messages: [{ role: 'user', content: 'hi\n#sim tokens=4 tools=2 thinking=2' }], thinking: { type: 'enabled', budget_tokens: 1024 } })
  const s2 = direct.messages.stream({ model: 'claude-opus-5-5', max_tokens: 100, tools, messages: [{ role: 'user', content: 'hi\n#sim tokens=4 tools=2 thinking=2' }], thinking: { type: 'enabled', budget_tokens: 1024 } })
  const [f1, f2] = [await s1.finalMessage(), await s2.finalMessage()]
  t.same(f1, f2, 'messages stream with thinking and tool use')
  t.equal(f1.content.filter((b) => b.type === 'tool_use').length, 2)
  t.ok(f1.content.some((b) => b.type === 'thinking' && b.signature.length > 0), 'the thinking signature survives')
  const c = await via.messages.countTokens({ model: 'claude-opus-5-5', messages: [{ role: 'user', content: 'count me' }] })
  t.ok(c.input_tokens > 0, 'count_tokens')
})

t.test('the provider sees its own key, never the gateway key; models are listed', async (t) => {
  const seen = new Set(rig.requests.map((r) => r.apiKey))
  t.ok(seen.has(PROVIDER_KEY))
  t.notOk(seen.has(KEY), 'the gateway key was never forwarded')
  for (const r of rig.requests) {
    t.notOk(JSON.stringify(r.headers).includes(KEY), 'no header carries the gateway key')
  }
  const res = await request(rig.url + '/v1/models', { headers: { authorization: `Bearer ${KEY}` } })
  const list = await res.body.json() as { object: string; data: Array<{ id: string }> }
  t.equal(list.object, 'list')
  t.ok(list.data.some((m) => m.id === 'fast-chat'), 'aliases are listed')
  t.same(await waitIdle(rig.gw), {}, 'ledger idle after every exchange')
  const m = await rig.gw.metrics()
  t.equal(m.get('sluice_admissions_total'), m.get('sluice_releases_total'))
})
