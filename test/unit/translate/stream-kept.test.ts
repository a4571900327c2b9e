// The Responses encoder's hand-over to the conversation store (worker/continuation.ts): with
// `state.keep`, once the terminal is rendered, takeKept() gives the id the client saw and the
// terminal's `output` exactly; its bytes are charged to the budget until taken or disposed;
// the response objects echo previous_response_id and store; without `state`, nothing is kept.
import t from 'tap'
import { CountingBudget } from '../../../src/translate/canonical.ts'
import { createStreamTranslator } from '../../../src/translate/stream/index.ts'
import { parseSseText } from '../../helpers/sse.ts'
import { chatFrames, fn, messagesFrames, request, sseOf } from './helpers.ts'

function run (from: 'openai-chat' | 'anthropic', state: { previousResponseId: string | null, store: boolean, keep: boolean } | undefined, budget: CountingBudget) {
  const tr = createStreamTranslator({ from, to: 'openai-responses', request: request('openai-responses', [fn('f')]), budget, issuer: 'x:y', ...(state ? { state } : {}) })
  const frames = from === 'openai-chat'
    ? chatFrames({ text: 'hello there', calls: [{ id: 'call_1', name: 'f', args: '{"a":1}' }] })
    : messagesFrames({ text: 'hello there', calls: [{ id: 'toolu_1', name: 'f', args: '{"a":1}' }] })
  let text = ''
  for (const f of sseOf(frames).split('\n\n').filter(x => x !== '')) for (const b of tr.pushFrame(Buffer.from(f + '\n\n'))) text += b.toString()
  for (const b of tr.end()) text += b.toString()
  const terminal = parseSseText(text).map(e => JSON.parse(e.data) as Record<string, any>).find(d => d.type === 'response.completed')
  return { tr, terminal }
}

for (const from of ['openai-chat', 'anthropic'] as const) {
  t.test(`${from} -> responses: the terminal's id and output, kept once`, async t => {
    const budget = new CountingBudget()
    const { tr, terminal } = run(from, { previousResponseId: 'resp_prev', store: true, keep: true }, budget)
    t.ok(tr.finished, 'finished')
    t.equal(terminal?.response.previous_response_id, 'resp_prev', 'the terminal echoes previous_response_id')
    t.equal(terminal?.response.store, true)
    t.ok(budget.held.output > 0, 'the kept output is charged until it is taken')
    const kept = tr.takeKept()
    t.equal(kept?.id, terminal?.response.id, 'the id the client saw')
    t.same(JSON.parse(kept?.output ?? 'null'), terminal?.response.output, 'exactly the terminal\'s output')
    t.equal(tr.takeKept(), null, 'once')
    t.ok(budget.idle, 'released when taken')
    tr.dispose()
    t.ok(budget.idle)
  })
}

t.test('not taken: dispose releases it; without state nothing is kept', async t => {
  const budget = new CountingBudget()
  const a = run('openai-chat', { previousResponseId: null, store: true, keep: true }, budget)
  t.notOk(budget.idle)
  a.tr.dispose()
  t.ok(budget.idle, 'dispose releases the kept output')
  const b = run('openai-chat', undefined, budget)
  t.equal(b.terminal?.response.store, false, 'unchanged default without the store')
  t.equal(b.tr.takeKept(), null)
  t.ok(budget.idle)
  const c = run('openai-chat', { previousResponseId: null, store: false, keep: false }, budget)
  t.equal(c.terminal?.response.store, false, 'store: false echoed')
  t.equal(c.tr.takeKept(), null, 'store: false keeps nothing')
  t.ok(budget.idle)
})
