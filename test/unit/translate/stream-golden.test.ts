// Golden canonical event sequences from the three provider decoders: what each provider
// stream becomes (sequential, non-overlapping items; complete calls or an error; caps), and
// the translation budget back at zero after every case.
import t from 'tap'
import { CountingBudget, type CanonicalEvent, type Protocol, type ToolDef } from '../../../src/translate/canonical.ts'
import { ChatDecoder, chatFromJson } from '../../../src/translate/stream/decode-chat.ts'
import { MessagesDecoder, messagesFromJson } from '../../../src/translate/stream/decode-messages.ts'
import { ResponsesDecoder, responsesFromJson } from '../../../src/translate/stream/decode-responses.ts'
import { toolLookup, type DecoderOptions, type TranslateLimits } from '../../../src/translate/stream/emit.ts'
import { InputUnwrapper } from '../../../src/translate/stream/unwrap.ts'
import { parseAnthropicThinkingOpaque, parseOpenaiReasoningOpaque } from '../../../src/translate/reasoning.ts'
import { chatFrames, EventSequenceChecker, fixtureFrames, fn, messagesFrames, type Frame, type ScriptCall } from './helpers.ts'

interface Decoded { c: EventSequenceChecker; budget: CountingBudget }

function decode (from: Protocol, frames: Frame[], o: { tools?: ToolDef[]; eof?: boolean; limits?: TranslateLimits; budget?: CountingBudget } = {}): Decoded {
  const c = new EventSequenceChecker()
  const budget = o.budget ?? new CountingBudget()
  const opts: DecoderOptions = { sink: c, budget, issuer: `${from}:prov`, lookup: toolLookup(o.tools ?? []) }
  if (o.limits !== undefined) opts.limits = o.limits
  const d = from === 'openai-chat' ? new ChatDecoder(opts) : from === 'anthropic' ? new MessagesDecoder(opts) : new ResponsesDecoder(opts)
  for (const f of frames) d.frame(f.event, f.data)
  if (o.eof !== false) d.end()
  return { c, budget }
}

function shape (events: CanonicalEvent[]): string[] {
  return events.map(e => {
    switch (e.type) {
      case 'item_start': return `start ${e.index} ${e.item.kind === 'tool_call' ? `${e.item.toolKind}:${e.item.namespace !== undefined ? e.item.namespace + '/' : ''}${e.item.name}` : e.item.kind}`
      case 'item_end': return `end ${e.index}`
      case 'delta': return `delta ${e.index}`
      case 'summary_delta': return `summary ${e.index}.${e.summaryIndex}`
      case 'finish': return `finish ${e.stop}`
      case 'error': return `error ${e.code}`
      default: return e.type
    }
  }).filter((s, i, a) => !((s.startsWith('delta') || s.startsWith('summary')) && a[i - 1] === s))
}

function text (events: CanonicalEvent[], index: number): string {
  return events.filter(e => e.type === 'delta' && e.index === index).map(e => (e as { text: string }).text).join('')
}

function ended (events: CanonicalEvent[]): Array<Extract<CanonicalEvent, { type: 'item_end' }>> {
  return events.filter(e => e.type === 'item_end') as Array<Extract<CanonicalEvent, { type: 'item_end' }>>
}

t.test('chat: text with reasoning first, usage from the usage chunk', async t => {
  const { c, budget } = decode('openai-chat', chatFrames({ reasoning: 'Let me think about it.', text: 'Hello there, world.' }))
  t.same(shape(c.events), ['start', 'start 0 reasoning', 'delta 0', 'end 0', 'start 1 text', 'delta 1', 'end 1', 'finish end'])
  const [r, x] = ended(c.events)
  t.same(r.item, { kind: 'reasoning', text: 'Let me think about it.', summary: [] })
  t.same(x.item, { kind: 'text', text: 'Hello there, world.' })
  t.same((c.last as any).usage, { inputTokens: 40, outputTokens: 12, cachedInputTokens: 8, reasoningTokens: 3 })
  t.ok(budget.idle)
  t.ok(budget.peak > 0, 'the open item was charged while kept')
})

