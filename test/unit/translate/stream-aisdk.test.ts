// The Vercel AI SDK (ai + @ai-sdk/openai responses()/chat() + @ai-sdk/anthropic) as a strict
// extra validator: it checks every chunk (and every JSON answer) against its schemas. The
// translated bytes are served by a loopback HTTP server; a valid translation yields no
// `error` part, the items come out as the provider sent them, and a failure surfaces as an
// error (never as a finished tool call).
import t from 'tap'
import { generateText, jsonSchema, streamText, tool } from 'ai'
import { createOpenAI } from '@ai-sdk/openai'
import { createAnthropic } from '@ai-sdk/anthropic'
import { CountingBudget, type Protocol } from '../../../src/translate/canonical.ts'
import { translateJson } from '../../../src/translate/stream/index.ts'
import { buildFailureRecord, signRecord } from '../../../src/sse/sign.ts'
import { chatFrames, fixtureFrames, fn, messagesFrames, request, run, serveHttp, type Frame, type ScriptCall } from './helpers.ts'

;(globalThis as { AI_SDK_LOG_WARNINGS?: boolean }).AI_SDK_LOG_WARNINGS = false

const schema = jsonSchema<Record<string, unknown>>({ type: 'object', properties: { command: { type: 'string' }, cmd: { type: 'string' } } })
const tools = { Bash: tool({ inputSchema: schema }), exec_command: tool({ inputSchema: schema }) }

function model (to: Protocol, url: string) {
  if (to === 'anthropic') return createAnthropic({ baseURL: url + '/v1', apiKey: 'sk' })('claude-x')
  const o = createOpenAI({ baseURL: url + '/v1', apiKey: 'sk' })
  return to === 'openai-responses' ? o.responses('m') : o.chat('m')
}

async function stream (to: Protocol, bytes: Buffer): Promise<{ parts: any[]; error?: unknown }> {
  const srv = await serveHttp(() => [bytes])
  try {
    const parts: any[] = []
    const res = streamText({ model: model(to, srv.url), prompt: 'x', tools, maxOutputTokens: 1000, maxRetries: 0, onError: () => {} })
    try {
      for await (const p of res.fullStream) parts.push(p)
    } catch (error) {
      return { parts, error }
    }
    return { parts }
  } finally {
    await srv.close()
  }
}

const calls: ScriptCall[] = Array.from({ length: 8 }, (_, i) => ({ id: `call_${i}`, name: 'Bash', args: JSON.stringify({ command: `echo ${i}` }) }))
const providers: Array<[Protocol, Frame[], string]> = [
  ['openai-chat', chatFrames({ reasoning: 'Thinking it over.', text: 'Running eight.', calls, interleave: true, piece: 4 }), 'Running eight.'],
  ['anthropic', messagesFrames({ thinking: { text: 'Thinking it over.', signature: 'EqSig==' }, text: 'Running eight.', calls }), 'Running eight.'],
  ['openai-responses', fixtureFrames('codex-tool-reasoning-parallel-01-response.sse'), ''],
]

for (const [from, frames, text] of providers) {
  for (const to of (['openai-chat', 'openai-responses', 'anthropic'] as Protocol[]).filter(p => p !== from)) {
    t.test(`stream ${from} -> ${to}: every chunk passes the AI SDK's schemas`, async t => {
      const r = run({ from, to, request: request(to, [fn('Bash'), fn('exec_command')]), includeUsage: true }, frames)
      t.ok(r.budget.idle)
      const { parts, error } = await stream(to, r.bytes)
      t.equal(error, undefined, `${(error as Error | undefined)?.message}`)
      t.same(parts.filter(p => p.type === 'error').map(p => String(p.error?.message ?? p.error)), [], 'no error parts')
      const toolCalls = parts.filter(p => p.type === 'tool-call')
      t.equal(toolCalls.length, from === 'openai-responses' ? 2 : 8)
      if (from !== 'openai-responses') t.same(toolCalls.map(c => c.input), calls.map(c => JSON.parse(c.args)))
      t.equal(parts.filter(p => p.type === 'text-delta').map(p => p.text).join(''), text)
      t.ok(parts.some(p => p.type === 'reasoning-delta') || to === 'openai-chat', 'reasoning came through')
      const finish = parts.find(p => p.type === 'finish')
      t.equal(finish?.finishReason, 'tool-calls')
    })
  }
}

t.test('stream failures: a truncated call is an error to the AI SDK, never a tool call', async t => {
  for (const to of ['openai-responses', 'anthropic', 'openai-chat'] as Protocol[]) {
    const r = run({ from: 'openai-chat', to, request: request(to, [fn('Bash')]) }, chatFrames({ text: 'ok', calls: [{ id: 'call_bad', name: 'Bash', args: '{"command":"ls' }] }))
    const f = r.t.failure
    t.ok(f !== null)
    const record = buildFailureRecord({ code: 'provider_protocol_error', message: f?.message, exchangeId: 'e', runId: null, provider: 'p', model: 'm', framesRelayed: 0, bytesRelayed: 0, usage: null, partial: true })
    const bytes = Buffer.concat([r.bytes, r.t.failureTail(record, signRecord(record, Buffer.from('k'.repeat(32))))])
    t.ok(r.budget.idle)
    const { parts, error } = await stream(to, bytes)
    t.notOk(parts.some(p => p.type === 'tool-call'), `${to}: no tool call`)
    const failedPart = parts.find(p => p.type === 'error') ?? (error !== undefined ? { error } : undefined)
    t.ok(failedPart !== undefined, `${to}: the SDK reports an error`)
    t.match(String((failedPart?.error as Error)?.message ?? JSON.stringify(failedPart?.error)), /provider_protocol_error/, `${to}: with the catalogue code`)
  }
})

