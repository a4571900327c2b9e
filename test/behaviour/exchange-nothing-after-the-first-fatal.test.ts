// The first fatal of a stream is final, wherever the provider's chunk boundaries fall (found
// by test/fuzz/provider-streams.test.ts, "how the provider's bytes were split does not
// change what the client is told"):
//   - a provider's own error event goes to the client whole, then the signed tail, and
//     nothing the provider sent after it, even when it came in the same read;
//   - a frame over the cap that follows the stream's terminal in the same read does not take
//     the frames before it (the terminal included) away from the client.

import t, { type Test } from 'tap'
import type { Server } from 'node:http'
import { request } from 'undici'
import { verifyRecord } from '../../src/sse/sign.ts'
import { KEY, SIGNING_KEY, chatBody, messagesBody, responsesBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { findSluice } from '../fuzz/tails.ts'

const chatChunk = (s: string) => `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"${s}"},"finish_reason":null}]}\n\n`
const chatFinish = 'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
const created = 'event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":"m","output":[]}}\n\n'
const rDelta = (n: number) => `event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":${n},"item_id":"m1","output_index":0,"content_index":0,"delta":"x"}\n\n`
const rCompleted = (n: number) => `event: response.completed\ndata: {"type":"response.completed","sequence_number":${n},"response":{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m","output":[],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}}\n\n`
const mStart = 'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":1,"output_tokens":1}}}\n\n'
const mDelta = 'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}\n\n'
const mStopReason = 'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}\n\n'
const mStop = 'event: message_stop\ndata: {"type":"message_stop"}\n\n'

/** Each stream is written in one write, so the gateway reads it (nearly always) in one chunk. */
const STREAMS: Record<string, { before: string; after: string }> = {
  chat: {
    before: chatChunk('a') + 'data: {"error":{"message":"overloaded","type":"server_error","code":null}}\n\n',
    after: chatChunk('after the error') + chatFinish + 'data: [DONE]\n\n',
  },
  responses: {
    before: created + rDelta(1) + 'event: error\ndata: {"type":"error","sequence_number":2,"code":"server_error","message":"boom"}\n\n',
    after: rDelta(3) + rCompleted(4),
  },
  messages: {
    before: mStart + mDelta + 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"busy"}}\n\n',
    after: mDelta + mStopReason + mStop,
  },
}

const MAX_FRAME = 1024
const oversize = 'data: {"pad":"' + 'x'.repeat(2 * MAX_FRAME) + '"}\n\n'

let rig: Rig
let upstream: Server
t.before(async () => {
  const up = await startUpstream((req, _body, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    const which = String(req.headers['x-test-tag'])
    if (which === 'oversize-after-done') res.end(chatChunk('a') + chatFinish + 'data: [DONE]\n\n' + oversize)
    else res.end(STREAMS[which].before + STREAMS[which].after)
  })
  upstream = up.server
  const url = up.url
  rig = await startRig({
    limits: { sseFrameBytes: MAX_FRAME },
    providers: () => [
      { name: 'up-chat', protocol: 'openai-chat', baseUrl: url, models: ['gpt-4o*'] },
      { name: 'up-responses', protocol: 'openai-responses', baseUrl: url, models: ['gpt-5*'] },
      { name: 'up-messages', protocol: 'anthropic', baseUrl: url, models: ['claude-*'] },
    ],
  })
})
t.teardown(async () => { await rig.close(); upstream.close() })

const PATHS: Record<string, string> = { chat: '/v1/chat/completions', responses: '/v1/responses', messages: '/v1/messages' }
const BODIES: Record<string, Record<string, unknown>> = {
  chat: chatBody('x', { stream: true }),
  responses: responsesBody('x', { stream: true }),
  messages: messagesBody('x', { stream: true }),
}

async function stream (t: Test, route: string, tag: string): Promise<string> {
  const res = await request(rig.url + PATHS[route], {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-test-tag': tag },
    body: JSON.stringify(BODIES[route]),
  })
  t.equal(res.statusCode, 200, 'a stream')
  return res.body.text()
}

for (const route of Object.keys(STREAMS)) {
  t.test(`${route}: the provider's error event, then the signed tail, and nothing sent after the error`, async (t) => {
    const text = await stream(t, route, route)
    t.ok(text.startsWith(STREAMS[route].before), 'every frame through the provider\'s error event, exactly')
    const rest = text.slice(STREAMS[route].before.length)
    t.notMatch(rest, /after the error|response\.completed|message_stop|\[DONE\]|"delta":"x"|text_delta/, 'no frame the provider sent after its error')
    const dataLine = rest.split('\n').find((l) => l.startsWith('data: '))
    t.ok(dataLine, 'a tail follows')
    t.equal(rest.split('\n\n').filter((f) => f.length > 0).length, 1, 'one frame after the error: the tail')
    const j = JSON.parse(dataLine!.slice('data: '.length)) as Record<string, unknown>
    const sluice = findSluice(j)
    t.ok(sluice, 'the tail carries the signed record')
    if (sluice === null) return
    t.ok(verifyRecord(sluice.record, sluice.signature, Buffer.from(SIGNING_KEY)), 'the signature verifies')
    t.same(await waitIdle(rig.gw), {})
  })
}

t.test('an oversize frame after [DONE] in the same read: the client still gets every frame through [DONE], and no tail', async (t) => {
  const text = await stream(t, 'chat', 'oversize-after-done')
  t.equal(text, chatChunk('a') + chatFinish + 'data: [DONE]\n\n', 'the stream through its terminal, exactly')
  t.same(await waitIdle(rig.gw), {})
})
