// Each `fault=` does what it promises, seen from raw bytes and from the official SDKs.
import t from 'tap'
import OpenAI from 'openai'
import Anthropic from '@anthropic-ai/sdk'
import { request } from 'node:http'
import { MALFORMED_MARK, faultKeysOf, nextExchange, parseSse, rawRequest, startSim, type SseFrame } from '../../../src/sim/index.ts'

const sim = await startSim()
t.teardown(() => sim.close())
const openai = new OpenAI({ baseURL: sim.url + '/v1', apiKey: 'sk-test', maxRetries: 0 })
const anthropic = new Anthropic({ baseURL: sim.url, apiKey: 'sk-test', maxRetries: 0 })

type Proto = 'chat' | 'responses' | 'messages'
const PROTOS: Proto[] = ['chat', 'responses', 'messages']
const PATH: Record<Proto, string> = { chat: '/v1/chat/completions', responses: '/v1/responses', messages: '/v1/messages' }

function body(proto: Proto, text: string, stream = true): Record<string, unknown> {
  if (proto === 'chat') return { model: 'gpt-4o-mini', stream, messages: [{ role: 'user', content: text }] }
  if (proto === 'responses') return { model: 'gpt-5.5', stream, input: text }
  return { model: 'claude-opus-5-5', max_tokens: 100, stream, messages: [{ role: 'user', content: text }] }
}

function send(proto: Proto, text: string, opts: { stream?: boolean; idleMs?: number; abortAfterMs?: number } = {}) {
  return rawRequest(sim.url, { path: PATH[proto], body: body(proto, text, opts.stream ?? true), idleMs: opts.idleMs, abortAfterMs: opts.abortAfterMs })
}

function isJson(s: string): boolean {
  try {
    JSON.parse(s)
    return true
  } catch {
    return false
  }
}

function lastFrameOk(proto: Proto, frames: SseFrame[]): boolean {
  const last = frames[frames.length - 1]
  if (proto === 'chat') return last.data === '[DONE]'
  if (proto === 'responses') return last.event === 'response.completed'
  return last.event === 'message_stop'
}

t.test('status-503: provider error JSON in each protocol, outcome fault', async t => {
  for (const proto of PROTOS) {
    const ex = nextExchange(sim)
    const r = await send(proto, '#sim fault=status-503')
    t.equal(r.status, 503, proto)
    const err = JSON.parse(r.body.toString())
    if (proto === 'messages') t.same(err.error.type, 'overloaded_error')
    else t.equal(err.error.type, 'server_error')
    const end = await ex.end
    t.equal(end.outcome, 'fault')
    t.equal(end.status, 503)
  }
  const e = await openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: '#sim fault=status-503' }] }).catch((x: unknown) => x)
  t.ok(e instanceof OpenAI.APIError && e.status === 503, 'openai SDK raises APIError 503')
})

t.test('status-429 carries Retry-After: 7', async t => {
  for (const proto of PROTOS) {
    const r = await send(proto, '#sim fault=status-429', { stream: proto !== 'chat' })
    t.equal(r.status, 429, proto)
    t.equal(r.headers['retry-after'], '7')
    const err = JSON.parse(r.body.toString())
    t.equal(proto === 'messages' ? err.error.type : err.error.code, proto === 'messages' ? 'rate_limit_error' : 'rate_limit_exceeded')
  }
  const e = await anthropic.messages.create({ model: 'claude-opus-5-5', max_tokens: 5, messages: [{ role: 'user', content: '#sim fault=status-429' }] }).catch((x: unknown) => x)
  t.ok(e instanceof Anthropic.RateLimitError, 'anthropic SDK raises RateLimitError')
  if (e instanceof Anthropic.APIError) t.equal(e.headers?.get('retry-after'), '7')
})