t.test('chat: 32 interleaved parallel calls -> 32 complete sequential calls, distinct stable indexes', async t => {
  const calls: ScriptCall[] = Array.from({ length: 32 }, (_, i) => ({ id: `call_${i}`, name: i % 2 === 0 ? 'read_file' : 'exec', args: JSON.stringify({ path: `/tmp/file-${i}.txt`, n: i, pad: 'x'.repeat(i) }) }))
  const frames = chatFrames({ text: 'Working on it.', calls, interleave: true, piece: 5 })
  // The script really interleaves: the second frame with tool_calls is for another call than the first.
  const tcFrames = frames.filter(f => (f.data as any).choices?.[0]?.delta?.tool_calls)
  t.not((tcFrames[0].data as any).choices[0].delta.tool_calls[0].index, (tcFrames[1].data as any).choices[0].delta.tool_calls[0].index)
  const { c, budget } = decode('openai-chat', frames, { tools: [fn('read_file'), fn('exec')] })
  const starts = c.ofType('item_start')
  t.equal(starts.length, 33)
  t.same(starts.map(s => s.index), Array.from({ length: 33 }, (_, i) => i), 'contiguous from 0')
  const done = ended(c.events).slice(1)
  t.same(done.map(d => d.item.kind === 'tool_call' && d.item.call.callId), calls.map(x => x.id), 'in the provider index order')
  t.same(done.map(d => d.item.kind === 'tool_call' && d.item.call.arguments), calls.map(x => x.args), 'each call complete')
  for (let i = 1; i <= 32; i++) t.equal(text(c.events, i), calls[i - 1].args, `call ${i - 1}: its deltas are its arguments`)
  t.equal(c.last?.type, 'finish')
  t.equal((c.last as any).stop, 'tool_calls')
  t.ok(budget.idle)
  t.ok(budget.held.tool_arguments === 0 && budget.peak >= calls.reduce((n, x) => n + x.args.length, 0), 'all pending arguments were charged at once')
})

t.test('chat: text after calls started flushes around them', async t => {
  const frames = chatFrames({ calls: [{ id: 'call_a', name: 'f', args: '{"a":1}' }] })
  // content arriving after the call's first fragment, before finish
  frames.splice(frames.length - 3, 0, { event: null, data: { id: 'x', choices: [{ index: 0, delta: { content: 'late text' }, finish_reason: null }] } })
  const { c, budget } = decode('openai-chat', frames, { tools: [fn('f')] })
  t.same(shape(c.events), ['start', 'start 0 text', 'delta 0', 'end 0', 'start 1 function:f', 'delta 1', 'end 1', 'finish tool_calls'])
  t.ok(budget.idle)
})

t.test('chat: namespaced, custom and tool_search calls restored from their wire names', async t => {
  const tools: ToolDef[] = [
    { kind: 'function', name: 'close_agent', namespace: 'multi_agent_v1', wireName: 'multi_agent_v1__close_agent' },
    { kind: 'custom', name: 'apply_patch', wireName: 'apply_patch' },
    { kind: 'tool_search', name: 'tool_search', wireName: 'tool_search' },
  ]
  const patch = '*** Begin Patch\n*** Add File: a.txt\n+hi "there" \\ é 😀\n*** End Patch\n'
  const { c, budget } = decode('openai-chat', chatFrames({
    calls: [
      { id: 'call_ns', name: 'multi_agent_v1__close_agent', args: '{"target":"x"}' },
      { id: 'call_cu', name: 'apply_patch', args: JSON.stringify({ input: patch }) },
      { id: 'call_ts', name: 'tool_search', args: '{"query":"calendar","limit":2}' },
    ],
    interleave: true,
    piece: 3,
  }), { tools })
  t.same(shape(c.events), ['start', 'start 0 function:multi_agent_v1/close_agent', 'delta 0', 'end 0', 'start 1 custom:apply_patch', 'delta 1', 'end 1', 'start 2 tool_search:tool_search', 'delta 2', 'end 2', 'finish tool_calls'])
  const [ns, cu, ts] = ended(c.events).map(e => e.item.kind === 'tool_call' ? e.item.call : null)
  t.same(ns, { kind: 'function', callId: 'call_ns', name: 'close_agent', namespace: 'multi_agent_v1', arguments: '{"target":"x"}' })
  t.equal(cu?.kind, 'custom')
  t.equal(cu?.arguments, patch, 'the custom input unwrapped from {"input": ...}')
  t.equal(text(c.events, 1), patch, 'its deltas are the raw input')
  t.same(ts, { kind: 'tool_search', callId: 'call_ts', name: 'tool_search', arguments: '{"query":"calendar","limit":2}' })
  t.ok(budget.idle)
})

