// prepare() with `translate`: every real client capture (../shared/fixtures/clients) translated
// for each provider of another protocol in the pool task itself, the provider's body handed
// back in a fresh ArrayBuffer, the tool table read against the raw client body, refusals as
// plain data, count_tokens answered locally; then the same through the real ParserPool.
import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { ParserPool } from '../../../src/json/pool.ts'
import { prepare, type PrepareOk, type PrepareTask, type Route } from '../../../src/json/prepare.ts'
import type { Protocol } from '../../../src/translate/canonical.ts'
import { WIRE_NAME } from '../../../src/translate/names.ts'
import { countTokensEstimate, translateRequest } from '../../../src/translate/request/index.ts'
import { declaredNames } from '../translate/invariants.ts'
import { shapes } from '../translate/shapes.ts'

type Json = Record<string, any>
const enc = new TextEncoder()
const LIMITS = { maxDepth: 128, maxNodes: 1_000_000 }
const dir = new URL('../../../../shared/fixtures/clients/', import.meta.url)
const files = readdirSync(dir).filter(f => f.includes('-POST-')).sort()
const protocols: Protocol[] = ['openai-chat', 'openai-responses', 'anthropic']

function routeOf (file: string): Route {
  return file.includes('chat_completions') ? 'chat' : file.includes('v1_responses') ? 'responses' : 'messages'
}
const PROTOCOL: Record<Route, Protocol> = { chat: 'openai-chat', responses: 'openai-responses', messages: 'anthropic', count_tokens: 'anthropic' }

function raw (file: string): Json {
  return JSON.parse(readFileSync(new URL(file, dir), 'utf8')).body as Json
}

/** The body as its own ArrayBuffer, the way the HTTP worker hands it over. */
function bytes (v: unknown): Uint8Array {
  const e = enc.encode(typeof v === 'string' ? v : JSON.stringify(v))
  const b = new Uint8Array(new ArrayBuffer(e.byteLength))
  b.set(e)
  return b
}

const task = (body: Uint8Array, route: Route, to: Protocol, over: Partial<PrepareTask> = {}): PrepareTask =>
  ({ body, route, limits: LIMITS, aliases: {}, translate: { to, issuer: `${to}:prov`, model: 'provider-model' }, ...over })

/** The client's own tools read straight from the raw body (hosted tools have no wire name). */
function clientTools (p: Protocol, body: Json): Array<{ kind: string; name: string; namespace?: string }> {
  const out: Array<{ kind: string; name: string; namespace?: string }> = []
  for (const tool of body.tools ?? []) {
    if (p === 'openai-chat') out.push({ kind: tool.type, name: tool.type === 'custom' ? tool.custom.name : tool.function.name })
    else if (p === 'anthropic') { if (tool.type === undefined || tool.type === 'custom') out.push({ kind: 'function', name: tool.name }) }
    else if (tool.type === 'namespace') for (const s of tool.tools) out.push({ kind: s.type, name: s.name, namespace: tool.name })
    else if (tool.type === 'function' || tool.type === 'custom') out.push({ kind: tool.type, name: tool.name })
    else if (tool.type === 'tool_search') out.push({ kind: 'tool_search', name: 'tool_search' })
  }
  return out
}

t.ok(files.length >= 20, `${files.length} captured requests`)

for (const file of files) {
  const route = routeOf(file)
  const from = PROTOCOL[route]
  const client = raw(file)
  for (const to of protocols.filter(p => p !== from)) {
    t.test(`${file} -> ${to}`, async t => {
      const input = bytes(client)
      const r = prepare(task(input, route, to))
      if (!r.ok) return t.fail(`refused: ${JSON.stringify(r.error)}`)
      t.equal(r.rewritten, true)
      t.equal(r.model, 'provider-model')
      t.equal(r.requestedModel, client.model)
      t.equal(r.stream, client.stream === true)
      t.not(r.body.buffer, input.buffer, 'a fresh buffer')
      t.equal(r.body.byteOffset, 0)
      t.equal(r.body.byteLength, r.body.buffer.byteLength, 'the result owns its whole buffer (transferable as is)')
      const body = JSON.parse(Buffer.from(r.body).toString('utf8')) as Json
      const shape = shapes[to].safeParse(body)
      t.same(shape.success ? [] : shape.error.issues.map(i => `${i.path.join('.')}: ${i.message}`), [], 'the provider request shape')
      t.equal(body.model, 'provider-model')
      t.same(body, translateRequest({ from, to, body: structuredClone(client), model: 'provider-model', issuer: `${to}:prov` }).body, 'what the translator makes, serialised once')

      const tr = r.translation!
      t.equal(tr.from, from)
      t.equal(tr.to, to)
      t.equal(tr.client, from)
      t.equal(tr.model, client.model)
      t.equal(tr.clientStream, client.stream === true)
      t.equal(tr.includeUsage, from === 'openai-chat' && client.stream_options?.include_usage === true)
      t.same(tr.tools.map(x => x.namespace === undefined ? { kind: x.kind, name: x.name } : { kind: x.kind, name: x.name, namespace: x.namespace }), clientTools(from, client), 'the tool table lists every client tool')
      for (const x of tr.tools) t.match(x.wireName, WIRE_NAME)
      for (const n of tr.tools.map(x => x.wireName)) t.ok(declaredNames(to, body).includes(n), `${n} declared`)
      const hosted = (client.tools ?? []).filter((x: Json) => from === 'openai-responses' && x.type === 'web_search')
      if (hosted.length > 0 && to === 'openai-chat') t.same(tr.droppedTools, ['web_search'], 'web_search has no Chat equivalent: dropped and reported')
      t.same(JSON.parse(JSON.stringify(tr)), tr, 'small plain data')
      t.ok(JSON.stringify(tr).length < 4096, 'no messages in it')
    })
  }
}

