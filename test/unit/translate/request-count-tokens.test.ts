// count_tokens for a model on a non-Anthropic provider: a local o200k_base count of the same
// text the request carries, with the documented overheads.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { IMAGE_TOKENS, MESSAGE_OVERHEAD, TOOL_OVERHEAD } from '../../../src/translate/request/count-tokens.ts'
import { countTokensEstimate } from '../../../src/translate/request/index.ts'
import { thrown } from './invariants.ts'

const dir = new URL('../../../../shared/fixtures/clients/', import.meta.url)
const msg = (content: unknown): Record<string, unknown> => ({ model: 'm', messages: [{ role: 'user', content }] })

t.test('known counts: "hello world" is 2 o200k tokens, plus one message overhead', async t => {
  t.same(countTokensEstimate(msg('hello world')), { input_tokens: MESSAGE_OVERHEAD + 2 })
  t.same(countTokensEstimate(msg('')), { input_tokens: MESSAGE_OVERHEAD })
  t.same(countTokensEstimate({ ...msg('hello world'), system: 'hello world' }), { input_tokens: 2 * (MESSAGE_OVERHEAD + 2) })
})

t.test('special-token text is counted as text, not refused', async t => {
  const n = countTokensEstimate(msg('<|endoftext|> and <|im_start|>')).input_tokens
  t.ok(n > MESSAGE_OVERHEAD + 2, `${n} tokens`)
})

t.test('every part counts: images, tools, tool calls and results, thinking', async t => {
  const base = countTokensEstimate(msg('hi')).input_tokens
  const img = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }
  t.equal(countTokensEstimate(msg([{ type: 'text', text: 'hi' }, img])).input_tokens, base + IMAGE_TOKENS)
  const withTool = countTokensEstimate({ ...msg('hi'), tools: [{ name: 'get_weather', description: 'Weather for a city', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }] }).input_tokens
  t.ok(withTool > base + TOOL_OVERHEAD, `a tool adds its name, description and schema (${withTool - base})`)
  const history = {
    model: 'm',
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: [{ type: 'thinking', thinking: 'let me think about the weather', signature: 's' }, { type: 'tool_use', id: 't1', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'sunny, 21 degrees' }] },
    ],
  }
  const withHistory = countTokensEstimate(history).input_tokens
  t.ok(withHistory > base + 2 * MESSAGE_OVERHEAD + 10, `history counted (${withHistory})`)
})

t.test('the Claude Code captures: a stable, plausible count (system prompt, 12 tools, history)', async t => {
  const body = JSON.parse(readFileSync(new URL('claude-tool-thinking-02-POST-v1_messages.json', dir), 'utf8')).body
  const n = countTokensEstimate(body).input_tokens
  const chars = JSON.stringify(body).length
  t.ok(n > chars / 8 && n < chars / 2, `${n} tokens for ${chars} JSON characters`)
  t.equal(countTokensEstimate(body).input_tokens, n, 'deterministic')
})

t.test('bodies translation refuses are refused here too', async t => {
  t.equal(thrown(() => countTokensEstimate({ model: 'm' })).code, 'invalid_request')
  t.equal(thrown(() => countTokensEstimate(null)).code, 'invalid_request')
  t.equal(thrown(() => countTokensEstimate(msg([{ type: 'document', source: {} }]))).code, 'invalid_request')
})
