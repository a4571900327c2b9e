// Field by field: what each client field becomes on each provider, and what is refused (with
// invalid_request naming the field) because the provider has no faithful equivalent. Every
// translated body is also held to the provider's request shape and turn rules.
import t, { type Test } from 'tap'
import type { Protocol } from '../../../src/translate/canonical.ts'
import { translateRequest } from '../../../src/translate/request/index.ts'
import { thrown, turnRules } from './invariants.ts'
import { shapes } from './shapes.ts'

type Json = Record<string, any>

function go (t: Test, from: Protocol, to: Protocol, body: Json): { body: Json; dropped: string[] } {
  const r = translateRequest({ from, to, body: structuredClone(body), model: 'prov', issuer: `${to}:p` })
  const shape = shapes[to].safeParse(r.body)
  t.same(shape.success ? [] : shape.error.issues.map(i => `${i.path.join('.')}: ${i.message}`), [], `${from} -> ${to}: provider shape`)
  t.same(turnRules(to, r.body), [], `${from} -> ${to}: turn rules`)
  return { body: r.body, dropped: r.request.droppedTools }
}

function refused (t: Test, from: Protocol, to: Protocol, body: Json, field: string): void {
  const e = thrown(() => translateRequest({ from, to, body, model: 'prov', issuer: `${to}:p` }))
  t.equal(e.code, 'invalid_request', `${from} -> ${to}: ${e.message}`)
  t.equal(e.status, 400)
  t.equal(e.details?.field, field, `names ${field}`)
  t.ok(e.message.startsWith(field + ':'), `message names the field: ${e.message}`)
}

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=='
const DATA_URL = `data:image/png;base64,${PNG}`
const HTTP_URL = 'https://example.com/cat.jpg'
const fnTool = { type: 'function', name: 'f', parameters: { type: 'object', properties: { a: { type: 'string' } } } }
const chatTool = { type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'string' } } } } }
const anthTool = { name: 'f', input_schema: { type: 'object', properties: { a: { type: 'string' } } } }

t.test('images: data URLs <-> base64, URLs stay URLs, in every direction', async t => {
  const responses = { model: 'm', input: [{ role: 'user', content: [{ type: 'input_text', text: 'look' }, { type: 'input_image', image_url: DATA_URL, detail: 'high' }, { type: 'input_image', image_url: HTTP_URL }] }] }
  const a = go(t, 'openai-responses', 'anthropic', responses).body
  t.same(a.messages[0].content.slice(1), [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } },
    { type: 'image', source: { type: 'url', url: HTTP_URL } },
  ])
  const c = go(t, 'openai-responses', 'openai-chat', responses).body
  t.same(c.messages[0].content.slice(1), [{ type: 'image_url', image_url: { url: DATA_URL, detail: 'high' } }, { type: 'image_url', image_url: { url: HTTP_URL } }])

  const chat = { model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: DATA_URL } }] }] }
  t.same(go(t, 'openai-chat', 'anthropic', chat).body.messages[0].content, [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } }])
  t.same(go(t, 'openai-chat', 'openai-responses', chat).body.input[0].content, [{ type: 'input_image', image_url: DATA_URL, detail: 'auto' }])

  const anth = { model: 'm', max_tokens: 10, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } }, { type: 'image', source: { type: 'url', url: HTTP_URL } }] }] }
  t.same(go(t, 'anthropic', 'openai-chat', anth).body.messages[0].content, [{ type: 'image_url', image_url: { url: DATA_URL } }, { type: 'image_url', image_url: { url: HTTP_URL } }])
  t.same(go(t, 'anthropic', 'openai-responses', anth).body.input[0].content.map((p: Json) => p.image_url), [DATA_URL, HTTP_URL])
})

t.test('images: an OpenAI file_id, an Anthropic file source are refused naming the field', async t => {
  refused(t, 'openai-responses', 'anthropic', { model: 'm', input: [{ role: 'user', content: [{ type: 'input_image', file_id: 'file-1' }] }] }, 'input[0].content[0].file_id')
  refused(t, 'anthropic', 'openai-chat', { model: 'm', messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'file', file_id: 'f' } }] }] }, 'messages[0].content[0].source.type')
})