t.test('without translate.model the alias target is the provider model', async t => {
  const client = raw('sdk-openai7-01-POST-v1_chat_completions.json')
  const r = prepare({ body: bytes(client), route: 'chat', limits: LIMITS, aliases: { [client.model]: 'claude-x' }, translate: { to: 'anthropic', issuer: 'anthropic:prov' } }) as PrepareOk
  t.equal(r.ok, true)
  t.equal(r.model, 'claude-x')
  t.equal(r.requestedModel, client.model)
  t.equal(JSON.parse(Buffer.from(r.body).toString()).model, 'claude-x')
  t.equal(r.translation?.model, client.model, 'the client model stays in the summary')
})

t.test('refusals are plain data with a catalogue code', async t => {
  const base = raw('sdk-openai7-01-POST-v1_chat_completions.json')
  const dup = { ...base, tools: [base.tools[0], base.tools[0]] }
  const collide = prepare(task(bytes(dup), 'chat', 'anthropic'))
  t.match(collide, { ok: false, error: { code: 'invalid_request', details: { field: 'tools' }, message: /collide/ } })
  t.same(structuredClone(collide), collide, 'crosses a thread boundary as is')
  t.match(prepare(task(bytes({ ...base, n: 2 }), 'chat', 'openai-responses')), { ok: false, error: { code: 'invalid_request', details: { field: 'n' } } })
  t.match(prepare(task(bytes({ ...base, model: 7 }), 'chat', 'anthropic')), { ok: false, error: { code: 'invalid_request', details: { field: 'model' } } })
  t.match(prepare(task(bytes('{"model":"x",'), 'chat', 'anthropic')), { ok: false, error: { code: 'invalid_json', details: { offset: 13 } } })
  t.match(prepare(task(bytes('[' .repeat(200) + ']'.repeat(200)), 'chat', 'anthropic')), { ok: false, error: { code: 'json_too_deep' } })
  t.match(prepare(task(bytes({ model: 'm', messages: 'hi' }), 'messages', 'openai-chat')), { ok: false, error: { code: 'invalid_request', details: { field: 'messages' } } })
  t.match(prepare(task(bytes(base), 'chat', 'anthropic', { envelope: 'exchange' })), { ok: false, error: { code: 'internal_error' } }, 'an envelope is translated in a second call')
  t.match(prepare(task(bytes(base), 'chat', 'openai-chat')), { ok: false, error: { code: 'internal_error', details: { reason: /same-protocol/ } } }, 'a same-protocol route is never translated')
  t.match(prepare(task(bytes({ model: 'm', messages: [] }), 'count_tokens', 'anthropic')), { ok: false, error: { code: 'internal_error' } }, 'count_tokens on an Anthropic provider is asked upstream')
})

