// Failure tails as the official SDKs see them: a real stream prefix from the sim, then the
// tail built from the tracker's context. The SDK must end with an error carrying the
// catalogue code (never hang, never succeed), and the signed record must survive the trip.
import t, { type Test } from 'tap'
import OpenAI from 'openai'
import Anthropic from '@anthropic-ai/sdk'
import { rawRequest, startSim } from '../../../src/sim/index.ts'
import { buildFailureRecord, signRecord, verifyRecord, type FailureRecord } from '../../../src/sse/sign.ts'
import { inspectorFor, type Protocol } from '../../../src/protocols/index.ts'
import { feed, PATH, simBody } from './feed.ts'

const sim = await startSim()
t.teardown(() => sim.close())
const KEY = Buffer.from('sluice-test-signing-key-32-bytes')

/** A fetch that answers every request with these SSE chunks (then EOF). */
function serve (chunks: Buffer[]): typeof fetch {
  return async () => {
    const body = new ReadableStream<Uint8Array>({
      start (controller) {
        for (const c of chunks) controller.enqueue(new Uint8Array(c))
        controller.close()
      },
    })
    return new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream' } })
  }
}

interface Prefixed {
  chunks: Buffer[]
  record: FailureRecord
  signature: string
}

/**
 * The first `frames` frames of a sim stream (`extra` more bytes of the next frame, to cut
 * inside it), then the tail the relay would write for `code`.
 */
async function prefixed (protocol: Protocol, frames: number, code: FailureRecord['code'] = 'provider_protocol_error', extra = 0, withhold = false): Promise<Prefixed> {
  const full = (await rawRequest(sim.url, { path: PATH[protocol], body: simBody(protocol, '#sim tokens=8 tools=1') })).body
  let end = 0
  for (let i = 0; i < frames; i++) end = full.indexOf('\n\n', end) + 2
  const prefix = full.subarray(0, end + extra)
  const r = feed(protocol, prefix)
  const record = buildFailureRecord({
    code,
    message: r.verdict.failure?.message,
    exchangeId: 'ex-1',
    runId: 'run-1',
    provider: 'sim',
    model: 'gpt-5.5',
    framesRelayed: r.frames.length,
    bytesRelayed: prefix.length,
    usage: r.verdict.usage,
    partial: true,
  })
  const signature = signRecord(record, KEY)
  const tail = inspectorFor(protocol).failureTail(record, signature, r.tracker.tailContext(withhold ? '' : r.closing))
  return { chunks: withhold ? [full.subarray(0, end), tail] : [prefix, tail], record, signature }
}

function openai (chunks: Buffer[]): OpenAI {
  return new OpenAI({ apiKey: 'sk-test', baseURL: 'http://sluice.invalid/v1', maxRetries: 0, logLevel: 'off', fetch: serve(chunks) })
}

function anthropic (chunks: Buffer[]): Anthropic {
  return new Anthropic({ apiKey: 'sk-test', baseURL: 'http://sluice.invalid', maxRetries: 0, logLevel: 'off', fetch: serve(chunks) })
}

async function settle<T> (p: Promise<T>): Promise<{ value?: T; error?: any }> {
  const timeout = new Promise<never>((_, reject) => setTimeout(() => reject(new Error('hung')), 5000).unref())
  try {
    return { value: await Promise.race([p, timeout]) }
  } catch (error) {
    return { error }
  }
}

function signed (t: Test, sluice: any, p: Prefixed): void {
  t.same(sluice?.record, p.record, 'the record arrives intact')
  t.equal(sluice?.signature, p.signature)
  t.ok(verifyRecord(sluice.record, sluice.signature, KEY), 'and verifies')
}

t.test('chat: the SDK throws APIError with the code (iteration and the stream helper)', async t => {
  const p = await prefixed('openai-chat', 4)
  const client = openai(p.chunks)
  const seen: unknown[] = []
  const it = await settle((async () => {
    const s = await client.chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: 'x' }] })
    for await (const c of s) seen.push(c)
  })())
  t.equal(seen.length, 4, 'the relayed chunks were delivered first')
  t.ok(it.error instanceof OpenAI.APIError, `${it.error?.constructor.name}`)
  t.match(it.error.message, /^sluice provider_protocol_error: /)
  t.equal(it.error.code, 'provider_protocol_error')
  t.equal(it.error.type, 'server_error')
  signed(t, it.error.error.sluice, p)
  const helper = await settle(openai(p.chunks).chat.completions.stream({ model: 'm', messages: [{ role: 'user', content: 'x' }] }).finalChatCompletion())
  t.ok(helper.error instanceof OpenAI.APIError)
  t.match(helper.error.message, /provider_protocol_error/)
  // The tail carries no [DONE]; with one after it the SDK would still throw at the error.
  t.notOk(p.chunks[1].includes('[DONE]'))
})

