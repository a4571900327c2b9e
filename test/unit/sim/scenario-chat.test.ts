// The scenario keys on the Chat Completions route, through the official openai SDK's
// chat.completions.stream() helper and the raw chunks.
import t from 'tap'
import OpenAI from 'openai'
import type { ChatCompletionTool } from 'openai/resources/chat/completions'
import { nextExchange, parseSse, rawRequest, startSim, streamProblems } from '../../../src/sim/index.ts'
import { SIM_COMMAND, SIM_PATCH } from '../../../src/sim/script.ts'

const sim = await startSim()
t.teardown(() => sim.close())
const client = new OpenAI({ baseURL: sim.url + '/v1', apiKey: 'sk-test', maxRetries: 0 })

type Json = Record<string, any>
const fn = (name: string, parameters: Json): ChatCompletionTool => ({ type: 'function', function: { name, parameters } })
// What a translated Codex request looks like on a Chat provider: namespaced tools flattened,
// the custom apply_patch as a function with one `input` string.
const tools: ChatCompletionTool[] = [
  fn('exec_command', { type: 'object', properties: { cmd: { type: 'string' }, workdir: { type: 'string' }, tty: { type: 'boolean' } }, required: ['cmd'] }),
  fn('apply_patch', { type: 'object', properties: { input: { type: 'string' } }, required: ['input'] }),
  fn('shell', { type: 'object', properties: { command: { type: 'array', items: { type: 'string' } }, timeout_ms: { type: 'number' } }, required: ['command'] }),
  fn('multi_agent_v1__close_agent', { type: 'object', properties: { target: { type: 'string' } }, required: ['target'] }),
  fn('mcp__docs__lookup', { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] }),
]

function body(directive: string, stream: boolean, extra: Json = {}): Json {
  return { model: 'gpt-4o-mini', stream, ...(stream ? { stream_options: { include_usage: true } } : {}), tools, ...extra, messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: directive }] }
}

async function final(directive: string) {
  return client.chat.completions.stream(body(directive, true) as any).finalChatCompletion()
}

async function raw(directive: string, stream = true) {
  return rawRequest(sim.url, { path: '/v1/chat/completions', body: body(directive, stream) })
}

function chunks(bytes: Buffer): Json[] {
  return parseSse(bytes).filter(f => f.data !== '[DONE]').map(f => JSON.parse(f.data))
}

const argsOf = (c: Json): unknown => JSON.parse(c.function.arguments)

t.test('call= picks the request\'s own tools; arguments fit each schema with runnable values', async t => {
  const d = '#sim tokens=0 call=exec_command,apply_patch,shell'
  const done = await final(d)
  const calls = (done.choices[0].message.tool_calls ?? []) as Json[]
  t.equal(done.choices[0].finish_reason, 'tool_calls')
  t.same(calls.map(c => c.function.name), ['exec_command', 'apply_patch', 'shell'])
  t.same(argsOf(calls[0]), { cmd: SIM_COMMAND })
  t.same(argsOf(calls[1]), { input: SIM_PATCH }, "the gateway's custom-tool wrapper gets the patch as input")
  t.same(argsOf(calls[2]), { command: ['bash', '-lc', SIM_COMMAND] })
  t.same(streamProblems('openai-chat', (await raw(d)).body), [])
  const json = await client.chat.completions.create(body(d, false) as any)
  t.same((json.choices[0].message.tool_calls as Json[]).map(c => [c.function.name, argsOf(c)]), calls.map(c => [c.function.name, argsOf(c)]), 'non-streaming: the same calls')
})

t.test('call= survives translation: NS.NAME finds a flattened name, a suffix finds a prefixed one', async t => {
  const done = await final('#sim tokens=0 call=multi_agent_v1.close_agent,lookup')
  const calls = (done.choices[0].message.tool_calls ?? []) as Json[]
  t.same(calls.map(c => c.function.name), ['multi_agent_v1__close_agent', 'mcp__docs__lookup'])
  t.same(argsOf(calls[1]), { query: 'sim' })
})

t.test('args=none and args={}: calls without arguments', async t => {
  const none = await raw('#sim tokens=0 call=exec_command args=none')
  const frames = chunks(none.body)
  const tc = frames.flatMap(c => c.choices[0]?.delta?.tool_calls ?? [])
  t.equal(tc.length, 1, 'only the head, no argument deltas')
  t.equal(tc[0].function.arguments, '')
  const done = await final('#sim tokens=0 call=exec_command args={}')
  t.equal((done.choices[0].message.tool_calls as Json[])[0].function.arguments, '{}')
})

