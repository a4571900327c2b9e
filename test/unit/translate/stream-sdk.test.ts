// Translated streams as the official SDKs' stream helpers read them (openai
// responses.stream() / chat.completions.stream(), @anthropic-ai/sdk messages.stream()):
// scripted provider streams of the other protocols (and the real same-protocol captures as
// perfect provider streams) go through createStreamTranslator; the bytes are served to the
// SDK. Failures get the client protocol's signed failure event with the fields the client
// acts on; the SDK never reports a broken call as completed. Budget idle after every case.
import t, { type Test } from 'tap'
import OpenAI from 'openai'
import Anthropic from '@anthropic-ai/sdk'
import { buildFailureRecord, signRecord, verifyRecord, type FailureRecord } from '../../../src/sse/sign.ts'
import { isErrorCode } from '../../../src/errors.ts'
import { opaqueFor, unwrapOpaque } from '../../../src/translate/envelope.ts'
import { parseAnthropicThinkingOpaque, parseOpenaiReasoningOpaque } from '../../../src/translate/reasoning.ts'
import type { Protocol, ToolDef } from '../../../src/translate/canonical.ts'
import { chatFrames, fixtureFrames, fn, messagesFrames, request, run, serve, settle, type Frame, type Run, type ScriptCall } from './helpers.ts'

const KEY = Buffer.from('sluice-test-signing-key-32-bytes')

function openai (bytes: Buffer): OpenAI {
  return new OpenAI({ apiKey: 'sk-test', baseURL: 'http://sluice.invalid/v1', maxRetries: 0, logLevel: 'off', fetch: serve([bytes]) })
}
function anthropic (bytes: Buffer): Anthropic {
  return new Anthropic({ apiKey: 'sk-test', baseURL: 'http://sluice.invalid', maxRetries: 0, logLevel: 'off', fetch: serve([bytes]) })
}

function translate (from: Protocol, to: Protocol, frames: Frame[], tools: ToolDef[] = [], o: { eof?: boolean; includeUsage?: boolean } = {}): Run {
  const opts: Parameters<typeof run>[0] = { from, to, request: request(to, tools), issuer: `${from}:prov-a` }
  if (o.includeUsage !== undefined) opts.includeUsage = o.includeUsage
  return run(opts, frames, o.eof !== false)
}

/** The translated bytes plus the signed failure tail, as the worker will write them. */
function failed (t: Test, r: Run): { bytes: Buffer; record: FailureRecord; signature: string } {
  const f = r.t.failure
  t.ok(f !== null, 'the translation failed')
  if (f === null) throw new Error('no failure')
  t.ok(isErrorCode(f.code), `${f.code} is a catalogue code`)
  const record = buildFailureRecord({ code: f.code as FailureRecord['code'], message: f.message, exchangeId: 'ex-1', runId: null, provider: 'prov-a', model: 'm', framesRelayed: 0, bytesRelayed: r.bytes.length, usage: null, partial: true })
  const signature = signRecord(record, KEY)
  const tail = r.t.failureTail(record, signature)
  t.ok(r.budget.idle, 'budget idle after the failure tail')
  return { bytes: Buffer.concat([r.bytes, tail]), record, signature }
}

async function responsesRun (bytes: Buffer): Promise<{ events: any[]; final: any; error?: any }> {
  const events: any[] = []
  const s = openai(bytes).responses.stream({ model: 'm', input: 'x' })
  const r = await settle((async () => {
    for await (const e of s) events.push(e)
    return s.finalResponse()
  })())
  return { events, final: r.value, error: r.error }
}

function lifecycle (t: Test, events: any[]): void {
  t.equal(events[0].type, 'response.created', 'response.created first')
  const seq = events.map(e => e.sequence_number)
  t.same(seq, seq.map((_, i) => i), 'sequence_number increasing from 0')
  const terminals = events.filter(e => ['response.completed', 'response.incomplete', 'response.failed'].includes(e.type))
  t.equal(terminals.length, 1, 'exactly one terminal')
  t.equal(events[events.length - 1], terminals[0], 'the terminal is last')
  const added = events.filter(e => e.type === 'response.output_item.added').map(e => e.output_index)
  t.same(added, added.map((_, i) => i), 'output_index contiguous from 0')
  const done = events.filter(e => e.type === 'response.output_item.done')
  if (terminals[0].type !== 'response.failed') {
    t.same(terminals[0].response.output.map((i: any) => i.id), done.map(e => e.item.id), 'the terminal lists every item with the stream\'s ids')
  }
}

