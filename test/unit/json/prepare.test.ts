// prepare(): every refusal code, alias rewrite, untouched bytes, and every recorded client
// request body.

import t, { type Test } from 'tap'
import { readFileSync, readdirSync } from 'node:fs'
import { prepare, type PrepareResult, type PrepareTask, type Route } from '../../../src/json/prepare.ts'
import { isErrorCode } from '../../../src/errors.ts'

const enc = new TextEncoder()
const LIMITS = { maxDepth: 128, maxNodes: 1_000_000 }
const task = (body: string | Uint8Array, over: Partial<PrepareTask> = {}): PrepareTask =>
  ({ body: typeof body === 'string' ? enc.encode(body) : body, route: 'chat', limits: LIMITS, aliases: {}, ...over })

function refused (t: Test, r: PrepareResult, code: string, details?: Record<string, unknown>) {
  if (r.ok) { t.fail(`expected ${code}, got ok`); return }
  t.equal(r.error.code, code)
  t.ok(isErrorCode(r.error.code), 'a catalogue code')
  if (details) t.same(r.error.details, details)
  t.same(structuredClone(r), r, 'plain data: crosses a thread boundary unchanged')
}

t.test('a plain request: model, stream, depth, nodes, the original bytes', async (t) => {
  const body = enc.encode('{"model":"gpt-5.5","stream":true,"input":[{"role":"user","content":"hi"}]}')
  const r = prepare(task(body, { route: 'responses' }))
  t.same({ ...r, body: undefined }, { ok: true, model: 'gpt-5.5', requestedModel: 'gpt-5.5', stream: true, body: undefined, rewritten: false, depth: 3, nodes: 7 })
  if (!r.ok) return
  t.equal(r.body, body, 'the very same Uint8Array: untouched bytes go to the provider')
  t.same(prepare(task('{"model":"m"}')), { ok: true, model: 'm', requestedModel: 'm', stream: false, body: enc.encode('{"model":"m"}'), rewritten: false, depth: 1, nodes: 2 }, 'stream defaults to false')
  t.equal((prepare(task('{"model":"m","stream":null}')) as { stream: boolean }).stream, false, 'null stream means the default')
  t.equal((prepare(task('{"model":"m","stream":true}', { route: 'count_tokens' })) as { stream: boolean }).stream, false, 'count_tokens never streams')
})

t.test('caps: json_too_deep and json_too_many_nodes before anything is parsed', async (t) => {
  refused(t, prepare(task('{"model":"m","x":[[[[1]]]]}', { limits: { maxDepth: 4, maxNodes: 100 } })), 'json_too_deep', { limit: 4, depth: 5 })
  refused(t, prepare(task('{"model":"m","x":[1,2,3]}', { limits: { maxDepth: 4, maxNodes: 5 } })), 'json_too_many_nodes', { limit: 5 })
  t.equal(prepare(task('{"model":"m","x":[1,2,3]}', { limits: { maxDepth: 2, maxNodes: 6 } })).ok, true, 'exactly at both caps')
  // refused on the caps even though the body would not parse: the caps come first
  refused(t, prepare(task('[' + '['.repeat(1_000_000), { limits: { maxDepth: 128, maxNodes: 1e9 } })), 'json_too_deep', { limit: 128, depth: 129 })
})

t.test('invalid_json: a byte position and a fixed reason, never the body', async (t) => {
  const secret = 'sk-live-SECRET-123'
  const cases: Array<[string | Uint8Array, Record<string, unknown>]> = [
    [`{"model":"${secret}",}`, { reason: 'expected a double-quoted member name', offset: 30, line: 1, column: 31 }],
    [`{"model":"${secret}`, { reason: 'unexpected end of input', offset: 28, line: 1, column: 29 }],
    [`{\n"model": ${secret}}`, { reason: 'expected a value', offset: 11, line: 2, column: 10 }],
    ['', { reason: 'unexpected end of input', offset: 0, line: 1, column: 1 }],
    [new Uint8Array([0x7b, 0x22, 0x6d, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]), { reason: 'the body is not UTF-8', offset: 6, line: 1, column: 7 }],
  ]
  for (const [body, details] of cases) {
    const r = prepare(task(body))
    refused(t, r, 'invalid_json', details)
    t.notMatch(JSON.stringify(r), /SECRET/, 'no body content in the refusal')
  }
})

