// A provider whose stream ends cleanly but inside a frame: the unfinished frame never reaches
// the client (the relay holds an unterminated frame back until it ends), and the stream ends
// with a signed provider_protocol_error tail right after the last whole frame.

import t from 'tap'
import type { Server } from 'node:http'
import { request } from 'undici'
import { verifyRecord, type FailureRecord } from '../../src/sse/sign.ts'
import { KEY, SIGNING_KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { startUpstream } from '../helpers/upstream.ts'

const chunk = (i: number) => `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"w${i}"},"finish_reason":null}]}\n\n`
const partial = 'data: {"id":"c1","object":"chat.compl'

let rig: Rig
let upstream: Server
t.before(async () => {
  const up = await startUpstream((_req, _body, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write(chunk(0) + chunk(1) + partial)
    setTimeout(() => res.end(), 20)
  })
  upstream = up.server
  const url = up.url
  rig = await startRig({ providers: () => [{ name: 'eof', protocol: 'openai-chat', baseUrl: url, models: ['*'] }] })
})
t.teardown(async () => { await rig.close(); upstream.close() })

t.test('EOF inside a frame: whole frames, then a signed tail; the partial frame is never sent', async (t) => {
  const res = await request(rig.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify(chatBody('x', { stream: true })),
  })
  const text = await res.body.text()
  t.equal(res.statusCode, 200)
  t.ok(text.startsWith(chunk(0) + chunk(1)), 'the provider\'s whole frames, exactly')
  t.notMatch(text, /chat\.compl(?!etion)/, 'the unfinished frame never reached the client')
  const rest = text.slice((chunk(0) + chunk(1)).length)
  t.match(rest, /^data: \{"error":/, 'the tail starts at a frame boundary')
  const j = JSON.parse(rest.trim().slice('data: '.length)) as { error: { sluice: { record: FailureRecord; signature: string } } }
  t.equal(j.error.sluice.record.code, 'provider_protocol_error')
  t.match(j.error.sluice.record.message, /inside a frame/)
  t.ok(verifyRecord(j.error.sluice.record, j.error.sluice.signature, Buffer.from(SIGNING_KEY)), 'signature verifies')
  t.same(await waitIdle(rig.gw), {})
})