t.test('chat: a no-argument call finalises as {}', async t => {
  const { c, budget } = decode('openai-chat', chatFrames({ calls: [{ id: 'call_0', name: 'get_goal', args: '' }] }), { tools: [fn('get_goal')] })
  const [d] = ended(c.events)
  t.equal(d.item.kind === 'tool_call' && d.item.call.arguments, '{}')
  t.equal(text(c.events, 0), '{}')
  t.ok(budget.idle)
})

t.test('messages and responses: a no-argument call finalises as {} too', async t => {
  let r = decode('anthropic', messagesFrames({ calls: [{ id: 'toolu_0', name: 'get_goal', args: '' }] }), { tools: [fn('get_goal')] })
  t.equal((ended(r.c.events)[0].item as any).call.arguments, '{}')
  t.equal(text(r.c.events, 0), '{}')
  t.ok(r.budget.idle)
  const frames = fixtureFrames('sdk-openai7-04-response.sse').filter(f => f.event !== 'response.function_call_arguments.delta')
  for (const f of frames) if (f.event === 'response.output_item.done') (f.data as any).item.arguments = ''
  r = decode('openai-responses', frames, { tools: [fn('get_weather')] })
  t.equal((ended(r.c.events)[0].item as any).call.arguments, '{}')
  t.ok(r.budget.idle)
})

t.test('chat: truncated and malformed calls are never ended', async t => {
  const cases: Array<[string, Frame[]]> = [
    ['invalid JSON at finish', chatFrames({ calls: [{ id: 'a', name: 'f', args: '{"a":1}' }, { id: 'b', name: 'f', args: '{"path":"/x' }] })],
    ['finish_reason length inside a call', chatFrames({ calls: [{ id: 'a', name: 'f', args: '{"a":1}' }], finish: 'length' })],
    ['EOF without a terminal inside a call', chatFrames({ calls: [{ id: 'a', name: 'f', args: '{"a":1' }], finish: null, usage: false, done: false })],
    ['[DONE] without finish_reason', chatFrames({ calls: [{ id: 'a', name: 'f', args: '{"a":1}' }], finish: null, usage: false })],
  ]
  for (const [name, frames] of cases) {
    const { c, budget } = decode('openai-chat', frames, { tools: [fn('f')] })
    t.equal(c.last?.type, 'error', `${name}: error last`)
    t.equal((c.last as any).code, 'provider_protocol_error', name)
    t.notOk(c.events.some(e => e.type === 'item_end' && e.item.kind === 'tool_call' && e.item.call.callId === 'b'), `${name}: the broken call never ends`)
    t.notOk(c.events.some(e => e.type === 'finish'), `${name}: no finish`)
    t.ok(budget.idle, `${name}: budget idle`)
  }
  const { c } = decode('openai-chat', chatFrames({ text: 'partial', finish: null, usage: false, done: false }))
  t.match((c.last as any).message, /without a terminal/)
})

t.test('chat: the provider error frame -> error with the catalogue code and provider type', async t => {
  const frames = chatFrames({ text: 'abc', finish: null, usage: false, done: false })
  frames.push({ event: null, data: { error: { message: 'Rate limit reached. Please try again in 20s.', type: 'requests', code: 'rate_limit_exceeded' } } })
  const { c, budget } = decode('openai-chat', frames)
  t.match(c.last, { type: 'error', code: 'provider_rate_limited', providerType: 'requests', providerCode: 'rate_limit_exceeded', retryAfterSeconds: 20 })
  t.ok(budget.idle)
})

t.test('messages: thinking + signature and redacted thinking -> reasoning with opaque', async t => {
  const { c, budget } = decode('anthropic', messagesFrames({ thinking: { text: 'Hmm, "quotes" and é.', signature: 'EqSig+/==' }, redacted: 'REDACTED-BLOB', text: 'Answer.', calls: [{ id: 'toolu_1', name: 'Bash', args: '{"command":"ls"}' }] }), { tools: [fn('Bash')] })
  t.same(shape(c.events), ['start', 'start 0 reasoning', 'delta 0', 'end 0', 'start 1 reasoning', 'end 1', 'start 2 text', 'delta 2', 'end 2', 'start 3 function:Bash', 'delta 3', 'end 3', 'finish tool_calls'])
  const [th, rd] = ended(c.events)
  if (th.item.kind !== 'reasoning' || rd.item.kind !== 'reasoning') throw new Error('reasoning expected')
  t.equal(th.item.opaque?.issuer, 'anthropic:prov')
  t.same(parseAnthropicThinkingOpaque(th.item.opaque!.data), { type: 'thinking', thinking: 'Hmm, "quotes" and é.', signature: 'EqSig+/==' })
  t.equal(rd.item.redacted, true)
  t.same(parseAnthropicThinkingOpaque(rd.item.opaque!.data), { type: 'redacted_thinking', data: 'REDACTED-BLOB' })
  t.same((c.last as any).usage, { inputTokens: 40, outputTokens: 12, cachedInputTokens: 8, cacheCreationInputTokens: 2 }, 'input = input + cache reads + cache writes')
  t.ok(budget.idle)
})