t.test('images in a tool output (Codex view_image): Anthropic in the tool_result, Chat in a user message after the tool messages', async t => {
  const body = {
    model: 'm',
    input: [
      { role: 'user', content: [{ type: 'input_text', text: 'see' }] },
      { type: 'function_call', call_id: 'c1', name: 'view_image', arguments: '{"path":"a.png"}' },
      { type: 'function_call_output', call_id: 'c1', output: [{ type: 'input_text', text: 'here' }, { type: 'input_image', image_url: DATA_URL }] },
    ],
    tools: [{ ...fnTool, name: 'view_image' }],
  }
  const a = go(t, 'openai-responses', 'anthropic', body).body
  t.same(a.messages[2].content, [{ type: 'tool_result', tool_use_id: 'c1', content: [{ type: 'text', text: 'here' }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } }] }])
  const c = go(t, 'openai-responses', 'openai-chat', body).body
  t.same(c.messages.slice(2).map((m: Json) => m.role), ['tool', 'user'])
  t.equal(c.messages[2].content, 'here')
  t.same(c.messages[3].content[1], { type: 'image_url', image_url: { url: DATA_URL } })
})

t.test('tool_choice and parallel_tool_calls', async t => {
  const chat = (tool_choice: unknown, extra: Json = {}): Json => ({ model: 'm', messages: [{ role: 'user', content: 'hi' }], tools: [chatTool], tool_choice, ...extra })
  const cases: Array<[unknown, unknown, unknown]> = [
    ['auto', { type: 'auto' }, 'auto'],
    ['none', { type: 'none' }, 'none'],
    ['required', { type: 'any' }, 'required'],
    [{ type: 'function', function: { name: 'f' } }, { type: 'tool', name: 'f' }, { type: 'function', name: 'f' }],
  ]
  for (const [choice, anth, resp] of cases) {
    t.same(go(t, 'openai-chat', 'anthropic', chat(choice)).body.tool_choice, anth, JSON.stringify(choice))
    t.same(go(t, 'openai-chat', 'openai-responses', chat(choice)).body.tool_choice, resp, JSON.stringify(choice))
  }
  t.same(go(t, 'openai-chat', 'anthropic', chat('required', { parallel_tool_calls: false })).body.tool_choice, { type: 'any', disable_parallel_tool_use: true })
  t.same(go(t, 'openai-chat', 'anthropic', { ...chat('auto', { parallel_tool_calls: false }), tool_choice: undefined }).body.tool_choice, { type: 'auto', disable_parallel_tool_use: true }, 'no choice, no parallel calls')

  const anth = (tool_choice: Json): Json => ({ model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], tools: [anthTool], tool_choice })
  const c1 = go(t, 'anthropic', 'openai-chat', anth({ type: 'any', disable_parallel_tool_use: true })).body
  t.equal(c1.tool_choice, 'required')
  t.equal(c1.parallel_tool_calls, false)
  t.same(go(t, 'anthropic', 'openai-chat', anth({ type: 'tool', name: 'f' })).body.tool_choice, { type: 'function', function: { name: 'f' } })
  t.equal(go(t, 'anthropic', 'openai-responses', anth({ type: 'none' })).body.tool_choice, 'none')

  const resp = { model: 'm', input: 'hi', tools: [{ type: 'custom', name: 'apply_patch' }], tool_choice: { type: 'custom', name: 'apply_patch' } }
  t.same(go(t, 'openai-responses', 'openai-chat', resp).body.tool_choice, { type: 'function', function: { name: 'apply_patch' } })
  t.same(go(t, 'openai-responses', 'anthropic', resp).body.tool_choice, { type: 'tool', name: 'apply_patch' })
})

t.test('tool_choice without any tool left (only a dropped hosted tool): not sent', async t => {
  const b = go(t, 'openai-responses', 'openai-chat', { model: 'm', input: 'hi', tools: [{ type: 'web_search' }], tool_choice: 'required', parallel_tool_calls: true })
  t.equal(b.body.tools, undefined)
  t.equal(b.body.tool_choice, undefined)
  t.equal(b.body.parallel_tool_calls, undefined)
  t.same(b.dropped, ['web_search'])
})

