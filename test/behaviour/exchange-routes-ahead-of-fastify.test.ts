// The exchange routes are served from the HTTP server's 'request' event, ahead of fastify
// (worker/routes.ts directExchanges), when fastify could not change the answer: POST, the
// exact path, a Host where HTTP/1.1 needs one, a well-formed JSON content type. Every other
// request goes through fastify as before. This test tells the two apart by fastify's own
// tracing channel (a test hook counts the requests fastify handed to a route handler) and
// checks that both give the same answer: status, headers and stream, with the ledger idle.

import t from 'tap'
import { connect } from 'node:net'
import { request } from 'undici'
import { KEY, chatBody, messagesBody, responsesBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 1 }) })
t.teardown(() => rig.close())

/** fastify's count of handled requests (this GET counts itself). */
async function fastifyHandled (): Promise<number> {
  const r = await request(`${rig.url}/_test/fastify-handled`)
  return ((await r.body.json()) as { count: number }).count
}

interface Answer { status: number; headers: string[]; contentType: string; body: string; byFastify: boolean }

async function post (path: string, contentType: string | null, body: unknown): Promise<Answer> {
  const before = await fastifyHandled()
  const headers: Record<string, string> = { authorization: `Bearer ${KEY}` }
  if (contentType !== null) headers['content-type'] = contentType
  const r = await request(rig.url + path, { method: 'POST', headers, body: JSON.stringify(body) })
  const text = await r.body.text()
  const after = await fastifyHandled()
  // after - before: 1 for the second GET itself, and 1 more if fastify served the POST.
  return {
    status: r.statusCode,
    headers: Object.keys(r.headers).filter((h) => h !== 'date' && !h.startsWith('x-sluice-exchange')).sort(),
    contentType: String(r.headers['content-type']),
    body: text,
    byFastify: after - before === 2,
  }
}

const streamChat = chatBody('route', { stream: true })

t.test('the common request is served ahead of fastify, on every exchange route', async (t) => {
  for (const [path, body] of [['/v1/chat/completions', streamChat], ['/v1/responses', responsesBody('route', { stream: true })], ['/v1/messages', messagesBody('route', { stream: true })], ['/v1/messages/count_tokens', messagesBody('count')]] as const) {
    const a = await post(path, 'application/json', body)
    t.equal(a.status, 200, `${path}: 200 (${a.body.slice(0, 200)})`)
    t.equal(a.byFastify, false, `${path}: not through fastify`)
  }
  for (const ct of ['application/json; charset=utf-8', 'Application/JSON;charset="UTF-8"', 'application/json ; charset=UTF-8']) {
    const a = await post('/v1/chat/completions', ct, streamChat)
    t.equal(a.status, 200, `${ct}: 200`)
    t.equal(a.byFastify, false, `${ct}: not through fastify`)
  }
  t.same(await waitIdle(rig.gw), {}, 'ledger idle')
})

t.test('anything fastify must judge goes through fastify, with the same answer', async (t) => {
  const direct = await post('/v1/chat/completions', 'application/json', streamChat)
  t.equal(direct.byFastify, false)
  t.match(direct.body, /data: \[DONE\]/)
  const cases: Array<[string, string, string | null]> = [
    ['another content type', '/v1/chat/completions', 'text/plain'],
    ['another charset', '/v1/chat/completions', 'application/json; charset=latin1'],
    ['no content type', '/v1/chat/completions', null],
    ['a query string', '/v1/chat/completions?trace=1', 'application/json'],
  ]
  for (const [name, path, ct] of cases) {
    const a = await post(path, ct, streamChat)
    t.equal(a.byFastify, true, `${name}: through fastify`)
    t.equal(a.status, direct.status, `${name}: same status (${a.body.slice(0, 200)})`)
    t.same(a.headers, direct.headers, `${name}: same headers`)
    t.equal(a.contentType, direct.contentType, `${name}: same content type`)
    t.match(a.body, /data: \[DONE\]/, `${name}: the whole stream`)
  }
  // Refusals fastify makes stay fastify's (before any handler, so its channel is silent): a
  // malformed content type, a missing Host.
  const bad = await post('/v1/chat/completions', 'application/json, text/plain', streamChat)
  t.equal(bad.status, 400)
  t.equal(JSON.parse(bad.body).code, 'invalid_request')
  const noHost = await new Promise<string>((resolve) => {
    const body = JSON.stringify(streamChat)
    const sock = connect(rig.gw.port, '127.0.0.1', () => sock.write(`POST /v1/chat/completions HTTP/1.1\r\nauthorization: Bearer ${KEY}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`))
    let text = ''
    sock.on('data', (d) => { text += d.toString('latin1') })
    sock.on('close', () => resolve(text))
    sock.on('error', () => {})
  })
  t.match(noHost, /^HTTP\/1\.1 400/, 'missing Host: refused')
  t.match(noHost, /"code":"http_malformed"/)
  // The wrong method on an exchange path is fastify's 404, in the catalogue's shape.
  const get = await request(rig.url + '/v1/chat/completions', { headers: { authorization: `Bearer ${KEY}` } })
  t.equal(get.statusCode, 404)
  t.equal(((await get.body.json()) as { code: string }).code, 'not_found')
  t.same(await waitIdle(rig.gw), {}, 'ledger idle')
})

t.test('a refusal on the direct path is the same refusal', async (t) => {
  const before = await fastifyHandled()
  const r = await request(rig.url + '/v1/chat/completions', { method: 'POST', headers: { authorization: 'Bearer nope', 'content-type': 'application/json' }, body: JSON.stringify(streamChat) })
  const body = (await r.body.json()) as { code: string }
  t.equal(await fastifyHandled() - before, 1, 'not through fastify')
  t.equal(r.statusCode, 401)
  t.equal(body.code, 'unauthorized')
  const bad = await request(rig.url + '/v1/chat/completions', { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: '{"model":' })
  t.equal(bad.statusCode, 400)
  t.equal(((await bad.body.json()) as { code: string }).code, 'invalid_json')
  t.same(await waitIdle(rig.gw), {}, 'ledger idle')
})