t.test('messages: the real Claude Code captures decode to complete items', async t => {
  for (const name of ['claude-tool-thinking-01-response.sse', 'claude-tool-bash-01-response.sse', 'claude-text-01-response.sse', 'sdk-anthropic-01-response.sse']) {
    const { c, budget } = decode('anthropic', fixtureFrames(name), { tools: [fn('Bash')] })
    t.equal(c.last?.type, 'finish', name)
    t.ok(budget.idle, name)
  }
  const { c } = decode('anthropic', fixtureFrames('claude-tool-thinking-01-response.sse'), { tools: [fn('Bash')] })
  const call = ended(c.events).find(e => e.item.kind === 'tool_call')
  t.same(JSON.parse((call?.item as any).call.arguments), { command: 'echo hello-from-mock > mock_out.txt && cat mock_out.txt', description: 'Run echo via mock' })
})

t.test('messages: a custom tool input unwrapped live, escapes and surrogates cut anywhere', async t => {
  const patch = '*** Begin Patch\n*** Update File: x\n@@\n-a "b"\n+c \\ d 😀 é\t\n*** End Patch\n'
  for (const piece of [1, 2, 3, 5, 13]) {
    const { c, budget } = decode('anthropic', messagesFrames({ calls: [{ id: 'toolu_p', name: 'apply_patch', args: JSON.stringify({ input: patch }) }], piece }), { tools: [{ kind: 'custom', name: 'apply_patch', wireName: 'apply_patch' }] })
    const deltas = c.ofType('delta').filter(d => d.index === 0)
    t.ok(deltas.length > 1 || piece > 50, `piece ${piece}: streamed in ${deltas.length} deltas`)
    t.equal(deltas.map(d => d.text).join(''), patch, `piece ${piece}: the deltas are the raw input`)
    for (const d of deltas) t.notOk(/[\ud800-\udbff]$/.test(d.text), 'no delta ends on a lone high surrogate')
    t.equal((ended(c.events)[0].item as any).call.arguments, patch)
    t.ok(budget.idle)
  }
})

t.test('messages: max_tokens inside a tool_use, EOF inside a block, error events', async t => {
  const cut = messagesFrames({ calls: [{ id: 'toolu_1', name: 'Bash', args: '{"command":"ls -la /very/long' }], stop: 'max_tokens' })
  let r = decode('anthropic', cut, { tools: [fn('Bash')] })
  t.match(r.c.last, { type: 'error', code: 'provider_protocol_error' })
  t.notOk(r.c.events.some(e => e.type === 'item_end'), 'the cut call never ends')
  t.ok(r.budget.idle)
  // a cut that happens to be valid JSON still fails on max_tokens
  r = decode('anthropic', messagesFrames({ calls: [{ id: 'toolu_1', name: 'Bash', args: '{"command":"ls"}' }], stop: 'max_tokens' }), { tools: [fn('Bash')] })
  t.match(r.c.last, { type: 'error', code: 'provider_protocol_error', message: /max_tokens/ })
  t.ok(r.budget.idle)
  r = decode('anthropic', messagesFrames({ text: 'abc', calls: [{ id: 'toolu_1', name: 'Bash', args: '{"command":"l' }], terminal: false }).slice(0, -1), { tools: [fn('Bash')] })
  t.match(r.c.last, { type: 'error', code: 'provider_protocol_error', message: /inside a tool call/ })
  t.ok(r.budget.idle)
  const overloaded = messagesFrames({ text: 'abc', terminal: false })
  overloaded.push({ event: 'error', data: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } } })
  r = decode('anthropic', overloaded)
  t.match(r.c.last, { type: 'error', code: 'provider_unavailable', providerType: 'overloaded_error' })
  t.ok(r.budget.idle)
  // a text block cut by max_tokens is a complete (short) answer with a length stop
  r = decode('anthropic', messagesFrames({ text: 'abc', stop: 'max_tokens' }))
  t.match(r.c.last, { type: 'finish', stop: 'length' })
})

