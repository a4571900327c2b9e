// A body below limits.inWorkerParseBytes is prepared in the HTTP worker itself (DESIGN.md step
// 5), the others in the parser pool. The two paths must be indistinguishable but for the
// thread: the same bodies (valid, invalid, too deep, too many values, aliases, a BOM,
// envelopes, translations, conversation history) through worker/exchange.ts prepare() with
// the threshold at 0 (every body to the pool) and at its bound (every body here) give the same
// results and refusals, the same bytes reserved afterwards, and the parse permit back each
// time. The pool's task count shows which path ran.

import t from 'tap'
import { validateConfig, sha256Hex } from '../../../src/config/load.ts'
import { SluiceError } from '../../../src/errors.ts'
import { ParserPool } from '../../../src/json/pool.ts'
import type { ContinuationTask, TranslateSpec } from '../../../src/json/prepare.ts'
import type { Route } from '../../../src/protocols/routes.ts'
import { Router } from '../../../src/routing.ts'
import { prepare, prepareNow } from '../../../worker/exchange.ts'
import { ExchangeScope } from '../../../worker/scope.ts'
import { idleProblems, makeLedger } from '../ledger/helpers.ts'
import { KEY, KEY_NAME, unitDeps } from './helpers.ts'

const enc = new TextEncoder()

function config (inWorkerParseBytes: number): ReturnType<typeof validateConfig> {
  return validateConfig({
    listen: { port: 0 },
    limits: { maxJsonDepth: 8, maxJsonNodes: 200, inWorkerParseBytes },
    keys: [{ name: KEY_NAME, sha256: sha256Hex(KEY), models: ['*'] }],
    providers: [
      { name: 'unit-chat', protocol: 'openai-chat', baseUrl: 'http://127.0.0.1:9', apiKeyEnv: 'UNIT_PROVIDER_KEY', models: ['gpt-*'], aliases: { fast: 'gpt-4o-mini' } },
      { name: 'unit-anthropic', protocol: 'anthropic', baseUrl: 'http://127.0.0.1:9', apiKeyEnv: 'UNIT_PROVIDER_KEY', models: ['claude-*'] },
    ],
  })
}

interface Case {
  name: string
  route: Route
  body: Uint8Array | string
  envelope?: 'exchange' | 'rpc'
  translate?: TranslateSpec
  continuation?: () => ContinuationTask
}

const chat = (extra: Record<string, unknown> = {}): string => JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], ...extra })
const toAnthropic: TranslateSpec = { to: 'anthropic', issuer: 'anthropic:unit-anthropic', model: 'claude-x' }

