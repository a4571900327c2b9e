// The edges of HTTP itself: malformed framing, a malformed Content-Type, long session ids
// in the path, HEAD on the event stream, a byte-order mark. Every answer is the catalogue's
// one shape `{ code, error, ...details }` with its status (never fastify's or Node's own
// shape, never an empty reply), refusals before authentication say nothing about keys or
// routes, and the ledger is idle after each case. Framing cases go over raw sockets
// (node:net): no HTTP client would send them.

import t, { type Test } from 'tap'
import { connect } from 'node:net'
import { request } from 'undici'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 1, limits: { headersTimeoutMs: 400 } }) })
t.teardown(() => rig.close())

interface Raw { status: number; headers: Record<string, string>; body: string; json: Record<string, unknown>; raw: string }

/** Writes `data` on a fresh connection and reads until the server closes it (or `waitMs`). */
function raw (data: string | Buffer | Array<string | Buffer>, waitMs = 5000, gapMs = 0): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const sock = connect(rig.gw.port, '127.0.0.1')
    const parts: Buffer[] = []
    const timer = setTimeout(() => sock.destroy(), waitMs)
    sock.on('data', (c: Buffer) => parts.push(c))
    sock.on('error', () => {})
    sock.on('close', () => {
      clearTimeout(timer)
      const text = Buffer.concat(parts).toString('latin1')
      const split = text.indexOf('\r\n\r\n')
      const head = split < 0 ? text : text.slice(0, split)
      const body = split < 0 ? '' : text.slice(split + 4)
      const [statusLine, ...lines] = head.split('\r\n')
      const headers: Record<string, string> = {}
      for (const l of lines) {
        const i = l.indexOf(':')
        if (i > 0) headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim()
      }
      let json: Record<string, unknown> = {}
      try { json = JSON.parse(body) } catch {}
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine ?? '')?.[1] ?? 0), headers, body, json, raw: text })
    })
    sock.on('connect', async () => {
      const chunks = Array.isArray(data) ? data : [data]
      for (const c of chunks) {
        if (sock.destroyed) return
        sock.write(c)
        if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs))
      }
    })
    sock.once('error', reject)
  })
}

const auth = `authorization: Bearer ${KEY}\r\n`
const host = 'host: 127.0.0.1\r\n'
const body = JSON.stringify(chatBody('hi'))

async function expectRefusal (t: Test, name: string, r: Raw, status: number, code: string): Promise<void> {
  t.equal(r.status, status, `${name}: status (${r.raw.slice(0, 200)})`)
  t.equal(r.json.code, code, `${name}: code`)
  t.equal(typeof r.json.error, 'string', `${name}: a human message`)
  t.notOk('statusCode' in r.json || 'message' in r.json, `${name}: not fastify's shape`)
  t.match(r.headers['content-type'] ?? '', /^application\/json/, `${name}: JSON`)
  t.equal(Number(r.headers['content-length']), Buffer.byteLength(r.body, 'latin1'), `${name}: framed`)
  t.notOk(r.body.includes(KEY), `${name}: nothing about the key`)
  t.same(await waitIdle(rig.gw), {}, `${name}: ledger idle`)
}