t.test('responses: the Codex captures (namespace, apply_patch, reasoning + parallel calls) decode', async t => {
  let r = decode('openai-responses', fixtureFrames('codex-tool-namespace-01-response.sse'))
  t.same(shape(r.c.events), ['start', 'start 0 function:multi_agent_v1/close_agent', 'delta 0', 'end 0', 'finish tool_calls'])
  t.ok(r.budget.idle)
  r = decode('openai-responses', fixtureFrames('codex-tool-applypatch-01-response.sse'))
  t.same(shape(r.c.events), ['start', 'start 0 custom:apply_patch', 'delta 0', 'end 0', 'finish tool_calls'])
  t.equal((ended(r.c.events)[0].item as any).call.arguments, '*** Begin Patch\n*** Add File: mock_patch.txt\n+patched by mock\n*** End Patch\n')
  r = decode('openai-responses', fixtureFrames('codex-tool-reasoning-parallel-01-response.sse'), { tools: [fn('exec_command')] })
  t.same(shape(r.c.events), ['start', 'start 0 reasoning', 'summary 0.0', 'end 0', 'start 1 function:exec_command', 'delta 1', 'end 1', 'start 2 function:exec_command', 'delta 2', 'end 2', 'finish tool_calls'])
  const rs = ended(r.c.events)[0].item
  if (rs.kind !== 'reasoning') throw new Error('reasoning')
  t.same(rs.summary, ['Thinking about the request (mock reasoning).'])
  t.same(parseOpenaiReasoningOpaque(rs.opaque!.data), { id: 'rs_xy2v80mzi3lwsgr1d7vj', encrypted_content: 'gAAAAABmockEncryptedReasoningBlob==' })
  t.same((r.c.last as any).usage, { inputTokens: 42, outputTokens: 12, cachedInputTokens: 0, reasoningTokens: 0 })
  t.ok(r.budget.idle)
  r = decode('openai-responses', fixtureFrames('codex-text-01-response.sse'))
  t.same(shape(r.c.events), ['start', 'start 0 text', 'delta 0', 'end 0', 'finish end'])
})

t.test('responses: incomplete inside a call, response.failed, EOF', async t => {
  const frames = fixtureFrames('codex-tool-reasoning-parallel-01-response.sse')
  const cutAt = frames.findIndex(f => f.event === 'response.function_call_arguments.delta') + 2
  const incomplete: Frame = { event: 'response.incomplete', data: { type: 'response.incomplete', response: { id: 'r', status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, usage: null } } }
  let r = decode('openai-responses', [...frames.slice(0, cutAt), incomplete])
  t.match(r.c.last, { type: 'error', code: 'provider_protocol_error', message: /incomplete/ })
  t.equal(ended(r.c.events).length, 1, 'only the reasoning item ended')
  t.ok(r.budget.idle)
  r = decode('openai-responses', frames.slice(0, cutAt))
  t.match(r.c.last, { type: 'error', code: 'provider_protocol_error', message: /inside a tool call/ })
  t.ok(r.budget.idle)
  const failed: Frame = { event: 'response.failed', data: { type: 'response.failed', response: { id: 'r', status: 'failed', error: { code: 'context_length_exceeded', message: 'Your input exceeds the context window of this model.' } } } }
  r = decode('openai-responses', [...frames.slice(0, 3), failed])
  t.match(r.c.last, { type: 'error', code: 'provider_error', providerCode: 'context_length_exceeded' })
})

t.test('caps: maxOutputItems, maxOutputBytes and the storage budget fail truthfully, budget idle', async t => {
  const calls: ScriptCall[] = Array.from({ length: 5 }, (_, i) => ({ id: `c${i}`, name: 'f', args: '{"a":1}' }))
  let r = decode('openai-chat', chatFrames({ calls, interleave: true }), { tools: [fn('f')], limits: { maxOutputItems: 4, maxOutputBytes: 1 << 20 } })
  t.match(r.c.last, { type: 'error', code: 'output_too_large', message: /maxOutputItems/ })
  t.ok(r.budget.idle)
  r = decode('anthropic', messagesFrames({ text: 'x'.repeat(500) }), { limits: { maxOutputItems: 256, maxOutputBytes: 100 } })
  t.match(r.c.last, { type: 'error', code: 'output_too_large', message: /maxOutputBytes/ })
  t.ok(r.budget.idle)
  r = decode('openai-chat', chatFrames({ calls: [{ id: 'a', name: 'f', args: JSON.stringify({ x: 'y'.repeat(400) }) }] }), { tools: [fn('f')], budget: new CountingBudget(200) })
  t.match(r.c.last, { type: 'error', code: 'output_too_large' })
  t.equal(r.budget.peak <= 200, true, 'never over the cap')
  t.ok(r.budget.idle)
})