t.test('responses client <- chat provider: text, usage', async t => {
  const r = translate('openai-chat', 'openai-responses', chatFrames({ text: 'Hello from a Chat provider, translated.' }))
  t.ok(r.budget.idle)
  const { events, final, error } = await responsesRun(r.bytes)
  t.equal(error, undefined, `${error?.message}`)
  lifecycle(t, events)
  t.equal(final.status, 'completed')
  t.equal(final.output_text, 'Hello from a Chat provider, translated.')
  t.same(final.usage, { input_tokens: 40, input_tokens_details: { cached_tokens: 8 }, output_tokens: 12, output_tokens_details: { reasoning_tokens: 3 }, total_tokens: 52 })
  t.same(events.slice(2, 5).map(e => e.type), ['response.output_item.added', 'response.content_part.added', 'response.output_text.delta'])
})

t.test('responses client <- chat provider: 32 interleaved parallel calls, text before them', async t => {
  const calls: ScriptCall[] = Array.from({ length: 32 }, (_, i) => ({ id: `call_${String(i).padStart(2, '0')}`, name: 'exec_command', args: JSON.stringify({ cmd: `echo ${i}`, workdir: '/tmp' }) }))
  const r = translate('openai-chat', 'openai-responses', chatFrames({ text: 'Running them.', calls, interleave: true, piece: 4 }), [fn('exec_command')])
  const { events, final, error } = await responsesRun(r.bytes)
  t.equal(error, undefined, `${error?.message}`)
  lifecycle(t, events)
  const fcs = final.output.filter((i: any) => i.type === 'function_call')
  t.equal(fcs.length, 32)
  t.same(fcs.map((i: any) => i.call_id), calls.map(c => c.id))
  t.same(fcs.map((i: any) => JSON.parse(i.arguments)), calls.map(c => JSON.parse(c.args)))
  t.equal(new Set(fcs.map((i: any) => i.id)).size, 32, 'distinct item ids')
  // non-overlapping: every call's deltas sit between its added and its done
  let open = -1
  for (const e of events) {
    if (e.type === 'response.output_item.added') { t.equal(open, -1); open = e.output_index }
    if (e.type === 'response.function_call_arguments.delta' && e.output_index !== open) t.fail('a delta outside its open item')
    if (e.type === 'response.output_item.done') open = -1
  }
  t.ok(r.budget.idle)
})

t.test('responses client: namespaced call restored as Codex sends it (function_call + namespace)', async t => {
  const tools: ToolDef[] = [{ kind: 'function', name: 'close_agent', namespace: 'multi_agent_v1', wireName: 'multi_agent_v1__close_agent' }]
  const r = translate('openai-chat', 'openai-responses', chatFrames({ calls: [{ id: 'call_ns1', name: 'multi_agent_v1__close_agent', args: '{"target":"x"}' }] }), tools)
  const { events, final, error } = await responsesRun(r.bytes)
  t.equal(error, undefined, `${error?.message}`)
  lifecycle(t, events)
  const capture = fixtureFrames('codex-tool-namespace-01-response.sse').find(f => f.event === 'response.output_item.done')!.data as any
  const ours = events.find(e => e.type === 'response.output_item.done').item
  t.same(Object.keys(ours).sort(), Object.keys(capture.item).sort(), 'the same fields as the capture Codex accepted')
  t.match(ours, { type: 'function_call', name: 'close_agent', namespace: 'multi_agent_v1', call_id: 'call_ns1', arguments: '{"target":"x"}', status: 'completed' })
  t.equal(final.output[0].namespace, 'multi_agent_v1')
})

