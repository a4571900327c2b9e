// Non-streaming answers, every pair: text, reasoning, stop reasons and usage in the client's
// own fields (translateJson in src/translate/stream/index.ts, as the parser pool's answer task runs it).
import t from 'tap'
import type { Protocol } from '../../../src/translate/canonical.ts'
import { unwrapOpaque } from '../../../src/translate/envelope.ts'
import { parseAnthropicThinkingOpaque, parseOpenaiReasoningOpaque } from '../../../src/translate/reasoning.ts'
import { CLIENT_FILE, LIMITS, TEXT_ANSWERS, summaryFor, type Json, translateAnswer } from './answer-helpers.ts'

const protocols: Protocol[] = ['openai-chat', 'openai-responses', 'anthropic']
// What each provider answer above carries, in canonical terms.
const INPUT = 450
const CACHED = 300

for (const provider of protocols) {
  for (const client of protocols.filter(p => p !== provider)) {
    t.test(`${client} client, ${provider} provider: text, reasoning, usage`, async t => {
      const request = summaryFor(CLIENT_FILE[client], provider)
      const out = translateAnswer(provider, client, structuredClone(TEXT_ANSWERS[provider]), { request, issuer: `${provider}:prov`, limits: LIMITS }) as Json
      t.ok(JSON.parse(JSON.stringify(out)), 'plain JSON')
      if (client === 'openai-chat') {
        t.match(out, { object: 'chat.completion', model: 'provider-model' })
        t.match(out.id, /^chatcmpl-/)
        t.equal(out.choices.length, 1)
        t.equal(out.choices[0].finish_reason, 'stop')
        t.same(out.choices[0].message.role, 'assistant')
        t.equal(out.choices[0].message.content, 'Hello there.')
        t.equal(out.choices[0].message.reasoning_content, 'The user greets me.')
        t.notOk('tool_calls' in out.choices[0].message)
        t.equal(out.usage.prompt_tokens, INPUT)
        t.equal(out.usage.completion_tokens, 20)
        t.equal(out.usage.total_tokens, INPUT + 20)
        t.equal(out.usage.prompt_tokens_details.cached_tokens, CACHED)
        t.equal(out.usage.completion_tokens_details.reasoning_tokens, provider === 'anthropic' ? 0 : 7)
      } else if (client === 'openai-responses') {
        t.match(out, { object: 'response', status: 'completed', error: null, incomplete_details: null, model: 'provider-model' })
        t.match(out.id, /^resp_/)
        t.same(out.output.map((i: Json) => i.type), ['reasoning', 'message'])
        t.same(out.output[0].summary, [{ type: 'summary_text', text: 'The user greets me.' }])
        t.equal(out.output[1].content[0].type, 'output_text')
        t.equal(out.output[1].content[0].text, 'Hello there.')
        t.equal(new Set(out.output.map((i: Json) => i.id)).size, 2, 'distinct item ids')
        t.same(out.usage, { input_tokens: INPUT, input_tokens_details: { cached_tokens: CACHED }, output_tokens: 20, output_tokens_details: { reasoning_tokens: provider === 'anthropic' ? 0 : 7 }, total_tokens: INPUT + 20 })
        if (provider === 'anthropic') {
          // Anthropic's signed thinking goes to the Responses client inside encrypted_content
          const o = unwrapOpaque(out.output[0].encrypted_content)
          t.equal(o?.issuer, 'anthropic:prov')
          t.same(parseAnthropicThinkingOpaque(o!.data), { type: 'thinking', thinking: 'The user greets me.', signature: 'EqQBCkgIARAB+sig/==' })
        } else t.notOk('encrypted_content' in out.output[0], 'Chat reasoning has no blob to carry')
      } else {
        t.match(out, { type: 'message', role: 'assistant', model: 'provider-model', stop_reason: 'end_turn', stop_sequence: null })
        t.match(out.id, /^msg_/)
        t.same(out.content.map((b: Json) => b.type), ['thinking', 'text'])
        t.equal(out.content[0].thinking, 'The user greets me.')
        t.equal(out.content[1].text, 'Hello there.')
        t.same(out.usage, { input_tokens: INPUT - CACHED, cache_creation_input_tokens: 0, cache_read_input_tokens: CACHED, output_tokens: 20 })
        if (provider === 'openai-responses') {
          // OpenAI's encrypted reasoning goes to the Claude client inside the thinking signature
          const o = unwrapOpaque(out.content[0].signature)
          t.equal(o?.issuer, 'openai-responses:prov')
          t.same(parseOpenaiReasoningOpaque(o!.data), { id: 'rs_1', encrypted_content: 'gAAAAB-enc+/=' })
        } else t.equal(out.content[0].signature, '', 'Chat reasoning has no signature to carry')
      }
    })
  }
}