t.test('fromJson: each protocol\'s JSON answer gives the same events as its stream', async t => {
  const tools = [fn('get_weather')]
  const chatJson = { id: 'chatcmpl-1', object: 'chat.completion', created: 1, model: 'gpt-x', choices: [{ index: 0, message: { role: 'assistant', content: 'Hi.', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"x"}' } }] }, finish_reason: 'tool_calls' }], usage: { prompt_tokens: 3, completion_tokens: 4 } }
  const msgJson = { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-x', content: [{ type: 'thinking', thinking: 'th', signature: 'sig' }, { type: 'text', text: 'Hi.' }, { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'x' } }], stop_reason: 'tool_use', usage: { input_tokens: 3, output_tokens: 4 } }
  const respJson = { id: 'resp_1', object: 'response', created_at: 1, model: 'gpt-x', status: 'completed', output: [{ id: 'msg_a', type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hi.' }] }, { id: 'fc_a', type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"x"}' }], usage: { input_tokens: 3, output_tokens: 4 } }
  const cases: Array<[string, (a: unknown, o: DecoderOptions) => void, unknown, string[]]> = [
    ['chat', chatFromJson, chatJson, ['start', 'start 0 text', 'delta 0', 'end 0', 'start 1 function:get_weather', 'delta 1', 'end 1', 'finish tool_calls']],
    ['messages', messagesFromJson, msgJson, ['start', 'start 0 reasoning', 'delta 0', 'end 0', 'start 1 text', 'delta 1', 'end 1', 'start 2 function:get_weather', 'delta 2', 'end 2', 'finish tool_calls']],
    ['responses', responsesFromJson, respJson, ['start', 'start 0 text', 'delta 0', 'end 0', 'start 1 function:get_weather', 'delta 1', 'end 1', 'finish tool_calls']],
  ]
  for (const [name, f, answer, want] of cases) {
    const c = new EventSequenceChecker()
    const budget = new CountingBudget()
    f(answer, { sink: c, budget, issuer: 'x:y', lookup: toolLookup(tools) })
    t.same(shape(c.events), want, name)
    const call = ended(c.events).find(e => e.item.kind === 'tool_call')
    t.same(JSON.parse((call?.item as any).call.arguments), { city: 'x' }, `${name}: the call's arguments`)
    t.ok(budget.idle, `${name}: budget idle`)
  }
  const c = new EventSequenceChecker()
  chatFromJson({ ...chatJson, choices: [{ ...chatJson.choices[0], finish_reason: 'length' }] }, { sink: c, budget: new CountingBudget(), issuer: 'x:y', lookup: toolLookup(tools) })
  t.match(c.last, { type: 'error', code: 'provider_protocol_error' }, 'a JSON answer cut by length inside a call fails too')
})

t.test('InputUnwrapper: layouts it does not follow stop the live output (the whole input comes at the end)', async t => {
  const u = new InputUnwrapper()
  t.equal(u.feed('{"other":1,"input":"x"}'), '')
  t.equal(u.live, false)
  t.equal(u.emitted, false)
  const v = new InputUnwrapper()
  t.equal(v.feed(' { "input" : "a\\u00e9'), 'aé')
  t.equal(v.feed('\\ud83d'), '', 'a lone high surrogate is held')
  t.equal(v.feed('\\ude00b"}'), '😀b')
  t.equal(v.closed, true)
  const { c, budget } = decode('anthropic', messagesFrames({ calls: [{ id: 't', name: 'apply_patch', args: '{"note":"n","input":"PATCH"}' }] }), { tools: [{ kind: 'custom', name: 'apply_patch', wireName: 'apply_patch' }] })
  t.same(c.ofType('delta').map(d => d.text), ['PATCH'])
  t.ok(budget.idle)
})

t.test('chat: fragments without index (compatible providers) still make whole calls', async t => {
  const chunk = (tc: Record<string, unknown>): Frame => ({ event: null, data: { id: 'x', model: 'm', choices: [{ index: 0, delta: { tool_calls: [tc] }, finish_reason: null }] } })
  const frames: Frame[] = [
    chunk({ id: 'call_a', type: 'function', function: { name: 'f', arguments: '{"a":' } }),
    chunk({ function: { arguments: '1}' } }),
    chunk({ id: 'call_b', type: 'function', function: { name: 'f', arguments: '{}' } }),
    { event: null, data: { id: 'x', choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] } },
    { event: null, data: '[DONE]' },
  ]
  const { c, budget } = decode('openai-chat', frames, { tools: [fn('f')] })
  t.same(ended(c.events).map(e => e.item.kind === 'tool_call' && [e.item.call.callId, e.item.call.arguments]), [['call_a', '{"a":1}'], ['call_b', '{}']])
  t.ok(budget.idle)
})

t.test('custom: a streamed input that differs from the parsed one (a second "input" key) fails', async t => {
  const { c, budget } = decode('anthropic', messagesFrames({ calls: [{ id: 't', name: 'apply_patch', args: '{"input":"first","input":"second!"}' }] }), { tools: [{ kind: 'custom', name: 'apply_patch', wireName: 'apply_patch' }] })
  t.match(c.last, { type: 'error', code: 'provider_protocol_error', message: /ambiguous/ })
  t.notOk(c.events.some(e => e.type === 'item_end'))
  t.ok(budget.idle)
})

t.test('chat: arguments sent as an object (compatible providers) are kept, not lost', async t => {
  const c = new EventSequenceChecker()
  const budget = new CountingBudget()
  chatFromJson({ id: 'c', choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [{ id: 'call_o', type: 'function', function: { name: 'f', arguments: { a: [1, 2] } } }] }, finish_reason: 'tool_calls' }] }, { sink: c, budget, issuer: 'x:y', lookup: toolLookup([fn('f')]) })
  t.equal((ended(c.events)[0].item as any).call.arguments, '{"a":[1,2]}')
  t.ok(budget.idle)
})