t.test('max tokens: each client field to each provider field; Anthropic default 8192', async t => {
  const msgs = [{ role: 'user', content: 'hi' }]
  t.equal(go(t, 'openai-chat', 'anthropic', { model: 'm', messages: msgs, max_completion_tokens: 300 }).body.max_tokens, 300)
  t.equal(go(t, 'openai-chat', 'anthropic', { model: 'm', messages: msgs, max_tokens: 301 }).body.max_tokens, 301, 'legacy max_tokens')
  t.equal(go(t, 'openai-chat', 'anthropic', { model: 'm', messages: msgs }).body.max_tokens, 8192)
  t.equal(go(t, 'openai-responses', 'anthropic', { model: 'm', input: 'hi', max_output_tokens: 302 }).body.max_tokens, 302)
  t.equal(go(t, 'anthropic', 'openai-chat', { model: 'm', messages: msgs, max_tokens: 303 }).body.max_completion_tokens, 303)
  t.equal(go(t, 'anthropic', 'openai-responses', { model: 'm', messages: msgs, max_tokens: 304 }).body.max_output_tokens, 304)
  t.equal(go(t, 'openai-chat', 'openai-responses', { model: 'm', messages: msgs, max_completion_tokens: 305 }).body.max_output_tokens, 305)
})

t.test('temperature, top_p, stop; Responses has no stop sequences: refused naming the field', async t => {
  const chat = { model: 'm', messages: [{ role: 'user', content: 'hi' }], temperature: 0.3, top_p: 0.9, stop: 'END' }
  const a = go(t, 'openai-chat', 'anthropic', chat).body
  t.equal(a.temperature, 0.3)
  t.equal(a.top_p, undefined, 'temperature wins: newer Anthropic models refuse both')
  t.same(a.stop_sequences, ['END'])
  const anth = { model: 'm', max_tokens: 9, messages: [{ role: 'user', content: 'hi' }], top_p: 0.5, stop_sequences: ['X', 'Y'] }
  const c = go(t, 'anthropic', 'openai-chat', anth).body
  t.equal(c.top_p, 0.5)
  t.same(c.stop, ['X', 'Y'])
  refused(t, 'anthropic', 'openai-responses', anth, 'stop_sequences')
  refused(t, 'openai-chat', 'openai-responses', chat, 'stop')
  const r = go(t, 'openai-chat', 'openai-responses', { ...chat, stop: undefined }).body
  t.equal(r.temperature, 0.3)
  t.equal(r.top_p, 0.9)
})

t.test('reasoning: effort <-> thinking budget <-> reasoning_effort', async t => {
  const chat = (effort: string): Json => ({ model: 'm', messages: [{ role: 'user', content: 'hi' }], reasoning_effort: effort })
  t.same(go(t, 'openai-chat', 'anthropic', chat('high')).body.thinking, { type: 'enabled', budget_tokens: 16384 })
  t.same(go(t, 'openai-chat', 'anthropic', chat('low')).body.thinking, { type: 'enabled', budget_tokens: 2048 })
  t.equal(go(t, 'openai-chat', 'anthropic', chat('none')).body.thinking, undefined)
  t.same(go(t, 'openai-chat', 'openai-responses', chat('high')).body.reasoning, { effort: 'high', summary: 'auto' })
  t.same(go(t, 'openai-chat', 'openai-responses', chat('none')).body.reasoning, { effort: 'none' })
  const anth = (thinking: Json, extra: Json = {}): Json => ({ model: 'm', max_tokens: 64000, messages: [{ role: 'user', content: 'hi' }], thinking, ...extra })
  t.equal(go(t, 'anthropic', 'openai-chat', anth({ type: 'enabled', budget_tokens: 20000 })).body.reasoning_effort, 'high')
  t.equal(go(t, 'anthropic', 'openai-chat', anth({ type: 'enabled', budget_tokens: 1024 })).body.reasoning_effort, 'low')
  t.equal(go(t, 'anthropic', 'openai-chat', anth({ type: 'disabled' })).body.reasoning_effort, undefined)
  t.equal(go(t, 'anthropic', 'openai-chat', anth({ type: 'adaptive' }, { output_config: { effort: 'max' } })).body.reasoning_effort, 'max')
  t.same(go(t, 'anthropic', 'openai-responses', anth({ type: 'adaptive' })).body.reasoning, { summary: 'auto' }, 'adaptive without effort: the provider default')
  t.same(go(t, 'openai-responses', 'anthropic', { model: 'm', input: 'hi', reasoning: { summary: 'auto' } }).body.thinking, { type: 'enabled', budget_tokens: 8192 }, 'no effort: medium')
})

