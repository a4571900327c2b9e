// readAnswer (src/json/answer.ts): a provider's non-streaming answer is checked within the JSON
// caps before it is parsed, must be a JSON object, and gives its usage; in the pool its bytes
// go in and come back by transfer, untouched.

import t from 'tap'
import { readAnswer, type AnswerTask } from '../../../src/json/answer.ts'
import { ParserPool } from '../../../src/json/pool.ts'

const enc = new TextEncoder()
const LIMITS = { maxDepth: 8, maxNodes: 100 }
const task = (text: string | Uint8Array, over: Partial<AnswerTask> = {}): AnswerTask =>
  ({ kind: 'answer', body: typeof text === 'string' ? enc.encode(text) : text, protocol: 'openai-chat', limits: LIMITS, ...over })

t.test('usage by protocol, the bytes untouched', async (t) => {
  const chat = readAnswer(task('{"id":"c","usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}'))
  t.same(chat.ok && chat.usage, { inputTokens: 3, outputTokens: 5, totalTokens: 8 })
  t.ok(chat.ok && Buffer.from(chat.body).toString() === '{"id":"c","usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}')
  const messages = readAnswer(task('{"type":"message","usage":{"input_tokens":2,"output_tokens":4}}', { protocol: 'anthropic' }))
  t.match(messages.ok && messages.usage, { inputTokens: 2, outputTokens: 4 })
  const responses = readAnswer(task('{"object":"response","usage":{"input_tokens":1,"output_tokens":6,"total_tokens":7}}', { protocol: 'openai-responses' }))
  t.match(responses.ok && responses.usage, { inputTokens: 1, outputTokens: 6 })
  const none = readAnswer(task('{"input_tokens":9}', { protocol: 'anthropic' }))
  t.equal(none.ok && none.usage, null, 'no usage (count_tokens): null')
})

t.test('past the caps: output_too_large naming the cap, before anything is built', async (t) => {
  const many = readAnswer(task('{"a":[' + new Array(100).fill('{}').join(',') + ']}'))
  t.same(many, { ok: false, error: { code: 'output_too_large', details: { reason: 'nodes', limit: 100 }, message: many.ok ? '' : many.error.message } })
  t.match(!many.ok && many.error.message, /maxJsonNodes/)
  const atCap = readAnswer(task('{"a":[' + new Array(98).fill('{}').join(',') + ']}'))
  t.equal(atCap.ok, true, 'exactly at the node cap passes')
  const deep = readAnswer(task('{"a":' + '['.repeat(8) + ']'.repeat(8) + '}'))
  t.match(deep, { ok: false, error: { code: 'output_too_large', details: { reason: 'depth', limit: 8 } } })
})

t.test('not UTF-8, not JSON, not an object: provider_protocol_error', async (t) => {
  for (const [what, body] of [
    ['not JSON', '<!doctype html><html></html>'],
    ['cut short', '{"id":"c","choices":['],
    ['empty', ''],
    ['an array', '[1,2]'],
    ['a string', '"hi"'],
    ['not UTF-8', new Uint8Array([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d])],
  ] as const) {
    const r = readAnswer(task(body))
    t.match(r, { ok: false, error: { code: 'provider_protocol_error' } }, what)
  }
})

t.test('in the pool: the buffer is transferred in and comes back untouched', async (t) => {
  const pool = new ParserPool({ threads: 1, heapMb: 64, youngGenMb: 16 })
  t.teardown(() => pool.close())
  const text = '{"id":"c","usage":{"prompt_tokens":1,"completion_tokens":2}}'
  const body = new Uint8Array(new ArrayBuffer(text.length))
  body.set(enc.encode(text))
  const r = await pool.readAnswer(task(body, { limits: { maxDepth: 128, maxNodes: 1_000_000 } }))
  t.equal(body.buffer.detached, true, 'transferred, not copied')
  t.ok(r.ok)
  if (!r.ok) return
  t.equal(Buffer.from(r.body).toString(), text, 'the same bytes back')
  t.same(r.usage, { inputTokens: 1, outputTokens: 2 })
  const refused = await pool.readAnswer(task('{"a":' + '['.repeat(9) + ']'.repeat(9) + '}'))
  t.match(refused, { ok: false, error: { code: 'output_too_large' } }, 'a refusal is data, not a throw')
  t.same({ completed: pool.stats().completed, failed: pool.stats().failed }, { completed: 2, failed: 0 })
})