t.test('every cut of a stream: finish only when whole; a call ends only complete; budget idle', async t => {
  const calls: ScriptCall[] = [
    { id: 'call_a', name: 'f', args: JSON.stringify({ path: '/a', n: 1 }) },
    { id: 'call_b', name: 'f', args: JSON.stringify({ path: '/bb', deep: { x: [1, 2, 3] } }) },
    { id: 'call_c', name: 'f', args: '' },
  ]
  const streams: Array<[Protocol, Frame[]]> = [
    ['openai-chat', chatFrames({ reasoning: 'r', text: 'some text', calls, interleave: true, piece: 4 })],
    ['anthropic', messagesFrames({ thinking: { text: 'th', signature: 'sig' }, text: 'some text', calls, piece: 4 })],
    ['openai-responses', fixtureFrames('codex-tool-reasoning-parallel-01-response.sse')],
  ]
  const full = new Map<string, string>(calls.map(c => [c.id, c.args === '' ? '{}' : c.args]))
  for (const f of fixtureFrames('codex-tool-reasoning-parallel-01-response.sse')) {
    const item = (f.data as any).item
    if (f.event === 'response.output_item.done' && item.type === 'function_call') full.set(item.call_id, item.arguments)
  }
  for (const [from, frames] of streams) {
    let finished = 0
    for (let k = 0; k <= frames.length; k++) {
      const { c, budget } = decode(from, frames.slice(0, k), { tools: [fn('f'), fn('exec_command')] })
      const last = c.last
      if (k === frames.length) t.equal(last?.type, 'finish', `${from}: the whole stream finishes`)
      else if (last?.type !== 'error') {
        t.fail(`${from}: cut after ${k} of ${frames.length} frames ended with ${last?.type}`)
        continue
      }
      if (last?.type === 'finish') finished++
      for (const e of ended(c.events)) {
        if (e.item.kind === 'tool_call') {
          if (e.item.call.arguments !== full.get(e.item.call.callId)) t.fail(`${from}: cut at ${k}: call ${e.item.call.callId} ended incomplete`)
        }
      }
      if (!budget.idle) t.fail(`${from}: cut at ${k}: budget not idle`)
    }
    t.equal(finished, 1, `${from}: only the whole stream finished (of ${frames.length + 1} cuts)`)
  }
})