t.test('reset-before-first-byte: the client sees a reset and no response', async t => {
  for (const proto of PROTOS) {
    const ex = nextExchange(sim)
    const sent = performance.now()
    const r = await send(proto, 'x\n#sim fault=reset-before-first-byte')
    const seen = performance.now()
    t.equal(r.status, 0, proto)
    t.equal(r.error?.code, 'ECONNRESET')
    t.equal(r.body.length, 0)
    const end = await ex.end
    t.equal(end.outcome, 'fault')
    t.equal(end.eventsSent, 0)
    // when the sim reset it: before the client saw the reset (the 'end' event may come later)
    t.ok(end.faultAt !== undefined && end.faultAt > sent && end.faultAt <= seen, `${proto}: faultAt is the moment of the reset`)
  }
  const e = await openai.responses.create({ model: 'm', input: '#sim fault=reset-before-first-byte' }).catch((x: unknown) => x)
  t.ok(e instanceof OpenAI.APIConnectionError, 'openai SDK raises APIConnectionError')
})

t.test('cut-mid-stream: exactly `at` whole frames, then the connection drops', async t => {
  for (const proto of PROTOS) {
    const ex = nextExchange(sim)
    const r = await send(proto, '#sim tokens=6 fault=cut-mid-stream at=3')
    t.equal(r.status, 200, proto)
    t.ok(r.error, `${proto}: transport error (${r.error?.code})`)
    const text = r.body.toString()
    t.ok(text.endsWith('\n\n'), 'cut on a frame boundary')
    const frames = parseSse(text)
    t.equal(frames.length, 3)
    t.ok(frames.every(f => isJson(f.data)))
    const end = await ex.end
    t.equal(end.outcome, 'fault')
    t.equal(end.eventsSent, 3)
  }
  // Default `at` is half the stream the same directive would have produced.
  const whole = parseSse((await send('messages', '#sim tokens=10')).body).length
  const cut = parseSse((await send('messages', '#sim tokens=10 fault=cut-mid-stream')).body).length
  t.equal(cut, Math.floor(whole / 2), `default at: ${cut} of ${whole}`)
  const stream = anthropic.messages.stream({ model: 'claude-opus-5-5', max_tokens: 5, messages: [{ role: 'user', content: '#sim tokens=6 fault=cut-mid-stream at=4' }] })
  await t.rejects(stream.finalMessage(), 'anthropic SDK fails the cut stream')
})

t.test('malformed-frame: one non-JSON frame at `at`, the stream then completes', async t => {
  for (const proto of PROTOS) {
    const normal = parseSse((await send(proto, '#sim tokens=5 tools=1')).body)
    const r = await send(proto, '#sim tokens=5 tools=1 fault=malformed-frame at=2')
    t.equal(r.status, 200)
    t.ok(r.body.includes(MALFORMED_MARK), `${proto}: marker in raw bytes`)
    const frames = parseSse(r.body)
    t.equal(frames.length, normal.length + 1, 'one extra frame')
    const bad = frames.flatMap((f, i) => (f.data !== '[DONE]' && !isJson(f.data) ? [i] : []))
    t.same(bad, [2], 'only frame 2 is not JSON')
    t.ok(lastFrameOk(proto, frames), 'stream completes')
  }
  const stream = await openai.chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: '#sim fault=malformed-frame at=2' }] })
  await t.rejects((async () => {
    for await (const _ of stream);
  })(), 'openai SDK rejects the malformed frame')
})

t.test('oversize-frame: one frame of exactly `size` bytes, then the stream continues', async t => {
  for (const proto of PROTOS) {
    const r = await send(proto, '#sim tokens=6 fault=oversize-frame size=200000 at=4')
    const frames = parseSse(r.body)
    const big = frames.flatMap((f, i) => (Buffer.byteLength(f.raw) + 2 >= 200000 ? [i] : []))
    if (proto === 'responses') {
      // Responses repeats the full text in the done events and response.completed.
      t.equal(big[0], 4, `${proto}: the oversize delta is frame 4`)
    } else t.same(big, [4], `${proto}: frame 4 only`)
    t.equal(Buffer.byteLength(frames[4].raw) + 2, 200000, 'exact size, blank line included')
    t.ok(isJson(frames[4].data))
    t.ok(lastFrameOk(proto, frames))
  }
  const r = await send('chat', '#sim fault=oversize-frame')
  const sizes = parseSse(r.body).map(f => Buffer.byteLength(f.raw) + 2)
  t.ok(sizes.includes(1536 * 1024), 'default size 1.5 MiB')
  const m = await anthropic.messages.create({ model: 'claude-opus-5-5', max_tokens: 5, stream: false, messages: [{ role: 'user', content: '#sim tokens=2 fault=oversize-frame size=100000' }] })
  const block = m.content[0]
  t.ok(block.type === 'text' && block.text.includes('x'.repeat(100000)), 'non-streaming: a text of `size` bytes')
  const final = await anthropic.messages.stream({ model: 'claude-opus-5-5', max_tokens: 5, messages: [{ role: 'user', content: '#sim tokens=2 fault=oversize-frame size=100000' }] }).finalMessage()
  const text = final.content[0]
  t.ok(text.type === 'text' && text.text.length > 99000, 'anthropic SDK assembles the big delta')
})

