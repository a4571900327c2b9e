// Property-based fuzzing of request bodies against the real gateway (issue 14, "Fuzzing").
//
// Every route: the blocking ones (/v1/chat/completions, /v1/responses, /v1/messages,
// /v1/messages/count_tokens), the non-blocking envelope (/v1/sessions/:id/exchanges) and
// JSON-RPC (/rpc, session/prompt and the rest). Bodies: plausible exchanges (known, aliased,
// unknown, mismatched and non-string models), arbitrary JSON, nesting and value counts either
// side of the caps, sizes either side of maxBodyBytes, text damage (cut, junk, trailing
// garbage); encodings (UTF-8, with a BOM, UTF-16 LE/BE with and without a BOM, invalid UTF-8
// inside a string); content types (well-formed and not); Content-Length or chunked, split
// anywhere; a missing or wrong key. The real sim answers what gets through.
//
// For every case: the outcome is a well-formed success or a catalogued refusal with its
// status in the catalogue's shape (JSON-RPC: a result or an error with a catalogued
// errorKind); where the input decides the outcome, it is that one (a clean request succeeds,
// a body that is not UTF-8 JSON is invalid_json, too deep is json_too_deep, ...); the ledger
// is idle afterwards and no worker exited.
//
// Bounded in `npm test`; SLUICE_FUZZ_RUNS=20000 for a long run (see test/fuzz/runs.ts).

import t from 'tap'
import fc from 'fast-check'
import { Readable } from 'node:stream'
import { request, Agent } from 'undici'
import { KEY, SIGNING_KEY, startRig, type Rig } from '../helpers/exchange.ts'
import { dataOf, dropConnections, endsExchange, openEvents } from '../helpers/sse.ts'
import { checkGatewayAfterCase, checkRefusal, checkRpc, checkTailRecord, errorLogs, workerRestarts, type HttpOutcome } from './outcomes.ts'
import { fuzzParams } from './runs.ts'
import { chunksOf, refFrames, splits } from './sse-model.ts'
import { splitTail } from './tails.ts'

const LIMITS = { maxBodyBytes: 8192, maxJsonDepth: 16, maxJsonNodes: 300 }

type Route = 'chat' | 'responses' | 'messages' | 'count_tokens'
type Target = { kind: 'blocking'; route: Route } | { kind: 'envelope'; route: Route } | { kind: 'rpc'; route: Route }
const ROUTES: Route[] = ['chat', 'responses', 'messages', 'count_tokens']
const PATH: Record<Route, string> = { chat: '/v1/chat/completions', responses: '/v1/responses', messages: '/v1/messages', count_tokens: '/v1/messages/count_tokens' }
/** A model each route's protocol serves in the rig (startRig's three sim providers). */
const GOOD_MODEL: Record<Route, string[]> = { chat: ['gpt-4o-mini', 'fast-chat', 'sim-chat'], responses: ['gpt-5.5', 'sim-responses'], messages: ['claude-opus-5-5'], count_tokens: ['claude-opus-5-5'] }

const text = fc.string({ unit: 'grapheme', maxLength: 24 }).filter((s) => !s.includes('#sim'))

/** The body a route expects, with `model` and free extra fields. */
function plausible (route: Route, model: unknown, content: string, stream: unknown, extra: Record<string, unknown>): Record<string, unknown> {
  const base: Record<string, unknown> = route === 'responses'
    ? { model, input: content }
    : route === 'chat'
      ? { model, messages: [{ role: 'user', content }] }
      : { model, max_tokens: 64, messages: [{ role: 'user', content }] }
  if (stream !== undefined && route !== 'count_tokens') base.stream = stream
  return { ...extra, ...base }
}

type Encoding = 'utf8' | 'utf8-bom' | 'utf16le' | 'utf16le-bom' | 'utf16be-bom' | 'invalid-utf8'
type Damage = 'none' | 'cut' | 'junk' | 'trailing' | 'pad'