t.test('Anthropic cache creation tokens stay apart for a Claude client', async t => {
  const request = summaryFor(CLIENT_FILE.anthropic, 'openai-chat')
  // a Chat provider reports all input in prompt_tokens, cached inside it
  const out = translateAnswer('openai-chat', 'anthropic', TEXT_ANSWERS['openai-chat'], { request, issuer: 'openai-chat:prov', limits: LIMITS }) as Json
  t.same(out.usage, { input_tokens: 150, cache_creation_input_tokens: 0, cache_read_input_tokens: 300, output_tokens: 20 })
  const back = translateAnswer('anthropic', 'openai-chat', TEXT_ANSWERS.anthropic, { request: summaryFor(CLIENT_FILE['openai-chat'], 'anthropic'), issuer: 'anthropic:prov', limits: LIMITS }) as Json
  t.equal(back.usage.prompt_tokens, 100 + 300 + 50, 'input + cache read + cache creation')
})

t.test('stop reasons in the client\'s fields', async t => {
  const cases: Array<{ provider: Protocol; answer: Json; stop: string }> = [
    { provider: 'openai-chat', answer: { ...TEXT_ANSWERS['openai-chat'], choices: [{ index: 0, message: { role: 'assistant', content: 'cut' }, finish_reason: 'length' }] }, stop: 'length' },
    { provider: 'openai-chat', answer: { ...TEXT_ANSWERS['openai-chat'], choices: [{ index: 0, message: { role: 'assistant', content: '' }, finish_reason: 'content_filter' }] }, stop: 'content_filter' },
    { provider: 'openai-responses', answer: { ...TEXT_ANSWERS['openai-responses'], status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } }, stop: 'length' },
    { provider: 'openai-responses', answer: { ...TEXT_ANSWERS['openai-responses'], status: 'incomplete', incomplete_details: { reason: 'content_filter' } }, stop: 'content_filter' },
    { provider: 'anthropic', answer: { ...TEXT_ANSWERS.anthropic, stop_reason: 'max_tokens' }, stop: 'length' },
    { provider: 'anthropic', answer: { ...TEXT_ANSWERS.anthropic, stop_reason: 'refusal' }, stop: 'refusal' },
    { provider: 'anthropic', answer: { ...TEXT_ANSWERS.anthropic, stop_reason: 'stop_sequence' }, stop: 'end' },
  ]
  const chatFinish: Record<string, string> = { end: 'stop', length: 'length', content_filter: 'content_filter', refusal: 'content_filter' }
  const anthropicStop: Record<string, string> = { end: 'end_turn', length: 'max_tokens', content_filter: 'refusal', refusal: 'refusal' }
  for (const c of cases) {
    for (const client of protocols.filter(p => p !== c.provider)) {
      const out = translateAnswer(c.provider, client, c.answer, { request: summaryFor(CLIENT_FILE[client], c.provider), issuer: 'x:y', limits: LIMITS }) as Json
      const label = `${c.provider} ${c.stop} -> ${client}`
      if (client === 'openai-chat') t.equal(out.choices[0].finish_reason, chatFinish[c.stop], label)
      else if (client === 'anthropic') t.equal(out.stop_reason, anthropicStop[c.stop], label)
      else {
        const incomplete = c.stop === 'length' || c.stop === 'content_filter'
        t.equal(out.status, incomplete ? 'incomplete' : 'completed', label)
        t.same(out.incomplete_details, incomplete ? { reason: c.stop === 'length' ? 'max_output_tokens' : 'content_filter' } : null, label)
      }
    }
  }
})

t.test('a Chat refusal reaches each client as a refusal', async t => {
  const answer = { ...TEXT_ANSWERS['openai-chat'], choices: [{ index: 0, message: { role: 'assistant', content: null, refusal: 'I cannot help with that.' }, finish_reason: 'stop' }] }
  const r = translateAnswer('openai-chat', 'openai-responses', answer, { request: summaryFor(RESPONSES, 'openai-chat'), issuer: 'x:y', limits: LIMITS }) as Json
  t.same(r.output[0].content, [{ type: 'refusal', refusal: 'I cannot help with that.' }])
  const m = translateAnswer('openai-chat', 'anthropic', answer, { request: summaryFor(CLIENT_FILE.anthropic, 'openai-chat'), issuer: 'x:y', limits: LIMITS }) as Json
  t.equal(m.stop_reason, 'refusal')
  t.same(m.content, [{ type: 'text', text: 'I cannot help with that.' }])
})
const RESPONSES = CLIENT_FILE['openai-responses']