const cases: Case[] = [
  { name: 'valid chat', route: 'chat', body: chat({ stream: true }) },
  { name: 'alias rewritten', route: 'chat', body: chat({ model: 'fast' }) },
  { name: 'byte-order mark dropped', route: 'chat', body: new Uint8Array([0xef, 0xbb, 0xbf, ...enc.encode(chat())]) },
  { name: 'session hint', route: 'chat', body: chat({ prompt_cache_key: 'sess-1' }) },
  { name: 'responses state', route: 'responses', body: JSON.stringify({ model: 'gpt-4o', input: 'x', previous_response_id: 'resp_1', store: false }) },
  { name: 'messages metadata hint', route: 'messages', body: JSON.stringify({ model: 'claude-x', max_tokens: 5, messages: [], metadata: { user_id: 'user_a_account_b_session_abc' } }) },
  { name: 'invalid JSON', route: 'chat', body: '{"model": "gpt-4o", "messages": [' },
  { name: 'not UTF-8', route: 'chat', body: new Uint8Array([0x7b, 0x22, 0x6d, 0xff, 0x22, 0x3a, 0x31, 0x7d]) },
  { name: 'not an object', route: 'chat', body: '[1,2]' },
  { name: 'model missing', route: 'chat', body: '{"messages":[]}' },
  { name: 'model empty', route: 'chat', body: '{"model":""}' },
  { name: 'stream not boolean', route: 'chat', body: chat({ stream: 'yes' }) },
  { name: 'too deep', route: 'chat', body: chat({ x: JSON.parse('[[[[[[[[[[1]]]]]]]]]]') }) },
  { name: 'too many values', route: 'chat', body: chat({ x: new Array(300).fill(0) }) },
  { name: 'empty body', route: 'chat', body: '' },
  { name: 'exchange envelope', route: 'chat', envelope: 'exchange', body: JSON.stringify({ route: 'chat', body: { model: 'fast', messages: [] } }) },
  { name: 'exchange envelope, bad route', route: 'chat', envelope: 'exchange', body: JSON.stringify({ route: 'nope', body: { model: 'x' } }) },
  { name: 'exchange envelope, bad body', route: 'chat', envelope: 'exchange', body: JSON.stringify({ route: 'chat', body: { model: 3 } }) },
  { name: 'rpc prompt', route: 'chat', envelope: 'rpc', body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'session/prompt', params: { sessionId: 's', route: 'chat', body: { model: 'gpt-4o', messages: [] } } }) },
  { name: 'rpc other method', route: 'chat', envelope: 'rpc', body: JSON.stringify({ jsonrpc: '2.0', id: 'a', method: 'session/cancel', params: { sessionId: 's', n: 1, o: {} } }) },
  { name: 'rpc bad version', route: 'chat', envelope: 'rpc', body: JSON.stringify({ jsonrpc: '1.0', id: 1, method: 'x' }) },
  { name: 'rpc envelope too deep', route: 'chat', envelope: 'rpc', body: '{"a":[[[[[[[[[[1]]]]]]]]]]}' },
  { name: 'translated chat -> anthropic', route: 'chat', translate: toAnthropic, body: chat({ stream: true, max_tokens: 20, tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }] }) },
  { name: 'translated, invalid messages', route: 'chat', translate: toAnthropic, body: JSON.stringify({ model: 'gpt-4o', messages: 'no' }) },
  { name: 'translated count_tokens estimate', route: 'count_tokens', translate: { to: 'openai-chat', issuer: 'openai-chat:unit-chat' }, body: JSON.stringify({ model: 'claude-x', messages: [{ role: 'user', content: 'count me' }] }) },
  { name: 'translated, an envelope is refused', route: 'chat', envelope: 'exchange', translate: toAnthropic, body: '{}' },
  {
    name: 'responses with history, kept',
    route: 'responses',
    translate: toAnthropic,
    body: JSON.stringify({ model: 'gpt-4o', input: [{ role: 'user', content: 'and now? ' + 'z'.repeat(40) }], previous_response_id: 'resp_1' }),
    continuation: () => ({ history: enc.encode('[[{"role":"user","content":"earlier"}]]'), keep: { blobThreshold: 16 } }),
  },
  {
    name: 'responses with an unreadable history',
    route: 'responses',
    translate: toAnthropic,
    body: JSON.stringify({ model: 'gpt-4o', input: 'x', previous_response_id: 'resp_1' }),
    continuation: () => ({ history: enc.encode('not json') }),
  },
]

/** A result with every byte array as its text, so two results compare by value. */
function plain (v: unknown): unknown {
  if (v instanceof Uint8Array) return { bytes: Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('latin1') }
  if (Array.isArray(v)) return v.map(plain)
  if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]))
  return v
}

t.test('the same bodies in the HTTP worker and in the parser pool: identical results, refusals, reservations, permits', async (t) => {
  const pool = new ParserPool({ threads: 1, heapMb: 64, youngGenMb: 8 })
  t.teardown(() => pool.close())
  const ledger = makeLedger()
  const router = (cfg: ReturnType<typeof config>): Router => new Router(cfg.providers, null, { UNIT_PROVIDER_KEY: 'k' })
  const deps = (bytes: number): ReturnType<typeof unitDeps> => {
    const cfg = config(bytes)
    const d = unitDeps(ledger, cfg)
    d.router = router(cfg)
    Object.defineProperty(d, 'parser', { value: pool })
    return d
  }
  const inPool = deps(0)
  const here = deps(300 * 1024) // the bound at the default heap: every case is far below it

  async function run (d: ReturnType<typeof deps>, c: Case, now = false): Promise<{ outcome: unknown, held: number, tasks: number }> {
    const bytes = typeof c.body === 'string' ? enc.encode(c.body) : new Uint8Array(c.body) // a fresh copy: the pool takes it
    const size = bytes.byteLength // read first: the pool detaches the buffer
    const scope = new ExchangeScope(ledger)
    scope.reserve(size)
    const before = pool.stats().completed + pool.stats().failed
    let outcome: unknown
    try {
      const r = now
        ? prepareNow(d, scope, c.route, bytes) ?? t.fail(`${c.name}: prepareNow did not take it`) as never
        : await prepare(d, scope, c.route, bytes, new AbortController().signal, c.envelope, c.translate, c.continuation?.())
      outcome = { ok: plain(r) }
      t.equal(scope.heldBytes, r.body.byteLength, `${c.name}: the prepared body's bytes are what is reserved`)
    } catch (err) {
      t.ok(err instanceof SluiceError, `${c.name}: a catalogue error`)
      const e = err as SluiceError
      outcome = { code: e.code, status: e.status, details: e.details, message: e.message }
      t.equal(scope.heldBytes, size, `${c.name}: the body's bytes stay reserved for the refusal`)
    }
    const held = scope.heldBytes
    t.equal(ledger.snapshot().parse.active, 0, `${c.name}: the parse permit is back`)
    scope.discard()
    t.same(idleProblems(ledger), [], `${c.name}: idle`)
    return { outcome, held, tasks: pool.stats().completed + pool.stats().failed - before }
  }

  for (const c of cases) {
    const a = await run(inPool, c)
    const b = await run(here, c)
    t.equal(a.tasks, 1, `${c.name}: threshold 0 -> the parser pool`)
    t.equal(b.tasks, 0, `${c.name}: below the threshold -> this thread, no pool task`)
    t.same(b.outcome, a.outcome, `${c.name}: the same outcome either way`)
    t.equal(b.held, a.held, `${c.name}: the same bytes reserved either way`)
    // A plain exchange body (what runExchange gives prepareNow): the same again, with no promise.
    if (c.envelope === undefined && c.translate === undefined && c.continuation === undefined) {
      const n = await run(here, c, true)
      t.equal(n.tasks, 0, `${c.name}: prepareNow -> this thread`)
      t.same(n.outcome, a.outcome, `${c.name}: prepareNow, the same outcome`)
      t.equal(n.held, a.held, `${c.name}: prepareNow, the same bytes reserved`)
    }
  }
  // The refusals above are real refusals (the table is not all successes, nor all failures).
  const codes = new Set<string>()
  for (const c of cases) codes.add(String(((await run(here, c)).outcome as { code?: string }).code ?? 'ok'))
  t.same([...codes].sort(), ['continuation_expired', 'internal_error', 'invalid_json', 'invalid_request', 'json_too_deep', 'json_too_many_nodes', 'ok'].sort())
})