t.test('responses client: custom apply_patch call with live input deltas (anthropic) and buffered (chat)', async t => {
  const patch = '*** Begin Patch\n*** Add File: mock_patch.txt\n+patched "by" mock \\ ✓\n*** End Patch\n'
  const tools: ToolDef[] = [{ kind: 'custom', name: 'apply_patch', wireName: 'apply_patch' }]
  for (const [from, frames] of [
    ['anthropic', messagesFrames({ calls: [{ id: 'toolu_ap', name: 'apply_patch', args: JSON.stringify({ input: patch }) }], piece: 6 })],
    ['openai-chat', chatFrames({ calls: [{ id: 'call_ap', name: 'apply_patch', args: JSON.stringify({ input: patch }) }], piece: 6 })],
  ] as Array<[Protocol, Frame[]]>) {
    const r = translate(from, 'openai-responses', frames, tools)
    const { events, final, error } = await responsesRun(r.bytes)
    t.equal(error, undefined, `${from}: ${error?.message}`)
    lifecycle(t, events)
    const deltas = events.filter(e => e.type === 'response.custom_tool_call_input.delta')
    t.ok(from === 'anthropic' ? deltas.length > 3 : deltas.length === 1, `${from}: ${deltas.length} input deltas`)
    t.equal(deltas.map(d => d.delta).join(''), patch)
    t.equal(events.find(e => e.type === 'response.custom_tool_call_input.done').input, patch)
    t.match(final.output[0], { type: 'custom_tool_call', name: 'apply_patch', input: patch, status: 'completed' })
    t.notOk(events.some(e => e.type.startsWith('response.function_call')), 'never an ordinary function call')
    t.ok(r.budget.idle)
  }
})

t.test('responses client: tool_search restored as tool_search_call, a no-argument call as {}', async t => {
  const tools: ToolDef[] = [{ kind: 'tool_search', name: 'tool_search', wireName: 'tool_search' }, fn('get_goal')]
  const r = translate('openai-chat', 'openai-responses', chatFrames({ calls: [{ id: 'call_ts', name: 'tool_search', args: '{"query":"calendar create","limit":1}' }, { id: 'call_ng', name: 'get_goal', args: '' }], interleave: true }), tools)
  const { events, final, error } = await responsesRun(r.bytes)
  t.equal(error, undefined, `${error?.message}`)
  lifecycle(t, events)
  t.same(final.output[0], { id: final.output[0].id, type: 'tool_search_call', status: 'completed', call_id: 'call_ts', execution: 'client', arguments: { query: 'calendar create', limit: 1 } })
  t.match(final.output[1], { type: 'function_call', name: 'get_goal', arguments: '{}' })
  t.notOk(events.some(e => e.type === 'response.function_call_arguments.delta' && e.output_index === 0), 'no function-call events for the search')
})

t.test('responses client <- anthropic: thinking + signature round-trip through encrypted_content', async t => {
  const thinking = { text: 'The user wants "ls"; é 😀.', signature: 'EqMockSignatureBase64+/==' }
  const r = translate('anthropic', 'openai-responses', messagesFrames({ thinking, redacted: 'REDACTED==', text: 'Running a tool.', calls: [{ id: 'toolu_1', name: 'Bash', args: '{"command":"ls"}' }] }), [fn('Bash')])
  const { events, final, error } = await responsesRun(r.bytes)
  t.equal(error, undefined, `${error?.message}`)
  lifecycle(t, events)
  t.same(final.output.map((i: any) => i.type), ['reasoning', 'reasoning', 'message', 'function_call'])
  const [rs, rd] = final.output
  t.same(rs.summary, [{ type: 'summary_text', text: thinking.text }])
  const env = unwrapOpaque(rs.encrypted_content)
  t.equal(env?.issuer, 'anthropic:prov-a', 'scoped to the issuing provider')
  t.same(parseAnthropicThinkingOpaque(env!.data), { type: 'thinking', thinking: thinking.text, signature: thinking.signature }, 'byte-exact thinking and signature')
  // What the request side does when Codex replays the item: only the issuer gets it back.
  t.same(parseAnthropicThinkingOpaque(opaqueFor(env!, 'anthropic:prov-a') ?? ''), { type: 'thinking', thinking: thinking.text, signature: thinking.signature })
  t.equal(opaqueFor(env!, 'anthropic:prov-b'), null, 'another provider never gets it')
  t.same(parseAnthropicThinkingOpaque(unwrapOpaque(rd.encrypted_content)!.data), { type: 'redacted_thinking', data: 'REDACTED==' })
  t.equal(rd.summary.length, 0)
  t.equal(final.output[3].call_id, 'toolu_1')
  t.ok(r.budget.idle)
})