interface Case {
  target: Target
  /** What the body is, for the oracle and for reading a counterexample. */
  shape: 'clean' | 'model' | 'json' | 'deep' | 'nodes' | 'big'
  /** Nesting added (deep) or values added (nodes), the body's size before encoding (big). */
  amount: number
  value: unknown
  damage: Damage
  encoding: Encoding
  contentType: string | null
  auth: 'good' | 'none' | 'wrong'
  chunked: boolean
  splitAt: number[]
}

const target: fc.Arbitrary<Target> = fc.tuple(fc.constantFrom<Target['kind']>('blocking', 'blocking', 'envelope', 'rpc'), fc.constantFrom(...ROUTES))
  .map(([kind, route]) => ({ kind, route }) as Target)

const jsonExtra = fc.dictionary(fc.string({ maxLength: 8 }).filter((k) => !['model', 'messages', 'input', 'stream', 'max_tokens', '__proto__'].includes(k)), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 })

const nested = (n: number, kind: 'array' | 'object'): unknown => {
  let v: unknown = 0
  for (let i = 0; i < n; i++) v = kind === 'array' ? [v] : { k: v }
  return v
}

function bodyFor (route: Route): fc.Arbitrary<Pick<Case, 'shape' | 'amount' | 'value'>> {
  const good = fc.constantFrom(...GOOD_MODEL[route])
  const anyModel = fc.oneof(good, fc.constantFrom('nope-model', 'gpt-4o-mini', 'gpt-5.5', 'claude-opus-5-5', 'fast-chat', ''), fc.jsonValue({ maxDepth: 1 }))
  const streamFlag = fc.oneof(fc.constant(undefined), fc.boolean(), fc.jsonValue({ maxDepth: 0 }))
  return fc.oneof(
    { weight: 4, arbitrary: fc.record({ model: good, content: text, stream: fc.option(fc.boolean(), { nil: undefined }), extra: jsonExtra })
      .map((g) => ({ shape: 'clean' as const, amount: 0, value: plausible(route, g.model, g.content, g.stream, g.extra) })) },
    { weight: 2, arbitrary: fc.record({ model: anyModel, content: text, stream: streamFlag, extra: jsonExtra })
      .map((g) => ({ shape: 'model' as const, amount: 0, value: plausible(route, g.model, g.content, g.stream, g.extra) })) },
    { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 4 }).map((value) => ({ shape: 'json' as const, amount: 0, value })) },
    { weight: 1, arbitrary: fc.record({ model: good, n: fc.integer({ min: LIMITS.maxJsonDepth - 6, max: LIMITS.maxJsonDepth + 6 }), kind: fc.constantFrom<'array' | 'object'>('array', 'object') })
      .map((g) => ({ shape: 'deep' as const, amount: g.n, value: plausible(route, g.model, 'deep', false, { x: nested(g.n, g.kind) }) })) },
    { weight: 1, arbitrary: fc.record({ model: good, n: fc.integer({ min: LIMITS.maxJsonNodes - 80, max: LIMITS.maxJsonNodes + 20 }) })
      .map((g) => ({ shape: 'nodes' as const, amount: g.n, value: plausible(route, g.model, 'nodes', false, { x: new Array<number>(g.n).fill(0) }) })) },
    { weight: 1, arbitrary: fc.record({ model: good, size: fc.integer({ min: LIMITS.maxBodyBytes - 400, max: LIMITS.maxBodyBytes + 400 }) })
      .map((g) => ({ shape: 'big' as const, amount: g.size, value: plausible(route, g.model, 'x'.repeat(Math.max(0, g.size - 120)), false, {}) })) },
  )
}