t.test('responses: response.failed for the response the client is reading', async t => {
  const p = await prefixed('openai-responses', 6, 'provider_unavailable')
  const tail = JSON.parse(p.chunks[1].toString().split('\ndata: ')[1])
  const events: string[] = []
  const it = await settle((async () => {
    const s = await openai(p.chunks).responses.create({ model: 'm', stream: true, input: 'x' })
    for await (const e of s) events.push(e.type)
  })())
  t.equal(it.error, undefined, 'event iteration ends normally ...')
  t.equal(events[events.length - 1], 'response.failed', '... on response.failed')
  t.equal(tail.sequence_number, 6, 'the next sequence_number')
  t.equal(events[0], 'response.created')
  const final = await settle(openai(p.chunks).responses.stream({ model: 'm', input: 'x' }).finalResponse())
  t.equal(final.error, undefined, 'finalResponse() resolves: a failed response is data to this SDK')
  const r = final.value as any
  t.equal(r.status, 'failed')
  t.equal(r.error.code, 'provider_unavailable')
  t.match(r.error.message, /^sluice provider_unavailable: /)
  t.equal(r.id, tail.response.id, 'the tail names the response of response.created (the SDK rejects a changed identity)')
  signed(t, r.error.sluice, p)
})

t.test('responses: before response.created, an error event (the SDK throws APIError)', async t => {
  const p = await prefixed('openai-responses', 0)
  t.match(p.chunks[1].toString(), /^event: error\n/)
  const final = await settle(openai(p.chunks).responses.stream({ model: 'm', input: 'x' }).finalResponse())
  t.ok(final.error instanceof OpenAI.APIError, `${final.error?.constructor.name}`)
  t.match(final.error.message, /^sluice provider_protocol_error: /)
  signed(t, final.error.error.sluice, p)
})

t.test('messages: the SDK throws APIError with the code (stream helper and iteration)', async t => {
  const p = await prefixed('anthropic', 5, 'provider_timeout')
  const helper = await settle(anthropic(p.chunks).messages.stream({ model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }).finalMessage())
  t.ok(helper.error instanceof Anthropic.APIError, `${helper.error?.constructor.name}`)
  t.match(helper.error.message, /sluice provider_timeout: /)
  t.equal(helper.error.type, 'api_error')
  signed(t, helper.error.error.error.sluice, p)
  const types: string[] = []
  const it = await settle((async () => {
    const s = await anthropic(p.chunks).messages.create({ model: 'm', max_tokens: 5, stream: true, messages: [{ role: 'user', content: 'x' }] })
    for await (const e of s) types.push(e.type)
  })())
  t.same(types, ['message_start', 'content_block_start', 'content_block_delta', 'content_block_delta'], 'the relayed events were delivered first (the SDK drops ping)')
  t.ok(it.error instanceof Anthropic.APIError)
  t.match(it.error.message, /provider_timeout/)
})

t.test('a tail after a partial frame: the closing bytes end it first', async t => {
  // Messages, cut after the event line of the next frame: the SDK skips a frame without data,
  // then reads the tail.
  const full = (await rawRequest(sim.url, { path: PATH.anthropic, body: simBody('anthropic', '#sim tokens=8') })).body
  const fifth = full.indexOf('\n\n', full.indexOf('\n\n', full.indexOf('\n\n', full.indexOf('\n\n') + 2) + 2) + 2) + 2
  const line = full.indexOf('\n', fifth) + 1 - fifth
  const p = await prefixed('anthropic', 4, 'provider_protocol_error', line)
  t.match(p.chunks[1].toString(), /^\nevent: error\n/, 'one LF ends the partial frame')
  const m = await settle(anthropic(p.chunks).messages.stream({ model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }).finalMessage())
  t.ok(m.error instanceof Anthropic.APIError)
  t.match(m.error.message, /provider_protocol_error/)
  // Chat, cut inside a JSON line: the partial frame is dispatched broken, so the SDK fails on
  // it with its own parse error before the tail (documented limitation: bytes already sent).
  const c = await prefixed('openai-chat', 3, 'provider_protocol_error', 20)
  t.match(c.chunks[1].toString(), /^\n\ndata: \{"error"/)
  const it = await settle((async () => {
    const s = await openai(c.chunks).chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: 'x' }] })
    for await (const _ of s);
  })())
  t.ok(it.error instanceof SyntaxError, `the SDK's own error: ${it.error?.message}`)
  // Withheld instead (the relay wrote only whole frames): the SDK reads the tail.
  const w = await prefixed('openai-chat', 3, 'provider_protocol_error', 20, true)
  const it2 = await settle((async () => {
    const s = await openai(w.chunks).chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: 'x' }] })
    for await (const _ of s);
  })())
  t.ok(it2.error instanceof OpenAI.APIError)
})