t.test('responses client: truncated / cut / unterminated calls fail, never complete', async t => {
  const cases: Array<[string, Protocol, Frame[], boolean]> = [
    ['invalid JSON at finish', 'openai-chat', chatFrames({ text: 'ok', calls: [{ id: 'call_bad', name: 'f', args: '{"cmd":"ls' }] }), true],
    ['length inside a call', 'openai-chat', chatFrames({ calls: [{ id: 'call_bad', name: 'f', args: '{"cmd":"ls"}' }], finish: 'length' }), true],
    ['EOF without terminal', 'openai-chat', chatFrames({ calls: [{ id: 'call_bad', name: 'f', args: '{"cmd":"ls"}' }], finish: null, usage: false, done: false }), true],
    ['anthropic max_tokens inside tool_use', 'anthropic', messagesFrames({ text: 'ok', calls: [{ id: 'call_bad', name: 'f', args: '{"cmd":"l' }], stop: 'max_tokens' }), true],
    ['anthropic EOF inside tool_use', 'anthropic', messagesFrames({ calls: [{ id: 'call_bad', name: 'f', args: '{"cmd":"l' }], terminal: false }).slice(0, -1), true],
  ]
  for (const [name, from, frames] of cases) {
    const r = translate(from, 'openai-responses', frames, [fn('f')])
    const f = failed(t, r)
    const { events, final, error } = await responsesRun(f.bytes)
    t.equal(error, undefined, `${name}: ${error?.message}`)
    lifecycle(t, events)
    t.equal(final.status, 'failed', `${name}: failed`)
    t.equal(final.error.code, 'provider_protocol_error')
    t.notOk(final.output.some((i: any) => i.call_id === 'call_bad' && i.status === 'completed'), `${name}: the SDK reports no completed call`)
    t.notOk(events.some(e => e.type === 'response.output_item.done' && e.item.call_id === 'call_bad'), `${name}: no output_item.done for it`)
    t.ok(verifyRecord(final.error.sluice.record, final.error.sluice.signature, KEY), `${name}: the signed record verifies`)
  }
})

t.test('responses client: provider errors in the fields Codex acts on', async t => {
  const cases: Array<[string, Frame, string, RegExp]> = [
    ['rate limit', { event: null, data: { error: { message: 'Rate limit reached. Please try again in 20s.', type: 'requests', code: 'rate_limit_exceeded' } } }, 'rate_limit_exceeded', /Please try again in 20s\./],
    ['quota', { event: null, data: { error: { message: 'You exceeded your current quota.', type: 'insufficient_quota', code: 'insufficient_quota' } } }, 'insufficient_quota', /quota/],
    ['context', { event: null, data: { error: { message: 'maximum context length is 128000 tokens', type: 'invalid_request_error', code: 'context_length_exceeded' } } }, 'context_length_exceeded', /context/],
  ]
  for (const [name, frame, code, msg] of cases) {
    const frames = chatFrames({ text: 'partial', finish: null, usage: false, done: false })
    frames.push(frame)
    const r = translate('openai-chat', 'openai-responses', frames)
    const f = failed(t, r)
    const { final } = await responsesRun(f.bytes)
    t.equal(final.error.code, code, name)
    t.match(final.error.message, msg, name)
    t.match(final.error.message, new RegExp(`^sluice ${f.record.code}: `), `${name}: the catalogue code leads the message`)
  }
  const frames = messagesFrames({ text: 'abc', terminal: false })
  frames.push({ event: 'error', data: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } } })
  const f = failed(t, translate('anthropic', 'openai-responses', frames))
  const { final } = await responsesRun(f.bytes)
  t.equal(final.error.code, 'server_is_overloaded')
  t.equal(f.record.code, 'provider_unavailable')
  // before any response.created: the SDK throws APIError
  const early = translate('anthropic', 'openai-responses', [{ event: 'error', data: { type: 'error', error: { type: 'rate_limit_error', message: 'slow down' } } }])
  const e2 = failed(t, early)
  const got = await responsesRun(e2.bytes)
  t.ok(got.error instanceof OpenAI.APIError, `${got.error?.constructor?.name}`)
  t.equal(got.error.code, 'rate_limit_exceeded')
})