t.test('stall: frames stop at `at`, socket stays open until the client leaves', async t => {
  for (const proto of PROTOS) {
    const ex = nextExchange(sim)
    const r = await send(proto, '#sim tokens=6 fault=stall at=3', { idleMs: 300 })
    t.ok(r.idle, `${proto}: no byte for 300 ms`)
    t.equal(r.error, null, 'connection was still open')
    t.equal(parseSse(r.body).length, 3)
    const end = await ex.end
    t.equal(end.outcome, 'client-closed')
    t.equal(end.eventsSent, 3)
    t.ok(end.durationMs >= 290)
  }
})

t.test("error-event: the protocol's own in-stream error, then the end", async t => {
  for (const proto of PROTOS) {
    const ex = nextExchange(sim)
    const r = await send(proto, '#sim tokens=6 fault=error-event at=2')
    t.equal(r.error, null, `${proto}: stream ended cleanly`)
    const frames = parseSse(r.body)
    t.equal(frames.length, 3)
    const last = frames[2]
    const data = JSON.parse(last.data)
    if (proto === 'chat') t.equal(data.error.type, 'server_error')
    else {
      t.equal(last.event, 'error')
      t.equal(data.type, 'error')
    }
    t.equal((await ex.end).outcome, 'fault')
  }
  const stream = anthropic.messages.stream({ model: 'claude-opus-5-5', max_tokens: 5, messages: [{ role: 'user', content: '#sim fault=error-event at=3' }] })
  const e = await stream.finalMessage().catch((x: unknown) => x)
  t.ok(e instanceof Anthropic.APIError, 'anthropic SDK raises APIError')
  const rs = openai.responses.stream({ model: 'm', input: '#sim fault=error-event at=3' })
  await t.rejects(rs.finalResponse(), 'openai SDK fails the Responses stream')
})

t.test('non-streaming faults', async t => {
  const cut = await send('chat', '#sim tokens=20 fault=cut-mid-stream', { stream: false })
  t.equal(cut.status, 200)
  t.ok(cut.error, 'connection dropped')
  t.ok(cut.body.length < Number(cut.headers['content-length']), 'short body')
  const bad = await send('responses', '#sim fault=malformed-frame', { stream: false })
  t.equal(bad.status, 200)
  t.notOk(isJson(bad.body.toString()), 'body is not JSON')
  const err = await send('messages', '#sim fault=error-event', { stream: false })
  t.equal(err.status, 500)
  t.equal(JSON.parse(err.body.toString()).error.type, 'api_error')
  const stall = await send('chat', '#sim fault=stall', { stream: false, idleMs: 300 })
  t.ok(stall.idle)
  t.ok(stall.body.length > 0 && stall.body.length < Number(stall.headers['content-length']))
})

t.test('client abort reaches the sim promptly: end outcome client-closed', async t => {
  const ex = nextExchange(sim)
  const controller = new AbortController()
  const stream = await openai.chat.completions.create(
    { model: 'm', stream: true, messages: [{ role: 'user', content: '#sim tokens=200 interval=20' }] },
    { signal: controller.signal },
  )
  let seen = 0
  let abortedAt = 0
  try {
    for await (const _ of stream) {
      if (++seen === 3) {
        abortedAt = performance.now()
        controller.abort()
      }
    }
  } catch {
    // the SDK may end the iteration quietly or with an abort error: both are fine here
  }
  t.equal(seen, 3, 'no chunk after the abort')
  const end = await ex.end
  const lag = performance.now() - abortedAt
  t.equal(end.outcome, 'client-closed')
  t.ok(end.eventsSent >= 3 && end.eventsSent < 20, `stopped early (${end.eventsSent} events)`)
  t.ok(lag < 500, `end seen ${lag.toFixed(0)} ms after the abort`)
})

