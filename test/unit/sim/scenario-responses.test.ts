// The scenario keys on the Responses route, seen through the official openai SDK's
// responses.stream() (its accumulator rejects any event out of place) and the raw bytes.
// The request is Codex CLI's own (function, custom apply_patch, tool_search, web_search
// tools), with a namespace tool as Codex sends for MCP servers.
import t from 'tap'
import { readFileSync } from 'node:fs'
import OpenAI from 'openai'
import type { ResponseStreamEvent } from 'openai/resources/responses/responses'
import { nextExchange, parseSse, rawRequest, startSim, streamProblems } from '../../../src/sim/index.ts'
import { RATE_LIMIT_RETRY } from '../../../src/sim/scenario.ts'
import { SIM_COMMAND, SIM_PATCH } from '../../../src/sim/script.ts'

const sim = await startSim()
t.teardown(() => sim.close())
const client = new OpenAI({ baseURL: sim.url + '/v1', apiKey: 'sk-test', maxRetries: 0 })

type Json = Record<string, any>
const codex: Json = JSON.parse(readFileSync(new URL('../../../ops/load/fixtures/codex-text-01.request.json', import.meta.url), 'utf8')).body
const namespace = {
  type: 'namespace',
  name: 'multi_agent_v1',
  description: 'Tools for spawning and managing sub-agents.',
  tools: [
    { type: 'function', name: 'close_agent', strict: false, parameters: { type: 'object', properties: { target: { type: 'string' } }, required: ['target'], additionalProperties: false } },
    { type: 'function', name: 'wait_agent', strict: false, parameters: { type: 'object', properties: { targets: { type: 'array', items: { type: 'string' } } }, required: ['targets'] } },
  ],
}
const tools = [...codex.tools, namespace]

/** Codex's request with this directive as the last user turn. */
function request(directive: string, stream: boolean): Json {
  return { ...codex, tools, stream, input: [...codex.input.slice(0, -1), { type: 'message', role: 'user', content: [{ type: 'input_text', text: directive }] }] }
}

async function streamed(directive: string) {
  const s = client.responses.stream(request(directive, true) as any)
  const events: ResponseStreamEvent[] = []
  for await (const e of s) events.push(e)
  return { events, final: await s.finalResponse() }
}

async function raw(directive: string, stream = true) {
  return rawRequest(sim.url, { path: '/v1/responses', body: request(directive, stream) })
}

t.test('call= picks function, custom, tool_search and namespaced tools the request offers', async t => {
  const d = '#sim tokens=0 call=exec_command,apply_patch,tool_search,multi_agent_v1.close_agent'
  const { events, final } = await streamed(d)
  t.equal(final.status, 'completed')
  t.same(final.output.map(o => o.type), ['function_call', 'custom_tool_call', 'tool_search_call', 'function_call'])
  const [exec, patch, search, close] = final.output as Json[]
  t.equal(exec.name, 'exec_command')
  t.same(JSON.parse(exec.arguments), { cmd: SIM_COMMAND }, 'required cmd only, a runnable command')
  t.equal(exec.namespace, undefined)
  t.equal(patch.name, 'apply_patch')
  t.equal(patch.input, SIM_PATCH, 'a patch Codex can apply')
  t.match(patch.id, /^ctc_[0-9a-z]{24}$/)
  const inputDeltas = events.flatMap(e => (e.type === 'response.custom_tool_call_input.delta' && e.item_id === patch.id ? [e.delta] : []))
  t.ok(inputDeltas.length > 1, 'the input is streamed in several deltas')
  t.equal(inputDeltas.join(''), SIM_PATCH)
  t.ok(events.some(e => e.type === 'response.custom_tool_call_input.done' && e.input === SIM_PATCH))
  t.equal(search.execution, 'client')
  t.same(search.arguments, { query: 'sim' }, 'arguments are an object, from the tool_search schema')
  t.match(search.call_id, /^call_[0-9a-z]{24}$/)
  t.match(search.id, /^tsc_[0-9a-z]{24}$/)
  t.equal(close.name, 'close_agent')
  t.equal(close.namespace, 'multi_agent_v1')
  t.same(Object.keys(JSON.parse(close.arguments)), ['target'])
  t.notOk(events.some(e => e.type === 'response.function_call_arguments.delta' && e.item_id === patch.id), 'no function deltas for a custom call')

  const r = await raw(d)
  t.same(streamProblems('openai-responses', r.body), [])
  const done = parseSse(r.body).map(f => JSON.parse(f.data)).filter(e => e.type === 'response.output_item.done')
  t.same(done[2].item, { id: search.id, type: 'tool_search_call', status: 'completed', call_id: search.call_id, execution: 'client', arguments: { query: 'sim' } }, 'the tool-search shape Codex deserialises')

  const json = await client.responses.create(request(d, false) as any)
  t.same(json.output.map(o => o.type), final.output.map(o => o.type), 'non-streaming: the same kinds of calls')
  t.same((json.output as Json[]).map(o => o.name ?? o.execution), ['exec_command', 'apply_patch', 'client', 'close_agent'])
  t.equal((json.output[1] as Json).input, SIM_PATCH)
  t.equal((json.output[3] as Json).namespace, 'multi_agent_v1')
})