t.test('structured output: mapped where the provider has it, json_object refused on Anthropic', async t => {
  const schema = { type: 'object', properties: { x: { type: 'number' } }, required: ['x'], additionalProperties: false }
  const chat = { model: 'm', messages: [{ role: 'user', content: 'hi' }], response_format: { type: 'json_schema', json_schema: { name: 'pt', schema, strict: true } } }
  t.same(go(t, 'openai-chat', 'anthropic', chat).body.output_config, { format: { type: 'json_schema', schema } })
  t.same(go(t, 'openai-chat', 'openai-responses', chat).body.text, { format: { type: 'json_schema', name: 'pt', schema, strict: true } })
  const resp = { model: 'm', input: 'hi', text: { format: { type: 'json_schema', name: 'pt', schema, strict: true }, verbosity: 'low' } }
  t.same(go(t, 'openai-responses', 'openai-chat', resp).body.response_format, { type: 'json_schema', json_schema: { name: 'pt', schema, strict: true } })
  const anth = { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], output_config: { format: { type: 'json_schema', schema } } }
  t.same(go(t, 'anthropic', 'openai-chat', anth).body.response_format, { type: 'json_schema', json_schema: { name: 'output', schema } })
  t.same(go(t, 'openai-chat', 'openai-responses', { ...chat, response_format: { type: 'json_object' } }).body.text, { format: { type: 'json_object' } })
  refused(t, 'openai-chat', 'anthropic', { ...chat, response_format: { type: 'json_object' } }, 'response_format')
  refused(t, 'openai-responses', 'anthropic', { ...resp, text: { format: { type: 'json_object' } } }, 'text.format')
  t.equal(go(t, 'openai-responses', 'anthropic', { ...resp, text: { format: { type: 'text' } } }).body.output_config, undefined)
})

t.test('conversation state is not translated yet: previous_response_id and conversation refused by name', async t => {
  refused(t, 'openai-responses', 'anthropic', { model: 'm', input: 'hi', previous_response_id: 'resp_1' }, 'previous_response_id')
  refused(t, 'openai-responses', 'openai-chat', { model: 'm', input: 'hi', conversation: 'conv_1' }, 'conversation')
  const ok = go(t, 'openai-responses', 'openai-chat', { model: 'm', input: 'hi', previous_response_id: null, store: true, include: ['x'], prompt_cache_key: 'k', client_metadata: { a: 1 }, metadata: { b: '2' }, service_tier: 'auto' }).body
  t.same(Object.keys(ok).sort(), ['messages', 'model', 'stream'], 'the dropped fields are not forwarded')
})