t.test('the threshold counts a continuation history and is strict (below, not at)', async (t) => {
  const pool = new ParserPool({ threads: 1, heapMb: 64, youngGenMb: 8 })
  t.teardown(() => pool.close())
  const ledger = makeLedger()
  const body = enc.encode(JSON.stringify({ model: 'gpt-4o', input: 'x', previous_response_id: 'r' }))
  const history = enc.encode('[[{"role":"user","content":"earlier"}]]')
  const tasksFor = async (threshold: number, withHistory: boolean): Promise<number> => {
    const cfg = config(threshold)
    const d = unitDeps(ledger, cfg)
    d.router = new Router(cfg.providers, null, { UNIT_PROVIDER_KEY: 'k' })
    Object.defineProperty(d, 'parser', { value: pool })
    const scope = new ExchangeScope(ledger)
    const b = new Uint8Array(body)
    scope.reserve(b.byteLength)
    const before = pool.stats().completed
    // Without the history the translator refuses previous_response_id: an outcome like any other here.
    const ok = await prepare(d, scope, 'responses', b, new AbortController().signal, undefined, toAnthropic, withHistory ? { history: new Uint8Array(history) } : undefined).then(() => true, (err: SluiceError) => err.code)
    t.equal(ok, withHistory ? true : 'invalid_request')
    scope.discard()
    return pool.stats().completed - before
  }
  t.equal(await tasksFor(body.byteLength + 1, false), 0, 'one byte below the threshold: here')
  t.equal(await tasksFor(body.byteLength, false), 1, 'at the threshold: the pool')
  t.equal(await tasksFor(body.byteLength + 1, true), 1, 'the history counts: the pool')
  t.equal(await tasksFor(body.byteLength + history.byteLength + 1, true), 0, 'body + history below: here')
  t.same(idleProblems(ledger), [])
})

t.test('prepareNow does nothing when it would have to wait: the permit taken, or a body for the pool', async (t) => {
  const ledger = makeLedger()
  const cfg = config(128)
  const d = unitDeps(ledger, cfg)
  d.router = new Router(cfg.providers, null, { UNIT_PROVIDER_KEY: 'k' })
  const small = enc.encode(chat())
  t.ok(small.byteLength < 128, 'a body below the threshold')
  const scope = new ExchangeScope(ledger)
  scope.reserve(small.byteLength)
  t.ok(ledger.parse.tryAcquire(), 'another exchange holds the parse permit')
  t.equal(prepareNow(d, scope, 'chat', small), null, 'permit taken: null')
  t.equal(scope.heldBytes, small.byteLength, 'nothing reserved or returned')
  ledger.parse.release()
  const ok = prepareNow(d, scope, 'chat', small)
  t.equal(ok?.model, 'gpt-4o-mini', 'permit free: prepared at once')
  t.equal(ledger.snapshot().parse.active, 0, 'and the permit back')
  const large = enc.encode(chat({ pad: 'p'.repeat(128) }))
  t.equal(prepareNow(d, scope, 'chat', large), null, 'at or above inWorkerParseBytes: null (the pool\'s)')
  scope.discard()
  t.same(idleProblems(ledger), [])
})
