// Reasoning carried between protocols: a client replays the envelope it got from us and the
// provider that issued the blob gets its original block back byte-exact; any other provider
// gets nothing of it. A provider that needs thinking blocks on tool turns gets them, or thinking
// is turned off for that request rather than sending an invalid one.
import t from 'tap'
import { issuerOf, wrapOpaque } from '../../../src/translate/envelope.ts'
import {
  anthropicThinkingOpaque, openaiReasoningOpaque, parseAnthropicThinkingOpaque, parseOpenaiReasoningOpaque,
} from '../../../src/translate/reasoning.ts'
import { translate } from './invariants.ts'
import { shapes } from './shapes.ts'

type Json = Record<string, any>
const CLAUDE = issuerOf('anthropic', 'claude')
const OPENAI = issuerOf('openai-responses', 'oa')
// awkward bytes on purpose: quotes, backslashes, newlines, non-ASCII, an unpaired-looking surrogate escape
const THINKING = 'Let me think: "quoted" \\ back\\slash\nnew line — ünïcode 🚀 \\ud800'
const SIGNATURE = 'EqQBCkYIARgCKkD+/=="\\\u00e9'
const ENCRYPTED = 'gAAAAABo+/==\n"x"\\y'

t.test('opaque helpers: the original block comes back byte-exact; other data is not one', async t => {
  const th = parseAnthropicThinkingOpaque(anthropicThinkingOpaque(CLAUDE, { type: 'thinking', thinking: THINKING, signature: SIGNATURE }).data)
  t.same(th, { type: 'thinking', thinking: THINKING, signature: SIGNATURE })
  t.same(parseAnthropicThinkingOpaque(anthropicThinkingOpaque(CLAUDE, { type: 'redacted_thinking', data: ENCRYPTED }).data), { type: 'redacted_thinking', data: ENCRYPTED })
  t.same(parseOpenaiReasoningOpaque(openaiReasoningOpaque(OPENAI, { id: 'rs_1', encrypted_content: ENCRYPTED }).data), { id: 'rs_1', encrypted_content: ENCRYPTED })
  t.same(parseOpenaiReasoningOpaque(openaiReasoningOpaque(OPENAI, { encrypted_content: ENCRYPTED }).data), { encrypted_content: ENCRYPTED })
  t.equal(parseAnthropicThinkingOpaque(openaiReasoningOpaque(OPENAI, { encrypted_content: ENCRYPTED }).data), null, 'an OpenAI blob is not a thinking block')
  t.equal(parseOpenaiReasoningOpaque(anthropicThinkingOpaque(CLAUDE, { type: 'thinking', thinking: 'a', signature: 'b' }).data), null)
  t.equal(parseAnthropicThinkingOpaque('not json'), null)
  t.equal(parseOpenaiReasoningOpaque('[1]'), null)
})

/** A Codex turn that replays a reasoning item (with our envelope) before its tool call. */
function codexReplay (encrypted: string): Json {
  return {
    model: 'gpt-x',
    stream: true,
    reasoning: { effort: 'high', summary: 'auto' },
    input: [
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'run it' }] },
      { type: 'reasoning', id: 'rs_9', summary: [{ type: 'summary_text', text: 'Thinking.' }], encrypted_content: encrypted },
      { type: 'function_call', call_id: 'call_1', name: 'exec_command', arguments: '{"cmd":"ls"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'a\nb' },
    ],
    tools: [{ type: 'function', name: 'exec_command', parameters: { type: 'object', properties: { cmd: { type: 'string' } } } }],
  }
}

t.test('Responses client on Anthropic: a replayed thinking envelope is restored byte-exact for its issuer', async t => {
  const env = wrapOpaque(anthropicThinkingOpaque(CLAUDE, { type: 'thinking', thinking: THINKING, signature: SIGNATURE }))
  const { body } = translate({ from: 'openai-responses', to: 'anthropic', body: codexReplay(env), model: 'claude-x', issuer: CLAUDE })
  t.ok(shapes.anthropic.safeParse(body).success, 'valid Anthropic request')
  const turn = body.messages[1]
  t.equal(turn.role, 'assistant')
  t.same(turn.content[0], { type: 'thinking', thinking: THINKING, signature: SIGNATURE }, 'the original block, first in its turn')
  t.equal(turn.content[0].signature, SIGNATURE, 'signature byte-exact')
  t.equal(turn.content[0].thinking, THINKING, 'thinking text byte-exact')
  t.same(body.thinking, { type: 'enabled', budget_tokens: 16384 }, 'effort high -> 16384, kept: the tool turn has its block')
  t.equal(body.max_tokens, 8192 + 16384)
})