t.test('tools=32 parallel: 32 interleaved calls, id and name on each first fragment', async t => {
  const d = '#sim tokens=0 tools=32 parallel call=exec_command'
  const r = await raw(d)
  t.same(streamProblems('openai-chat', r.body), [])
  const fragments = chunks(r.body).flatMap(c => c.choices[0]?.delta?.tool_calls ?? [])
  const first = new Map<number, Json>()
  for (const f of fragments) if (!first.has(f.index)) first.set(f.index, f)
  t.same([...first.keys()], Array.from({ length: 32 }, (_v, i) => i), 'indexes 0..31')
  for (const f of first.values()) {
    t.match(f.id, /^call_[0-9a-z]{24}$/)
    t.equal(f.type, 'function')
    t.equal(f.function.name, 'exec_command')
  }
  t.equal(new Set([...first.values()].map(f => f.id)).size, 32, 'distinct ids')
  t.equal(fragments.filter(f => f.id !== undefined).length, 32, 'ids only on first fragments')
  const repeats = fragments.filter((f, i) => i > 0 && f.index === fragments[i - 1].index).length
  t.equal(repeats, 0, 'consecutive fragments always belong to different calls')
  const args = fragments.filter(f => f.id === undefined)
  t.ok(args.length >= 64, `${args.length} argument fragments, several per call`)
  const done = await final(d)
  const calls = (done.choices[0].message.tool_calls ?? []) as Json[]
  t.equal(calls.length, 32)
  for (const c of calls) t.same(argsOf(c), { cmd: SIM_COMMAND })
})

t.test('tools=32 parallel stagger: later heads arrive after earlier calls\' arguments began', async t => {
  const d = '#sim tokens=0 tools=32 parallel stagger call=exec_command,apply_patch'
  const r = await raw(d)
  t.same(streamProblems('openai-chat', r.body), [])
  const fragments = chunks(r.body).flatMap(c => c.choices[0]?.delta?.tool_calls ?? [])
  const headAt = new Map<number, number>()
  const firstArgsAt = new Map<number, number>()
  fragments.forEach((f, i) => {
    if (f.id !== undefined) {
      t.notOk(headAt.has(f.index), `one head for call ${f.index}`)
      headAt.set(f.index, i)
    } else {
      t.ok(headAt.has(f.index) && headAt.get(f.index)! < i, `call ${f.index}: arguments after its head`)
      if (!firstArgsAt.has(f.index)) firstArgsAt.set(f.index, i)
    }
  })
  t.equal(headAt.size, 32)
  t.ok(headAt.get(31)! > firstArgsAt.get(0)!, 'the last head comes after the first call\'s arguments started')
  t.ok([...headAt.keys()].every((k, i) => k === i), 'heads in index order')
  const done = await final(d)
  const calls = (done.choices[0].message.tool_calls ?? []) as Json[]
  t.equal(calls.length, 32)
  t.same(calls.map(c => c.function.name), Array.from({ length: 32 }, (_v, i) => (i % 2 === 0 ? 'exec_command' : 'apply_patch')))
  for (const c of calls) t.doesNotThrow(() => argsOf(c), `${c.id}: whole JSON`)
  t.same(argsOf(calls[1]), { input: SIM_PATCH })
})

t.test('reasoning_content: DeepSeek-style reasoning deltas before the answer, streaming and not', async t => {
  const d = '#sim tokens=2 thinking=3 reasoning_content'
  const frames = chunks((await raw(d)).body)
  const reasoning = frames.flatMap(c => (typeof c.choices[0]?.delta?.reasoning_content === 'string' ? [c.choices[0].delta.reasoning_content as string] : []))
  t.equal(reasoning.length, 3)
  const firstText = frames.findIndex(c => c.choices[0]?.delta?.content)
  const lastReasoning = frames.findLastIndex(c => c.choices[0]?.delta?.reasoning_content !== undefined)
  t.ok(lastReasoning < firstText, 'reasoning comes before the text')
  t.equal(frames[0].choices[0].delta.role, 'assistant')
  const done = await final(d)
  t.match(done.choices[0].message.content, /^[A-Z][a-z]+ [a-z]+$/, 'the SDK still assembles the answer')
  const json = await client.chat.completions.create(body(d, false) as any)
  t.match((json.choices[0].message as Json).reasoning_content, /^[A-Z][a-z]+( [a-z]+){2}$/)
  const off = chunks((await raw('#sim tokens=2 thinking=3')).body)
  t.notOk(off.some(c => c.choices[0]?.delta?.reasoning_content !== undefined), 'Chat has no reasoning without the key')
  const toolsOnly = chunks((await raw('#sim tokens=0 call=exec_command reasoning_content')).body)
  t.equal(toolsOnly[0].choices[0].delta.role, 'assistant', 'role first, before the reasoning')
  t.equal(toolsOnly[0].choices[0].delta.tool_calls, undefined)
})

t.test('usage: cached and reasoning tokens in prompt_tokens_details / completion_tokens_details', async t => {
  const d = '#sim tokens=3 cached=50 reasoning_tokens=20'
  const frames = chunks((await raw(d)).body)
  const usage = frames[frames.length - 1].usage
  t.equal(usage.prompt_tokens_details.cached_tokens, Math.min(50, usage.prompt_tokens))
  t.equal(usage.completion_tokens_details.reasoning_tokens, 20)
  t.ok(usage.completion_tokens > 20)
  const json = await client.chat.completions.create(body(d, false) as any)
  t.equal(json.usage?.completion_tokens_details?.reasoning_tokens, 20)
  t.ok((json.usage?.prompt_tokens_details?.cached_tokens ?? 0) > 0)
  const plain = await client.chat.completions.create(body('#sim tokens=3', false) as any)
  t.equal(plain.usage?.prompt_tokens_details, undefined, 'no details unless asked (as before)')
})

