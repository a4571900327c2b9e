// Same request body -> the same bytes; a different body -> different text and ids.
import t from 'tap'
import { parseSse, rawRequest, startSim } from '../../../src/sim/index.ts'

const sim = await startSim()
t.teardown(() => sim.close())

const cases: Array<[string, (text: string, stream: boolean) => unknown]> = [
  ['/v1/chat/completions', (text, stream) => ({ model: 'gpt-4o-mini', stream, stream_options: stream ? { include_usage: true } : undefined, messages: [{ role: 'user', content: text }] })],
  ['/v1/responses', (text, stream) => ({ model: 'gpt-5.5', stream, input: text })],
  ['/v1/messages', (text, stream) => ({ model: 'claude-opus-5-5', stream, max_tokens: 10, messages: [{ role: 'user', content: text }] })],
]

for (const [path, make] of cases) {
  for (const stream of [true, false]) {
    t.test(`${path} stream=${stream}`, async t => {
      const a = await rawRequest(sim.url, { path, body: make('hello\n#sim tokens=12 tools=2', stream) })
      const b = await rawRequest(sim.url, { path, body: make('hello\n#sim tokens=12 tools=2', stream) })
      const c = await rawRequest(sim.url, { path, body: make('hello!\n#sim tokens=12 tools=2', stream) })
      t.equal(a.status, 200)
      t.ok(a.body.length > 200)
      t.ok(a.body.equals(b.body), 'identical bytes for an identical body')
      t.notOk(a.body.equals(c.body), 'different bytes for a different body')
      t.equal(a.headers['x-request-id'] ?? a.headers['request-id'], b.headers['x-request-id'] ?? b.headers['request-id'], 'request id header too')
      const texts = [a, c].map(r => textOf(path, r.body, stream))
      t.not(texts[0], texts[1], `text differs: "${texts[0].slice(0, 30)}" vs "${texts[1].slice(0, 30)}"`)
      t.ok(texts[0].length > 0)
    })
  }
}

t.test('bytes= makes every text delta that many bytes', async t => {
  const r = await rawRequest(sim.url, { path: '/v1/messages', body: { model: 'm', stream: true, max_tokens: 10, messages: [{ role: 'user', content: '#sim tokens=20 bytes=300' }] } })
  const deltas = parseSse(r.body).flatMap(f => {
    const d = JSON.parse(f.data)
    return d.type === 'content_block_delta' ? [d.delta.text as string] : []
  })
  t.equal(deltas.length, 20)
  t.ok(deltas.every(d => Buffer.byteLength(d) === 300))
  t.ok(new Set(deltas).size > 1, 'not all the same piece')
})

/** The assembled text of a response, whatever its protocol. */
function textOf(path: string, body: Buffer, stream: boolean): string {
  if (!stream) {
    const j = JSON.parse(body.toString())
    if (path === '/v1/chat/completions') return j.choices[0].message.content
    if (path === '/v1/responses') return j.output[0].content[0].text
    return j.content[0].text
  }
  let text = ''
  for (const f of parseSse(body)) {
    if (f.data === '[DONE]') continue
    const d = JSON.parse(f.data)
    if (path === '/v1/chat/completions') text += d.choices[0]?.delta?.content ?? ''
    else if (path === '/v1/responses' && d.type === 'response.output_text.delta') text += d.delta
    else if (d.type === 'content_block_delta' && d.delta.type === 'text_delta') text += d.delta.text
  }
  return text
}