t.test('invalid_request names the field', async (t) => {
  const cases: Array<[string, Record<string, unknown>]> = [
    ['[{"model":"m"}]', { field: 'body', reason: 'must be a JSON object' }],
    ['null', { field: 'body', reason: 'must be a JSON object' }],
    ['"model"', { field: 'body', reason: 'must be a JSON object' }],
    ['{"messages":[]}', { field: 'model', reason: 'is required' }],
    ['{"model":42}', { field: 'model', reason: 'must be a string' }],
    ['{"model":null}', { field: 'model', reason: 'must be a string' }],
    ['{"model":""}', { field: 'model', reason: 'must not be empty' }],
    ['{"model":"m","stream":"yes"}', { field: 'stream', reason: 'must be a boolean' }],
    ['{"model":"m","stream":1}', { field: 'stream', reason: 'must be a boolean' }],
  ]
  for (const [body, details] of cases) refused(t, prepare(task(body)), 'invalid_request', details)
})

t.test('an alias rewrites only the model value; no alias returns the bytes untouched', async (t) => {
  const text = '{ "model" : "fast",\n "seed": 12345678901234567890, "temperature": 1.0, "metadata": {"model":"fast"}, "stream": true }'
  const body = enc.encode(text)
  const copy = Buffer.from(body)
  const r = prepare(task(body, { aliases: { fast: 'gpt-5.5-mini' } }))
  t.ok(r.ok)
  if (!r.ok) return
  t.equal(r.rewritten, true)
  t.equal(r.model, 'gpt-5.5-mini')
  t.equal(r.requestedModel, 'fast')
  t.equal(r.stream, true)
  t.equal(new TextDecoder().decode(r.body), text.replace('"fast",', '"gpt-5.5-mini",'), 'whitespace, big integers, 1.0 and nested members kept')
  t.not(r.body, body)
  t.same(Buffer.from(body), copy, 'the input bytes were not modified')

  const plain = enc.encode('{"model":"other","stream":false}')
  const untouched = prepare(task(plain, { aliases: { fast: 'gpt-5.5-mini' } }))
  t.ok(untouched.ok && untouched.body === plain && !untouched.rewritten && untouched.model === 'other')
  t.same(untouched.ok && Buffer.from(untouched.body), Buffer.from('{"model":"other","stream":false}'), 'same contents')

  // inherited names are not aliases
  for (const model of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
    const r2 = prepare(task(`{"model":${JSON.stringify(model)}}`))
    t.ok(r2.ok && !r2.rewritten && r2.model === model, model)
  }
  const self = prepare(task('{"model":"same"}', { aliases: { same: 'same' } }))
  t.ok(self.ok && !self.rewritten, 'an alias to itself changes nothing')
})

t.test('session hints: prompt_cache_key, Claude Code metadata.user_id (both forms), bounded', async (t) => {
  const hint = (body: unknown, route: Route) => {
    const r = prepare(task(JSON.stringify(body), { route }))
    return r.ok ? r.sessionHint : 'refused'
  }
  t.equal(hint({ model: 'm', prompt_cache_key: 'sess-1' }, 'responses'), 'sess-1')
  t.equal(hint({ model: 'm', prompt_cache_key: 'sess-1' }, 'chat'), 'sess-1')
  t.equal(hint({ model: 'm', prompt_cache_key: 'x'.repeat(257) }, 'responses'), undefined)
  t.equal(hint({ model: 'm', metadata: { user_id: JSON.stringify({ device_id: 'd', session_id: 'abc' }) } }, 'messages'), 'abc')
  t.equal(hint({ model: 'm', metadata: { user_id: 'user_0f_account_1a_session_5fe20794-87d5' } }, 'count_tokens'), '5fe20794-87d5')
  t.equal(hint({ model: 'm', metadata: { user_id: '{not json' } }, 'messages'), undefined)
  t.equal(hint({ model: 'm', metadata: { user_id: 7 } }, 'messages'), undefined)
  t.equal(hint({ model: 'm', prompt_cache_key: 'p' }, 'messages'), undefined, 'per route')
  const r = prepare(task('{"model":"m"}'))
  t.notOk(r.ok && 'sessionHint' in r, 'absent, not undefined, when there is none')
})