t.test('call=web_search: a hosted web_search_call item with its status events', async t => {
  const { events, final } = await streamed('#sim tokens=1 call=web_search')
  t.same(final.output.map(o => o.type), ['message', 'web_search_call'])
  const ws = final.output[1] as Json
  t.match(ws.id, /^ws_[0-9a-z]{24}$/)
  t.equal(ws.status, 'completed')
  t.same(ws.action, { type: 'search', query: 'sim' })
  t.same(events.filter(e => e.type.startsWith('response.web_search_call.')).map(e => e.type), ['response.web_search_call.in_progress', 'response.web_search_call.searching', 'response.web_search_call.completed'])
  t.same(streamProblems('openai-responses', (await raw('#sim tokens=1 call=web_search')).body), [])
  const json = await client.responses.create(request('#sim tokens=0 call=web_search', false) as any)
  t.same(json.output.map(o => o.type), ['web_search_call'])
})

t.test('call= names resolve by namespace and suffix; an unknown name is still called, with {}', async t => {
  const { final } = await streamed('#sim tokens=0 call=wait_agent,nope_tool tools=3')
  t.same((final.output as Json[]).map(o => [o.name, o.namespace ?? null]), [['wait_agent', 'multi_agent_v1'], ['nope_tool', null], ['wait_agent', 'multi_agent_v1']], 'tools=3 cycles through the named calls')
  t.same(JSON.parse((final.output[0] as Json).arguments), { targets: [] })
  t.equal((final.output[1] as Json).arguments, '{}')
})

t.test('args= forces the arguments; args=none is a call without argument deltas', async t => {
  const none = await streamed('#sim tokens=0 call=get_goal args=none')
  t.equal((none.final.output[0] as Json).arguments, '')
  t.notOk(none.events.some(e => e.type === 'response.function_call_arguments.delta'), 'no deltas')
  t.ok(none.events.some(e => e.type === 'response.function_call_arguments.done' && e.arguments === ''))
  const empty = await streamed('#sim tokens=0 call=get_goal args={}')
  t.equal((empty.final.output[0] as Json).arguments, '{}')
  const spaced = await streamed('#sim tokens=0 call=exec_command,apply_patch args={"cmd":"ls%20-la"}')
  t.equal((spaced.final.output[0] as Json).arguments, '{"cmd":"ls -la"}', 'percent-decoded')
  t.equal((spaced.final.output[1] as Json).input, '{"cmd":"ls -la"}', 'a custom call takes it as its input')
})

