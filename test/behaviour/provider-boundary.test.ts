// What crosses the provider boundary, both ways, with a real (tiny) node:http provider that
// records every request: only allowlisted headers go upstream and none carries the gateway
// key; whatever a provider says in an error (its message, type and code, in a refusal or a
// stream's failure tail) reaches the caller without credentials and capped; a provider's
// Retry-After is clamped. The ledger is idle after each case.

import t, { type Test } from 'tap'
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http'
import { request } from 'undici'
import { KEY, PROVIDER_KEY, chatBody, messagesBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'

const OTHER_KEYS = ['sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv0123', 'sk-proj-ZyXwVuTsRqPoNm987654']
const HEX = '0123456789abcdef0123456789abcdef01234567'
const B64 = 'dGhpcyBpcyBhIHNlY3JldCB0b2tlbiAxMjM0NTY3ODkw'
const SECRETS = [KEY, PROVIDER_KEY, ...OTHER_KEYS, HEX, B64]
const LEAKY = `Incorrect API key provided: ${PROVIDER_KEY}. Sent Authorization: Bearer ${PROVIDER_KEY}; ` +
  `also ${OTHER_KEYS.join(' and ')}, token=${HEX}, session ${B64}. ${'padding '.repeat(200)}`
const FAR = new Date(Date.now() + 10 * 86_400_000).toUTCString()

interface Seen { path: string; headers: IncomingHttpHeaders }
const seen: Seen[] = []
let upstream: Server
let rig: Rig

function chatOk (): string {
  return JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion', created: 0, model: 'gpt-4o-mini', choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } })
}

t.before(async () => {
  upstream = createServer((req, res) => {
    const parts: Buffer[] = []
    req.on('data', (c: Buffer) => parts.push(c))
    req.on('end', () => {
      seen.push({ path: req.url ?? '', headers: req.headers })
      const body = JSON.parse(Buffer.concat(parts).toString('utf8')) as { model: string }
      switch (body.model) {
        case 'gpt-4o-leak':
          res.writeHead(401, { 'content-type': 'application/json' })
          return res.end(JSON.stringify({ error: { message: LEAKY, type: `invalid_request_error ${PROVIDER_KEY}`, code: `invalid_api_key ${OTHER_KEYS[0]}` } }))
        case 'claude-leak':
          res.writeHead(401, { 'content-type': 'application/json' })
          return res.end(JSON.stringify({ type: 'error', error: { type: 'authentication_error', message: LEAKY } }))
        case 'gpt-4o-retry':
          res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '999999999' })
          return res.end(JSON.stringify({ error: { message: 'slow down', type: 'rate_limit_error' } }))
        case 'gpt-4o-retry-date':
          res.writeHead(503, { 'content-type': 'application/json', 'retry-after': FAR })
          return res.end(JSON.stringify({ error: { message: 'later', type: 'server_error' } }))
        case 'gpt-4o-ok-retry':
          res.writeHead(200, { 'content-type': 'application/json', 'retry-after': '999999999' })
          return res.end(chatOk())
        case 'gpt-4o-stream-leak':
          res.writeHead(200, { 'content-type': 'text/event-stream' })
          res.write('data: {"id":"c1","object":"chat.completion.chunk","created":0,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}\n\n')
          return res.end(`data: ${JSON.stringify({ error: { message: LEAKY, type: `server_error ${PROVIDER_KEY}`, code: `boom ${OTHER_KEYS[1]}` } })}\n\n`)
        case 'claude-ok':
          res.writeHead(200, { 'content-type': 'application/json' })
          return res.end(JSON.stringify({ id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-x', content: [{ type: 'text', text: 'ok' }], stop_reason: 'end_turn', usage: { input_tokens: 1, output_tokens: 1 } }))
        default:
          res.writeHead(200, { 'content-type': 'application/json' })
          return res.end(chatOk())
      }
    })
  })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  const addr = upstream.address()
  const url = `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}`
  rig = await startRig({
    workers: 1,
    providers: () => [
      { name: 'up-chat', protocol: 'openai-chat', baseUrl: url, apiKeyEnv: 'SIM_PROVIDER_KEY', models: ['gpt-4o*'] },
      { name: 'up-messages', protocol: 'anthropic', baseUrl: url, apiKeyEnv: 'SIM_PROVIDER_KEY', models: ['claude-*'] },
    ],
  })
})
t.teardown(async () => {
  await rig.close()
  await new Promise((resolve) => upstream.close(resolve))
})

async function post (path: string, body: unknown, headers: Record<string, string>) {
  const res = await request(rig.url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })
  const text = await res.body.text()
  let json: Record<string, unknown> = {}
  try { json = JSON.parse(text) } catch {}
  return { status: res.statusCode, headers: res.headers, text, json }
}

function noSecrets (t: Test, name: string, text: string): void {
  for (const s of SECRETS) t.notOk(text.includes(s), `${name}: does not carry ${s.slice(0, 10)}…`)
}

t.test('only allowlisted headers reach the provider, and none carries the gateway key', async (t) => {
  const trace = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'
  const r = await post('/v1/chat/completions', chatBody('headers'), {
    authorization: `Bearer ${KEY}`,
    'api-key': KEY,
    'x-goog-api-key': KEY,
    'x-custom-auth': `Token ${KEY}`,
    'x-request-id': `req-${KEY}`,
    'x-test-tag': KEY,
    'openai-organization': 'org-test',
    'openai-beta': 'assistants=v2',
    'anthropic-beta': 'not-for-openai',
    traceparent: trace,
    'user-agent': 'test-agent/1',
    'idempotency-key': 'idem-1',
    'x-random': 'hello',
    'x-session-id': 'sess-1',
    cookie: 'a=b',
  })
  t.equal(r.status, 200, r.text.slice(0, 200))
  const h = seen.at(-1)!.headers
  for (const [k, v] of Object.entries(h)) t.notOk(String(v).includes(KEY), `${k}: no gateway key`)
  t.equal(h.authorization, `Bearer ${PROVIDER_KEY}`, 'the provider gets its own key')
  t.equal(h['openai-organization'], 'org-test')
  t.equal(h['openai-beta'], 'assistants=v2')
  t.equal(h.traceparent, trace)
  t.equal(h['user-agent'], 'test-agent/1')
  t.equal(h['idempotency-key'], 'idem-1')
  for (const k of ['api-key', 'x-goog-api-key', 'x-custom-auth', 'x-request-id', 'x-test-tag', 'anthropic-beta', 'x-random', 'x-session-id', 'cookie', 'x-api-key']) {
    t.equal(h[k], undefined, `${k} not forwarded`)
  }
  const m = await post('/v1/messages', messagesBody('headers', { model: 'claude-ok' }), {
    'x-api-key': KEY,
    'x-goog-api-key': KEY,
    'anthropic-version': '2023-06-01',
    'anthropic-beta': 'tools-2024',
    'openai-organization': 'not-for-anthropic',
    'x-test-tag': 'tagged',
  })
  t.equal(m.status, 200, m.text.slice(0, 200))
  const mh = seen.at(-1)!.headers
  for (const [k, v] of Object.entries(mh)) t.notOk(String(v).includes(KEY), `${k}: no gateway key`)
  t.equal(mh['x-api-key'], PROVIDER_KEY)
  t.equal(mh['anthropic-version'], '2023-06-01')
  t.equal(mh['anthropic-beta'], 'tools-2024')
  t.equal(mh['openai-organization'], undefined)
  t.equal(mh['x-goog-api-key'], undefined)
  t.equal(mh['x-test-tag'], 'tagged', 'upstream.forwardHeaders extends the allowlist')
  t.same(await waitIdle(rig.gw), {}, 'ledger idle')
})

t.test('a provider error that quotes credentials reaches the caller scrubbed and capped', async (t) => {
  for (const [path, body] of [['/v1/chat/completions', { ...chatBody('x'), model: 'gpt-4o-leak' }], ['/v1/messages', messagesBody('x', { model: 'claude-leak' })]] as const) {
    const r = await post(path, body, { authorization: `Bearer ${KEY}` })
    t.equal(r.status, 401, `${path}: the provider's own 4xx`)
    t.equal(r.json.code, 'provider_error')
    noSecrets(t, path, r.text)
    const msg = String(r.json.providerMessage)
    t.match(msg, /^Incorrect API key provided: \[redacted\]\. Sent Authorization: Bearer \[redacted\]/, `${path}: the message is kept, the keys are not`)
    t.ok(msg.length <= 301, `${path}: capped (${msg.length})`)
    t.ok(msg.endsWith('…'), `${path}: the cap is visible`)
    t.ok(typeof r.json.signature === 'string', `${path}: still signed`)
    t.same(await waitIdle(rig.gw), {}, `${path}: ledger idle`)
  }
})

t.test('an in-band stream error that quotes the provider key never reaches the caller', async (t) => {
  const r = await post('/v1/chat/completions', { ...chatBody('x', { stream: true }), model: 'gpt-4o-stream-leak' }, { authorization: `Bearer ${KEY}` })
  t.equal(r.status, 200)
  noSecrets(t, 'stream', r.text)
  t.match(r.text, /"content":"hi"/, 'the frames before it went out')
  t.match(r.text, /"code":"provider_error"/, 'the signed failure tail says what happened')
  t.match(r.text, /\[redacted\]/, 'with the provider\'s type, scrubbed')
  t.same(await waitIdle(rig.gw), {}, 'ledger idle')
})

t.test('a provider\'s Retry-After is clamped to an hour', async (t) => {
  const a = await post('/v1/chat/completions', { ...chatBody('x'), model: 'gpt-4o-retry' }, { authorization: `Bearer ${KEY}` })
  t.equal(a.status, 429)
  t.equal(a.json.code, 'provider_rate_limited')
  t.equal(a.headers['retry-after'], '3600')
  t.equal(a.json.retryAfterSeconds, 3600)
  const b = await post('/v1/chat/completions', { ...chatBody('x'), model: 'gpt-4o-retry-date' }, { authorization: `Bearer ${KEY}` })
  t.equal(b.status, 502)
  t.equal(b.json.code, 'provider_unavailable')
  t.equal(b.headers['retry-after'], '3600', 'an HTTP date ten days out')
  const c = await post('/v1/chat/completions', { ...chatBody('x'), model: 'gpt-4o-ok-retry' }, { authorization: `Bearer ${KEY}` })
  t.equal(c.status, 200)
  t.equal(c.headers['retry-after'], '3600', 'also on a relayed answer')
  t.same(await waitIdle(rig.gw), {}, 'ledger idle')
})