t.test('Responses client on Anthropic: redacted thinking restored as redacted_thinking', async t => {
  const env = wrapOpaque(anthropicThinkingOpaque(CLAUDE, { type: 'redacted_thinking', data: ENCRYPTED }))
  const { body } = translate({ from: 'openai-responses', to: 'anthropic', body: codexReplay(env), model: 'claude-x', issuer: CLAUDE })
  t.same(body.messages[1].content[0], { type: 'redacted_thinking', data: ENCRYPTED })
  t.ok(body.thinking !== undefined)
})

t.test('an envelope from another issuer is dropped, and thinking turned off for the tool turn', async t => {
  const env = wrapOpaque(anthropicThinkingOpaque(issuerOf('anthropic', 'other-account'), { type: 'thinking', thinking: THINKING, signature: SIGNATURE }))
  const { body } = translate({ from: 'openai-responses', to: 'anthropic', body: codexReplay(env), model: 'claude-x', issuer: CLAUDE })
  t.ok(shapes.anthropic.safeParse(body).success)
  const text = JSON.stringify(body)
  t.notOk(text.includes(JSON.stringify(SIGNATURE).slice(1, -1)), 'the foreign signature is not sent')
  t.same(body.messages[1].content.map((b: Json) => b.type), ['tool_use'])
  t.equal(body.thinking, undefined, 'no valid block for the tool turn: thinking off, not an invalid request')
  t.equal(body.max_tokens, 8192)
})

t.test('a damaged envelope or a raw provider blob is dropped', async t => {
  for (const blob of [wrapOpaque({ issuer: CLAUDE, data: 'garbage' }), 'sluice1.%%%', ENCRYPTED]) {
    const { body } = translate({ from: 'openai-responses', to: 'anthropic', body: codexReplay(blob), model: 'claude-x', issuer: CLAUDE })
    t.same(body.messages[1].content.map((b: Json) => b.type), ['tool_use'], JSON.stringify(blob).slice(0, 30))
  }
})

t.test('thinking on without a tool turn in the loop: enabled; a new user message ends the loop', async t => {
  const req = codexReplay('x')
  req.input.push({ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'and now?' }] })
  const { body } = translate({ from: 'openai-responses', to: 'anthropic', body: req, model: 'claude-x', issuer: CLAUDE })
  t.same(body.thinking, { type: 'enabled', budget_tokens: 16384 }, 'earlier tool turns need no block')
  t.same(body.messages.map((m: Json) => m.role), ['user', 'assistant', 'user'], 'the results and the new text share one user turn')
  t.same(body.messages[2].content.map((b: Json) => b.type), ['tool_result', 'text'])
})

