// Non-streaming answers with tool calls: every tool kind restored to the client's own name
// (namespace, custom -> custom_tool_call with its raw input, tool_search -> tool_search_call),
// reasoning carried across a tool turn and replayed byte-exact on the next request, and every
// incomplete call refused (never reported as a completed call).
import t from 'tap'
import type { Protocol } from '../../../src/translate/canonical.ts'
import { translateRequest } from '../../../src/translate/request/index.ts'
import { summarise } from '../../../src/translate/summary.ts'
import { CLIENT_FILE, LIMITS, capture, summaryFor, wireOf, type Json, translateAnswer } from './answer-helpers.ts'

const APPLY_PATCH = 'codex-tool-applypatch-01-POST-v1_responses.json'
const NAMESPACE = 'codex-tool-namespace-01-POST-v1_responses.json'
const CLAUDE = 'claude-tool-thinking-01-POST-v1_messages.json'
const CHAT = CLIENT_FILE['openai-chat']
const PATCH = '*** Begin Patch\n*** Add File: a.txt\n+hi "there"\n*** End Patch\n'

const chatAnswer = (calls: Json[], finish = 'tool_calls', extra: Json = {}): Json => ({
  id: 'chatcmpl-t1', object: 'chat.completion', created: 1_764_000_000, model: 'provider-model',
  choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: calls, ...extra }, finish_reason: finish }],
  usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
})
const fn = (id: string, name: string, args: string): Json => ({ id, type: 'function', function: { name, arguments: args } })
const messagesAnswer = (content: Json[], stop = 'tool_use'): Json => ({
  id: 'msg_t1', type: 'message', role: 'assistant', model: 'provider-model', content, stop_reason: stop, stop_sequence: null,
  usage: { input_tokens: 10, output_tokens: 5 },
})
const responsesAnswer = (output: Json[], status = 'completed', extra: Json = {}): Json => ({
  id: 'resp_t1', object: 'response', created_at: 1_764_000_000, status, model: 'provider-model', output,
  usage: { input_tokens: 10, output_tokens: 5 }, ...extra,
})

function run (file: string, provider: Protocol, client: Protocol, answer: Json): Json {
  return translateAnswer(provider, client, answer, { request: summaryFor(file, provider), issuer: `${provider}:prov`, limits: LIMITS }) as Json
}

function refusal (file: string, provider: Protocol, client: Protocol, answer: Json): { code?: string; message: string } | null {
  try {
    run(file, provider, client, answer)
    return null
  } catch (e) {
    return { code: (e as { code?: string }).code, message: (e as Error).message }
  }
}

t.test('Codex on a Chat provider: custom, tool_search and no-argument calls restored', async t => {
  const s = summaryFor(APPLY_PATCH, 'openai-chat')
  const out = run(APPLY_PATCH, 'openai-chat', 'openai-responses', chatAnswer([
    fn('call_a', wireOf(s, 'apply_patch'), JSON.stringify({ input: PATCH })),
    fn('call_b', wireOf(s, 'tool_search'), '{"query":"calendar tools","limit":3}'),
    fn('call_c', wireOf(s, 'exec_command'), ''),
  ]))
  t.equal(out.status, 'completed')
  t.same(out.output.map((i: Json) => [i.type, i.call_id]), [['custom_tool_call', 'call_a'], ['tool_search_call', 'call_b'], ['function_call', 'call_c']])
  t.match(out.output[0], { type: 'custom_tool_call', status: 'completed', name: 'apply_patch', input: PATCH })
  t.match(out.output[1], { type: 'tool_search_call', status: 'completed', execution: 'client', arguments: { query: 'calendar tools', limit: 3 } })
  t.match(out.output[2], { type: 'function_call', status: 'completed', name: 'exec_command', arguments: '{}' })
  t.equal(new Set(out.output.map((i: Json) => i.id)).size, 3, 'distinct item ids')
  t.match(out.output[0].id, /^ctc_/)
  t.match(out.output[1].id, /^tsc_/)
  t.match(out.output[2].id, /^fc_/)
})

t.test('Codex on an Anthropic provider: custom call from tool_use input', async t => {
  const s = summaryFor(APPLY_PATCH, 'anthropic')
  const out = run(APPLY_PATCH, 'anthropic', 'openai-responses', messagesAnswer([
    { type: 'text', text: 'Patching.' },
    { type: 'tool_use', id: 'toolu_1', name: wireOf(s, 'apply_patch'), input: { input: PATCH } },
  ]))
  t.same(out.output.map((i: Json) => i.type), ['message', 'custom_tool_call'])
  t.match(out.output[1], { call_id: 'toolu_1', name: 'apply_patch', input: PATCH })
})