const answers: Array<[Protocol, unknown]> = [
  ['openai-chat', { id: 'chatcmpl-1', object: 'chat.completion', created: 1796000000, model: 'gpt-x', choices: [{ index: 0, message: { role: 'assistant', content: 'Done.', reasoning_content: 'hm', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'Bash', arguments: '{"command":"ls"}' } }] }, finish_reason: 'tool_calls' }], usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 } }],
  ['anthropic', { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-x', content: [{ type: 'thinking', thinking: 'hm', signature: 'sig' }, { type: 'text', text: 'Done.' }, { type: 'tool_use', id: 'toolu_1', name: 'Bash', input: { command: 'ls' } }], stop_reason: 'tool_use', stop_sequence: null, usage: { input_tokens: 3, output_tokens: 4 } }],
  ['openai-responses', { id: 'resp_1', object: 'response', created_at: 1796000000, model: 'gpt-x', status: 'completed', output: [{ id: 'rs_1', type: 'reasoning', summary: [{ type: 'summary_text', text: 'hm' }], encrypted_content: 'enc' }, { id: 'msg_1', type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Done.', annotations: [] }] }, { id: 'fc_1', type: 'function_call', status: 'completed', call_id: 'call_1', name: 'Bash', arguments: '{"command":"ls"}' }], usage: { input_tokens: 3, output_tokens: 4, total_tokens: 7 } }],
]

for (const [from, answer] of answers) {
  for (const to of (['openai-chat', 'openai-responses', 'anthropic'] as Protocol[]).filter(p => p !== from)) {
    t.test(`json ${from} -> ${to}: the answer passes generateText's schemas`, async t => {
      const budget = new CountingBudget()
      const r = translateJson({ from, to, request: { ...request(to, [fn('Bash')]), stream: false }, budget, issuer: `${from}:p`, answer })
      t.ok(budget.idle)
      if (!r.ok) throw new Error(r.error.message)
      const srv = await serveHttp(() => [Buffer.from(JSON.stringify(r.body))], 'application/json')
      try {
        const g = await generateText({ model: model(to, srv.url), prompt: 'x', tools, maxOutputTokens: 1000, maxRetries: 0 })
        t.equal(g.text, 'Done.')
        t.same(g.toolCalls.map(c => c.input), [{ command: 'ls' }])
        t.equal(g.finishReason, 'tool-calls')
        t.equal(g.usage.outputTokens, 4)
        if (to !== 'openai-chat') t.equal(g.reasoningText, 'hm')
      } finally {
        await srv.close()
      }
    })
  }
}

// The providers whose calls stream live (Messages, Responses): a call cut mid-arguments — the
// provider's length stop right after it, or its EOF — reaches no client as a complete call. The AI
// SDK's chat model finalises every unfinished call when the stream ends (even after an error
// part), so a Chat client must never see a truncated call's fragments at all.
t.test('stream failures: a call cut while it streams live is never a tool call to the AI SDK', async t => {
  const exec = fixtureFrames('codex-tool-exec-01-response.sse')
  const firstArgs = exec.findIndex(f => (f.data as any)?.type === 'response.function_call_arguments.delta')
  t.ok(firstArgs > 0, 'the fixture streams its call arguments')
  const cuts: Array<[string, Protocol, Frame[]]> = [
    ['messages max_tokens inside the call', 'anthropic', messagesFrames({ text: 'ok', calls: [{ id: 'toolu_bad', name: 'Bash', args: '{"command":"ls -la /tmp"' }], stop: 'max_tokens' })],
    ['messages eof inside the call', 'anthropic', messagesFrames({ text: 'ok', calls: [{ id: 'toolu_bad', name: 'Bash', args: '{"command":"ls -la /tmp"' }], terminal: false }).slice(0, -1)],
    ['responses eof inside the call', 'openai-responses', exec.slice(0, firstArgs + 1)],
  ]
  for (const [name, from, frames] of cuts) {
    for (const to of (['openai-chat', 'openai-responses', 'anthropic'] as Protocol[]).filter(p => p !== from)) {
      const r = run({ from, to, request: request(to, [fn('Bash'), fn('exec_command')]) }, frames)
      const f = r.t.failure
      t.ok(f !== null, `${name} -> ${to}: a failure`)
      const record = buildFailureRecord({ code: 'provider_protocol_error', message: f?.message, exchangeId: 'e', runId: null, provider: 'p', model: 'm', framesRelayed: 0, bytesRelayed: 0, usage: null, partial: true })
      const bytes = Buffer.concat([r.bytes, r.t.failureTail(record, signRecord(record, Buffer.from('k'.repeat(32))))])
      t.ok(r.budget.idle, `${name} -> ${to}: budget idle`)
      const { parts, error } = await stream(to, bytes)
      t.same(parts.filter(p => p.type === 'tool-call').map(p => p.toolName), [], `${name} -> ${to}: no tool call`)
      const failedPart = parts.find(p => p.type === 'error') ?? (error !== undefined ? { error } : undefined)
      t.ok(failedPart !== undefined, `${name} -> ${to}: the SDK reports an error`)
      t.match(String((failedPart?.error as Error)?.message ?? JSON.stringify(failedPart?.error)), /provider_protocol_error/, `${name} -> ${to}: with the catalogue code`)
      t.not(parts.find(p => p.type === 'finish')?.finishReason, 'tool-calls', `${name} -> ${to}: no tool-calls finish`)
    }
  }
})
