// Property-based fuzzing of provider answers through the real gateway (issue 14, "Fuzzing").
//
// A real local upstream (node:http in this process, the providers' baseUrl) replays fuzzed
// bytes: SSE streams of every protocol, from well-formed to broken (no terminal, provider
// error events, malformed, junk and oversize frames, invalid UTF-8, CRLF / CR line ends, cut
// at any byte, the connection reset), written in chunks down to one byte each; non-SSE and
// error answers; and non-streaming JSON answers. For every case:
//   - the gateway stays up and no worker exits (log lines; /metrics restarts at the end);
//   - an answer refused before the first byte is the catalogue's JSON refusal;
//   - a stream is whole frames of the provider's bytes, byte for byte (same-protocol pairs),
//     then at most one signed failure tail, the last frame; with no tail, a terminal frame
//     reached the client;
//   - the ledger is idle afterwards.
//
// Pairs: a client route and the provider protocol behind it, same-protocol and translated. A
// translated pair (exact: false) is checked for whole frames of the client's protocol, one tail
// and a terminal, not for provider bytes.
//
// Bounded in `npm test`; SLUICE_FUZZ_RUNS=20000 for a long run (see test/fuzz/runs.ts).

import t from 'tap'
import fc from 'fast-check'
import { once } from 'node:events'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { Agent, request } from 'undici'
import type { Protocol } from '../../src/protocols/index.ts'
import { KEY, SIGNING_KEY, chatBody, messagesBody, responsesBody, startRig, type Rig } from '../helpers/exchange.ts'
import { checkGatewayAfterCase, checkRefusal, checkTailRecord, errorLogs, workerRestarts, type HttpOutcome } from './outcomes.ts'
import { fuzzParams, numRuns } from './runs.ts'
import { chunksOf, refFrames, splits, streamCase, TERMINAL_FRAME, type StreamCase } from './sse-model.ts'
import { splitTail } from './tails.ts'
import { dataOf, dropConnections, endsExchange, openEvents, type SseEvent } from '../helpers/sse.ts'

type ClientRoute = 'chat' | 'responses' | 'messages'

interface Pair {
  route: ClientRoute
  provider: Protocol
  /** Same protocol: the client gets the provider's bytes exactly. */
  exact: boolean
}

const ROUTE_PROTOCOL: Record<ClientRoute, Protocol> = { chat: 'openai-chat', responses: 'openai-responses', messages: 'anthropic' }
const PATH: Record<ClientRoute, string> = { chat: '/v1/chat/completions', responses: '/v1/responses', messages: '/v1/messages' }
/** The model that routes to each provider protocol (one fuzz provider per protocol). */
const MODEL: Record<Protocol, string> = { 'openai-chat': 'fz-chat', 'openai-responses': 'fz-resp', anthropic: 'fz-msg' }

/** (client route, provider protocol): the three same-protocol pairs and the six translated ones. */
export const PAIRS: Pair[] = ([
  ['chat', 'openai-chat'],
  ['responses', 'openai-responses'],
  ['messages', 'anthropic'],
  ['chat', 'openai-responses'],
  ['chat', 'anthropic'],
  ['responses', 'openai-chat'],
  ['responses', 'anthropic'],
  ['messages', 'openai-chat'],
  ['messages', 'openai-responses'],
] as Array<[ClientRoute, Protocol]>).map(([route, provider]) => ({ route, provider, exact: ROUTE_PROTOCOL[route] === provider }))

const MAX_FRAME = 1024

function requestBody (route: ClientRoute, model: string, stream: boolean): Record<string, unknown> {
  if (route === 'chat') return chatBody('fuzz', { model, stream })
  if (route === 'responses') return responsesBody('fuzz', { model, stream })
  return messagesBody('fuzz', { model, stream })
}

/** What the upstream does for one case. */
interface Answer {
  status: number
  headers: Record<string, string>
  bytes: Buffer
  chunks: number[]
  /** 'end': a clean end; 'reset': the socket is destroyed after the last chunk. */
  ending: 'end' | 'reset'
}

const cases = new Map<string, Answer>()
let seq = 0