for (const provider of ['openai-chat', 'anthropic'] as const) {
  t.test(`Codex namespace tools on a ${provider} provider: restored as {namespace, name}`, async t => {
    const s = summaryFor(NAMESPACE, provider)
    const wire = wireOf(s, 'spawn_agent', 'multi_agent_v1')
    t.not(wire, 'spawn_agent', 'the provider saw a flattened name')
    const args = '{"task": "look around", "agent":"explorer"}'
    const answer = provider === 'openai-chat'
      ? chatAnswer([fn('call_1', wire, args), fn('call_2', wireOf(s, 'exec_command'), '{"cmd":"ls"}')])
      : messagesAnswer([{ type: 'tool_use', id: 'toolu_1', name: wire, input: JSON.parse(args) }, { type: 'tool_use', id: 'toolu_2', name: wireOf(s, 'exec_command'), input: { cmd: 'ls' } }])
    const out = run(NAMESPACE, provider, 'openai-responses', answer)
    t.match(out.output[0], { type: 'function_call', name: 'spawn_agent', namespace: 'multi_agent_v1' })
    t.same(JSON.parse(out.output[0].arguments), JSON.parse(args))
    if (provider === 'openai-chat') t.equal(out.output[0].arguments, args, 'Chat arguments text kept byte-exact')
    t.match(out.output[1], { type: 'function_call', name: 'exec_command' })
    t.notOk('namespace' in out.output[1], 'a plain function has no namespace')
  })
}

for (const provider of ['openai-responses', 'anthropic'] as const) {
  t.test(`a Chat client on a ${provider} provider: tool_calls`, async t => {
    const file = CLIENT_FILE['openai-chat']
    const answer = provider === 'anthropic'
      ? messagesAnswer([{ type: 'tool_use', id: 'toolu_9', name: 'get_weather', input: { city: 'Paris' } }])
      : responsesAnswer([{ id: 'fc_1', type: 'function_call', status: 'completed', call_id: 'call_9', name: 'get_weather', arguments: '{"city":"Paris"}' }])
    const out = run(file, provider, 'openai-chat', answer)
    t.equal(out.choices[0].finish_reason, 'tool_calls')
    t.equal(out.choices[0].message.content, null)
    t.same(out.choices[0].message.tool_calls, [{ id: provider === 'anthropic' ? 'toolu_9' : 'call_9', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }])
  })
}

t.test('Claude Code on a Chat provider: tool_use with an input object', async t => {
  const out = run(CLAUDE, 'openai-chat', 'anthropic', chatAnswer([fn('call_x', 'Bash', '{"command":"ls -la","description":"List"}'), fn('call_y', 'Read', '{"file_path":"/tmp/a"}')]))
  t.equal(out.stop_reason, 'tool_use')
  t.same(out.content, [
    { type: 'tool_use', id: 'call_x', name: 'Bash', input: { command: 'ls -la', description: 'List' } },
    { type: 'tool_use', id: 'call_y', name: 'Read', input: { file_path: '/tmp/a' } },
  ])
})