t.test('framing errors answer in the catalogue shape, with a code for each', async (t) => {
  const cases: Array<[string, string | Buffer | string[], number, string, number?]> = [
    ['bad Content-Length', `POST /v1/chat/completions HTTP/1.1\r\n${host}${auth}content-length: abc\r\n\r\n${body}`, 400, 'http_malformed'],
    ['two Content-Lengths', `POST /v1/chat/completions HTTP/1.1\r\n${host}${auth}content-length: 5\r\ncontent-length: 6\r\n\r\n${body}`, 400, 'http_malformed'],
    ['Content-Length with Transfer-Encoding', `POST /v1/chat/completions HTTP/1.1\r\n${host}${auth}content-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n`, 400, 'http_malformed'],
    ['unknown Transfer-Encoding', `POST /v1/chat/completions HTTP/1.1\r\n${host}${auth}transfer-encoding: gzip, zebra\r\n\r\n`, 400, 'http_malformed'],
    ['bad chunk size', `POST /v1/chat/completions HTTP/1.1\r\n${host}${auth}transfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`, 400, 'http_malformed'],
    ['bad request line', 'GARBAGE\r\n\r\n', 400, 'http_malformed'],
    ['oversized headers', `POST /v1/chat/completions HTTP/1.1\r\n${host}${auth}x-big: ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'http_headers_too_large'],
    ['oversized URL', `GET /v1/models?${'q'.repeat(20_000)} HTTP/1.1\r\n${host}${auth}\r\n`, 431, 'http_headers_too_large'],
    ['missing Host', `POST /v1/chat/completions HTTP/1.1\r\n${auth}content-length: ${body.length}\r\n\r\n${body}`, 400, 'http_malformed'],
    ['expect: weird', `POST /v1/chat/completions HTTP/1.1\r\n${host}${auth}expect: weird\r\ncontent-length: ${body.length}\r\n\r\n${body}`, 417, 'http_expectation_failed'],
    ['slow headers', `POST /v1/chat/completions HTTP/1.1\r\n${host}x-slow: 1\r\n`, 408, 'http_headers_timeout', 20_000],
  ]
  for (const [name, data, status, code, wait] of cases) {
    const r = await raw(data, wait)
    await expectRefusal(t, name, r, status, code)
    t.equal(r.headers.connection, 'close', `${name}: the connection is closed`)
  }
  // A bad chunk in the middle of a body an exchange is already reading.
  const mid = await raw([
    `POST /v1/chat/completions HTTP/1.1\r\n${host}${auth}transfer-encoding: chunked\r\n\r\n`,
    `5\r\n{"mod\r\n`,
    'not-a-chunk-size\r\n\r\n',
  ], 5000, 100)
  await expectRefusal(t, 'bad chunk mid-body', mid, 400, 'http_malformed')
  const m = await rig.gw.metrics()
  t.ok((m.get('sluice_refusals_total{code="http_malformed"}') ?? 0) >= 1, 'framing refusals are counted')
})

t.test('a malformed Content-Type is a caller error before authentication', async (t) => {
  for (const ct of ['a', '', 'application/json, text/plain', ';']) {
    for (const withKey of [true, false]) {
      const name = `content-type ${JSON.stringify(ct)}${withKey ? '' : ' (no key)'}`
      const r = await raw(`POST /v1/chat/completions HTTP/1.1\r\n${host}${withKey ? auth : ''}content-type: ${ct}\r\ncontent-length: ${body.length}\r\n\r\n${body}`)
      await expectRefusal(t, name, r, 400, 'invalid_request')
      t.equal(r.json.header, 'content-type', `${name}: names the header`)
      t.notOk('exchangeId' in r.json, `${name}: no exchange id`)
    }
  }
  // A well-formed Content-Type that is not JSON is still accepted (curl -d sends a form type).
  const before = rig.requests.length
  const ok = await request(rig.url + '/v1/chat/completions', { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/x-www-form-urlencoded' }, body })
  t.equal(ok.statusCode, 200, 'a form content type still works')
  await ok.body.text()
  t.equal(rig.requests.length, before + 1)
  // The other routes too.
  for (const path of ['/rpc', '/v1/sessions/s1/exchanges']) {
    const r = await raw(`POST ${path} HTTP/1.1\r\n${host}${auth}content-type: a\r\ncontent-length: 2\r\n\r\n{}`)
    await expectRefusal(t, path, r, 400, 'invalid_request')
  }
})

t.test('a session id the header accepts works in the path', async (t) => {
  for (const len of [101, 200, 256]) {
    const id = `s${'x'.repeat(len - 1)}`
    const r = await request(`${rig.url}/v1/sessions/${id}/exchanges`, { method: 'POST', headers: { authorization: `Bearer ${KEY}` }, body: JSON.stringify({ route: 'chat', body: chatBody('long id') }) })
    const j = await r.body.json() as Record<string, unknown>
    t.equal(r.statusCode, 202, `${len} characters: accepted`)
    t.equal(j.sessionId, id)
    const c = await request(`${rig.url}/v1/sessions/${id}/exchanges/${String(j.exchangeId)}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${KEY}` } })
    t.equal(c.statusCode, 200, `${len} characters: cancel route`)
    await c.body.text()
  }
  // 256 characters that must be percent-encoded in a path are still 256 characters.
  const wide = 'é'.repeat(256)
  const w = await request(`${rig.url}/v1/sessions/${encodeURIComponent(wide)}/exchanges`, { method: 'POST', headers: { authorization: `Bearer ${KEY}` }, body: JSON.stringify({ route: 'chat', body: chatBody('wide id') }) })
  t.equal(w.statusCode, 202, '256 encoded characters')
  t.equal((await w.body.json() as Record<string, unknown>).sessionId, wide)
  // Beyond what the header accepts: the catalogue's invalid_request, never 414 FST_ERR_*.
  for (const id of ['x'.repeat(257), 'x'.repeat(5000)]) {
    const r = await request(`${rig.url}/v1/sessions/${id}/exchanges`, { method: 'POST', headers: { authorization: `Bearer ${KEY}` }, body: '{}' })
    const j = await r.body.json() as Record<string, unknown>
    t.equal(r.statusCode, 400, `${id.length} characters: refused`)
    t.equal(j.code, 'invalid_request')
  }
  const bad = await request(`${rig.url}/v1/sessions/%zz/events`, { headers: { authorization: `Bearer ${KEY}` } })
  const bj = await bad.body.json() as Record<string, unknown>
  t.equal(bad.statusCode, 400, 'a malformed percent-encoding')
  t.equal(bj.code, 'invalid_request')
  t.same(await waitIdle(rig.gw), {}, 'ledger idle')
})

t.test('HEAD on the event stream answers at once', async (t) => {
  const r = await raw(`HEAD /v1/sessions/s1/events HTTP/1.1\r\n${host}${auth}connection: close\r\n\r\n`, 5000)
  t.equal(r.status, 200, `answered (${r.raw.slice(0, 200)})`)
  t.match(r.headers['content-type'] ?? '', /^text\/event-stream/)
  t.equal(r.body, '', 'no body')
  const noKey = await raw(`HEAD /v1/sessions/s1/events HTTP/1.1\r\n${host}connection: close\r\n\r\n`, 5000)
  t.equal(noKey.status, 401, 'HEAD needs the key like GET')
  t.same(await waitIdle(rig.gw), {}, 'ledger idle')
})

t.test('the admin plane refuses other methods with the catalogue\'s 405', async (t) => {
  const r = await request(`http://127.0.0.1:${rig.gw.adminPort}/healthz`, { method: 'POST', body: '' })
  const j = await r.body.json() as Record<string, unknown>
  t.equal(r.statusCode, 405)
  t.equal(j.code, 'method_not_allowed')
  t.equal(r.headers.allow, 'GET, HEAD')
})

t.test('a UTF-8 byte-order mark is stripped before the body is forwarded', async (t) => {
  const before = rig.requests.length
  const bom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(body)])
  const r = await request(rig.url + '/v1/chat/completions', { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: bom })
  const text = await r.body.text()
  t.equal(r.statusCode, 200, text.slice(0, 200))
  t.equal(rig.requests.length, before + 1, 'it reached the provider')
  t.equal(Number(rig.requests.at(-1)!.headers['content-length']), Buffer.byteLength(body), 'the forwarded body is the JSON text without the mark')
  t.same(await waitIdle(rig.gw), {}, 'ledger idle')
})