async function messagesRun (bytes: Buffer): Promise<{ events: any[]; final: any; error?: any }> {
  const events: any[] = []
  const s = anthropic(bytes).messages.stream({ model: 'm', max_tokens: 100, messages: [{ role: 'user', content: 'x' }] })
  s.on('streamEvent', e => events.push(e))
  const r = await settle(s.finalMessage())
  return { events, final: r.value, error: r.error }
}

function nesting (t: Test, events: any[]): void {
  t.equal(events[0].type, 'message_start')
  let open = -1
  let next = 0
  for (const e of events) {
    if (e.type === 'content_block_start') { t.equal(open, -1, 'blocks do not overlap'); t.equal(e.index, next++, 'indexes in order'); open = e.index }
    if (e.type === 'content_block_delta' && e.index !== open) t.fail('delta outside its block')
    if (e.type === 'content_block_stop') { t.equal(e.index, open); open = -1 }
  }
  t.same(events.slice(-2).map(e => e.type), ['message_delta', 'message_stop'])
  t.equal(events.filter(e => e.type === 'message_delta').length, 1, 'one message_delta')
}

t.test('messages client <- responses provider: OpenAI reasoning carried in the thinking signature, parallel calls', async t => {
  const r = translate('openai-responses', 'anthropic', fixtureFrames('codex-tool-reasoning-parallel-01-response.sse'), [fn('exec_command')])
  const { events, final, error } = await messagesRun(r.bytes)
  t.equal(error, undefined, `${error?.message}`)
  nesting(t, events)
  t.same(final.content.map((b: any) => b.type), ['thinking', 'tool_use', 'tool_use'])
  t.equal(final.content[0].thinking, 'Thinking about the request (mock reasoning).')
  const env = unwrapOpaque(final.content[0].signature)
  t.equal(env?.issuer, 'openai-responses:prov-a')
  t.same(parseOpenaiReasoningOpaque(env!.data), { id: 'rs_xy2v80mzi3lwsgr1d7vj', encrypted_content: 'gAAAAABmockEncryptedReasoningBlob==' })
  t.same(final.content[1].input, { cmd: 'echo hello-from-mock > mock_out.txt && cat mock_out.txt' })
  t.equal(final.content[1].id, 'call_r8tyxr15vn5qydvisfr4')
  t.equal(final.stop_reason, 'tool_use')
  t.equal(final.usage.input_tokens, 42)
  t.equal(final.usage.output_tokens, 12)
  t.ok(r.budget.idle)
})

t.test('messages client <- responses provider: reasoning with only encrypted_content -> redacted_thinking carrying it', async t => {
  const frames = fixtureFrames('codex-tool-reasoning-parallel-01-response.sse').filter(f => !f.event?.startsWith('response.reasoning_summary'))
  for (const f of frames) if (f.event === 'response.output_item.done' && (f.data as any).item.type === 'reasoning') (f.data as any).item.summary = []
  const r = translate('openai-responses', 'anthropic', frames, [fn('exec_command')])
  const { events, final, error } = await messagesRun(r.bytes)
  t.equal(error, undefined, `${error?.message}`)
  nesting(t, events)
  t.same(final.content.map((b: any) => b.type), ['redacted_thinking', 'tool_use', 'tool_use'])
  t.same(parseOpenaiReasoningOpaque(unwrapOpaque(final.content[0].data)!.data), { id: 'rs_xy2v80mzi3lwsgr1d7vj', encrypted_content: 'gAAAAABmockEncryptedReasoningBlob==' })
  t.ok(r.budget.idle)
})

