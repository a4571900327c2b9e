// createStreamTranslator as the worker drives it: frames as bytes (pushFrame), comments and
// keep-alives, a frame that is not JSON, an abort in the middle (dispose), the failure tail
// handed over once; the budget back at zero in every case.
import t from 'tap'
import { CountingBudget } from '../../../src/translate/canonical.ts'
import { createStreamTranslator, translateJson } from '../../../src/translate/stream/index.ts'
import { buildFailureRecord, signRecord } from '../../../src/sse/sign.ts'
import { chatFrames, fn, messagesFrames, request, sseOf } from './helpers.ts'

const record = buildFailureRecord({ code: 'provider_protocol_error', exchangeId: 'e', runId: null, provider: 'p', model: 'm', framesRelayed: 0, bytesRelayed: 0, usage: null, partial: true })
const signature = signRecord(record, Buffer.from('k'.repeat(32)))

t.test('comment and empty frames pass nothing; a frame that is not JSON fails the stream', async t => {
  const budget = new CountingBudget()
  const tr = createStreamTranslator({ from: 'openai-chat', to: 'openai-responses', request: request('openai-responses'), budget, issuer: 'x:y' })
  t.same(tr.pushFrame(Buffer.from(': keep-alive')), [])
  const first = tr.pushFrame(Buffer.from(sseOf(chatFrames({ text: 'hi' }).slice(0, 2)).split('\n\n')[0]))
  t.match(first[0].toString(), /^event: response.created\n/)
  t.same(tr.pushFrame(Buffer.from('data: ')), [])
  tr.pushFrame(Buffer.from('data: {"id":"x","choices":[{"delta":{"content":"ab')) // cut short
  t.match(tr.failure, { code: 'provider_protocol_error', message: /not valid JSON/ })
  t.same(tr.pushFrame(Buffer.from('data: {"id":"x"}')), [], 'nothing after the failure')
  t.same(tr.end(), [])
  const tail = tr.failureTail(record, signature).toString()
  t.match(tail, /^event: response.failed\n/)
  t.throws(() => tr.failureTail(record, signature), /twice/)
  t.ok(budget.idle)
})

t.test('an abort in the middle of buffered calls and an open text item: dispose releases everything', async t => {
  for (const [from, frames] of [
    ['openai-chat', chatFrames({ text: 'some text', calls: [{ id: 'a', name: 'f', args: '{"x":"' + 'y'.repeat(300) + '"}' }], interleave: true, finish: null, usage: false, done: false })],
    ['anthropic', messagesFrames({ thinking: { text: 'th', signature: 'sig' }, text: 'abc', terminal: false }).slice(0, -1)],
  ] as const) {
    for (const to of ['openai-responses', 'anthropic', 'openai-chat'] as const) {
      if (to === from) continue
      const budget = new CountingBudget()
      const tr = createStreamTranslator({ from, to, request: request(to, [fn('f')]), budget, issuer: 'x:y' })
      for (const f of frames) tr.push(f.event, f.data)
      t.notOk(budget.idle, `${from} -> ${to}: bytes held mid-stream`)
      tr.dispose()
      t.ok(budget.idle, `${from} -> ${to}: idle after dispose`)
    }
  }
})

t.test('translateJson: a cap or a broken answer is an error, the budget idle', async t => {
  const budget = new CountingBudget()
  const answer = { id: 'c', choices: [{ index: 0, message: { role: 'assistant', content: 'x'.repeat(1000) }, finish_reason: 'stop' }] }
  const r = translateJson({ from: 'openai-chat', to: 'anthropic', request: request('anthropic'), budget, issuer: 'x:y', answer, limits: { maxOutputItems: 256, maxOutputBytes: 100 } })
  t.match(r, { ok: false, error: { code: 'output_too_large' } })
  t.ok(budget.idle)
  const r2 = translateJson({ from: 'anthropic', to: 'openai-chat', request: request('openai-chat'), budget, issuer: 'x:y', answer: 'nope' })
  t.match(r2, { ok: false, error: { code: 'provider_protocol_error' } })
  const r3 = translateJson({ from: 'openai-chat', to: 'openai-responses', request: request('openai-responses'), budget, issuer: 'x:y', answer })
  t.match(r3, { ok: true, body: { object: 'response', status: 'completed', output: [{ type: 'message', content: [{ type: 'output_text', text: 'x'.repeat(1000) }] }] } })
  t.ok(budget.idle)
})

t.test('a Chat client gets the usage chunk when its request asked (request.includeUsage)', async t => {
  for (const includeUsage of [true, false]) {
    const budget = new CountingBudget()
    const tr = createStreamTranslator({ from: 'anthropic', to: 'openai-chat', request: { ...request('openai-chat'), includeUsage }, budget, issuer: 'x:y' })
    const out: Buffer[] = []
    for (const f of messagesFrames({ text: 'hi' })) out.push(...tr.push(f.event, f.data))
    const text = Buffer.concat(out).toString()
    t.equal(/"choices":\[\],"usage":\{"prompt_tokens":40/.test(text), includeUsage, `includeUsage ${includeUsage}`)
    t.match(text, /data: \[DONE\]\n\n$/)
    t.ok(budget.idle)
  }
})
