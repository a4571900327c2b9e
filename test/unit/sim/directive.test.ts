// The `#sim` directive grammar and where it is read from.
import t from 'tap'
import { DEFAULT_DIRECTIVE, lastUserText, LIMITS, parseDirective } from '../../../src/sim/index.ts'

t.test('defaults when there is no directive', async t => {
  t.same(parseDirective(null), DEFAULT_DIRECTIVE)
  t.same(parseDirective('hello there'), DEFAULT_DIRECTIVE)
  t.same(parseDirective('#simulate tokens=3'), DEFAULT_DIRECTIVE, '#simulate is not #sim')
  t.same(parseDirective('say #sim tokens=3'), DEFAULT_DIRECTIVE, 'must start the line')
})

t.test('every key', async t => {
  const d = parseDirective('#sim ttft=200 tokens=100 interval=10 tools=3 parallel=1 fault=cut-mid-stream at=7 size=4096 bytes=64 thinking=4')
  t.same(d, { ttft: 200, tokens: 100, interval: 10, tools: 3, parallel: true, fault: 'cut-mid-stream', at: 7, size: 4096, bytes: 64, thinking: 4 })
})

t.test('bare keys, unknown keys, bad values, clamping', async t => {
  t.equal(parseDirective('#sim parallel').parallel, true)
  t.equal(parseDirective('#sim parallel=0').parallel, false)
  const d = parseDirective('#sim colour=blue tokens=abc ttft=-5 tools=99999 fault=explode bytes=0 interval=1.5')
  t.equal(d.tokens, DEFAULT_DIRECTIVE.tokens, 'non-numeric ignored')
  t.equal(d.ttft, DEFAULT_DIRECTIVE.ttft, 'negative ignored')
  t.equal(d.tools, LIMITS.tools, 'clamped')
  t.equal(d.fault, null, 'unknown fault ignored')
  t.equal(d.bytes, null, 'bytes=0 ignored')
  t.equal(d.interval, 0, 'fraction ignored')
  t.equal(parseDirective('#sim tokens=99999999').tokens, LIMITS.tokens)
})

t.test('several lines apply in order; leading spaces and CRLF are fine', async t => {
  const d = parseDirective('intro\r\n  #sim tokens=3 tools=1\r\nmiddle\n#sim tokens=5\r\n')
  t.equal(d.tokens, 5)
  t.equal(d.tools, 1)
})

t.test('chat: last user message, any content shape; a tool result ends it', async t => {
  t.equal(lastUserText('openai-chat', { messages: [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }, { role: 'user', content: 'c' }] }), 'c')
  t.equal(lastUserText('openai-chat', { messages: [{ role: 'user', content: [{ type: 'text', text: 'x' }, { type: 'image_url', image_url: { url: 'u' } }, { type: 'text', text: 'y' }] }] }), 'x\ny')
  t.equal(lastUserText('openai-chat', { messages: [{ role: 'user', content: 'a' }, { role: 'assistant', tool_calls: [] }, { role: 'tool', content: 'r' }] }), null)
  t.equal(lastUserText('openai-chat', { messages: 'nope' }), null)
  t.equal(lastUserText('openai-chat', null), null)
})

t.test('responses: string input, item arrays, input_text parts, tool outputs', async t => {
  t.equal(lastUserText('openai-responses', { input: '#sim tokens=1' }), '#sim tokens=1')
  t.equal(
    lastUserText('openai-responses', {
      input: [
        { type: 'message', role: 'developer', content: [{ type: 'input_text', text: 'dev' }] },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'u1' }] },
        { role: 'user', content: 'u2' },
        { type: 'reasoning', summary: [] },
      ],
    }),
    'u2',
  )
  t.equal(lastUserText('openai-responses', { input: [{ role: 'user', content: 'u' }, { type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' }, { type: 'function_call_output', call_id: 'c', output: 'o' }] }), null)
  t.equal(lastUserText('openai-responses', { input: [{ role: 'user', content: 'u' }, { type: 'custom_tool_call_output', call_id: 'c', output: 'o' }] }), null)
})

t.test('anthropic: skips interleaved system entries; tool_result-only turn has no text', async t => {
  t.equal(lastUserText('anthropic', { messages: [{ role: 'user', content: [{ type: 'text', text: 'reminder' }, { type: 'text', text: '#sim tokens=2' }] }, { role: 'system', content: 'env' }] }), 'reminder\n#sim tokens=2')
  t.equal(lastUserText('anthropic', { messages: [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 'r' }] }] }), null)
  t.equal(parseDirective(lastUserText('anthropic', { messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 'r' }, { type: 'text', text: '#sim tokens=2' }] }] })).tokens, 2, 'text next to a tool_result counts')
})