async function replay (req: IncomingMessage, res: ServerResponse): Promise<void> {
  req.resume()
  await once(req, 'end')
  const a = cases.get(String(req.headers['x-test-tag']))
  if (a === undefined) {
    res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":{"message":"no such fuzz case"}}')
    return
  }
  res.writeHead(a.status, a.headers)
  for (const chunk of chunksOf(a.bytes, a.chunks)) {
    if (res.destroyed) return
    res.write(chunk)
    // One event-loop turn between writes, so chunks tend to arrive as separate reads.
    await new Promise((resolve) => setImmediate(resolve))
  }
  if (a.ending === 'reset') res.socket?.destroy()
  else res.end()
}

let rig: Rig
let upstream: Server
// Idle connections are closed by this client well before the gateway's keep-alive timeout
// (30 s, advertised; undici would keep them ~28 s): in a long run, a request must not race the
// server closing its idle socket (a reset that would say nothing about the gateway).
const client = new Agent({ connections: 4, keepAliveTimeout: 1000, keepAliveMaxTimeout: 1000 })

t.before(async () => {
  upstream = createServer((req, res) => { void replay(req, res).catch(() => res.destroy()) })
  upstream.listen(0, '127.0.0.1')
  await once(upstream, 'listening')
  const url = `http://127.0.0.1:${(upstream.address() as { port: number }).port}`
  rig = await startRig({
    limits: { sseFrameBytes: MAX_FRAME, maxOutputBytes: 64 * 1024 },
    providers: () => (Object.keys(MODEL) as Protocol[]).map((protocol) => ({ name: MODEL[protocol], protocol, baseUrl: url, models: [MODEL[protocol]] })),
  })
})
t.teardown(async () => {
  await client.close()
  await dropConnections() // the events streams' keep-alive connections (global dispatcher)
  await rig.close()
  upstream.close()
})

async function exchange (pair: Pair, stream: boolean, answer: Answer): Promise<HttpOutcome> {
  const tag = `fz-${++seq}`
  cases.set(tag, answer)
  try {
    const res = await request(rig.url + PATH[pair.route], {
      method: 'POST',
      dispatcher: client,
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-test-tag': tag },
      body: JSON.stringify(requestBody(pair.route, MODEL[pair.provider], stream)),
    })
    const body = Buffer.from(await res.body.arrayBuffer())
    return { status: res.statusCode, headers: res.headers, body }
  } finally {
    cases.delete(tag)
  }
}

/** The checks for one streamed case (see the file header). */
function checkStream (pair: Pair, c: StreamCase, ending: Answer['ending'], o: HttpOutcome): void {
  const what = `${pair.route}<-${pair.provider} ${c.mutation} [${c.pieces.join(',')}] ${ending}; the client got ...${JSON.stringify(o.body.subarray(-400).toString('latin1'))}`
  if (o.status !== 200) {
    // Nothing had been sent: only a refusal before the first byte is possible, and never
    // for a well-formed stream (a listed pair must work: protocol_mismatch fails here).
    checkRefusal(o, what)
    if (c.mutation === 'none' && ending === 'end') throw new Error(`${what}: a well-formed stream was refused`)
    return
  }
  const client = ROUTE_PROTOCOL[pair.route]
  const { prefix, tail, json } = splitTail(o.body, client)
  const exchangeId = o.headers['x-sluice-exchange-id']
  if (tail !== null) checkTailRecord(json, SIGNING_KEY, typeof exchangeId === 'string' ? exchangeId : undefined, what)
  // Exactly one tail: nothing before it is a tail too.
  if (prefix.includes('"sluice":{"record"')) throw new Error(`${what}: a second tail, or one before the end`)
  const ref = refFrames(prefix, Number.MAX_SAFE_INTEGER)
  if (ref.trailing !== null) throw new Error(`${what}: the client got part of a frame: ${JSON.stringify(ref.trailing.toString('latin1').slice(0, 120))}`)
  if (pair.exact) {
    if (!prefix.equals(c.bytes.subarray(0, prefix.length))) throw new Error(`${what}: the relayed bytes differ from the provider's`)
    if (!refFrames(c.bytes, MAX_FRAME).boundaries.has(prefix.length)) throw new Error(`${what}: relayed ${prefix.length} bytes, not at a frame boundary of the provider's stream`)
  }
  if (tail === null) {
    const terminal = ref.events.some((e) => e.kind === 'frame' && TERMINAL_FRAME[client].test(e.bytes.toString('latin1')))
    if (!terminal) throw new Error(`${what}: the stream ended with neither a terminal nor a failure tail`)
    if (c.mutation === 'none' && ending === 'end' && pair.exact && !prefix.equals(c.bytes)) throw new Error(`${what}: a well-formed stream was not relayed whole`)
  } else if (c.mutation === 'none' && ending === 'end') {
    throw new Error(`${what}: a well-formed stream got a failure tail: ${tail.toString().slice(0, 300)}`)
  }
}

