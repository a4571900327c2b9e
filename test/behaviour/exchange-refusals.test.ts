// Every refusal before the provider: right code and status, nothing sent upstream, and the
// ledger back at idle afterwards.

import t from 'tap'
import { request } from 'undici'
import { sha256Hex } from '../../src/config/load.ts'
import { KEY, chatBody, messagesBody, responsesBody, simProvidersNoTranslation, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'

const PINNED = 'sk-pinned-to-gpt5-only'
const LIMITED = 'sk-three-turns-per-run'

let rig: Rig
t.before(async () => {
  rig = await startRig({
    workers: 2,
    // The protocol_mismatch case needs a provider that does not translate.
    providers: simProvidersNoTranslation,
    limits: { maxBodyBytes: 4096, maxJsonDepth: 8, maxJsonNodes: 200 },
    keys: [
      { name: 'test', sha256: sha256Hex(KEY), models: ['*'] },
      { name: 'pinned', sha256: sha256Hex(PINNED), models: ['gpt-5*'] },
      { name: 'limited', sha256: sha256Hex(LIMITED), models: ['*'], maxTurnsPerRun: 3 },
    ],
  })
})
t.teardown(() => rig.close())

async function post (path: string, body: unknown, headers: Record<string, string> = { authorization: `Bearer ${KEY}` }) {
  const res = await request(rig.url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) })
  const text = await res.body.text()
  let json: Record<string, unknown> = {}
  try { json = JSON.parse(text) } catch {}
  return { status: res.statusCode, headers: res.headers, json, text }
}

const refusals: Array<[string, () => ReturnType<typeof post>, number, string]> = [
  ['no key', () => post('/v1/chat/completions', chatBody('x'), {}), 401, 'unauthorized'],
  ['wrong key', () => post('/v1/chat/completions', chatBody('x'), { authorization: 'Bearer sk-nope' }), 401, 'unauthorized'],
  ['wrong x-api-key', () => post('/v1/messages', messagesBody('x'), { 'x-api-key': 'sk-nope' }), 401, 'unauthorized'],
  ['model pin', () => post('/v1/chat/completions', chatBody('x'), { authorization: `Bearer ${PINNED}` }), 403, 'model_not_allowed'],
  ['unknown model', () => post('/v1/chat/completions', { ...chatBody('x'), model: 'llama-9' }), 404, 'model_not_found'],
  ['protocol mismatch', () => post('/v1/chat/completions', { ...chatBody('x'), model: 'claude-opus-5-5' }), 400, 'protocol_mismatch'],
  ['body over the cap', () => post('/v1/responses', responsesBody('x'.repeat(5000))), 413, 'payload_too_large'],
  ['invalid JSON', () => post('/v1/responses', '{"model":"gpt-5.5",'), 400, 'invalid_json'],
  ['too deep', () => post('/v1/responses', { model: 'gpt-5.5', input: [[[[[[[[[['deep']]]]]]]]]] }), 400, 'json_too_deep'],
  ['too many nodes', () => post('/v1/responses', { model: 'gpt-5.5', input: Array.from({ length: 300 }, (_, i) => i) }), 400, 'json_too_many_nodes'],
  ['no model', () => post('/v1/responses', { input: 'x' }), 400, 'invalid_request'],
  ['unknown route', () => post('/v1/embeddings', { model: 'x' }), 404, 'not_found'],
]

t.test('each refusal: code, status, nothing upstream, idle after', async (t) => {
  for (const [name, go, status, code] of refusals) {
    const before = rig.requests.length
    const r = await go()
    t.equal(r.status, status, `${name}: status`)
    t.equal(r.json.code, code, `${name}: code (${r.text.slice(0, 160)})`)
    t.equal(typeof r.json.error, 'string', `${name}: human message`)
    t.notOk(r.headers['retry-after'], `${name}: no Retry-After, a retry cannot help`)
    t.equal(rig.requests.length, before, `${name}: nothing reached the provider`)
    t.same(await waitIdle(rig.gw), {}, `${name}: ledger idle`)
  }
  const m = await rig.gw.metrics()
  for (const [, , , code] of refusals) t.ok((m.get(`sluice_refusals_total{code="${code}"}`) ?? 0) >= 1, `${code} counted`)
  t.equal(m.get('sluice_admissions_total'), m.get('sluice_releases_total'), 'every admitted exchange released')
})

t.test('turn pin: a run takes at most its key\'s turns, across workers; refusals give the turn back', async (t) => {
  const run = { authorization: `Bearer ${LIMITED}`, 'x-sluice-run-id': `run-${Date.now()}` }
  // A local refusal (bad JSON) does not spend a turn.
  t.equal((await post('/v1/chat/completions', '{', run)).json.code, 'invalid_json')
  for (let i = 0; i < 3; i++) {
    // Fresh connections: with 2 workers the turns land on both, the count is shared.
    const r = await post('/v1/chat/completions', chatBody(`turn ${i}`), run)
    t.equal(r.status, 200, `turn ${i + 1}`)
  }
  const fourth = await post('/v1/chat/completions', chatBody('one more'), run)
  t.equal(fourth.status, 429)
  t.equal(fourth.json.code, 'turn_limit')
  t.equal(fourth.json.limit, 3)
  const other = await post('/v1/chat/completions', chatBody('another run'), { ...run, 'x-sluice-run-id': 'another' })
  t.equal(other.status, 200, 'another run is not affected')
  const tp = await post('/v1/chat/completions', chatBody('traceparent run'), { authorization: `Bearer ${LIMITED}`, traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' })
  t.equal(tp.status, 200, 'the W3C trace id is a run identity too')
  t.same(await waitIdle(rig.gw), {})
})
