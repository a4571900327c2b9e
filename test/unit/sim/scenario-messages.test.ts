// The scenario keys on the Anthropic Messages route, through @anthropic-ai/sdk's
// messages.stream() helper and the raw events.
import t from 'tap'
import Anthropic from '@anthropic-ai/sdk'
import type { MessageStreamEvent, Tool } from '@anthropic-ai/sdk/resources/messages'
import { nextExchange, parseSse, rawRequest, startSim, streamProblems } from '../../../src/sim/index.ts'
import { SIM_COMMAND, SIM_PATCH } from '../../../src/sim/script.ts'

const sim = await startSim()
t.teardown(() => sim.close())
const client = new Anthropic({ baseURL: sim.url, apiKey: 'sk-ant-test', maxRetries: 0 })

type Json = Record<string, any>
// Claude Code's own tools, and what a translated Codex request looks like on Anthropic.
const tools: Tool[] = [
  { name: 'Bash', description: 'Run a shell command', input_schema: { type: 'object', properties: { command: { type: 'string' }, timeout: { type: 'number' }, description: { type: 'string' } }, required: ['command'] } },
  { name: 'Read', input_schema: { type: 'object', properties: { file_path: { type: 'string' }, limit: { type: 'number' } }, required: ['file_path'] } },
  { name: 'apply_patch', input_schema: { type: 'object', properties: { input: { type: 'string' } }, required: ['input'] } },
  { name: 'get_goal', input_schema: { type: 'object', properties: {} } },
]
const THINKING = { type: 'enabled', budget_tokens: 1024 } as const

function body(directive: string, stream: boolean, extra: Json = {}): Json {
  return { model: 'claude-opus-5-5', max_tokens: 2048, stream, tools, ...extra, messages: [{ role: 'user', content: [{ type: 'text', text: 'do it' }, { type: 'text', text: directive }] }] }
}

async function streamed(directive: string, extra: Json = {}) {
  const s = client.messages.stream(body(directive, true, extra) as any)
  const events: MessageStreamEvent[] = []
  s.on('streamEvent', e => events.push(e))
  return { events, message: await s.finalMessage() }
}

async function raw(directive: string, stream = true, extra: Json = {}) {
  return rawRequest(sim.url, { path: '/v1/messages', body: body(directive, stream, extra) })
}

function events(bytes: Buffer): Json[] {
  return parseSse(bytes).map(f => JSON.parse(f.data))
}

t.test('call= picks the request\'s tools; tool_use input fits each schema', async t => {
  const d = '#sim tokens=0 call=Bash,Read,apply_patch,get_goal'
  const { events: evs, message } = await streamed(d)
  t.equal(message.stop_reason, 'tool_use')
  const uses = message.content.flatMap(b => (b.type === 'tool_use' ? [b] : []))
  t.same(uses.map(u => u.name), ['Bash', 'Read', 'apply_patch', 'get_goal'])
  t.same(uses.map(u => u.input), [{ command: SIM_COMMAND }, { file_path: 'sim.txt' }, { input: SIM_PATCH }, {}])
  t.ok(evs.some(e => e.type === 'content_block_delta' && e.delta.type === 'input_json_delta'), 'input streamed as input_json_delta')
  t.same(streamProblems('anthropic', (await raw(d)).body), [])
  const json = await client.messages.create(body(d, false) as any)
  t.same(json.content.flatMap(b => (b.type === 'tool_use' ? [[b.name, b.input]] : [])), uses.map(u => [u.name, u.input]), 'non-streaming: the same calls')
})

t.test('call=web_search: a server_tool_use and its web_search_tool_result; not a tool_use stop', async t => {
  const withSearch = { tools: [...tools, { type: 'web_search_20250305', name: 'web_search', max_uses: 3 }] }
  const { message } = await streamed('#sim tokens=1 call=web_search', withSearch)
  t.same(message.content.map(b => b.type), ['text', 'server_tool_use', 'web_search_tool_result'])
  t.equal(message.stop_reason, 'end_turn', 'a server tool is not a client tool call')
  const use = message.content[1] as Json
  const result = message.content[2] as Json
  t.match(use.id, /^srvtoolu_[0-9a-z]{24}$/)
  t.same(use.input, { query: 'sim' })
  t.equal(result.tool_use_id, use.id)
  t.equal(result.content[0].type, 'web_search_result')
  t.equal((message.usage as Json).server_tool_use?.web_search_requests, 1)
  const both = await client.messages.create(body('#sim tokens=0 call=web_search,Bash', false, withSearch) as any)
  t.same(both.content.map(b => b.type), ['server_tool_use', 'web_search_tool_result', 'tool_use'])
  t.equal(both.stop_reason, 'tool_use')
  t.same(streamProblems('anthropic', (await raw('#sim tokens=0 call=web_search,Bash', true, withSearch)).body), [])
})