const streamAnswer = (c: StreamCase, ending: Answer['ending']): Answer => ({
  status: 200,
  headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' },
  bytes: c.bytes,
  chunks: c.chunks,
  ending,
})

const ending = fc.oneof({ weight: 5, arbitrary: fc.constant<Answer['ending']>('end') }, { weight: 1, arbitrary: fc.constant<Answer['ending']>('reset') })

t.test('provider streams: whole frames, byte-exact, then at most one signed tail; ledger idle', async (t) => {
  for (const pair of PAIRS) {
    await fc.assert(fc.asyncProperty(streamCase(pair.provider, { maxFrame: MAX_FRAME }), ending, async (c, end) => {
      const o = await exchange(pair, true, streamAnswer(c, end))
      checkStream(pair, c, end, o)
      await checkGatewayAfterCase(rig.gw, `${pair.route}<-${pair.provider}`)
    }), fuzzParams(60, { shrink: false }))
  }
  t.equal(await workerRestarts(rig.gw), 0, 'no worker restarted')
  t.same(errorLogs(rig.gw), [], 'nothing logged at error level')
})

/** Answers that are not an event stream, or refuse: each is the JSON refusal, before any byte. */
const notAStream: fc.Arbitrary<Answer> = fc.record({
  status: fc.constantFrom(200, 400, 401, 404, 408, 413, 429, 500, 502, 503, 504, 529),
  contentType: fc.constantFrom('application/json', 'text/html', 'text/plain', 'application/octet-stream', ''),
  bytes: fc.oneof(
    fc.constant(Buffer.from('{"error":{"message":"nope","type":"server_error"}}')),
    fc.constant(Buffer.from('{"type":"error","error":{"type":"overloaded_error","message":"busy"}}')),
    fc.constant(Buffer.from('<html>login</html>')),
    fc.uint8Array({ maxLength: 64 }).map((u) => Buffer.from(u)),
  ),
  retryAfter: fc.option(fc.constantFrom('1', '30', '99999', 'soon', '-4'), { nil: undefined }),
}).chain((a) => splits(a.bytes.length).map((chunks): Answer => {
  const headers: Record<string, string> = {}
  if (a.contentType !== '') headers['content-type'] = a.contentType
  if (a.retryAfter !== undefined) headers['retry-after'] = a.retryAfter
  return { status: a.status, headers, bytes: a.bytes, chunks, ending: 'end' }
}))

t.test('provider answers that are not a stream, or refuse: the catalogue\'s JSON refusal; ledger idle', async (t) => {
  for (const pair of PAIRS) {
    await fc.assert(fc.asyncProperty(notAStream, async (a) => {
      const o = await exchange(pair, true, a)
      checkRefusal(o, `${pair.route}<-${pair.provider} ${a.status} ${a.headers['content-type']}`)
      await checkGatewayAfterCase(rig.gw, `${pair.route}<-${pair.provider}`)
    }), fuzzParams(25, { shrink: false }))
  }
  t.equal(await workerRestarts(rig.gw), 0, 'no worker restarted')
})

