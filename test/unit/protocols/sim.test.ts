// The simulated provider's streams, all three protocols: classification agrees with a full
// decode of every frame (the oracle), terminals and usage are found, and each stream fault is
// seen for what it is.
import t from 'tap'
import { ERROR_EVENT_MESSAGE, MALFORMED_MARK, parseSse, rawRequest, startSim } from '../../../src/sim/index.ts'
import { SseFramer } from '../../../src/sse/framer.ts'
import { inspectorFor, StreamTracker, type FrameClass, type Protocol } from '../../../src/protocols/index.ts'
import { feed, PATH, simBody } from './feed.ts'

const sim = await startSim()
t.teardown(() => sim.close())

const PROTOCOLS: Protocol[] = ['openai-chat', 'openai-responses', 'anthropic']
const INSPECT_NAMES: Record<Protocol, string[]> = {
  'openai-chat': [],
  'openai-responses': ['response.created', 'response.completed', 'response.failed', 'response.incomplete', 'error'],
  anthropic: ['message_start', 'message_delta', 'message_stop', 'error'],
}

async function stream (protocol: Protocol, directive: string): Promise<Buffer> {
  const r = await rawRequest(sim.url, { path: PATH[protocol], body: simBody(protocol, directive) })
  return r.body
}

type Json = Record<string, any>

/** What a full decode says a frame carries. */
function oracle (protocol: Protocol, event: string | null, data: string): { carries: boolean; usage?: Json; terminal?: string } {
  if (data === '[DONE]') return { carries: true, terminal: 'done' }
  const d: Json = JSON.parse(data)
  if (protocol === 'openai-chat') {
    const finish = (d.choices ?? []).some((c: Json) => c.finish_reason != null)
    const carries = finish || (d.usage != null && typeof d.usage === 'object') || d.error != null
    return { carries, usage: d.usage ?? undefined }
  }
  const name = event ?? d.type
  const carries = INSPECT_NAMES[protocol].includes(name)
  if (protocol === 'openai-responses') return { carries, usage: d.response?.usage ?? undefined, terminal: name === 'response.completed' ? 'completed' : undefined }
  return { carries, usage: d.usage ?? d.message?.usage, terminal: name === 'message_stop' ? 'completed' : undefined }
}