const WELL_FORMED_TYPES = ['application/json', 'application/json; charset=utf-8', 'application/json; charset=utf-16', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/vnd.api+json']
const MALFORMED_TYPES = ['a', 'application/json, text/plain', ';']

const fuzzCase: fc.Arbitrary<Case> = target.chain((tg) => fc.record({
  target: fc.constant(tg),
  body: bodyFor(tg.route),
  damage: fc.oneof({ weight: 6, arbitrary: fc.constant<Damage>('none') }, { weight: 1, arbitrary: fc.constantFrom<Damage>('cut', 'junk', 'trailing', 'pad') }),
  encoding: fc.oneof({ weight: 6, arbitrary: fc.constant<Encoding>('utf8') }, { weight: 3, arbitrary: fc.constantFrom<Encoding>('utf8-bom', 'utf16le', 'utf16le-bom', 'utf16be-bom', 'invalid-utf8') }),
  contentType: fc.oneof({ weight: 8, arbitrary: fc.constantFrom<string | null>(...WELL_FORMED_TYPES, null) }, { weight: 1, arbitrary: fc.constantFrom<string | null>(...MALFORMED_TYPES) }),
  auth: fc.oneof({ weight: 12, arbitrary: fc.constant<Case['auth']>('good') }, { weight: 1, arbitrary: fc.constantFrom<Case['auth']>('none', 'wrong') }),
  chunked: fc.boolean(),
  at: fc.nat(),
  splitAt: fc.array(fc.nat(), { maxLength: 6 }),
})).map((g): Case => ({ target: g.target, ...g.body, damage: g.damage, encoding: g.encoding, contentType: g.contentType, auth: g.auth, chunked: g.chunked, splitAt: [g.at, ...g.splitAt] }))

let session = 0

/** The HTTP body for a case: the exchange, wrapped for the target, as text. */
function wrapped (c: Case): { path: string; text: string } {
  const inner = c.value
  switch (c.target.kind) {
    case 'blocking': return { path: PATH[c.target.route], text: JSON.stringify(inner) }
    case 'envelope': return { path: `/v1/sessions/fz-${process.pid}-${++session}/exchanges`, text: JSON.stringify({ route: c.target.route, body: inner }) }
    case 'rpc': return { path: '/rpc', text: JSON.stringify({ jsonrpc: '2.0', id: ++session, method: 'session/prompt', params: { sessionId: `fz-rpc-${process.pid}-${session}`, route: c.target.route, body: inner } }) }
  }
}

function damaged (text: string, d: Damage, at: number): string {
  switch (d) {
    case 'none': return text
    case 'cut': return text.slice(0, at % Math.max(1, text.length))
    case 'junk': { const p = at % (text.length + 1); return text.slice(0, p) + '\u0001}' + text.slice(p) }
    case 'trailing': return text + ' x'
    case 'pad': return '\t\r\n ' + text + ' \n'
  }
}

function encoded (text: string, e: Encoding): Buffer {
  switch (e) {
    case 'utf8': return Buffer.from(text)
    case 'utf8-bom': return Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text)])
    case 'utf16le': return Buffer.from(text, 'utf16le')
    case 'utf16le-bom': return Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(text, 'utf16le')])
    case 'utf16be-bom': return Buffer.from(Buffer.concat([Buffer.from([0xfe, 0xff]), Buffer.from(text, 'utf16le').swap16()]))
    case 'invalid-utf8': {
      // Invalid UTF-8 inside the first string literal (the JSON stays well-formed otherwise).
      const b = Buffer.from(text)
      const q = b.indexOf('"')
      if (q === -1) return Buffer.concat([b, Buffer.from([0xff])])
      return Buffer.concat([b.subarray(0, q + 1), Buffer.from([0xc3, 0x28]), b.subarray(q + 1)])
    }
  }
}

/**
 * Which code the input itself decides, when it decides one (null: several are honest), and
 * a code it rules out.
 */