t.test('tool history: a call without a result, a result without a call, a result twice: refused', async t => {
  const call = { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' }
  const out = { type: 'function_call_output', call_id: 'c1', output: 'ok' }
  refused(t, 'openai-responses', 'anthropic', { model: 'm', input: [{ role: 'user', content: 'hi' }, call, { role: 'user', content: 'next' }], tools: [fnTool] }, 'input')
  refused(t, 'openai-responses', 'openai-chat', { model: 'm', input: [{ role: 'user', content: 'hi' }, out], tools: [fnTool] }, 'input')
  refused(t, 'openai-responses', 'openai-chat', { model: 'm', input: [{ role: 'user', content: 'hi' }, call, out, out], tools: [fnTool] }, 'input')
  refused(t, 'openai-chat', 'anthropic', { model: 'm', messages: [{ role: 'user', content: 'hi' }, { role: 'tool', tool_call_id: 'zz', content: 'x' }] }, 'messages')
})

t.test('tool history: results moved right after their call; a developer note in between moves after them', async t => {
  const body = {
    model: 'm',
    input: [
      { role: 'user', content: 'hi' },
      { type: 'function_call', call_id: 'c1', name: 'f', arguments: '' },
      { role: 'developer', content: 'note' },
      { type: 'function_call_output', call_id: 'c1', output: 'ok' },
    ],
    tools: [fnTool],
  }
  const a = go(t, 'openai-responses', 'anthropic', body).body
  t.same(a.messages.map((m: Json) => m.role), ['user', 'assistant', 'user', 'system'])
  t.same(a.messages[1].content[0].input, {}, 'empty arguments are {}')
  const c = go(t, 'openai-responses', 'openai-chat', body).body
  t.same(c.messages.map((m: Json) => m.role), ['user', 'assistant', 'tool', 'system'])
  t.equal(c.messages[1].tool_calls[0].function.arguments, '{}', 'empty arguments are {}')
})

t.test('system / developer / instructions: leading ones become the provider\'s system, in order', async t => {
  const chat = { model: 'm', messages: [{ role: 'system', content: 'S' }, { role: 'developer', content: [{ type: 'text', text: 'D' }] }, { role: 'user', content: 'hi' }] }
  const a = go(t, 'openai-chat', 'anthropic', chat).body
  t.same(a.system, [{ type: 'text', text: 'S' }, { type: 'text', text: 'D' }])
  t.same(a.messages, [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }])
  const r = go(t, 'openai-chat', 'openai-responses', chat).body
  t.same(r.input.map((i: Json) => i.role), ['system', 'developer', 'user'], 'Responses keeps the roles in place')
  const resp = { model: 'm', instructions: 'I', input: [{ role: 'developer', content: 'D' }, { role: 'user', content: 'hi' }] }
  t.same(go(t, 'openai-responses', 'anthropic', resp).body.system, [{ type: 'text', text: 'I' }, { type: 'text', text: 'D' }])
  t.same(go(t, 'openai-responses', 'openai-chat', resp).body.messages.map((m: Json) => [m.role, m.content]), [['system', 'I'], ['system', 'D'], ['user', 'hi']], 'developer is system on Chat providers')
  const anth = { model: 'm', max_tokens: 5, system: 'S', messages: [{ role: 'user', content: 'hi' }, { role: 'system', content: 'later' }, { role: 'assistant', content: 'yo' }] }
  t.same(go(t, 'anthropic', 'openai-chat', anth).body.messages.map((m: Json) => m.role), ['system', 'user', 'system', 'assistant'])
})

t.test('multi-turn text history keeps its order and roles', async t => {
  const anth = { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'a' }, { role: 'assistant', content: [{ type: 'text', text: 'b' }] }, { role: 'user', content: 'c' }] }
  t.same(go(t, 'anthropic', 'openai-chat', anth).body.messages, [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }, { role: 'user', content: 'c' }])
  t.same(go(t, 'anthropic', 'openai-responses', anth).body.input, [
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'a' }] },
    { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'b', annotations: [] }] },
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'c' }] },
  ])
  const chat = { model: 'm', messages: [{ role: 'user', content: 'a' }, { role: 'user', content: 'a2' }, { role: 'assistant', content: 'b' }, { role: 'assistant', content: '' }] }
  t.same(go(t, 'openai-chat', 'anthropic', chat).body.messages, [
    { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'a2' }] },
    { role: 'assistant', content: [{ type: 'text', text: 'b' }] },
  ], 'consecutive same-role merged, empty text left out')
})