for (const protocol of PROTOCOLS) {
  t.test(`${protocol}: streaming with tools, usage and reasoning`, async t => {
    for (const directive of ['#sim tokens=30 tools=3 parallel thinking=4', '#sim tokens=0 tools=1', '#sim tokens=12 bytes=300']) {
      const bytes = await stream(protocol, directive)
      const frames = parseSse(bytes)
      const r = feed(protocol, bytes, { chunk: 'random' })
      t.equal(r.frames.length, frames.length, `${directive}: every frame found`)
      t.notOk(r.classes.includes('malformed'), 'no frame misclassified as malformed')
      let inspected = 0
      for (let i = 0; i < frames.length; i++) {
        const o = oracle(protocol, frames[i].event ?? null, frames[i].data)
        if (o.carries) t.equal(r.classes[i], 'inspect', `frame ${i} carries fields: inspect`)
        else if (r.classes[i] !== 'pass') t.fail(`frame ${i} carries nothing but is ${r.classes[i]}`)
        if (r.classes[i] === 'inspect') inspected++
      }
      t.ok(inspected <= 3, `${inspected} of ${frames.length} frames decoded`)
      t.equal(r.verdict.ok, true, 'validated terminal')
      t.equal(r.verdict.terminal, 'completed')
      t.equal(r.verdict.partial, false)
      // Usage equals what a full decode of the last usage-bearing frames gives.
      const last = frames.map(f => oracle(protocol, f.event ?? null, f.data).usage).filter(u => u != null)
      const u = last[last.length - 1] as Json
      if (protocol === 'openai-chat') t.same(r.verdict.usage, { inputTokens: u.prompt_tokens, outputTokens: u.completion_tokens, totalTokens: u.total_tokens })
      else if (protocol === 'openai-responses') t.same(r.verdict.usage, { inputTokens: u.input_tokens, outputTokens: u.output_tokens, totalTokens: u.total_tokens })
      else {
        const start = JSON.parse(frames[0].data).message.usage
        t.same(r.verdict.usage, { inputTokens: start.input_tokens, outputTokens: u.output_tokens, totalTokens: start.input_tokens + u.output_tokens })
      }
      t.ok(r.tracker.responseId, 'response id')
      if (protocol === 'openai-responses') {
        t.equal(r.tracker.lastSequenceNumber, frames.length - 1)
        t.equal(r.tracker.nextSequenceNumber, frames.length)
      }
    }
  })

  t.test(`${protocol}: chunks as the socket delivers them`, async t => {
    const res = await fetch(sim.url + PATH[protocol], { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(simBody(protocol, '#sim tokens=2000 tools=2')) })
    const inspector = inspectorFor(protocol)
    const tracker = new StreamTracker(protocol)
    const classes: FrameClass[] = []
    const framer = new SseFramer({
      onFrame: f => {
        const c = inspector.classify(f)
        classes.push(c)
        if (tracker.frame(f, c)) tracker.apply(inspector.inspect(f))
      },
    })
    let chunks = 0
    for await (const chunk of res.body as ReadableStream<Uint8Array>) {
      chunks++
      framer.push(chunk)
      t.ok(framer.bufferedBytes <= 64 * 1024, 'holds at most a partial frame') // never a whole stream
    }
    const v = tracker.end({ trailingBytes: framer.end()?.length ?? 0 })
    t.ok(chunks > 1, `${chunks} chunks`)
    t.equal(v.ok, true)
    t.notOk(classes.includes('malformed'))
    t.ok(framer.frames > 2000)
  })

  t.test(`${protocol}: fault=malformed-frame is caught at its frame`, async t => {
    const bytes = await stream(protocol, '#sim tokens=6 tools=1 fault=malformed-frame at=3')
    const r = feed(protocol, bytes, { chunk: 'random' })
    const marked = r.frames.flatMap((f, i) => (f.includes(MALFORMED_MARK) ? [i] : []))
    t.same(marked, [3], 'the sim put it at frame 3')
    t.same(r.classes.flatMap((c, i) => (c === 'malformed' ? [i] : [])), [3], 'classified malformed: that frame only')
    t.equal(r.verdict.ok, false)
    t.equal(r.verdict.failure?.code, 'provider_protocol_error')
    t.equal(r.verdict.failure?.frame, 3)
    t.equal(r.verdict.failure?.inBand, false)
    t.equal(r.verdict.framesAdmitted, 3, 'nothing admitted after the fatal')
    t.equal(r.verdict.terminal, null, 'the later terminal validates nothing')
    t.equal(r.verdict.partial, true)
  })

  t.test(`${protocol}: fault=error-event is read`, async t => {
    const bytes = await stream(protocol, '#sim tokens=6 fault=error-event at=4')
    const r = feed(protocol, bytes)
    t.equal(r.classes[4], 'inspect')
    const err = r.facts[r.facts.length - 1].error
    t.equal(err?.message, ERROR_EVENT_MESSAGE)
    const failure = r.verdict.failure
    t.equal(failure?.inBand, true, "the provider's error event is already in the client's stream")
    t.equal(failure?.frame, 4)
    t.equal(failure?.code, protocol === 'anthropic' ? 'provider_unavailable' : 'provider_error', `${err?.type} -> ${failure?.code}`)
    t.equal(failure?.providerError?.message, ERROR_EVENT_MESSAGE)
    t.equal(r.verdict.ok, false)
  })

  t.test(`${protocol}: fault=cut-mid-stream has no terminal`, async t => {
    const res = await rawRequest(sim.url, { path: PATH[protocol], body: simBody(protocol, '#sim tokens=6 fault=cut-mid-stream at=4') })
    t.ok(res.error, 'the connection dropped')
    const r = feed(protocol, res.body, { chunk: 'random' })
    t.equal(r.frames.length, 4)
    t.equal(r.verdict.terminal, null)
    t.equal(r.verdict.ok, false)
    t.equal(r.verdict.failure?.code, 'provider_protocol_error')
    t.match(r.verdict.failure?.message, /without a terminal/)
    t.equal(r.verdict.partial, true)
    // Cut inside a frame: the trailing bytes are reported, and the tail closes that frame.
    const cut = feed(protocol, res.body.subarray(0, res.body.length - 5))
    t.match(cut.verdict.failure?.message, /inside a frame/)
    t.equal(cut.closing, '\n\n')
  })

  t.test(`${protocol}: fault=oversize-frame is reported once, then resync`, async t => {
    const bytes = await stream(protocol, '#sim tokens=6 fault=oversize-frame size=200000 at=3')
    const all = parseSse(bytes)
    const r = feed(protocol, bytes, { chunk: 16 * 1024, maxFrameBytes: 128 * 1024 })
    const big = all.filter(f => Buffer.byteLength(f.raw) + 2 > 128 * 1024).length
    t.ok(big >= 1)
    t.equal(r.oversize.length, big, `${big} oversize frame(s) reported, once each`)
    t.equal(r.frames.length + r.oversize.length, all.length, 'every other frame still found (resync)')
    t.equal(r.verdict.failure?.code, 'provider_protocol_error')
    t.match(r.verdict.failure?.message, /larger than the frame cap/)
    t.ok(r.framer.bufferedBytes === 0)
  })

  t.test(`${protocol}: non-streaming usage`, async t => {
    const res = await rawRequest(sim.url, { path: PATH[protocol], body: simBody(protocol, '#sim tokens=9 tools=1', false) })
    const body: Json = JSON.parse(res.body.toString())
    const inspector = inspectorFor(protocol)
    const usage = inspector.extractUsage(res.body)
    if (protocol === 'openai-chat') t.same(usage, { inputTokens: body.usage.prompt_tokens, outputTokens: body.usage.completion_tokens, totalTokens: body.usage.total_tokens })
    else if (protocol === 'openai-responses') t.same(usage, { inputTokens: body.usage.input_tokens, outputTokens: body.usage.output_tokens, totalTokens: body.usage.total_tokens })
    else t.same(usage, { inputTokens: body.usage.input_tokens, outputTokens: body.usage.output_tokens })
    t.same(inspector.usageFromJson(body), usage)
    t.equal(inspector.usageFromJson({}), null)
    const bad = await rawRequest(sim.url, { path: PATH[protocol], body: simBody(protocol, '#sim fault=malformed-frame', false) })
    t.throws(() => inspector.extractUsage(bad.body), { code: 'provider_protocol_error' }, 'a body that is not JSON')
  })
}