t.test('Claude Code on a Responses provider: reasoning kept in the signature and replayed byte-exact', async t => {
  const enc = 'gAAAAABo-opaque/+==' + 'x'.repeat(100)
  const out = run(CLAUDE, 'openai-responses', 'anthropic', responsesAnswer([
    { id: 'rs_7', type: 'reasoning', summary: [{ type: 'summary_text', text: 'I should list files.' }], encrypted_content: enc },
    { id: 'fc_7', type: 'function_call', status: 'completed', call_id: 'call_7', name: 'Bash', arguments: '{"command":"ls"}' },
  ]))
  t.same(out.content.map((b: Json) => b.type), ['thinking', 'tool_use'])
  t.equal(out.content[0].thinking, 'I should list files.')
  // the next turn, as Claude Code sends it: the answer's content back, then the tool result
  const raw = capture(CLAUDE)
  const next = { ...raw, messages: [...raw.messages, { role: 'assistant', content: out.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_7', content: 'a.txt' }] }] }
  const { body } = translateRequest({ from: 'anthropic', to: 'openai-responses', body: next, model: 'provider-model', issuer: 'openai-responses:prov' })
  const items = (body.input as Json[]).slice(-3)
  t.match(items[0], { type: 'reasoning', encrypted_content: enc })
  t.match(items[1], { type: 'function_call', call_id: 'call_7', name: 'Bash' })
  t.match(items[2], { type: 'function_call_output', call_id: 'call_7' })
  // another provider never gets the blob
  const other = translateRequest({ from: 'anthropic', to: 'openai-responses', body: next, model: 'provider-model', issuer: 'openai-responses:other' })
  t.notOk(JSON.stringify(other.body).includes(enc), 'the blob is scoped to its issuer')
})

t.test('Codex on an Anthropic provider: thinking and redacted thinking kept in encrypted_content and replayed', async t => {
  const out = run('codex-tool-exec-01-POST-v1_responses.json', 'anthropic', 'openai-responses', messagesAnswer([
    { type: 'thinking', thinking: 'Run ls.', signature: 'EqMBCkYIBxgCKkD+/sig==' },
    { type: 'redacted_thinking', data: 'EmwKAhgBEgy+redacted==' },
    { type: 'tool_use', id: 'toolu_5', name: 'exec_command', input: { cmd: 'ls' } },
  ]))
  t.same(out.output.map((i: Json) => i.type), ['reasoning', 'reasoning', 'function_call'])
  t.same(out.output[0].summary, [{ type: 'summary_text', text: 'Run ls.' }])
  t.same(out.output[1].summary, [], 'redacted thinking has no text')
  t.match(out.output[2], { call_id: 'toolu_5', name: 'exec_command', arguments: '{"cmd":"ls"}' })
  const raw = capture('codex-tool-exec-01-POST-v1_responses.json')
  const next = { ...raw, input: [...raw.input, ...out.output, { type: 'function_call_output', call_id: 'toolu_5', output: 'a.txt' }] }
  const { body } = translateRequest({ from: 'openai-responses', to: 'anthropic', body: next, model: 'provider-model', issuer: 'anthropic:prov' })
  const assistant = (body.messages as Json[]).findLast(m => m.role === 'assistant') as Json
  t.same(assistant.content.slice(0, 3), [
    { type: 'thinking', thinking: 'Run ls.', signature: 'EqMBCkYIBxgCKkD+/sig==' },
    { type: 'redacted_thinking', data: 'EmwKAhgBEgy+redacted==' },
    { type: 'tool_use', id: 'toolu_5', name: 'exec_command', input: { cmd: 'ls' } },
  ])
})

t.test('incomplete calls are refused, never completed', async t => {
  const s = summaryFor(APPLY_PATCH, 'openai-chat')
  const cases: Array<[string, string, Protocol, Protocol, Json]> = [
    ['Chat length stop with a call', APPLY_PATCH, 'openai-chat', 'openai-responses', chatAnswer([fn('c1', 'exec_command', '{"cmd":"l')], 'length')],
    ['Chat length stop with complete-looking arguments', APPLY_PATCH, 'openai-chat', 'openai-responses', chatAnswer([fn('c1', 'exec_command', '{"cmd":"ls"}')], 'length')],
    ['Chat truncated arguments', APPLY_PATCH, 'openai-chat', 'openai-responses', chatAnswer([fn('c1', 'exec_command', '{"cmd":"l')])],
    ['Chat arguments that are not an object', APPLY_PATCH, 'openai-chat', 'openai-responses', chatAnswer([fn('c1', 'exec_command', '[1,2]')])],
    ['Chat call without a name', APPLY_PATCH, 'openai-chat', 'openai-responses', chatAnswer([fn('c1', '', '{}')])],
    ['custom call without its input', APPLY_PATCH, 'openai-chat', 'openai-responses', chatAnswer([fn('c1', wireOf(s, 'apply_patch'), '{"patch":"x"}')])],
    ['Anthropic max_tokens inside tool_use', CHAT, 'anthropic', 'openai-chat', messagesAnswer([{ type: 'text', text: 'ok' }, { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'P' } }], 'max_tokens')],
    ['Anthropic tool_use input not an object', CHAT, 'anthropic', 'openai-chat', messagesAnswer([{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: 'Paris' }])],
    ['Responses incomplete function_call', CLAUDE, 'openai-responses', 'anthropic', responsesAnswer([{ type: 'function_call', status: 'incomplete', call_id: 'c1', name: 'Bash', arguments: '{"command":"l' }], 'incomplete', { incomplete_details: { reason: 'max_output_tokens' } })],
    ['Responses stopped for length after a call', CLAUDE, 'openai-responses', 'anthropic', responsesAnswer([{ type: 'function_call', call_id: 'c1', name: 'Bash', arguments: '{"command":"ls"}' }], 'incomplete', { incomplete_details: { reason: 'max_output_tokens' } })],
    ['Responses malformed arguments', CLAUDE, 'openai-responses', 'anthropic', responsesAnswer([{ type: 'function_call', status: 'completed', call_id: 'c1', name: 'Bash', arguments: '{"command":' }])],
  ]
  for (const [label, file, provider, client, answer] of cases) {
    const r = refusal(file, provider, client, answer)
    t.equal(r?.code, 'provider_protocol_error', label)
  }
  // a length stop after a complete call followed by text is an ordinary truncated answer
  const ok = run(CHAT, 'anthropic', 'openai-chat', messagesAnswer([{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }, { type: 'text', text: 'and then' }], 'max_tokens'))
  t.equal(ok.choices[0].finish_reason, 'length')
  t.equal(ok.choices[0].message.tool_calls.length, 1)
})

t.test('a name the request did not declare comes back as a plain function', async t => {
  const out = run(CLAUDE, 'openai-chat', 'anthropic', chatAnswer([fn('c1', 'Invented', '{}')]))
  t.same(out.content, [{ type: 'tool_use', id: 'c1', name: 'Invented', input: {} }])
})

t.test('a Chat client\'s custom tool on an Anthropic provider: a custom tool call with its input', async t => {
  const body = {
    model: 'm',
    messages: [{ role: 'user', content: 'patch it' }],
    tools: [{ type: 'custom', custom: { name: 'apply_patch', description: 'Apply a patch' } }, { type: 'function', function: { name: 'ls', parameters: { type: 'object', properties: {} } } }],
  }
  const { request, body: sent } = translateRequest({ from: 'openai-chat', to: 'anthropic', body, model: 'provider-model', issuer: 'anthropic:prov' })
  t.same((sent.tools as Json[]).map(x => x.name), ['apply_patch', 'ls'])
  const summary = summarise(request, body)
  const out = translateAnswer('anthropic', 'openai-chat', messagesAnswer([
    { type: 'tool_use', id: 'toolu_1', name: 'apply_patch', input: { input: PATCH } },
    { type: 'tool_use', id: 'toolu_2', name: 'ls', input: {} },
  ]), { request: summary, issuer: 'anthropic:prov', limits: LIMITS }) as Json
  t.same(out.choices[0].message.tool_calls, [
    { id: 'toolu_1', type: 'custom', custom: { name: 'apply_patch', input: PATCH } },
    { id: 'toolu_2', type: 'function', function: { name: 'ls', arguments: '{}' } },
  ])
  t.equal(out.choices[0].finish_reason, 'tool_calls')
})

t.test('a tool stop without a client call is an ordinary end', async t => {
  const out = run(CHAT, 'anthropic', 'openai-chat', messagesAnswer([{ type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} }, { type: 'text', text: 'done' }], 'tool_use'))
  t.equal(out.choices[0].finish_reason, 'stop')
  const empty = run(CLAUDE, 'openai-chat', 'anthropic', chatAnswer([], 'tool_calls', { content: 'nothing to run' }))
  t.equal(empty.stop_reason, 'end_turn')
  t.same(empty.content, [{ type: 'text', text: 'nothing to run' }])
})

t.test('Codex sends the restored calls back: the next request reaches the Chat provider with the same wire names and call ids', async t => {
  const s = summaryFor(APPLY_PATCH, 'openai-chat')
  const out = run(APPLY_PATCH, 'openai-chat', 'openai-responses', chatAnswer([
    fn('call_a', wireOf(s, 'apply_patch'), JSON.stringify({ input: PATCH })),
    fn('call_b', wireOf(s, 'tool_search'), '{"query":"calendar"}'),
  ]))
  const raw = capture(APPLY_PATCH)
  const next = {
    ...raw,
    input: [
      ...raw.input,
      ...out.output,
      { type: 'custom_tool_call_output', call_id: 'call_a', output: 'Done!' },
      { type: 'tool_search_output', call_id: 'call_b', status: 'completed', execution: 'client', tools: [] },
    ],
  }
  const { body } = translateRequest({ from: 'openai-responses', to: 'openai-chat', body: next, model: 'provider-model', issuer: 'openai-chat:prov' })
  const msgs = body.messages as Json[]
  const assistant = msgs.findLast(m => m.role === 'assistant' && Array.isArray(m.tool_calls)) as Json
  t.same(assistant.tool_calls.map((c: Json) => [c.id, c.function.name]), [['call_a', wireOf(s, 'apply_patch')], ['call_b', wireOf(s, 'tool_search')]])
  t.same(JSON.parse(assistant.tool_calls[0].function.arguments), { input: PATCH }, 'the custom input goes back as the function argument')
  t.same(msgs.filter(m => m.role === 'tool').slice(-2).map(m => m.tool_call_id), ['call_a', 'call_b'])
})