t.test('hosted tools: mapped to the provider\'s server tool or dropped and listed, never a refusal', async t => {
  const anth = { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], tools: [anthTool, { type: 'web_search_20250305', name: 'web_search', allowed_domains: ['a.com'] }, { type: 'bash_20250124', name: 'bash' }] }
  const r = go(t, 'anthropic', 'openai-responses', anth)
  t.same(r.body.tools.slice(1), [{ type: 'web_search', filters: { allowed_domains: ['a.com'] } }])
  t.same(r.dropped, ['bash'])
  const c = go(t, 'anthropic', 'openai-chat', anth)
  t.same(c.body.tools.map((x: Json) => x.function.name), ['f'])
  t.same(c.dropped, ['web_search', 'bash'])
  const resp = { model: 'm', input: 'hi', tools: [{ type: 'web_search', filters: { allowed_domains: ['b.org'] } }, { type: 'file_search', vector_store_ids: ['v'] }] }
  const a = go(t, 'openai-responses', 'anthropic', resp)
  t.same(a.body.tools, [{ type: 'web_search_20250305', name: 'web_search', allowed_domains: ['b.org'] }])
  t.same(a.dropped, ['file_search'])
})

t.test('custom tool calls and tool search on Chat / Anthropic: functions, ids and inputs kept', async t => {
  const body = {
    model: 'm',
    input: [
      { role: 'user', content: 'go' },
      { type: 'tool_search_call', call_id: 's1', execution: 'client', arguments: { query: 'github' } },
      { type: 'tool_search_output', call_id: 's1', execution: 'client', tools: [{ type: 'namespace', name: 'gh', tools: [{ type: 'function', name: 'list_prs', parameters: { type: 'object', properties: {} } }] }] },
      { type: 'custom_tool_call', call_id: 'p1', name: 'apply_patch', input: '*** Begin Patch\n*** End Patch\n' },
      { type: 'custom_tool_call_output', call_id: 'p1', output: 'Done' },
    ],
    tools: [{ type: 'custom', name: 'apply_patch', format: { type: 'grammar', syntax: 'lark', definition: 'start: "x"' } }, { type: 'tool_search', execution: 'client', parameters: { type: 'object', properties: { query: { type: 'string' } } } }],
  }
  const c = go(t, 'openai-responses', 'openai-chat', body).body
  t.same(c.tools.map((x: Json) => x.function.name), ['apply_patch', 'tool_search', 'gh__list_prs'], 'the tools a search loaded are declared')
  t.same(c.messages[1].tool_calls[0], { id: 's1', type: 'function', function: { name: 'tool_search', arguments: '{"query":"github"}' } })
  t.equal(c.messages[2].content, 'Loaded tools: list_prs')
  t.same(c.messages[3].tool_calls[0].function, { name: 'apply_patch', arguments: JSON.stringify({ input: '*** Begin Patch\n*** End Patch\n' }) })
  t.same(c.messages[4], { role: 'tool', tool_call_id: 'p1', content: 'Done' })
  const a = go(t, 'openai-responses', 'anthropic', body).body
  t.same(a.messages[1].content[0], { type: 'tool_use', id: 's1', name: 'tool_search', input: { query: 'github' } })
  t.same(a.messages[3].content[0], { type: 'tool_use', id: 'p1', name: 'apply_patch', input: { input: '*** Begin Patch\n*** End Patch\n' } })
})

t.test('Chat and Anthropic clients on Responses: function tools strict false unless asked', async t => {
  const c = go(t, 'openai-chat', 'openai-responses', { model: 'm', messages: [{ role: 'user', content: 'hi' }], tools: [chatTool, { type: 'function', function: { ...chatTool.function, name: 'g', strict: true } }] }).body
  t.same(c.tools.map((x: Json) => [x.name, x.strict]), [['f', false], ['g', true]])
  const a = go(t, 'anthropic', 'openai-responses', { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], tools: [{ name: 'noschema' }] }).body
  t.same(a.tools[0].parameters, { type: 'object', properties: {} })
})