/** A Claude Code turn that replays a thinking block whose signature is our envelope. */
function claudeReplay (signature: string, redacted = false): Json {
  const block = redacted ? { type: 'redacted_thinking', data: signature } : { type: 'thinking', thinking: 'I should list.', signature }
  return {
    model: 'claude-x',
    max_tokens: 4096,
    stream: false,
    thinking: { type: 'enabled', budget_tokens: 2048 },
    messages: [
      { role: 'user', content: 'list' },
      { role: 'assistant', content: [block, { type: 'tool_use', id: 'toolu_1', name: 'Bash', input: { command: 'ls' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'a' }] },
    ],
    tools: [{ name: 'Bash', input_schema: { type: 'object', properties: { command: { type: 'string' } } } }],
  }
}

t.test('Claude client on Responses: a replayed signature envelope becomes the reasoning item, byte-exact', async t => {
  const env = wrapOpaque(openaiReasoningOpaque(OPENAI, { id: 'rs_abc', encrypted_content: ENCRYPTED }))
  const { body } = translate({ from: 'anthropic', to: 'openai-responses', body: claudeReplay(env), model: 'gpt-x', issuer: OPENAI })
  t.ok(shapes['openai-responses'].safeParse(body).success, 'valid Responses request')
  t.same(body.input.map((i: Json) => i.type), ['message', 'reasoning', 'function_call', 'function_call_output'])
  t.same(body.input[1], { type: 'reasoning', id: 'rs_abc', summary: [], encrypted_content: ENCRYPTED })
  t.same(body.include, ['reasoning.encrypted_content'])
  t.same(body.reasoning, { effort: 'low', summary: 'auto' }, 'budget 2048 -> effort low')
  t.equal(body.store, false)
})

t.test('Claude client on Responses: the envelope in redacted_thinking data is restored too', async t => {
  const env = wrapOpaque(openaiReasoningOpaque(OPENAI, { encrypted_content: ENCRYPTED }))
  const { body } = translate({ from: 'anthropic', to: 'openai-responses', body: claudeReplay(env, true), model: 'gpt-x', issuer: OPENAI })
  t.same(body.input[1], { type: 'reasoning', summary: [], encrypted_content: ENCRYPTED })
})

t.test('Claude client: another issuer\'s envelope, or Anthropic\'s own signature, is never sent', async t => {
  for (const sig of [wrapOpaque(openaiReasoningOpaque(issuerOf('openai-responses', 'elsewhere'), { encrypted_content: ENCRYPTED })), 'EqMockSignature==']) {
    for (const to of ['openai-responses', 'openai-chat'] as const) {
      const { body } = translate({ from: 'anthropic', to, body: claudeReplay(sig), model: 'gpt-x', issuer: to === 'openai-responses' ? OPENAI : issuerOf('openai-chat', 'oa') })
      const text = JSON.stringify(body)
      t.notOk(text.includes('gAAAAABo'), `${to}: no foreign encrypted content`)
      t.notOk(text.includes('EqMockSignature'), `${to}: no Anthropic signature`)
      t.notOk(text.includes('sluice1.'), `${to}: no envelope`)
      t.ok(shapes[to].safeParse(body).success, `${to}: valid request`)
    }
  }
})

t.test('Chat providers never get reasoning back: an envelope for a Chat issuer is dropped as well', async t => {
  const chatIssuer = issuerOf('openai-chat', 'oa')
  const env = wrapOpaque(openaiReasoningOpaque(chatIssuer, { encrypted_content: ENCRYPTED }))
  const { body } = translate({ from: 'anthropic', to: 'openai-chat', body: claudeReplay(env), model: 'gpt-x', issuer: chatIssuer })
  t.same(body.messages[1], { role: 'assistant', content: null, tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'Bash', arguments: '{"command":"ls"}' } }] })
  t.equal(body.reasoning_effort, 'low')
})

t.test('Anthropic thinking with a forced tool or a tiny max_tokens: thinking off (Anthropic refuses both)', async t => {
  const forced = { model: 'm', input: 'hi', reasoning: { effort: 'medium' }, tool_choice: 'required', tools: [{ type: 'function', name: 'f', parameters: { type: 'object', properties: {} } }] }
  const a = translate({ from: 'openai-responses', to: 'anthropic', body: forced, model: 'c', issuer: CLAUDE })
  t.equal(a.body.thinking, undefined)
  t.same(a.body.tool_choice, { type: 'any' })
  const tiny = { model: 'm', input: 'hi', reasoning: { effort: 'high' }, max_output_tokens: 900, temperature: 0.2 }
  const b = translate({ from: 'openai-responses', to: 'anthropic', body: tiny, model: 'c', issuer: CLAUDE })
  t.equal(b.body.thinking, undefined, 'a budget under 1024 is no thinking')
  t.equal(b.body.max_tokens, 900)
  t.equal(b.body.temperature, 0.2, 'temperature kept when thinking is off')
  const capped = translate({ from: 'openai-responses', to: 'anthropic', body: { ...tiny, max_output_tokens: 5000 }, model: 'c', issuer: CLAUDE })
  t.same(capped.body.thinking, { type: 'enabled', budget_tokens: 4999 }, 'the budget is capped below max_tokens')
  t.equal(capped.body.temperature, undefined, 'no temperature with thinking')
  t.ok(shapes.anthropic.safeParse(capped.body).success)
})