t.test('messages client <- chat provider: text, 32 interleaved calls, max_tokens stop', async t => {
  const calls: ScriptCall[] = Array.from({ length: 32 }, (_, i) => ({ id: `call_${i}`, name: 'Bash', args: JSON.stringify({ command: `echo ${i}` }) }))
  let r = translate('openai-chat', 'anthropic', chatFrames({ reasoning: 'thinking...', text: 'Let me run these.', calls, interleave: true, piece: 3 }), [fn('Bash')])
  let got = await messagesRun(r.bytes)
  t.equal(got.error, undefined, `${got.error?.message}`)
  nesting(t, got.events)
  t.same(got.final.content.map((b: any) => b.type), ['thinking', 'text', ...calls.map(() => 'tool_use')])
  t.same(got.final.content.slice(2).map((b: any) => b.input), calls.map(c => JSON.parse(c.args)))
  t.equal(got.final.content[0].signature, '', 'no opaque from a Chat provider: no signature (never a fake one)')
  t.equal(got.final.stop_reason, 'tool_use')
  t.equal(got.final.usage.cache_read_input_tokens, 8)
  t.equal(got.final.usage.input_tokens, 32, 'Anthropic input_tokens excludes cache reads')
  t.ok(r.budget.idle)
  r = translate('openai-chat', 'anthropic', chatFrames({ text: 'cut sh', finish: 'length' }))
  got = await messagesRun(r.bytes)
  t.equal(got.final.stop_reason, 'max_tokens')
})

t.test('messages client: failures are event: error with the type Claude Code acts on', async t => {
  const cases: Array<[string, Protocol, Frame[], string]> = [
    ['chat rate limit', 'openai-chat', [...chatFrames({ text: 'a', finish: null, usage: false, done: false }), { event: null, data: { error: { message: 'Please try again in 3s', type: 'requests', code: 'rate_limit_exceeded' } } }], 'rate_limit_error'],
    ['responses failed: context', 'openai-responses', [...fixtureFrames('codex-text-01-response.sse').slice(0, 4), { event: 'response.failed', data: { type: 'response.failed', response: { id: 'r', error: { code: 'context_length_exceeded', message: 'Your input exceeds the context window of this model.' } } } }], 'invalid_request_error'],
    ['responses server error', 'openai-responses', [...fixtureFrames('codex-text-01-response.sse').slice(0, 4), { event: 'error', data: { type: 'error', code: 'server_is_overloaded', message: 'overloaded' } }], 'overloaded_error'],
    ['chat truncated call', 'openai-chat', chatFrames({ calls: [{ id: 'call_bad', name: 'Bash', args: '{"command":"ls' }] }), 'api_error'],
    ['chat EOF', 'openai-chat', chatFrames({ calls: [{ id: 'call_bad', name: 'Bash', args: '{"command":"ls"}' }], finish: null, usage: false, done: false }), 'api_error'],
  ]
  for (const [name, from, frames, type] of cases) {
    const r = translate(from, 'anthropic', frames, [fn('Bash')])
    const f = failed(t, r)
    const got = await messagesRun(f.bytes)
    t.ok(got.error instanceof Anthropic.APIError, `${name}: APIError (${got.error?.constructor?.name})`)
    t.equal(got.error?.error?.error?.type, type, name)
    t.notOk(got.events.some(e => e.type === 'content_block_start' && e.content_block.id === 'call_bad'), `${name}: the broken call never reached the client`)
    t.ok(verifyRecord(got.error.error.error.sluice.record, got.error.error.error.sluice.signature, KEY))
  }
})

async function chatRun (bytes: Buffer): Promise<{ chunks: any[]; final: any; error?: any }> {
  const chunks: any[] = []
  const s = openai(bytes).chat.completions.stream({ model: 'm', messages: [{ role: 'user', content: 'x' }], stream_options: { include_usage: true } })
  s.on('chunk', c => chunks.push(c))
  const r = await settle(s.finalChatCompletion())
  return { chunks, final: r.value, error: r.error }
}