/** A non-streaming answer: a JSON document of the protocol, or one broken on the way. */
function jsonAnswer (protocol: Protocol): fc.Arbitrary<{ valid: boolean; answer: Answer }> {
  const doc = (text: string): Record<string, unknown> => protocol === 'openai-chat'
    ? { id: 'chatcmpl-fz', object: 'chat.completion', created: 1, model: 'fz-chat', choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 } }
    : protocol === 'openai-responses'
      ? { id: 'resp_fz', object: 'response', created_at: 1, status: 'completed', model: 'fz-resp', output: [{ type: 'message', id: 'msg_fz', role: 'assistant', content: [{ type: 'output_text', text }] }], usage: { input_tokens: 1, output_tokens: 2, total_tokens: 3 } }
      : { id: 'msg_fz', type: 'message', role: 'assistant', model: 'fz-msg', content: [{ type: 'text', text }], stop_reason: 'end_turn', usage: { input_tokens: 1, output_tokens: 2 } }
  return fc.record({
    text: fc.string({ unit: 'grapheme', maxLength: 40 }),
    damage: fc.constantFrom('none', 'none', 'cut', 'invalid-utf8', 'not-object', 'bom', 'big', 'deep'),
    at: fc.nat(),
    chunked: fc.boolean(),
    ending: ending,
  }).chain((g) => {
    let bytes = Buffer.from(JSON.stringify(doc(g.text)))
    if (g.damage === 'cut') bytes = bytes.subarray(0, g.at % bytes.length)
    if (g.damage === 'invalid-utf8') {
      const q = bytes.indexOf('"text":"') + 8
      bytes = Buffer.concat([bytes.subarray(0, q), Buffer.from([0xc3, 0x28]), bytes.subarray(q)])
    }
    if (g.damage === 'not-object') bytes = Buffer.from(JSON.stringify([doc(g.text)]))
    if (g.damage === 'bom') bytes = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), bytes])
    if (g.damage === 'big') bytes = Buffer.from(JSON.stringify(doc('x'.repeat(70 * 1024))))
    if (g.damage === 'deep') bytes = Buffer.from(JSON.stringify({ ...doc(g.text), extra: JSON.parse('['.repeat(200) + ']'.repeat(200)) }))
    const headers: Record<string, string> = { 'content-type': 'application/json' }
    // With a content-length the body is sent whole or the reset cuts it short; without, chunked.
    if (!g.chunked) headers['content-length'] = String(bytes.length)
    const valid = g.damage === 'none' && g.ending === 'end'
    return splits(bytes.length).map((chunks) => ({ valid, answer: { status: 200, headers, bytes, chunks, ending: g.ending } }))
  })
}

t.test('non-streaming answers: the provider\'s bytes exactly, or the catalogue\'s JSON refusal; ledger idle', async (t) => {
  for (const pair of PAIRS) {
    await fc.assert(fc.asyncProperty(jsonAnswer(pair.provider), async ({ valid, answer }) => {
      const o = await exchange(pair, false, answer)
      const what = `${pair.route}<-${pair.provider} buffered`
      if (o.status === 200) {
        if (pair.exact && !o.body.equals(answer.bytes)) throw new Error(`${what}: 200 with bytes that are not the provider's`)
      } else {
        const code = checkRefusal(o, what)
        if (valid) throw new Error(`${what}: a well-formed answer was refused with ${code}`)
      }
      await checkGatewayAfterCase(rig.gw, what)
    }), fuzzParams(40, { shrink: false }))
  }
  t.equal(await workerRestarts(rig.gw), 0, 'no worker restarted')
  t.same(errorLogs(rig.gw), [], 'nothing logged at error level')
})

/** What a client is told, less what differs per exchange (ids, times, signatures). */
function verdictOf (pair: Pair, o: HttpOutcome): string {
  if (o.status !== 200) return `refused ${o.status} ${(JSON.parse(o.body.toString()) as { code: string }).code}`
  const { prefix, tail, json } = splitTail(o.body, ROUTE_PROTOCOL[pair.route])
  const code = tail === null ? null : checkTailRecord(json, SIGNING_KEY, undefined, 'tail').code
  // Frames, not bytes: a CRLF blank line whose LF came in the provider's next read may or
  // may not follow the last frame; either way the client has the same frames.
  const frames = refFrames(prefix, Number.MAX_SAFE_INTEGER).events
  const bytes = frames.reduce((n, e) => n + (e.kind === 'frame' ? e.bytes.length : 0), 0)
  return `${frames.length} frames (${bytes} bytes) relayed, ${code === null ? 'no tail' : `tail ${code}`}`
}