function expected (c: Case, bytes: Buffer, text: string): { want: string[] | null; never: string | null } {
  const out = (want: string | string[] | null, never: string | null = null) => ({ want: typeof want === 'string' ? [want] : want, never })
  if (c.contentType !== null && MALFORMED_TYPES.includes(c.contentType)) return out('invalid_request')
  if (c.auth !== 'good') return out('unauthorized')
  if (bytes.length > LIMITS.maxBodyBytes) return out('payload_too_large')
  const utf8 = c.encoding === 'utf8' || c.encoding === 'utf8-bom'
  const counted = c.shape === 'deep' || c.shape === 'nodes'
  // The caps are checked while the text is scanned: a broken text with a deep or long part
  // may be refused for either. Otherwise the text decides.
  if (counted && (!utf8 || c.damage === 'cut' || c.damage === 'junk' || c.damage === 'trailing')) return out(null)
  let parses = true
  try { JSON.parse(text) } catch { parses = false }
  // The caps are counted on the raw bytes before they are decoded (src/json/bounded.ts): in
  // a text that is not UTF-8 JSON the counts mean nothing, and may cross a cap first.
  if (!utf8 || !parses) return out(['invalid_json', 'json_too_many_nodes', 'json_too_deep'])
  // The body's own object adds a level and a value; an envelope at most two more of each.
  if (c.shape === 'deep') return c.amount > LIMITS.maxJsonDepth ? out('json_too_deep') : c.amount + 3 <= LIMITS.maxJsonDepth ? out(null, 'json_too_deep') : out(null)
  if (c.shape === 'nodes') return c.amount >= LIMITS.maxJsonNodes ? out('json_too_many_nodes') : c.amount + 60 <= LIMITS.maxJsonNodes ? out(null, 'json_too_many_nodes') : out(null)
  if (c.shape === 'clean' && c.damage !== 'junk') {
    // JSON-RPC offers no streaming (README "JSON-RPC"): a clean streaming body is refused.
    const streams = (c.value as { stream?: unknown }).stream === true && c.target.route !== 'count_tokens'
    return out(c.target.kind === 'rpc' && streams ? 'invalid_request' : 'ok')
  }
  return out(null)
}

/** Refusals sent before the body is read (the connection is closed after them). */
const BEFORE_BODY = ['invalid_request', 'unauthorized', 'payload_too_large']

// Idle connections are closed by this client well before the gateway's keep-alive timeout
// (30 s, advertised; undici would keep them ~28 s): in a long run, a request must not race the
// server closing its idle socket (a reset that would say nothing about the gateway).
const client = new Agent({ connections: 4, keepAliveTimeout: 1000, keepAliveMaxTimeout: 1000 })
let rig: Rig

t.before(async () => {
  rig = await startRig({ limits: LIMITS })
})
t.teardown(async () => {
  await client.close()
  await dropConnections() // the events streams' keep-alive connections (global dispatcher)
  await rig.close()
})

async function send (c: Case): Promise<{ o: HttpOutcome | null; error?: Error; bytes: Buffer; text: string }> {
  const w = wrapped(c)
  const text = damaged(w.text, c.damage, c.splitAt[0])
  const bytes = encoded(text, c.encoding)
  const headers: Record<string, string> = {}
  if (c.contentType !== null) headers['content-type'] = c.contentType
  if (c.auth === 'good') headers.authorization = `Bearer ${KEY}`
  if (c.auth === 'wrong') headers.authorization = 'Bearer sk-not-a-key-of-this-gateway'
  let body: Buffer | Readable = bytes
  if (c.chunked) {
    // No content-length: undici sends the parts as chunks (Transfer-Encoding: chunked).
    const lengths = fc.sample(splits(bytes.length), { seed: c.splitAt.reduce((a, b) => a * 31 + b, 7) | 0, numRuns: 1 })[0]
    body = Readable.from(chunksOf(bytes, lengths), { objectMode: false })
  }
  try {
    const res = await request(rig.url + w.path, { method: 'POST', dispatcher: client, headers, body })
    const out = Buffer.from(await res.body.arrayBuffer())
    return { o: { status: res.statusCode, headers: res.headers, body: out }, bytes, text }
  } catch (err) {
    // A refusal before the body is read closes the connection (Connection: close); a client
    // still writing a chunked body may see that close (EPIPE, a reset) before the answer.
    return { o: null, error: err as Error, bytes, text }
  }
}

/** A success on a blocking route: JSON, or whole frames with at most one tail. */
function checkBlockingSuccess (c: Case, o: HttpOutcome, what: string): void {
  const ct = String(o.headers['content-type'] ?? '')
  if (ct.startsWith('text/event-stream')) {
    const protocol = c.target.route === 'chat' ? 'openai-chat' : c.target.route === 'responses' ? 'openai-responses' : 'anthropic'
    const { prefix, tail, json } = splitTail(o.body, protocol)
    if (tail !== null) checkTailRecord(json, SIGNING_KEY, undefined, what)
    if (refFrames(prefix, Number.MAX_SAFE_INTEGER).trailing !== null) throw new Error(`${what}: a stream that ends inside a frame`)
    return
  }
  try {
    JSON.parse(o.body.toString('utf8'))
  } catch {
    throw new Error(`${what}: ${o.status} with a body that is neither JSON nor a stream`)
  }
}