t.test('chat client <- anthropic / responses providers', async t => {
  let r = translate('anthropic', 'openai-chat', fixtureFrames('claude-tool-thinking-01-response.sse'), [fn('Bash')], { includeUsage: true })
  let got = await chatRun(r.bytes)
  t.equal(got.error, undefined, `${got.error?.message}`)
  t.equal(new Set(got.chunks.map(c => c.id)).size, 1, 'one id')
  t.equal(got.chunks[0].choices[0].delta.role, 'assistant', 'role first')
  t.equal(got.chunks.filter(c => c.choices[0]?.finish_reason).length, 1, 'one finish_reason')
  const m = got.final.choices[0]
  t.equal(m.message.content, 'Running a tool.')
  t.equal(m.finish_reason, 'tool_calls')
  t.equal(m.message.tool_calls[0].id, 'toolu_p6vv680q4cr7y4gq2zf1')
  t.same(JSON.parse(m.message.tool_calls[0].function.arguments), { command: 'echo hello-from-mock > mock_out.txt && cat mock_out.txt', description: 'Run echo via mock' })
  t.equal(got.final.usage.prompt_tokens, 42)
  t.ok(r.budget.idle)
  r = translate('openai-responses', 'openai-chat', fixtureFrames('codex-tool-reasoning-parallel-01-response.sse'), [fn('exec_command')], { includeUsage: false })
  got = await chatRun(r.bytes)
  t.equal(got.error, undefined, `${got.error?.message}`)
  t.same(got.final.choices[0].message.tool_calls.map((c: any) => c.id), ['call_r8tyxr15vn5qydvisfr4', 'call_hj6gdnr1slchdw1c52a8'])
  t.notOk(r.text.includes('"usage"'), 'no usage chunk unless asked')
  r = translate('anthropic', 'openai-chat', messagesFrames({ text: 'x', calls: [{ id: 'call_bad', name: 'Bash', args: '{"a' }], stop: 'max_tokens' }), [fn('Bash')])
  const f = failed(t, r)
  t.notOk(f.bytes.includes('[DONE]'))
  got = await chatRun(f.bytes)
  t.ok(got.error instanceof OpenAI.APIError)
  t.equal(got.error.code, 'provider_protocol_error')
  // The call streamed live from Anthropic, but a Chat client gets a call only whole, at its end
  // (encode-chat.ts): Chat has no per-call end and Chat clients finalise whatever call they hold
  // when the stream ends (the AI SDK's chat model reports a cut call as a tool-call even after
  // the error frame). So none of the cut call's chunks went out: only the text, then the error,
  // no finish_reason, and the SDK throws instead of returning a completion with it.
  t.notOk(got.chunks.some(c => c.choices[0]?.delta?.tool_calls), 'none of the cut call went out')
  t.equal(got.chunks.map(c => c.choices[0]?.delta?.content ?? '').join(''), 'x', 'the text streamed live')
  t.notOk(got.chunks.some(c => c.choices[0]?.finish_reason), 'no finish_reason')
  t.equal(got.final, undefined, 'no completion')
})

t.test('the real captures as provider streams, to both other client protocols', async t => {
  const sets: Array<[Protocol, string]> = [
    ['openai-chat', 'sdk-openai7-01-response.sse'], ['openai-chat', 'sdk-openai7-02-response.sse'],
    ['anthropic', 'claude-text-01-response.sse'], ['anthropic', 'claude-tool-bash-01-response.sse'], ['anthropic', 'claude-tool-thinking-02-response.sse'], ['anthropic', 'sdk-anthropic-02-response.sse'],
    ['openai-responses', 'codex-text-01-response.sse'], ['openai-responses', 'codex-tool-exec-01-response.sse'], ['openai-responses', 'sdk-openai7-05-response.sse'],
  ]
  for (const [from, name] of sets) {
    for (const to of (['openai-chat', 'openai-responses', 'anthropic'] as Protocol[]).filter(p => p !== from)) {
      const r = translate(from, to, fixtureFrames(name), [fn('Bash'), fn('get_weather'), fn('exec_command')], { includeUsage: true })
      t.equal(r.t.failure, null, `${name} -> ${to}`)
      t.ok(r.budget.idle)
      const got = to === 'openai-responses' ? await responsesRun(r.bytes) : to === 'anthropic' ? await messagesRun(r.bytes) : await chatRun(r.bytes)
      t.equal(got.error, undefined, `${name} -> ${to}: ${got.error?.message}`)
    }
  }
})