t.test('provider streams: how the provider\'s bytes were split does not change what the client is told', async (t) => {
  let ran = 0
  for (const pair of PAIRS) {
    await fc.assert(fc.asyncProperty(streamCase(pair.provider, { maxFrame: MAX_FRAME }), async (c) => {
      ran++
      const split = await exchange(pair, true, streamAnswer(c, 'end'))
      await checkGatewayAfterCase(rig.gw, 'split')
      const whole = await exchange(pair, true, streamAnswer({ ...c, chunks: c.bytes.length === 0 ? [] : [c.bytes.length] }, 'end'))
      await checkGatewayAfterCase(rig.gw, 'whole')
      const a = verdictOf(pair, split)
      const b = verdictOf(pair, whole)
      if (a !== b) throw new Error(`${pair.route}<-${pair.provider} ${c.mutation} [${c.pieces.join(',')}] chunks ${JSON.stringify(c.chunks.length > 20 ? `${c.chunks.length} chunks` : c.chunks)}: split: ${a}; whole: ${b}`)
    }), fuzzParams(40, { shrink: false }))
  }
  t.equal(ran, numRuns(40) * PAIRS.length, 'every case ran, each told the same both ways')
})

let sessions = 0

/** One non-blocking exchange: submit, then read the session's events to its end. */
async function nonBlocking (pair: Pair, answer: Answer): Promise<{ accepted: HttpOutcome; end: SseEvent | null }> {
  const tag = `fz-${++seq}`
  cases.set(tag, answer)
  const sessionId = `fz-nb-${process.pid}-${++sessions}`
  try {
    const res = await request(`${rig.url}/v1/sessions/${sessionId}/exchanges`, {
      method: 'POST',
      dispatcher: client,
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-test-tag': tag },
      body: JSON.stringify({ route: pair.route, body: requestBody(pair.route, MODEL[pair.provider], true) }),
    })
    const accepted = { status: res.statusCode, headers: res.headers, body: Buffer.from(await res.body.arrayBuffer()) }
    if (accepted.status !== 202) return { accepted, end: null }
    const { exchangeId, lastEventId } = JSON.parse(accepted.body.toString()) as { exchangeId: string; lastEventId: number }
    const events = await openEvents(rig.url, sessionId, { key: KEY, lastEventId })
    try {
      const seen = await events.until(endsExchange(exchangeId))
      return { accepted, end: seen[seen.length - 1] }
    } finally {
      events.close()
    }
  } finally {
    cases.delete(tag)
  }
}

t.test('non-blocking mode: fuzzed provider streams end in turn_complete or a catalogued turn_error; ledger idle', async (t) => {
  let ran = 0
  let completed = 0
  for (const pair of PAIRS) {
    await fc.assert(fc.asyncProperty(streamCase(pair.provider, { maxFrame: MAX_FRAME }), ending, async (c, end) => {
      ran++
      const what = `events ${pair.route}<-${pair.provider} ${c.mutation} [${c.pieces.join(',')}] ${end}`
      const { accepted, end: last } = await nonBlocking(pair, streamAnswer(c, end))
      if (last === null) {
        checkRefusal(accepted, what)
      } else {
        const d = dataOf(last)
        if (last.event === 'turn_error') {
          checkRefusal({ status: Number(d.status), headers: { 'content-type': 'application/json' }, body: Buffer.from(JSON.stringify(d)) }, `${what} turn_error`)
          if (c.mutation === 'none' && end === 'end') throw new Error(`${what}: a well-formed stream ended in turn_error ${String(d.code)}`)
        } else if (d.status !== 200) {
          throw new Error(`${what}: turn_complete with status ${String(d.status)}`)
        } else {
          completed++
        }
      }
      await checkGatewayAfterCase(rig.gw, what)
    }), fuzzParams(20, { shrink: false }))
  }
  t.equal(ran, numRuns(20) * PAIRS.length, 'every case ran')
  t.ok(completed > 0, `some streams completed (${completed} of ${ran})`)
  t.equal(await workerRestarts(rig.gw), 0, 'no worker restarted')
})