t.test('a client that leaves during ttft is seen at once', async t => {
  const ex = nextExchange(sim)
  const r = await send('messages', '#sim ttft=5000', { abortAfterMs: 100 })
  t.ok(r.aborted)
  const end = await ex.end
  t.equal(end.outcome, 'client-closed')
  t.equal(end.status, 0)
  t.ok(end.durationMs < 1000, `${end.durationMs.toFixed(0)} ms`)
})

t.test('ttft delays the first byte; interval spaces the events', async t => {
  const slow = await send('chat', '#sim ttft=200 tokens=1')
  t.ok((slow.headMs ?? 0) >= 190, `head after ${slow.headMs?.toFixed(0)} ms`)
  const start = performance.now()
  const paced = await send('messages', '#sim tokens=3 interval=40')
  const elapsed = performance.now() - start
  const frames = parseSse(paced.body).length
  t.ok(elapsed >= (frames - 1) * 40 * 0.9, `${frames} frames in ${elapsed.toFixed(0)} ms`)
})

t.test('backpressure: a reader that does not read holds the stream back', async t => {
  const ex = nextExchange(sim)
  const payload = JSON.stringify(body('chat', '#sim tokens=20000 bytes=1000'))
  await new Promise<void>(resolve => {
    const req = request(sim.url + PATH.chat, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) }, agent: false }, res => {
      res.pause()
      setTimeout(() => {
        req.destroy()
        resolve()
      }, 300)
    })
    req.end(payload)
  })
  const end = await ex.end
  t.equal(end.outcome, 'client-closed')
  t.ok(end.eventsSent < 10000, `only ${end.eventsSent} of 20003 frames were written`)
})

t.test('fault_key scopes a fault to some API keys: other keys, and none, get the answer', async t => {
  const keyed = (proto: Proto, text: string, headers: Record<string, string>) =>
    rawRequest(sim.url, { path: PATH[proto], body: body(proto, text), headers })
  for (const proto of PROTOS) {
    for (const [fault, status] of [['status-503', 503], ['status-429', 429], ['reset-before-first-byte', 0]] as const) {
      const text = `x\n#sim fault=${fault} fault_key=sk-acct-a,sk-acct-c`
      const hit = nextExchange(sim)
      const a = await keyed(proto, text, proto === 'messages' ? { 'x-api-key': 'sk-acct-a' } : { authorization: 'Bearer sk-acct-a' })
      t.equal(a.status, status, `${proto} ${fault}: the key the fault names gets it`)
      t.equal((await hit.end).outcome, 'fault')
      const hitC = nextExchange(sim)
      t.equal((await keyed(proto, text, { authorization: 'Bearer sk-acct-c' })).status, status, `${proto} ${fault}: so does the other key it names`)
      t.equal((await hitC.end).outcome, 'fault')
      for (const other of [{ authorization: 'Bearer sk-acct-b' }, { 'x-api-key': 'sk-acct-aa' }, {}] as Array<Record<string, string>>) {
        const miss = nextExchange(sim)
        const b = await keyed(proto, text, other)
        t.equal(b.status, 200, `${proto} ${fault} ${JSON.stringify(other)}: answered`)
        t.ok(lastFrameOk(proto, parseSse(b.body.toString())), 'the whole stream, with its terminal')
        t.equal((await miss.end).outcome, 'completed')
      }
    }
  }
  t.same(faultKeysOf('#sim fault=status-503 fault_key='), [], 'an empty fault_key scopes nothing')
  t.same(faultKeysOf('#sim fault_key=a\n#sim fault_key=b,c'), ['b', 'c'], 'the last one wins')
  t.same(faultKeysOf('#sim fault=status-503'), [])
})