t.test('an envelope: the second call translates its exchange body', async t => {
  const client = raw('codex-tool-namespace-01-POST-v1_responses.json')
  const first = prepare({ body: bytes({ route: 'responses', body: client }), route: 'chat', envelope: 'exchange', limits: LIMITS, aliases: {} })
  if (!first.ok) return t.fail(JSON.stringify(first.error))
  t.equal(first.envelope?.route, 'responses')
  const second = prepare(task(first.body, first.envelope!.route!, 'openai-chat'))
  if (!second.ok) return t.fail(JSON.stringify(second.error))
  t.equal(second.translation?.from, 'openai-responses')
  t.ok(second.translation?.tools.some(x => x.namespace === 'multi_agent_v1' && x.name === 'spawn_agent'))
  t.equal(shapes['openai-chat'].safeParse(JSON.parse(Buffer.from(second.body).toString())).success, true)

  const claude = raw('claude-tool-bash-01-POST-v1_messages.json')
  const rpc = prepare({ body: bytes({ jsonrpc: '2.0', id: 7, method: 'session/prompt', params: { sessionId: 's1', route: 'messages', body: claude } }), route: 'chat', envelope: 'rpc', limits: LIMITS, aliases: { [claude.model]: 'gpt-x' } })
  if (!rpc.ok) return t.fail(JSON.stringify(rpc.error))
  t.same(rpc.envelope, { route: 'messages', rpc: { id: 7, method: 'session/prompt', params: { sessionId: 's1', route: 'messages' } } })
  const inner = prepare({ body: rpc.body, route: rpc.envelope!.route!, limits: LIMITS, aliases: {}, translate: { to: 'openai-responses', issuer: 'openai-responses:prov' } })
  if (!inner.ok) return t.fail(JSON.stringify(inner.error))
  t.equal(inner.model, 'gpt-x', 'the alias applied by the first call reaches the provider body')
  t.equal(JSON.parse(Buffer.from(inner.body).toString()).model, 'gpt-x')
  t.ok(inner.translation?.tools.some(x => x.name === 'Bash'))
})

t.test('count_tokens on a non-Anthropic provider: answered locally', async t => {
  for (const file of files.filter(f => routeOf(f) === 'messages')) {
    const client = raw(file)
    const r = prepare(task(bytes(client), 'count_tokens', 'openai-chat'))
    if (!r.ok) { t.fail(`${file}: ${JSON.stringify(r.error)}`); continue }
    const expected = countTokensEstimate(structuredClone(client))
    t.ok(expected.input_tokens > 0, `${file}: something counted`)
    t.same(r.estimate, expected, file)
    t.same(JSON.parse(Buffer.from(r.body).toString()), expected, `${file}: the body is the Anthropic answer`)
    t.equal(r.stream, false)
    t.equal(r.translation, undefined)
  }
  t.match(prepare(task(bytes({ model: 'm', messages: [{ role: 'user', content: [{ type: 'mystery' }] }] }), 'count_tokens', 'openai-responses')), { ok: false, error: { code: 'invalid_request' } })
})

t.test('through the real pool: each pair, count_tokens, a refusal', async t => {
  const pool = new ParserPool({ threads: 1, heapMb: 128, youngGenMb: 16 })
  t.teardown(() => pool.close())
  const pairs: Array<[string, Protocol]> = [
    ['sdk-openai7-01-POST-v1_chat_completions.json', 'openai-responses'],
    ['sdk-openai7-01-POST-v1_chat_completions.json', 'anthropic'],
    ['codex-tool-applypatch-01-POST-v1_responses.json', 'openai-chat'],
    ['codex-tool-reasoning-parallel-02-POST-v1_responses.json', 'anthropic'],
    ['claude-tool-thinking-02-POST-v1_messages.json', 'openai-chat'],
    ['claude-tool-thinking-02-POST-v1_messages.json', 'openai-responses'],
  ]
  for (const [file, to] of pairs) {
    const route = routeOf(file)
    const input = bytes(raw(file))
    const local = prepare(task(bytes(raw(file)), route, to))
    const r = await pool.prepare(task(input, route, to))
    t.equal((input.buffer as ArrayBuffer).detached, true, `${file} -> ${to}: the body was transferred in`)
    if (!r.ok || !local.ok) { t.fail(`${file} -> ${to}: refused`); continue }
    t.equal(r.body.byteLength, r.body.buffer.byteLength, 'came back owning its buffer')
    t.same(Buffer.from(r.body), Buffer.from(local.body), `${file} -> ${to}: the same provider body as in this thread`)
    t.same(r.translation, local.translation, `${file} -> ${to}: the same translation facts`)
  }
  const count = await pool.prepare(task(bytes(raw('claude-text-01-POST-v1_messages.json')), 'count_tokens', 'openai-responses'))
  t.same(count.ok ? count.estimate : null, countTokensEstimate(raw('claude-text-01-POST-v1_messages.json')), 'the tokenizer runs in the parser thread')
  const base = raw('sdk-openai7-01-POST-v1_chat_completions.json')
  const refused = await pool.prepare(task(bytes({ ...base, tools: [base.tools[0], base.tools[0]] }), 'chat', 'anthropic'))
  t.match(refused, { ok: false, error: { code: 'invalid_request', details: { field: 'tools' } } })
  t.same({ completed: pool.stats().completed, failed: pool.stats().failed, lost: pool.stats().threadsLost }, { completed: pairs.length + 2, failed: 0, lost: 0 })
})
