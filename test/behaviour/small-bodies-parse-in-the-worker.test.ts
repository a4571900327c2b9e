// DESIGN.md step 5: a body below limits.inWorkerParseBytes is parsed in the HTTP worker under
// the parse permit; a larger one still hops to the heap-limited parser pool. Seen through the
// worker's pool counts (/_test/parser): a small exchange adds no pool task, a large one adds
// one, a small translated exchange adds none for either of its two parses. (Streaming
// exchanges: a non-streaming answer is read in the pool, src/json/answer.ts, a separate hop.) Refusals of small
// bodies are the same catalogue refusals, and the ledger is idle after each.

import t from 'tap'
import { request } from 'undici'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'

let rig: Rig
t.before(async () => {
  rig = await startRig({ workers: 1, limits: { inWorkerParseBytes: 16 * 1024, maxJsonDepth: 16 } })
})
t.teardown(() => rig.close())

async function poolTasks (): Promise<number> {
  const res = await request(rig.url + '/_test/parser')
  const s = await res.body.json() as { completed: number, failed: number }
  return s.completed + s.failed
}

async function post (path: string, body: string): Promise<{ status: number, text: string }> {
  const res = await request(rig.url + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body,
  })
  return { status: res.statusCode, text: await res.body.text() }
}

t.test('a small body is parsed in the worker, a large one in the pool', async (t) => {
  const small = JSON.stringify(chatBody('small\n#sim tokens=3', { stream: true }))
  t.ok(small.length < 16 * 1024)
  const before = await poolTasks()
  const a = await post('/v1/chat/completions', small)
  t.equal(a.status, 200, a.text)
  t.equal(await poolTasks(), before, 'no parser-pool task for a small body')
  t.same(await waitIdle(rig.gw), {})

  const large = JSON.stringify({ ...chatBody('large\n#sim tokens=3', { stream: true }), metadata: { pad: 'p'.repeat(20 * 1024) } })
  const b = await post('/v1/chat/completions', large)
  t.equal(b.status, 200, b.text)
  t.equal(await poolTasks(), before + 1, 'one parser-pool task for a body above the threshold')
  t.same(await waitIdle(rig.gw), {})
})

t.test('a small translated exchange: neither parse hops', async (t) => {
  const before = await poolTasks()
  const body = JSON.stringify({ model: 'claude-sonnet-4', max_tokens: 50, messages: [{ role: 'user', content: 'hi\n#sim tokens=3' }], stream: true })
  const r = await post('/v1/chat/completions', body)
  t.equal(r.status, 200, r.text)
  t.match(r.text, /chat\.completion\.chunk/, 'OpenAI chunks, translated from the Anthropic provider')
  t.equal(await poolTasks(), before, 'the parse and the translation both ran in the worker')
  t.same(await waitIdle(rig.gw), {})
})

t.test('small refusals in the worker: the catalogue codes, nothing sent, ledger idle', async (t) => {
  const before = await poolTasks()
  const sent = rig.requests.length
  const deep = await post('/v1/chat/completions', JSON.stringify({ ...chatBody('x'), deep: JSON.parse('['.repeat(20) + ']'.repeat(20)) }))
  t.equal(deep.status, 400)
  t.equal(JSON.parse(deep.text).code, 'json_too_deep')
  const bad = await post('/v1/chat/completions', '{"model": "gpt-4o-mini", "messages": [')
  t.equal(bad.status, 400)
  t.equal(JSON.parse(bad.text).code, 'invalid_json')
  const noModel = await post('/v1/chat/completions', '{"messages":[]}')
  t.equal(noModel.status, 400)
  t.equal(JSON.parse(noModel.text).code, 'invalid_request')
  t.equal(await poolTasks(), before, 'all three refused in the worker')
  t.equal(rig.requests.length, sent, 'nothing reached the provider')
  const m = await rig.gw.metrics()
  t.equal(m.get('sluice_permits_released_total{gate="parse"}'), m.get('sluice_permits_admitted_total{gate="parse"}'), 'every parse permit released')
  t.same(await waitIdle(rig.gw), {})
})
