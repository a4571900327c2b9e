// The rules a stream and a JSON answer share (they go through the same decoders): what counts
// as the terminal, the stop when no client call was made or a length stop follows a call, ids
// when the provider sent none, refusals, a Chat client's custom calls. Each case as a stream
// (createStreamTranslator, the worker's way) and, where the answer has a JSON form, as JSON
// (translateJson, the parser pool's way); the budget idle after every one.
import t from 'tap'
import { CountingBudget, type Protocol } from '../../../src/translate/canonical.ts'
import { translateJson } from '../../../src/translate/stream/index.ts'
import { chatFrames, fn, messagesFrames, parseSse, request, run, type Frame } from './helpers.ts'

const ev = (event: string, data: Record<string, unknown>): Frame => ({ event, data: { type: event, ...data } })

function json (from: Protocol, to: Protocol, answer: unknown, tools = [fn('Bash')]): ReturnType<typeof translateJson> & { idle: boolean } {
  const budget = new CountingBudget(1 << 20)
  const r = translateJson({ from, to, request: { ...request(to, tools), stream: false }, budget, issuer: `${from}:p`, answer })
  return { ...r, idle: budget.idle }
}

t.test('messages: message_stop without a stop_reason is not a completed answer', async t => {
  const frames = messagesFrames({ text: 'hello', terminal: false })
  frames.push(ev('message_stop', {}))
  const r = run({ from: 'anthropic', to: 'openai-chat', request: request('openai-chat') }, frames)
  t.match(r.t.failure, { code: 'provider_protocol_error', message: /stop_reason/ })
  t.notMatch(r.text, /finish_reason":"stop"/, 'never a stop')
  t.ok(r.budget.idle)
  const j = json('anthropic', 'openai-chat', { id: 'msg_1', type: 'message', role: 'assistant', content: [{ type: 'text', text: 'hello' }], usage: {} })
  t.match(j, { ok: false, error: { code: 'provider_protocol_error' }, idle: true }, 'the JSON answer the same')
})

t.test('chat: a JSON answer without finish_reason is refused like the stream without one', async t => {
  const frames = chatFrames({ text: 'hello', finish: null })
  const r = run({ from: 'openai-chat', to: 'anthropic', request: request('anthropic') }, frames)
  t.match(r.t.failure, { code: 'provider_protocol_error', message: /finish_reason/ })
  t.ok(r.budget.idle)
  for (const finish of [null, undefined]) {
    const j = json('openai-chat', 'anthropic', { id: 'c1', choices: [{ index: 0, message: { role: 'assistant', content: 'hello' }, finish_reason: finish }] })
    t.match(j, { ok: false, error: { code: 'provider_protocol_error', message: /finish_reason/ }, idle: true }, `finish_reason ${String(finish)}`)
  }
  const parts = json('openai-chat', 'anthropic', { id: 'c1', choices: [{ index: 0, message: { role: 'assistant', content: [{ type: 'text', text: 'he' }, { type: 'text', text: 'llo' }] }, finish_reason: 'stop' }] })
  t.match(parts, { ok: true, body: { content: [{ type: 'text', text: 'hello' }] } }, 'content as parts is read')
})

const call = (status: string): Record<string, unknown> => ({ id: 'fc_1', type: 'function_call', status, call_id: 'call_1', name: 'Bash', arguments: '{"command":"ls"}' })
const responsesFrames = (item: Record<string, unknown>, terminal: Frame): Frame[] => [
  ev('response.created', { response: { id: 'resp_1', model: 'gpt-x', created_at: 1 } }),
  ev('response.output_item.added', { output_index: 0, item: { ...item, arguments: '' } }),
  ev('response.function_call_arguments.delta', { output_index: 0, delta: item.arguments }),
  ev('response.output_item.done', { output_index: 0, item }),
  terminal,
]
const completed = ev('response.completed', { response: { id: 'resp_1', status: 'completed', usage: { input_tokens: 1, output_tokens: 2 } } })
const incomplete = ev('response.incomplete', { response: { id: 'resp_1', status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } } })

t.test('responses: a call the provider marks incomplete, or a length stop right after a call, is never a completed call', async t => {
  for (const [label, frames, answer] of [
    ['call status incomplete', responsesFrames(call('incomplete'), completed), { id: 'resp_1', status: 'completed', output: [call('incomplete')] }],
    ['max_output_tokens after the call', responsesFrames(call('completed'), incomplete), { id: 'resp_1', status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, output: [call('completed')] }],
  ] as const) {
    const r = run({ from: 'openai-responses', to: 'anthropic', request: request('anthropic', [fn('Bash')]) }, frames)
    t.match(r.t.failure, { code: 'provider_protocol_error' }, `${label}: stream`)
    t.notMatch(r.text, /"stop_reason":"tool_use"/, `${label}: no tool_use stop`)
    t.ok(r.budget.idle)
    t.match(json('openai-responses', 'anthropic', answer), { ok: false, error: { code: 'provider_protocol_error' }, idle: true }, `${label}: JSON`)
  }
  const r = run({ from: 'openai-responses', to: 'anthropic', request: request('anthropic', [fn('Bash')]) }, responsesFrames(call('completed'), completed))
  t.equal(r.t.failure, null, 'a completed call with a completed response is fine')
  t.match(r.text, /"stop_reason":"tool_use"/)
  for (const status of ['in_progress', 'queued', undefined]) {
    t.match(json('openai-responses', 'anthropic', { id: 'resp_1', status, output: [] }), { ok: false, error: { code: 'provider_protocol_error', message: /not complete/ }, idle: true }, `JSON status ${String(status)}`)
  }
})