t.test('reasoning with encrypted_content, usage with cached and reasoning tokens, streaming and not', async t => {
  const d = '#sim thinking=3 tokens=2 call=exec_command cached=100 reasoning_tokens=40'
  const { final } = await streamed(d)
  t.same(final.output.map(o => o.type), ['reasoning', 'message', 'function_call'])
  const reasoning = final.output[0] as Json
  t.match(reasoning.encrypted_content, /^Sim[A-Za-z0-9+/=]+$/, 'Codex asks for reasoning.encrypted_content')
  t.equal(reasoning.summary[0].text.split(' ').length, 3)
  t.equal(final.usage?.input_tokens_details.cached_tokens, 100)
  t.equal(final.usage?.output_tokens_details.reasoning_tokens, 40)
  t.ok((final.usage?.output_tokens ?? 0) > 40, 'reasoning tokens are part of the output tokens')
  const json = await client.responses.create(request(d, false) as any)
  t.same(json.output.map(o => o.type), ['reasoning', 'message', 'function_call'])
  t.match((json.output[0] as Json).encrypted_content, /^Sim[A-Za-z0-9+/=]+$/, 'non-streaming: encrypted_content too')
  t.equal(json.usage?.input_tokens_details.cached_tokens, 100)
  t.equal(json.usage?.output_tokens_details.reasoning_tokens, 40)
})

t.test('truncate=args: the stream completes, the last call holds cut JSON', async t => {
  const { events, final } = await streamed('#sim tokens=0 call=exec_command,exec_command truncate=args')
  t.equal(final.status, 'completed')
  const calls = final.output as Json[]
  t.same(JSON.parse(calls[0].arguments), { cmd: SIM_COMMAND }, 'the first call is whole')
  t.throws(() => JSON.parse(calls[1].arguments), 'the last call is malformed')
  t.ok(`{"cmd":"${SIM_COMMAND}"}`.startsWith(calls[1].arguments) && calls[1].arguments.length > 0, 'a prefix of the real arguments')
  t.equal(calls[1].status, 'completed')
  t.ok(events.some(e => e.type === 'response.function_call_arguments.done' && e.item_id === calls[1].id))
  const json = await client.responses.create(request('#sim tokens=0 call=exec_command truncate=args', false) as any)
  t.equal(json.status, 'completed')
  t.throws(() => JSON.parse((json.output[0] as Json).arguments))
})

t.test('truncate=length: response.incomplete with max_output_tokens in the middle of a call', async t => {
  const { events, final } = await streamed('#sim tokens=0 call=exec_command,apply_patch truncate=length')
  t.equal(final.status, 'incomplete')
  t.same(final.incomplete_details, { reason: 'max_output_tokens' })
  t.equal(events[events.length - 1].type, 'response.incomplete')
  const cut = final.output[1] as Json
  t.equal(cut.status, 'incomplete')
  t.ok(SIM_PATCH.startsWith(cut.input) && cut.input.length < SIM_PATCH.length, 'the input stops part-way')
  t.notOk(events.some(e => e.type === 'response.custom_tool_call_input.done'), 'the cut input is never done')
  t.equal((final.output[0] as Json).status, 'completed')
  const text = await streamed('#sim tokens=6 truncate=length')
  t.equal(text.final.status, 'incomplete')
  t.equal(text.final.output_text.split(' ').length, 3, 'without calls the text stops half-way')
  const json = await client.responses.create(request('#sim tokens=0 call=exec_command truncate=length', false) as any)
  t.equal(json.status, 'incomplete')
  t.same(json.incomplete_details, { reason: 'max_output_tokens' })
  t.equal((json.output[0] as Json).status, 'incomplete')
})

