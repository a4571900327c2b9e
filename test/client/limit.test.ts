// The limit option: a positive integer, or null / 0 / Infinity for no local cap; negative,
// fractional and NaN refused at construction. connect() takes the gateway's own limit from
// GET /v1/capabilities.
import t from 'tap'
import { PendingPromptLimitError, SluiceClient, SluiceRequestError, SluiceResponseError } from '../../src/client/index.ts'
import { json, startServer, type TestServer } from './server.ts'

const KEY = 'sk-caps'
let caps: unknown = { name: 'sluice', version: '0.1.0', limits: { maxPendingPromptsPerSession: 3, maxActiveExchanges: 32 }, features: ['sessions'] }
let srv: TestServer
t.before(async () => {
  srv = await startServer((req, res, seen) => {
    if (seen.path === '/v1/capabilities') {
      if (seen.headers.authorization !== `Bearer ${KEY}`) return json(res, 401, { code: 'unauthorized', error: 'missing or unknown gateway key' })
      return json(res, 200, caps)
    }
    // a prompt route that holds its answer open until the test is done
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{')
  })
})
t.teardown(() => srv.close())

t.test('invalid limits throw RangeError at construction', async (t) => {
  for (const v of [-1, 1.5, NaN, -Infinity, 0.0001]) {
    t.throws(() => new SluiceClient({ baseURL: 'http://127.0.0.1:1', maxPendingPromptsPerSession: v }), RangeError, String(v))
  }
  t.throws(() => new SluiceClient({ baseURL: 'http://127.0.0.1:1', maxPendingPromptsPerSession: '5' as unknown as number }), TypeError)
  t.throws(() => new SluiceClient({ baseURL: 'not a url' }), TypeError)
  t.throws(() => new SluiceClient({ baseURL: 'http://127.0.0.1:1', eventStreamRetries: -1 }), RangeError)
})

t.test('null, 0 and Infinity disable the local cap; the default is 5', async (t) => {
  for (const v of [null, 0, Infinity]) {
    const c = new SluiceClient({ baseURL: srv.url, maxPendingPromptsPerSession: v })
    t.equal(c.limit, null, String(v))
    const s = c.session('many')
    const held = []
    for (let i = 0; i < 8; i++) held.push(await s.fetch(srv.url + '/v1/responses', { method: 'POST', body: '{}' }))
    t.equal(s.pending, 8, `${String(v)}: 8 pending, none refused`)
    for (const r of held) await r.body!.cancel()
    t.equal(s.pending, 0)
  }
  const d = new SluiceClient({ baseURL: srv.url })
  t.equal(d.limit, 5)
  const s = d.session('five')
  const held = []
  for (let i = 0; i < 5; i++) held.push(await s.fetch(srv.url + '/v1/messages', { method: 'POST', body: '{}' }))
  const before = srv.requests.length
  await t.rejects(s.fetch(srv.url + '/v1/messages', { method: 'POST', body: '{}' }), PendingPromptLimitError)
  t.equal(srv.requests.length, before)
  for (const r of held) await r.body!.cancel()
  t.equal(s.pending, 0)
  t.equal(new SluiceClient({ baseURL: srv.url, maxPendingPromptsPerSession: 1 }).limit, 1)
})

t.test('connect() reads the limit from /v1/capabilities', async (t) => {
  caps = { name: 'sluice', version: '0.1.0', limits: { maxPendingPromptsPerSession: 3 }, features: [] }
  const c = await SluiceClient.connect({ baseURL: srv.url, apiKey: KEY })
  t.equal(c.limit, 3)
  t.equal(srv.requests.at(-1)!.method, 'GET')
  const s = c.session('three')
  const held = []
  for (let i = 0; i < 3; i++) held.push(await s.fetch(srv.url + '/v1/chat/completions', { method: 'POST', body: '{}' }))
  const refused = await s.fetch(srv.url + '/v1/chat/completions', { method: 'POST', body: '{}' }).catch((e: unknown) => e)
  t.match(refused, { name: 'PendingPromptLimitError', limit: 3, pendingCount: 3 })
  for (const r of held) await r.body!.cancel()

  caps = { name: 'sluice', version: '0.1.0', limits: { maxPendingPromptsPerSession: null }, features: [] }
  t.equal((await SluiceClient.connect({ baseURL: srv.url, apiKey: KEY })).limit, null, 'null from the server: no local cap')
  t.match(await SluiceClient.readCapabilities({ baseURL: srv.url, apiKey: KEY }), caps)

  caps = { name: 'sluice', limits: {} }
  await t.rejects(SluiceClient.connect({ baseURL: srv.url, apiKey: KEY }), SluiceResponseError, 'no limit advertised')
  caps = { name: 'sluice', limits: { maxPendingPromptsPerSession: -2 } }
  await t.rejects(SluiceClient.connect({ baseURL: srv.url, apiKey: KEY }), RangeError, 'an invalid advertised limit')
  const err = await SluiceClient.connect({ baseURL: srv.url, apiKey: 'wrong' }).catch((e: unknown) => e)
  t.ok(err instanceof SluiceRequestError)
  t.match(err, { status: 401, code: 'unauthorized', retryAfterSeconds: null })
})