t.test('args=none: a no-argument call has no input deltas and input {}', async t => {
  const r = events((await raw('#sim tokens=0 call=get_goal args=none')).body)
  t.notOk(r.some(e => e.type === 'content_block_delta'), 'no input_json_delta')
  const { message } = await streamed('#sim tokens=0 call=get_goal args=none')
  t.same(message.content[0].type === 'tool_use' && message.content[0].input, {})
  const forced = await streamed('#sim tokens=0 call=Bash args={"command":"pwd"}')
  t.same(forced.message.content[0].type === 'tool_use' && forced.message.content[0].input, { command: 'pwd' })
})

t.test('thinking with signature_delta, redacted_thinking blocks, streaming and not', async t => {
  const d = '#sim tokens=1 thinking=3 redacted=2 call=Bash'
  const { events: evs, message } = await streamed(d, { thinking: THINKING })
  t.same(message.content.map(b => b.type), ['thinking', 'redacted_thinking', 'redacted_thinking', 'text', 'tool_use'])
  const th = message.content[0]
  const sig = evs.flatMap(e => (e.type === 'content_block_delta' && e.delta.type === 'signature_delta' ? [e.delta.signature] : []))
  t.equal(sig.length, 1)
  t.ok(th.type === 'thinking' && th.signature === sig[0] && th.thinking.split(' ').length === 3)
  const blobs = message.content.flatMap(b => (b.type === 'redacted_thinking' ? [b.data] : []))
  t.equal(new Set(blobs).size, 2, 'distinct blobs')
  for (const b of blobs) t.match(b, /^SimRedacted[A-Za-z0-9+/=]+$/)
  const again = await streamed(d, { thinking: THINKING })
  t.same(again.message.content.slice(0, 3), message.content.slice(0, 3), 'signature and blobs are deterministic')
  const json = await client.messages.create(body(d, false, { thinking: THINKING }) as any)
  t.same(json.content.map(b => b.type), ['thinking', 'redacted_thinking', 'redacted_thinking', 'text', 'tool_use'])
  t.ok(json.content[0].type === 'thinking' && /^Sim/.test(json.content[0].signature))
  t.same(streamProblems('anthropic', (await raw(d, true, { thinking: THINKING })).body), [])
})

t.test('usage: cache_read_input_tokens, input_tokens without the cached part', async t => {
  const plain = await client.messages.create(body('#sim tokens=2', false) as any)
  const cached = await client.messages.create(body('#sim tokens=2 cached=30', false) as any)
  t.equal(plain.usage.cache_read_input_tokens, 0)
  t.equal(cached.usage.cache_read_input_tokens, 30)
  const sent = body('#sim tokens=2 cached=30', false)
  const exact = JSON.parse((await rawRequest(sim.url, { path: '/v1/messages', body: sent })).body.toString())
  t.equal(exact.usage.input_tokens + 30, Math.ceil(Buffer.byteLength(JSON.stringify(sent)) / 4), 'input + cached = the whole prompt')
  const start = events((await raw('#sim tokens=2 cached=30')).body)[0]
  t.equal(start.message.usage.cache_read_input_tokens, 30)
})

t.test('truncate=args: the cut input_json_delta, then a proper tool_use stop', async t => {
  const r = events((await raw('#sim tokens=0 call=Bash,Bash truncate=args')).body)
  const partial = (index: number): string => r.filter(e => e.type === 'content_block_delta' && e.index === index).map(e => e.delta.partial_json).join('')
  t.same(JSON.parse(partial(0)), { command: SIM_COMMAND })
  t.throws(() => JSON.parse(partial(1)), 'the last call is cut mid-JSON')
  t.ok(`{"command":"${SIM_COMMAND}"}`.startsWith(partial(1)))
  t.equal(r.find(e => e.type === 'message_delta')?.delta.stop_reason, 'tool_use')
  t.equal(r[r.length - 1].type, 'message_stop')
  t.ok(r.some(e => e.type === 'content_block_stop' && e.index === 1), 'the cut block is closed')
  const json = await client.messages.create(body('#sim tokens=0 call=Bash truncate=args', false) as any)
  t.same(json.content[0].type === 'tool_use' && json.content[0].input, {}, 'a JSON body cannot hold cut input: {}')
})