t.test('every recorded client request body prepares with its model, stream flag and session', async (t) => {
  const dir = new URL('../../../../shared/fixtures/clients/', import.meta.url)
  const files = readdirSync(dir).filter((f) => /-POST-.*\.json$/.test(f))
  t.ok(files.length >= 12, `${files.length} fixtures`)
  const routeOf = (url: string): Route => url.startsWith('/v1/messages/count_tokens') ? 'count_tokens'
    : url.startsWith('/v1/messages') ? 'messages' : url.startsWith('/v1/responses') ? 'responses' : 'chat'
  for (const f of files) {
    const rec = JSON.parse(readFileSync(new URL(f, dir), 'utf8')) as { url: string; headers: Record<string, string>; body: Record<string, unknown> }
    const bytes = enc.encode(JSON.stringify(rec.body))
    const r = prepare(task(bytes, { route: routeOf(rec.url) }))
    t.ok(r.ok, f)
    if (!r.ok) continue
    t.equal(r.model, rec.body.model, `${f}: model`)
    t.equal(r.stream, rec.body.stream === true, `${f}: stream`)
    t.equal(r.body, bytes, `${f}: untouched`)
    const header = rec.headers['session-id'] ?? rec.headers['x-claude-code-session-id']
    if (header !== undefined) t.equal(r.sessionHint, header, `${f}: the body's session agrees with the header`)
    const aliased = prepare(task(bytes, { route: routeOf(rec.url), aliases: { [String(rec.body.model)]: 'target-model' } }))
    t.ok(aliased.ok && aliased.rewritten && JSON.parse(new TextDecoder().decode(aliased.body)).model === 'target-model', `${f}: alias`)
    t.same(aliased.ok && JSON.parse(new TextDecoder().decode(aliased.body)), { ...rec.body, model: 'target-model' }, `${f}: alias changes nothing else`)
  }
})

t.test('never throws: an unexpected failure is internal_error as data', async (t) => {
  const r = prepare({ body: null as unknown as Uint8Array, route: 'chat', limits: LIMITS, aliases: {} })
  refused(t, r, 'internal_error', { reason: 'request preparation failed' })
})

t.test('a leading UTF-8 byte-order mark is accepted and dropped from the forwarded bytes', async (t) => {
  const json = '{"model":"m","messages":[]}'
  const bom = new Uint8Array([0xef, 0xbb, 0xbf, ...enc.encode(json)])
  const r = prepare(task(bom))
  t.equal(r.ok, true)
  if (!r.ok) return
  t.same(r.body, enc.encode(json), 'the JSON text without the mark')
  t.equal(r.body.buffer.byteLength, enc.encode(json).byteLength, 'a buffer of its own size (reservations follow byteLength)')
  t.equal(r.rewritten, true)
  const aliased = prepare(task(bom, { aliases: { m: 'gpt-4o-mini' } }))
  t.equal(aliased.ok, true)
  if (aliased.ok) t.same(aliased.body, enc.encode('{"model":"gpt-4o-mini","messages":[]}'), 'with an alias: no mark either')
  // A mark anywhere else is not whitespace: still invalid_json.
  refused(t, prepare(task(new Uint8Array([...enc.encode(' '), 0xef, 0xbb, 0xbf, ...enc.encode(json)]))), 'invalid_json')
})