t.test('a tool stop without a call of the client\'s is an ordinary end, streaming as in JSON', async t => {
  const frames = [
    ev('message_start', { message: { id: 'msg_1', model: 'claude-x', usage: { input_tokens: 1 } } }),
    ev('content_block_start', { index: 0, content_block: { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} } }),
    ev('content_block_stop', { index: 0 }),
    ev('content_block_start', { index: 1, content_block: { type: 'text', text: 'done' } }),
    ev('content_block_stop', { index: 1 }),
    ev('message_delta', { delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 2 } }),
    ev('message_stop', {}),
  ]
  const r = run({ from: 'anthropic', to: 'openai-chat', request: request('openai-chat') }, frames)
  t.equal(r.t.failure, null)
  t.match(r.text, /"finish_reason":"stop"/)
  const c = run({ from: 'openai-chat', to: 'anthropic', request: request('anthropic') }, chatFrames({ text: 'nothing to run', finish: 'tool_calls' }))
  t.match(c.text, /"stop_reason":"end_turn"/)
  t.ok(r.budget.idle && c.budget.idle)
})

t.test('no provider id: each answer gets a fresh one, streaming and JSON', async t => {
  const noId = (): Frame[] => chatFrames({ text: 'hi' }).map(f => typeof f.data === 'object' && f.data !== null ? { ...f, data: { ...(f.data as object), id: undefined } } : f)
  const ids = [0, 1].map(() => parseSse(run({ from: 'openai-chat', to: 'anthropic', request: request('anthropic') }, noId()).bytes)[0].message.id as string)
  t.match(ids[0], /^msg_[0-9a-f]{32}$/)
  t.not(ids[0], ids[1])
  const j = [0, 1].map(() => json('openai-chat', 'openai-responses', { choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }] }))
  const jid = j.map(x => x.ok ? x.body.id as string : '')
  t.match(jid[0], /^resp_[0-9a-f]{32}$/)
  t.not(jid[0], jid[1])
})

t.test('responses: a refusal is the stop `refusal` (content_filter for a Chat client)', async t => {
  const frames = [
    ev('response.created', { response: { id: 'resp_1', model: 'gpt-x', created_at: 1 } }),
    ev('response.output_item.added', { output_index: 0, item: { id: 'msg_1', type: 'message', content: [] } }),
    ev('response.refusal.delta', { output_index: 0, delta: 'I cannot help with that.' }),
    ev('response.output_item.done', { output_index: 0, item: { id: 'msg_1', type: 'message', content: [{ type: 'refusal', refusal: 'I cannot help with that.' }] } }),
    completed,
  ]
  const r = run({ from: 'openai-responses', to: 'openai-chat', request: request('openai-chat') }, frames)
  t.match(r.text, /"finish_reason":"content_filter"/)
  const j = json('openai-responses', 'openai-chat', { id: 'resp_1', status: 'completed', output: [{ id: 'msg_1', type: 'message', content: [{ type: 'refusal', refusal: 'I cannot help with that.' }] }] })
  t.match(j, { ok: true, body: { choices: [{ message: { content: null, refusal: 'I cannot help with that.' }, finish_reason: 'content_filter' }] } })
})

t.test('a Chat client\'s custom tool: a custom call streaming (custom.input deltas) as in the JSON answer', async t => {
  const tools = [{ kind: 'custom' as const, name: 'apply_patch', wireName: 'apply_patch' }]
  const patch = '*** Begin Patch\n*** End Patch\n'
  const r = run({ from: 'anthropic', to: 'openai-chat', request: request('openai-chat', tools) }, messagesFrames({ calls: [{ id: 'toolu_1', name: 'apply_patch', args: JSON.stringify({ input: patch }) }] }))
  t.equal(r.t.failure, null)
  const calls = parseSse(r.bytes).flatMap(c => c.choices?.[0]?.delta?.tool_calls ?? [])
  t.match(calls[0], { index: 0, id: 'toolu_1', type: 'custom', custom: { name: 'apply_patch', input: '' } })
  t.equal(calls.slice(1).map((c: any) => c.custom.input).join(''), patch)
  t.notOk(calls.some((c: any) => 'function' in c), 'no function deltas')
  const j = json('anthropic', 'openai-chat', { id: 'msg_1', type: 'message', content: [{ type: 'tool_use', id: 'toolu_1', name: 'apply_patch', input: { input: patch } }], stop_reason: 'tool_use', usage: {} }, tools)
  t.match(j, { ok: true, body: { choices: [{ message: { tool_calls: [{ id: 'toolu_1', type: 'custom', custom: { name: 'apply_patch', input: patch } }] }, finish_reason: 'tool_calls' }] } })
})

t.test('translateJson refuses a same-protocol answer (it is relayed byte-exact)', async t => {
  t.match(json('anthropic', 'anthropic', { id: 'msg_1', type: 'message', content: [], stop_reason: 'end_turn' }), { ok: false, error: { code: 'internal_error' }, idle: true })
})