t.test('truncate=length: stop_reason max_tokens in the middle of a call, or of the text', async t => {
  const { message, events: evs } = await streamed('#sim tokens=0 call=Bash truncate=length')
  t.equal(message.stop_reason, 'max_tokens')
  const partial = evs.flatMap(e => (e.type === 'content_block_delta' && e.delta.type === 'input_json_delta' ? [e.delta.partial_json] : [])).join('')
  t.throws(() => JSON.parse(partial))
  const text = await streamed('#sim tokens=6 truncate=length')
  t.equal(text.message.stop_reason, 'max_tokens')
  t.ok(text.message.content[0].type === 'text' && text.message.content[0].text.split(' ').length === 3)
  const json = await client.messages.create(body('#sim tokens=0 call=Bash truncate=length', false) as any)
  t.equal(json.stop_reason, 'max_tokens')
})

t.test('truncate=filter: stop_reason refusal, streaming and not', async t => {
  const { message } = await streamed('#sim tokens=6 truncate=filter')
  t.equal(message.stop_reason, 'refusal')
  t.ok(message.content[0].type === 'text' && message.content[0].text.split(' ').length === 3)
  const json = await client.messages.create(body('#sim tokens=0 call=Bash truncate=filter', false) as any)
  t.equal(json.stop_reason, 'refusal')
})

t.test('truncate=eof: input deltas, then the end: no block stop, no message_delta', async t => {
  const ex = nextExchange(sim)
  const r = await raw('#sim tokens=0 call=Bash truncate=eof')
  t.equal(r.error, null)
  const evs = events(r.body)
  t.equal(evs[evs.length - 1].type, 'content_block_delta')
  t.notOk(evs.some(e => e.type === 'message_delta' || e.type === 'message_stop' || e.type === 'content_block_stop'))
  t.equal((await ex.end).outcome, 'fault')
  await t.rejects(streamed('#sim tokens=0 call=Bash truncate=eof'), 'the SDK helper does not finish a message')
  const json = await raw('#sim tokens=0 call=Bash truncate=eof', false)
  t.throws(() => JSON.parse(json.body.toString()))
})

t.test('error=: event: error with the type Claude Code acts on; HTTP errors when not streaming', async t => {
  const cases: Array<[string, string, number]> = [
    ['overloaded', 'overloaded_error', 529],
    ['rate_limit', 'rate_limit_error', 429],
    ['invalid_request', 'invalid_request_error', 400],
    ['context_length', 'invalid_request_error', 400],
    ['insufficient_quota', 'billing_error', 402],
    ['overloaded_error', 'overloaded_error', 529],
  ]
  for (const [kind, type, status] of cases) {
    const ex = nextExchange(sim)
    const r = await raw(`#sim tokens=4 error=${kind} at=4`)
    const frames = parseSse(r.body)
    t.equal(frames.length, 5, `${kind}: after 4 frames`)
    t.equal(frames[4].event, 'error')
    t.equal(JSON.parse(frames[4].data).error.type, type)
    t.equal((await ex.end).outcome, 'fault')
    const e = await streamed(`#sim tokens=4 error=${kind}`).catch((x: unknown) => x)
    t.ok(e instanceof Anthropic.APIError && (e.error as Json)?.error?.type === type, `${kind}: the SDK raises ${type}`)
    const j = await client.messages.create(body(`#sim error=${kind}`, false) as any).catch((x: unknown) => x)
    t.ok(j instanceof Anthropic.APIError && j.status === status && (j.error as Json)?.error?.type === type, `${kind}: HTTP ${status}`)
  }
  const ctx = await client.messages.create(body('#sim error=context_length', false) as any).catch((x: unknown) => x)
  t.match(ctx instanceof Anthropic.APIError ? ctx.message : '', /prompt is too long/, 'the message Claude Code recognises')
  const first = events((await raw('#sim error=overloaded at=0')).body)
  t.same(first.map(e => e.type), ['error'], 'at=0: the error is the first event')
})
