// readAnswer() with `translate`: the provider's answer checked and parsed as always, then
// translated into the client's answer bytes (a fresh buffer handed back by transfer), the
// provider's usage still read; refusals as plain data; then through the real ParserPool.
import t from 'tap'
import { readAnswer, type AnswerTask } from '../../../src/json/answer.ts'
import { ParserPool } from '../../../src/json/pool.ts'
import { prepare } from '../../../src/json/prepare.ts'
import type { Protocol } from '../../../src/translate/canonical.ts'
import { CLIENT_FILE, TEXT_ANSWERS, capture, summaryFor, type Json } from '../translate/answer-helpers.ts'

const enc = new TextEncoder()
const JSON_LIMITS = { maxDepth: 128, maxNodes: 1_000_000 }
const OUT = { maxOutputItems: 256, maxOutputBytes: 1 << 20 }
const protocols: Protocol[] = ['openai-chat', 'openai-responses', 'anthropic']

function bytes (v: unknown): Uint8Array {
  const e = enc.encode(typeof v === 'string' ? v : JSON.stringify(v))
  const b = new Uint8Array(new ArrayBuffer(e.byteLength))
  b.set(e)
  return b
}

const task = (provider: Protocol, client: Protocol, answer: unknown, limits = OUT): AnswerTask => ({
  kind: 'answer', body: bytes(answer), protocol: provider, limits: JSON_LIMITS,
  translate: { to: client, request: summaryFor(CLIENT_FILE[client], provider), issuer: `${provider}:prov`, limits },
})

t.test('each pair: the client answer comes back, the provider usage is still read', async t => {
  for (const provider of protocols) {
    for (const client of protocols.filter(p => p !== provider)) {
      const tk = task(provider, client, TEXT_ANSWERS[provider])
      const input = tk.body
      const r = readAnswer(tk)
      if (!r.ok) { t.fail(`${provider} -> ${client}: ${JSON.stringify(r.error)}`); continue }
      t.equal(r.translated, true)
      t.not(r.body.buffer, input.buffer, 'a fresh buffer')
      t.equal(r.body.byteLength, r.body.buffer.byteLength, 'owning its whole buffer')
      const out = JSON.parse(Buffer.from(r.body).toString()) as Json
      const text = client === 'openai-chat' ? out.choices[0].message.content : client === 'anthropic' ? out.content[1].text : out.output[1].content[0].text
      t.equal(text, 'Hello there.', `${provider} -> ${client}`)
      t.ok(r.usage !== null && r.usage.outputTokens === 20, `${provider} -> ${client}: provider usage read`)
    }
  }
})

t.test('the answer of a request prepared in the pool task: the translation facts feed the answer task', async t => {
  const file = 'codex-tool-applypatch-01-POST-v1_responses.json'
  const p = prepare({ body: bytes(capture(file)), route: 'responses', limits: JSON_LIMITS, aliases: {}, translate: { to: 'anthropic', issuer: 'anthropic:prov' } })
  if (!p.ok) return t.fail(JSON.stringify(p.error))
  const wire = p.translation!.tools.find(x => x.name === 'apply_patch')!.wireName
  const answer = { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-x', content: [{ type: 'tool_use', id: 'toolu_1', name: wire, input: { input: '*** Begin Patch\n*** End Patch\n' } }], stop_reason: 'tool_use', usage: { input_tokens: 5, output_tokens: 3 } }
  const r = readAnswer({ kind: 'answer', body: bytes(answer), protocol: 'anthropic', limits: JSON_LIMITS, translate: { to: 'openai-responses', request: p.translation!, issuer: 'anthropic:prov', limits: OUT } })
  if (!r.ok) return t.fail(JSON.stringify(r.error))
  const out = JSON.parse(Buffer.from(r.body).toString()) as Json
  t.match(out.output, [{ type: 'custom_tool_call', name: 'apply_patch', call_id: 'toolu_1', input: '*** Begin Patch\n*** End Patch\n' }])
})

t.test('refusals are plain data', async t => {
  const truncated = { ...TEXT_ANSWERS['openai-chat'], choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Pa' } }] }, finish_reason: 'length' }] }
  const r = readAnswer(task('openai-chat', 'anthropic', truncated))
  // the length stop is what the refusal names (it is checked first: the arguments are cut either way)
  t.match(r, { ok: false, error: { code: 'provider_protocol_error', message: /length limit .* arguments are incomplete/ } })
  t.same(structuredClone(r), r)
  const whole = structuredClone(truncated)
  whole.choices[0].message.tool_calls[0].function.arguments = '{"city":"Paris"}'
  t.match(readAnswer(task('openai-chat', 'anthropic', whole)), { ok: false, error: { code: 'provider_protocol_error', message: /length/ } }, 'a length stop with a call: not reported as complete')
  t.match(readAnswer(task('anthropic', 'openai-chat', TEXT_ANSWERS.anthropic, { maxOutputItems: 1, maxOutputBytes: 1 << 20 })), { ok: false, error: { code: 'output_too_large', details: { reason: 'items' } } })
  t.match(readAnswer(task('anthropic', 'openai-chat', TEXT_ANSWERS.anthropic, { maxOutputItems: 8, maxOutputBytes: 200 })), { ok: false, error: { code: 'output_too_large', details: { reason: 'bytes' } } }, 'the translated answer over the byte cap')
  t.match(readAnswer(task('anthropic', 'openai-chat', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } })), { ok: false, error: { code: 'provider_unavailable', details: { providerType: 'overloaded_error' } } })
  t.match(readAnswer(task('anthropic', 'openai-chat', '{"type":"message",')), { ok: false, error: { code: 'provider_protocol_error', details: { reason: 'not JSON' } } }, 'the checks before translation still run')
})

t.test('through the real pool: each pair, and a refusal', async t => {
  const pool = new ParserPool({ threads: 1, heapMb: 64, youngGenMb: 16 })
  t.teardown(() => pool.close())
  let n = 0
  for (const provider of protocols) {
    for (const client of protocols.filter(p => p !== provider)) {
      const tk = task(provider, client, TEXT_ANSWERS[provider])
      const local = readAnswer(task(provider, client, TEXT_ANSWERS[provider]))
      const r = await pool.readAnswer(tk)
      n++
      t.equal((tk.body.buffer as ArrayBuffer).detached, true, 'transferred in')
      if (!r.ok || !local.ok) { t.fail(`${provider} -> ${client}: refused`); continue }
      t.equal(r.translated, true)
      const a = JSON.parse(Buffer.from(r.body).toString()) as Json
      const b = JSON.parse(Buffer.from(local.body).toString()) as Json
      // an Anthropic answer has no creation time: the Chat / Responses client's comes from the clock
      if (provider === 'anthropic') for (const o of [a, b]) { delete o.created; delete o.created_at }
      t.same(a, b, `${provider} -> ${client}: the same answer as in this thread`)
      t.same(r.usage, local.usage)
    }
  }
  const refused = await pool.readAnswer(task('anthropic', 'openai-chat', { ...TEXT_ANSWERS.anthropic, content: [{ type: 'tool_use', id: 't', name: 'get_weather', input: { city: 'P' } }], stop_reason: 'max_tokens' }))
  t.match(refused, { ok: false, error: { code: 'provider_protocol_error' } })
  t.same({ completed: pool.stats().completed, failed: pool.stats().failed }, { completed: n + 1, failed: 0 })
})