t.test('truncate=filter: response.incomplete with content_filter, streaming and not', async t => {
  const { final } = await streamed('#sim tokens=6 truncate=filter')
  t.equal(final.status, 'incomplete')
  t.same(final.incomplete_details, { reason: 'content_filter' })
  t.equal((final.output[0] as Json).status, 'incomplete')
  const call = await streamed('#sim tokens=0 call=exec_command truncate=content_filter')
  t.same(call.final.incomplete_details, { reason: 'content_filter' })
  t.equal((call.final.output[0] as Json).status, 'incomplete')
  const json = await client.responses.create(request('#sim tokens=4 truncate=filter', false) as any)
  t.same(json.incomplete_details, { reason: 'content_filter' })
})

t.test('truncate=eof: the stream ends after argument deltas without a terminal', async t => {
  const ex = nextExchange(sim)
  const r = await raw('#sim tokens=0 call=exec_command truncate=eof')
  t.equal(r.error, null, 'the HTTP response itself ends cleanly')
  const frames = parseSse(r.body).map(f => JSON.parse(f.data))
  t.equal(frames[frames.length - 1].type, 'response.function_call_arguments.delta')
  t.notOk(frames.some(f => /^response\.(completed|incomplete|failed)$/.test(f.type)))
  t.equal((await ex.end).outcome, 'fault')
  const { final } = await streamed('#sim tokens=0 call=exec_command truncate=eof')
  t.not(final.status, 'completed', 'the SDK is left with an unfinished response')
  const json = await raw('#sim tokens=0 call=exec_command truncate=eof', false)
  t.equal(Number(json.headers['content-length']), json.body.length)
  t.throws(() => JSON.parse(json.body.toString()), 'non-streaming: the JSON stops half-way')
})

t.test('error=: response.failed with the error.code Codex acts on', async t => {
  const cases: Array<[string, string]> = [
    ['context_length', 'context_length_exceeded'],
    ['rate_limit', 'rate_limit_exceeded'],
    ['insufficient_quota', 'insufficient_quota'],
    ['overloaded', 'server_is_overloaded'],
    ['invalid_request', 'invalid_prompt'],
    ['context_length_exceeded', 'context_length_exceeded'],
  ]
  for (const [kind, code] of cases) {
    const ex = nextExchange(sim)
    const { events, final } = await streamed(`#sim tokens=4 error=${kind}`)
    t.equal(events[events.length - 1].type, 'response.failed', kind)
    t.equal(final.status, 'failed')
    t.equal(final.error?.code, code, `${kind}: error.code ${code}`)
    t.equal((await ex.end).outcome, 'fault')
  }
  const rate = await streamed('#sim error=rate_limit at=3')
  t.match(rate.final.error?.message, `Please try again in ${RATE_LIMIT_RETRY}`, 'the retry time Codex parses')
  t.equal(rate.events.length, 4, 'after `at` frames')
  const first = await streamed('#sim error=context_length at=0')
  t.same(first.events.map(e => e.type), ['response.created', 'response.failed'], 'response.created always comes first')
  const r = await raw('#sim tokens=2 error=insufficient_quota')
  const frames = parseSse(r.body)
  t.equal(frames[frames.length - 1].event, 'response.failed')

  const e = await client.responses.create(request('#sim error=rate_limit', false) as any).catch((x: unknown) => x)
  t.ok(e instanceof OpenAI.APIError, 'non-streaming: an HTTP error')
  if (e instanceof OpenAI.APIError) {
    t.equal(e.status, 429)
    t.equal(e.code, 'rate_limit_exceeded')
    t.equal(e.headers?.get('retry-after-ms'), '1500')
  }
  const c = await client.responses.create(request('#sim error=context_length', false) as any).catch((x: unknown) => x)
  t.ok(c instanceof OpenAI.APIError && c.status === 400 && c.code === 'context_length_exceeded')
  const q = await client.responses.create(request('#sim error=insufficient_quota', false) as any).catch((x: unknown) => x)
  t.ok(q instanceof OpenAI.APIError && q.status === 429 && q.code === 'insufficient_quota')
})