t.test('malformed bodies are refused naming the field, never a crash', async t => {
  refused(t, 'openai-chat', 'anthropic', [] as unknown as Json, 'body')
  refused(t, 'openai-chat', 'anthropic', { model: 'm' }, 'messages')
  refused(t, 'anthropic', 'openai-chat', { model: 'm', messages: [{ role: 'user', content: [{ type: 'text' }] }] }, 'messages[0].content[0].text')
  refused(t, 'openai-responses', 'openai-chat', { model: 'm', input: [{ type: 'item_reference', id: 'x' }] }, 'input[0].type')
  refused(t, 'openai-responses', 'anthropic', { model: 'm', input: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: 'not json' }, { type: 'function_call_output', call_id: 'c', output: '' }] }, 'tool call c')
  refused(t, 'openai-chat', 'anthropic', { model: 'm', messages: [{ role: 'user', content: 'hi' }], n: 2 }, 'n')
  const e = thrown(() => translateRequest({ from: 'anthropic', to: 'anthropic', body: {}, model: 'm', issuer: 'x' }))
  t.equal(e.code, 'internal_error', 'a same-protocol route never translates')
})

t.test('history call ids a provider would refuse: rewritten alike in call and result, still distinct', async t => {
  const chat = {
    model: 'm',
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'functions.f:0', type: 'function', function: { name: 'f', arguments: '{}' } }, { id: 'functions.f:1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'functions.f:0', content: 'a' },
      { role: 'tool', tool_call_id: 'functions.f:1', content: [{ type: 'text', text: '' }] },
    ],
    tools: [chatTool],
  }
  const a = go(t, 'openai-chat', 'anthropic', chat).body
  const ids = a.messages[1].content.map((b: Json) => b.id)
  t.equal(new Set(ids).size, 2, `distinct: ${ids.join(' ')}`)
  t.same(a.messages[2].content.map((b: Json) => b.tool_use_id), ids)
  t.equal(a.messages[2].content[1].content, '', 'an empty text output is an empty string, not an empty text block')
  const long = 'toolu_' + 'x'.repeat(60)
  const anth = { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: [{ type: 'tool_use', id: long, name: 'f', input: {} }] }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: long, content: 'ok' }] }], tools: [anthTool] }
  const c = go(t, 'anthropic', 'openai-chat', anth).body
  t.ok(c.messages[1].tool_calls[0].id.length <= 40, c.messages[1].tool_calls[0].id)
  t.equal(c.messages[2].tool_call_id, c.messages[1].tool_calls[0].id)
  t.equal(go(t, 'anthropic', 'openai-responses', anth).body.input[1].call_id, long, 'Responses takes it as it is')
})

t.test('tool_choice naming a tool the request does not declare: refused naming tool_choice', async t => {
  refused(t, 'openai-chat', 'anthropic', { model: 'm', messages: [{ role: 'user', content: 'hi' }], tools: [chatTool], tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice')
  refused(t, 'anthropic', 'openai-responses', { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], tool_choice: { type: 'tool', name: 'f' } }, 'tool_choice')
})

t.test('a provider model without reasoning (reasoning: false): no reasoning field of any kind is sent', async t => {
  const run = (from: Protocol, to: Protocol, body: Json): Json => {
    const r = translateRequest({ from, to, body, model: 'prov', issuer: `${to}:p`, reasoning: false }).body as Json
    t.ok(shapes[to].safeParse(r).success, `${from} -> ${to}: provider shape`)
    return r
  }
  const anth = { model: 'm', max_tokens: 5000, thinking: { type: 'enabled', budget_tokens: 2048 }, messages: [{ role: 'user', content: 'hi' }] }
  for (const [from, to, body] of [
    ['anthropic', 'openai-chat', anth], ['anthropic', 'openai-responses', anth],
    ['openai-chat', 'anthropic', { model: 'm', messages: [{ role: 'user', content: 'hi' }], reasoning_effort: 'high' }],
    ['openai-responses', 'anthropic', { model: 'm', input: 'hi', reasoning: { effort: 'high' } }],
  ] as Array<[Protocol, Protocol, Json]>) {
    const b = run(from, to, body)
    for (const f of ['reasoning', 'reasoning_effort', 'thinking', 'include']) t.equal(b[f], undefined, `${from} -> ${to}: no ${f}`)
  }
})