t.test('the default 1 MiB cap against the sim default oversize frame (1.5 MiB)', async t => {
  const bytes = await stream('openai-chat', '#sim tokens=4 fault=oversize-frame')
  const r = feed('openai-chat', bytes, { chunk: 64 * 1024 })
  t.equal(r.oversize.length, 1)
  t.ok(r.oversize[0] > 1024 * 1024)
  t.equal(r.frames[r.frames.length - 1], 'data: [DONE]', 'resynchronised to the end')
})

t.test('the scenario streams (call=, reasoning, truncate=, error=) as the tracker sees them', async t => {
  for (const protocol of PROTOCOLS) {
    const whole = feed(protocol, await stream(protocol, '#sim tokens=2 call=read_file,read_file thinking=2 redacted=1 reasoning_content cached=9 reasoning_tokens=4'), { chunk: 'random' })
    t.equal(whole.verdict.ok, true, `${protocol}: named calls with reasoning validate`)
    t.equal(whole.verdict.terminal, 'completed')
    t.notOk(whole.classes.includes('malformed'))
    const length = feed(protocol, await stream(protocol, '#sim tokens=0 call=read_file truncate=length'))
    t.equal(length.verdict.terminal, 'incomplete', `${protocol}: a length stop is an incomplete terminal`)
    const eof = feed(protocol, await stream(protocol, '#sim tokens=0 call=read_file truncate=eof'), { chunk: 'random' })
    t.equal(eof.verdict.ok, false)
    t.equal(eof.verdict.terminal, null)
    t.equal(eof.verdict.failure?.code, 'provider_protocol_error')
    t.match(eof.verdict.failure?.message, /without a terminal/)
    for (const [kind, code, providerField] of [
      ['rate_limit', 'provider_rate_limited', protocol === 'anthropic' ? 'rate_limit_error' : 'rate_limit_exceeded'],
      ['overloaded', 'provider_unavailable', protocol === 'anthropic' ? 'overloaded_error' : 'server_is_overloaded'],
      ['context_length', 'provider_error', protocol === 'anthropic' ? 'invalid_request_error' : 'context_length_exceeded'],
    ] as const) {
      const r = feed(protocol, await stream(protocol, `#sim tokens=4 error=${kind} at=3`))
      const f = r.verdict.failure
      t.equal(r.verdict.ok, false, `${protocol} error=${kind}`)
      t.equal(f?.inBand, true, 'the error is already in the stream')
      t.equal(f?.frame, 3)
      t.equal(f?.code, code, `${protocol} error=${kind} -> ${code}`)
      t.equal(protocol === 'anthropic' ? f?.providerError?.type : f?.providerError?.code, providerField)
    }
  }
})