t.test('truncate=args: malformed arguments, then a proper tool_calls finish', async t => {
  const done = await final('#sim tokens=0 call=exec_command,exec_command truncate=args')
  t.equal(done.choices[0].finish_reason, 'tool_calls')
  const calls = (done.choices[0].message.tool_calls ?? []) as Json[]
  t.same(argsOf(calls[0]), { cmd: SIM_COMMAND })
  t.throws(() => argsOf(calls[1]), 'the last call is cut mid-JSON')
  t.ok(calls[1].function.arguments.length > 0)
  const json = await client.chat.completions.create(body('#sim tokens=0 call=exec_command truncate=args', false) as any)
  t.equal(json.choices[0].finish_reason, 'tool_calls')
  t.throws(() => argsOf((json.choices[0].message.tool_calls as Json[])[0]))
  const textOnly = await final('#sim tokens=0 truncate=args')
  t.equal(textOnly.choices[0].message.tool_calls?.length, 1, 'without call= or tools= one call is made to cut')
})

t.test('truncate=length: finish_reason length in the middle of a call, or of the text', async t => {
  const done = await final('#sim tokens=1 call=exec_command truncate=length')
  t.equal(done.choices[0].finish_reason, 'length')
  t.throws(() => argsOf((done.choices[0].message.tool_calls as Json[])[0]))
  const text = await final('#sim tokens=8 truncate=length')
  t.equal(text.choices[0].finish_reason, 'length')
  t.equal(text.choices[0].message.content?.split(' ').length, 4)
  const json = await client.chat.completions.create(body('#sim tokens=0 call=exec_command truncate=length', false) as any)
  t.equal(json.choices[0].finish_reason, 'length')
})

t.test('truncate=filter: finish_reason content_filter, streaming and not', async t => {
  const done = await final('#sim tokens=6 truncate=filter')
  t.equal(done.choices[0].finish_reason, 'content_filter')
  t.equal(done.choices[0].message.content?.split(' ').length, 3)
  const json = await client.chat.completions.create(body('#sim tokens=0 call=exec_command truncate=filter', false) as any)
  t.equal(json.choices[0].finish_reason, 'content_filter')
})

t.test('truncate=eof: argument deltas, then the end: no finish chunk, no [DONE]', async t => {
  const ex = nextExchange(sim)
  const r = await raw('#sim tokens=0 call=exec_command,exec_command truncate=eof')
  t.equal(r.error, null)
  const frames = parseSse(r.body)
  t.not(frames[frames.length - 1].data, '[DONE]')
  const last = JSON.parse(frames[frames.length - 1].data)
  t.equal(last.choices[0].delta.tool_calls[0].index, 1, 'the last call was still streaming')
  t.notOk(frames.some(f => f.data !== '[DONE]' && JSON.parse(f.data).choices[0]?.finish_reason), 'no finish_reason')
  t.equal((await ex.end).outcome, 'fault')
  await t.rejects(final('#sim tokens=0 call=exec_command truncate=eof'), 'the SDK helper refuses the stream')
  const json = await raw('#sim tokens=0 call=exec_command truncate=eof', false)
  t.equal(Number(json.headers['content-length']), json.body.length)
  t.throws(() => JSON.parse(json.body.toString()))
})

t.test('error=: an error frame mid-stream with the code clients act on; HTTP errors when not streaming', async t => {
  const cases: Array<[string, string, number]> = [
    ['rate_limit', 'rate_limit_exceeded', 429],
    ['context_length', 'context_length_exceeded', 400],
    ['insufficient_quota', 'insufficient_quota', 429],
    ['overloaded', 'server_is_overloaded', 503],
    ['invalid_request', 'invalid_prompt', 400],
  ]
  for (const [kind, code, status] of cases) {
    const r = await raw(`#sim tokens=6 error=${kind} at=3`)
    const frames = parseSse(r.body)
    t.equal(frames.length, 4, `${kind}: after 3 frames`)
    t.equal(JSON.parse(frames[3].data).error.code, code)
    t.notOk(frames.some(f => f.data === '[DONE]'))
    const e = await final(`#sim tokens=6 error=${kind}`).catch((x: unknown) => x)
    t.ok(e instanceof OpenAI.APIError && e.code === code, `${kind}: the SDK raises ${code}`)
    const j = await client.chat.completions.create(body(`#sim error=${kind}`, false) as any).catch((x: unknown) => x)
    t.ok(j instanceof OpenAI.APIError && j.status === status && j.code === code, `${kind}: HTTP ${status}`)
  }
  const r = await raw('#sim error=rate_limit')
  t.match(JSON.parse(parseSse(r.body).at(-1)!.data).error.message, /Please try again in 1\.5s/)
})