let previous = ''

t.test('request bodies on every route: a well-formed success or the catalogued refusal; ledger idle', async (t) => {
  const seen = new Map<string, number>()
  await fc.assert(fc.asyncProperty(fuzzCase, async (c) => {
    const { o, error, bytes, text } = await send(c)
    const { want, never } = expected(c, bytes, text)
    if (o === null) {
      const w = `${c.target.kind} ${c.target.route} ${c.shape} ${c.encoding} ct=${c.contentType} auth=${c.auth} ${c.chunked ? 'chunked' : 'length'} ${bytes.length}B`
      if (!c.chunked || want === null || !want.every((w) => BEFORE_BODY.includes(w))) throw new Error(`${w}: the request failed (${error?.message}) where no refusal before the body was due; the case before: ${previous}; gateway log tail: ${rig.gw.logs.slice(-3).join(' | ').slice(0, 1500)}`)
      seen.set('closed-before-body', (seen.get('closed-before-body') ?? 0) + 1)
      await checkGatewayAfterCase(rig.gw, w)
      return
    }
    const what = previous = `${c.target.kind} ${c.target.route} ${c.shape}(${c.amount}) ${c.damage} ${c.encoding} ct=${c.contentType} auth=${c.auth} ${c.chunked ? 'chunked' : 'length'} ${bytes.length}B -> ${o.status} ${o.body.subarray(0, 300).toString()}`
    let code: string
    if (c.target.kind === 'rpc') {
      code = checkRpc(o, what)
    } else if (c.target.kind === 'envelope') {
      if (o.status === 202) {
        const j = JSON.parse(o.body.toString()) as { exchangeId?: unknown; sessionId?: unknown; lastEventId?: unknown }
        if (typeof j.exchangeId !== 'string' || typeof j.sessionId !== 'string' || typeof j.lastEventId !== 'number') throw new Error(`${what}: 202 without exchangeId, sessionId, lastEventId`)
        // The accepted exchange runs in the background: its end is a session event.
        const events = await openEvents(rig.url, j.sessionId, { key: KEY, lastEventId: j.lastEventId })
        let last
        try {
          last = (await events.until(endsExchange(j.exchangeId))).at(-1)!
        } finally {
          events.close()
        }
        const d = dataOf(last)
        if (last.event === 'turn_error') {
          code = checkRefusal({ status: Number(d.status), headers: { 'content-type': 'application/json' }, body: Buffer.from(JSON.stringify(d)) }, `${what} turn_error`)
        } else {
          if (d.status !== 200) throw new Error(`${what}: turn_complete with status ${String(d.status)}`)
          code = 'ok'
        }
      } else {
        code = checkRefusal(o, what)
      }
    } else if (o.status >= 200 && o.status < 300) {
      checkBlockingSuccess(c, o, what)
      code = 'ok'
    } else {
      code = checkRefusal(o, what)
    }
    if (want !== null && !want.includes(code)) throw new Error(`${what}: expected ${want.join(' or ')}, got ${code}`)
    if (never !== null && code === never) throw new Error(`${what}: ${code} for a body within that cap`)
    seen.set(code, (seen.get(code) ?? 0) + 1)
    await checkGatewayAfterCase(rig.gw, what)
  }), fuzzParams(250, { shrink: false }))
  t.comment(`outcomes: ${JSON.stringify(Object.fromEntries(seen))}`)
  t.ok((seen.get('ok') ?? 0) > 0 && seen.size >= 4, 'the cases reached successes and several refusals')
  t.equal(await workerRestarts(rig.gw), 0, 'no worker restarted')
  t.same(errorLogs(rig.gw), [], 'nothing logged at error level')
})