t.test('refusals of the answer itself', async t => {
  const ctx = { request: summaryFor(CLIENT_FILE['openai-chat'], 'anthropic'), issuer: 'x:y', limits: LIMITS }
  const code = (f: () => unknown): string | undefined => { try { f(); return undefined } catch (e) { return (e as { code?: string }).code } }
  t.equal(code(() => translateAnswer('anthropic', 'openai-chat', [], ctx)), 'provider_protocol_error', 'not an object')
  t.equal(code(() => translateAnswer('anthropic', 'openai-chat', { type: 'message', content: [] }, ctx)), 'provider_protocol_error', 'no stop_reason')
  // a block of a type this gateway does not know is left out, as the stream decoder leaves it out
  const unknown = translateAnswer('anthropic', 'openai-chat', { ...TEXT_ANSWERS.anthropic, content: [{ type: 'mystery' }, { type: 'text', text: 'kept' }] }, ctx)
  t.same(unknown.choices[0].message.content, 'kept', 'unknown block left out')
  // an error body gets the catalogue code of the provider's error type (providerErrorCode, as in a stream)
  t.equal(code(() => translateAnswer('anthropic', 'openai-chat', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }, ctx)), 'provider_unavailable', 'an overloaded error body')
  t.equal(code(() => translateAnswer('anthropic', 'openai-chat', { type: 'error', error: { type: 'invalid_request_error', message: 'bad' } }, ctx)), 'provider_error', 'an error body')
  t.equal(code(() => translateAnswer('openai-chat', 'anthropic', { choices: [{ message: { content: 'x' }, finish_reason: null }] }, ctx)), 'provider_protocol_error', 'no finish_reason')
  t.equal(code(() => translateAnswer('openai-responses', 'anthropic', { ...TEXT_ANSWERS['openai-responses'], status: 'in_progress' }, ctx)), 'provider_protocol_error', 'not complete')
  t.equal(code(() => translateAnswer('openai-responses', 'anthropic', { ...TEXT_ANSWERS['openai-responses'], status: 'failed', error: { code: 'server_error', message: 'boom' } }, ctx)), 'provider_error', 'failed')
  t.equal(code(() => translateAnswer('anthropic', 'anthropic', TEXT_ANSWERS.anthropic, ctx)), 'internal_error', 'same protocol')
  // server-side tool traces are left out, their text answer stays
  const out = translateAnswer('anthropic', 'openai-chat', { ...TEXT_ANSWERS.anthropic, content: [{ type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: { query: 'x' } }, { type: 'web_search_tool_result', tool_use_id: 'srvtoolu_1', content: [] }, { type: 'text', text: 'Found it.' }] }, ctx) as Json
  t.equal(out.choices[0].message.content, 'Found it.')
  t.notOk('tool_calls' in out.choices[0].message)
})

t.test('item and byte caps', async t => {
  const request = summaryFor(CLIENT_FILE['openai-chat'], 'anthropic')
  const code = (limits: { maxOutputItems: number; maxOutputBytes: number }): string | undefined => {
    try { translateAnswer('anthropic', 'openai-chat', TEXT_ANSWERS.anthropic, { request, issuer: 'x:y', limits }); return undefined } catch (e) { return (e as { code?: string }).code }
  }
  t.equal(code({ maxOutputItems: 2, maxOutputBytes: 1 << 20 }), undefined, 'two items fit two')
  t.equal(code({ maxOutputItems: 1, maxOutputBytes: 1 << 20 }), 'output_too_large', 'two items do not fit one')
  t.equal(code({ maxOutputItems: 256, maxOutputBytes: 20 }), 'output_too_large', 'bytes over the cap')
})

t.test('answer ids: the client protocol\'s prefix, the provider\'s id inside', async t => {
  const run = (provider: Protocol, client: Protocol, answer: Json): Json =>
    translateAnswer(provider, client, answer, { request: summaryFor(CLIENT_FILE[client], provider), issuer: 'x:y', limits: LIMITS }) as Json
  t.equal(run('anthropic', 'openai-chat', TEXT_ANSWERS.anthropic).id, 'chatcmpl-msg_abc123')
  t.equal(run('anthropic', 'openai-responses', TEXT_ANSWERS.anthropic).id, 'resp_msg_abc123')
  t.equal(run('openai-chat', 'anthropic', TEXT_ANSWERS['openai-chat']).id, 'msg_chatcmpl-abc123')
  t.equal(run('openai-responses', 'anthropic', TEXT_ANSWERS['openai-responses']).id, 'msg_resp_abc123')
  t.equal(run('openai-responses', 'openai-chat', TEXT_ANSWERS['openai-responses']).id, 'chatcmpl-resp_abc123')
  t.equal(run('openai-chat', 'openai-responses', { ...TEXT_ANSWERS['openai-chat'], id: 'gen/42:x' }).id, 'resp_gen_42_x', 'characters outside [A-Za-z0-9_-] replaced')
  const a = run('openai-chat', 'anthropic', { ...TEXT_ANSWERS['openai-chat'], id: undefined }).id as string
  const b = run('openai-chat', 'anthropic', { ...TEXT_ANSWERS['openai-chat'], id: undefined }).id as string
  t.match(a, /^msg_[A-Za-z0-9]{32}$/, 'no provider id: a fresh one')
  t.not(a, b, 'fresh each time')
  const out = run('anthropic', 'openai-responses', TEXT_ANSWERS.anthropic)
  t.same(out.output.map((i: Json) => i.id), ['rs_msg_abc123_0', 'msg_msg_abc123_1'], 'item ids from the response id and the item index')
})
