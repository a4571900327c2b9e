// Redaction: every configured path, every credential header at any depth and in any case,
// child bindings and errors; the caller's objects untouched; the exchange line's own fields kept.

import t from 'tap'
import type pino from 'pino'
import { CENSOR, FIELD_MAX_CHARS, LINE_MAX_BYTES, capLine, createLogger, isoAt, isoTime, lineWriter, REDACT_PATHS, SECRET_HEADERS, SECRET_KEYS, scrubSecrets, truncate } from '../../src/log.ts'

const SECRET = 'sk-live-0123456789-do-not-log'

function capture (): { log: pino.Logger; lines: () => Array<Record<string, unknown>>; text: () => string } {
  const out: string[] = []
  const log = createLogger('info', { write: (s: string) => { out.push(s) } })
  return { log, lines: () => out.map((l) => JSON.parse(l) as Record<string, unknown>), text: () => out.join('') }
}

/** An object with SECRET at a pino path (`a.b`, `["x-y"]`, `a[*].b`, a leading `*` as `any`). */
function objectAt (path: string): Record<string, unknown> {
  const parts = [...path.matchAll(/\["([^"]+)"\]|\[\*\]|[^.[\]]+/g)].map((m) => m[1] ?? m[0])
  const root: Record<string, unknown> = {}
  let node: Record<string, unknown> | unknown[] = root
  parts.forEach((p, i) => {
    const last = i === parts.length - 1
    const value: unknown = last ? SECRET : parts[i + 1] === '[*]' ? [] : {}
    if (Array.isArray(node)) {
      const holder: Record<string, unknown> = {}
      node.push(holder)
      node = holder
      if (p === '[*]') return
    }
    const key = p === '*' ? 'any' : p
    ;(node as Record<string, unknown>)[key] = value
    if (!last) node = value as Record<string, unknown> | unknown[]
  })
  return root
}

t.test('every REDACT_PATHS entry is redacted', async (t) => {
  for (const path of REDACT_PATHS) {
    const c = capture()
    const obj = objectAt(path)
    c.log.info(obj, 'line')
    t.notMatch(c.text(), SECRET, `${path}: not in the line (${JSON.stringify(obj)})`)
    t.match(c.text(), CENSOR, `${path}: censored, not dropped`)
  }
})

t.test('credential headers at any depth, in any case, in arrays', async (t) => {
  const variants = (h: string): string[] => [h, h.toUpperCase(), h.replace(/(^|-)([a-z])/g, (_m, a: string, b: string) => a + b.toUpperCase())]
  for (const h of SECRET_HEADERS) {
    for (const name of variants(h)) {
      const c = capture()
      const headers = { [name]: SECRET, accept: 'application/json' }
      c.log.info({ [name]: SECRET }, 'top')
      c.log.info({ headers }, 'headers')
      c.log.info({ req: { headers } }, 'req.headers')
      c.log.info({ upstream: { request: { headers } } }, '*.*.headers')
      c.log.info({ a: { b: { c: { d: { e: { headers } } } } } }, 'deep')
      c.log.info({ list: [{ headers }, [{ headers }]] }, 'arrays')
      c.log.info({ clientHeaders: headers, provider: { headers } }, 'named')
      c.log.info({ [name]: [SECRET, SECRET] }, 'multi-valued')
      t.notMatch(c.text(), SECRET, `${name}: never in a line`)
      t.ok(c.lines().every((l) => JSON.stringify(l).includes(CENSOR)), `${name}: censored in every line`)
      t.ok(c.lines().slice(1, 7).every((l) => JSON.stringify(l).includes('application/json')), `${name}: other headers kept`)
    }
  }
})

t.test('keys and config secrets', async (t) => {
  const c = capture()
  c.log.info({ apiKey: SECRET, provider: { name: 'p', apiKey: SECRET }, providers: [{ apiKey: SECRET }] }, 'provider keys')
  c.log.info({ signingKey: SECRET, boot: { signingKey: SECRET } }, 'signing key')
  c.log.info({ key: SECRET }, 'a presented key')
  c.log.info({ keys: [{ name: 'k', sha256: SECRET }], config: { keys: [{ name: 'k', sha256: SECRET }] } }, 'config key hashes')
  c.log.info({ rawHeaders: ['Authorization', SECRET], req: { rawHeaders: ['Cookie', SECRET] } }, 'raw headers')
  c.log.info({ password: SECRET, oauth: { access_token: SECRET, refresh_token: SECRET, client_secret: SECRET }, secret: SECRET }, 'generic')
  t.notMatch(c.text(), SECRET)
  t.equal(c.lines().length, 6)
  t.equal(c.lines()[3].keys && (c.lines()[3].keys as Array<Record<string, unknown>>)[0].name, 'k', 'a key\'s name is kept')
})

t.test('child bindings are redacted', async (t) => {
  const c = capture()
  c.log.child({ headers: { Authorization: `Bearer ${SECRET}` }, ctx: { cookie: SECRET } }).info({ ok: 1 }, 'child')
  c.log.child({ worker: 1 }).child({ deeper: { 'x-api-key': SECRET } }).warn('grandchild')
  t.notMatch(c.text(), SECRET)
  t.equal(c.lines()[1].worker, 1, 'other bindings kept')
})

t.test('errors: own properties, nested errors, errors under other keys', async (t) => {
  const c = capture()
  const inner = Object.assign(new Error('inner'), { headers: { authorization: SECRET } })
  const err = Object.assign(new Error('upstream failed', { cause: inner }), {
    code: 'E_UPSTREAM',
    request: { headers: { 'x-api-key': SECRET } },
    response: { headers: { 'set-cookie': [SECRET] } },
    nested: inner,
  })
  c.log.error({ err }, 'as err')
  c.log.error(err, 'as the first argument')
  c.log.warn({ error: err, reason: inner }, 'under other keys')
  t.notMatch(c.text(), SECRET)
  const [a, b, w] = c.lines()
  for (const l of [a, b]) {
    const e = l.err as Record<string, unknown>
    t.equal(e.type, 'Error', 'still an error: type')
    t.match(e.message, /upstream failed/, 'message')
    t.match(e.stack, /upstream failed/, 'stack')
    t.equal(e.code, 'E_UPSTREAM', 'other properties kept')
  }
  t.match((w.error as Record<string, unknown>).message, /upstream failed/, 'an error under another key keeps its message')
  t.equal(err.request.headers['x-api-key'], SECRET, 'the error itself is not modified')
})

t.test('scrubSecrets: copy on write, the caller\'s objects untouched', async (t) => {
  const plain = { a: 1, b: { c: [1, 2, { d: 'x' }] } }
  t.equal(scrubSecrets(plain), plain, 'nothing to replace: the same object')
  const headers = { authorization: SECRET, accept: '*/*' }
  const obj = { route: 'chat', req: { headers }, list: [headers] }
  const out = scrubSecrets(obj)
  t.not(out, obj, 'a copy')
  t.same(out, { route: 'chat', req: { headers: { authorization: CENSOR, accept: '*/*' } }, list: [{ authorization: CENSOR, accept: '*/*' }] })
  t.equal(headers.authorization, SECRET, 'the live headers object is unchanged')
  t.equal(obj.req.headers, headers)
  const buf = Buffer.from('bytes')
  const when = new Date(0)
  t.equal(scrubSecrets({ buf, when }).buf, buf, 'buffers and objects with toJSON are left alone')
})

t.test('scrubSecrets: cycles and depth end; what is too deep is cut', async (t) => {
  const a: Record<string, unknown> = { name: 'a', authorization: SECRET }
  a.self = a
  const c = capture()
  c.log.info({ a }, 'cycle')
  let deep: Record<string, unknown> = { authorization: SECRET }
  for (let i = 0; i < 20; i++) deep = { next: deep }
  c.log.info({ deep }, 'deep')
  t.notMatch(c.text(), SECRET)
  t.match(c.text(), /too deep/)
})

t.test('the exchange line is logged whole', async (t) => {
  const rec = {
    exchangeId: '3f0c6a4e-3a7e-4c55-9f5e-2b8b7d1c9e10', runId: 'run-1', route: 'chat', keyName: 'test', sessionId: 's1', mode: 'blocking',
    laneQueued: false, laneMs: 0, model: 'gpt-4o-mini', provider: 'sim-chat', stream: true, code: 'ok', status: 200, queued: false,
    queueMs: 0, ttfbMs: 3.5, totalMs: 12.25, bytesIn: 120, bytesOut: 4096, frames: 12,
    usage: { input_tokens: 10, output_tokens: 20, cache_read_input_tokens: 0, total_tokens: 30 }, partial: false, evidence: true,
  }
  const c = capture()
  c.log.child({ worker: 2, generation: 3 }).info(rec, 'exchange')
  const [line] = c.lines()
  t.match(line, { ...rec, worker: 2, generation: 3, msg: 'exchange', service: 'sluice' })
  t.notMatch(JSON.stringify(line), CENSOR, 'nothing of it is mistaken for a credential')
})

t.test('SECRET_KEYS are lower case (they are compared lower-cased)', async (t) => {
  for (const k of SECRET_KEYS) t.equal(k, k.toLowerCase(), k)
})

t.test('a string field over FIELD_MAX_CHARS keeps its first characters and a truncation marker', async (t) => {
  const c = capture()
  const model = 'm'.repeat(1_860_000)
  // One long field a line (several would be re-cut to fit the line cap: the next test).
  c.log.info({ model, route: 'chat' }, 'exchange')
  c.log.child({ sessionId: 's'.repeat(FIELD_MAX_CHARS + 1) }).info('child')
  c.log.info({ nested: { list: ['x'.repeat(FIELD_MAX_CHARS + 10), 'short'] } }, 'nested')
  c.log.info({ ok: 'y'.repeat(FIELD_MAX_CHARS) }, 'at the cap')
  c.log.error({ err: new Error('e'.repeat(5000)) }, 'failed')
  const [line, child, nested, whole, err] = c.lines()
  t.equal(line.model, 'm'.repeat(FIELD_MAX_CHARS) + `…[truncated ${1_860_000 - FIELD_MAX_CHARS} chars]`)
  t.equal(line.route, 'chat')
  t.equal(line.lineTruncated, undefined, 'the field cap alone was enough')
  t.equal(child.sessionId, 's'.repeat(FIELD_MAX_CHARS) + '…[truncated 1 chars]', 'child bindings too')
  t.same((nested.nested as { list: string[] }).list, ['x'.repeat(FIELD_MAX_CHARS) + '…[truncated 10 chars]', 'short'], 'at any depth')
  t.equal(whole.ok, 'y'.repeat(FIELD_MAX_CHARS), 'a string of exactly the cap is whole')
  const e = err.err as Record<string, string>
  t.equal(e.type, 'Error')
  t.match(e.message, /^e+…\[truncated \d+ chars\]$/, 'an error\'s message')
  t.equal(truncate('ab\u{1f600}cd', 3), 'ab…[truncated 4 chars]', 'a surrogate pair is never split')
})

t.test('every line fits LINE_MAX_BYTES, newline included, and says when it was re-cut', async (t) => {
  const c = capture()
  const many: Record<string, string> = {}
  for (let i = 0; i < 40; i++) many[`f${i}`] = '\u00e9'.repeat(FIELD_MAX_CHARS) // 2 bytes each: 2 KiB a field
  c.log.info({ exchangeId: 'id-1', ...many }, 'exchange')
  const huge: Record<string, number> = {}
  for (let i = 0; i < 2000; i++) huge[`k${i}`] = i
  c.log.info({ exchangeId: 'id-2', huge }, 'exchange')
  c.log.info({ exchangeId: 'id-3' }, 'x'.repeat(100_000))
  c.log.info({ exchangeId: 'id-4', small: true }, 'exchange')
  const raw = c.text().split('\n').filter((l) => l !== '')
  t.equal(raw.length, 4, 'one line each')
  for (const l of raw) t.ok(Buffer.byteLength(l) + 1 <= LINE_MAX_BYTES, `${Buffer.byteLength(l) + 1} bytes`)
  const [a, b, m, d] = c.lines()
  t.equal(a.exchangeId, 'id-1')
  t.equal(a.msg, 'exchange')
  t.ok((a.lineTruncated as number) > LINE_MAX_BYTES, 're-cut lines say how long they were')
  t.match(a.f0, /^\u00e9+…\[truncated \d+ chars\]$/)
  t.equal(b.exchangeId, 'id-2', 'too many fields: the first ones are kept')
  t.ok((b.lineTruncated as number) > LINE_MAX_BYTES)
  t.match(m.msg, /^x+…\[truncated \d+ chars\]$/, 'a long message is cut too')
  t.equal(d.lineTruncated, undefined, 'a short line is untouched')
  t.equal(capLine('{"a":1}\n'), '{"a":1}\n')
})

t.test('lineWriter writes, byte for byte, the line logger.info(rec, msg) writes', async (t) => {
  const base = {
    exchangeId: '3f0c6a4e-3a7e-4c55-9f5e-2b8b7d1c9e10', runId: null, route: 'chat', keyName: 'test', sessionId: 's1', mode: 'blocking',
    laneQueued: false, laneMs: 0, model: 'gpt-4o-mini', provider: 'sim-chat', stream: true, code: 'ok', status: 200, queued: false,
    queueMs: 0.125, ttfbMs: null, totalMs: 12.25, bytesIn: 120, bytesOut: 4096, frames: 12,
    usage: { inputTokens: 10, outputTokens: 20 }, partial: false, evidence: true, traceId: null, releaseMs: 13.5,
    translated: 'openai-responses->anthropic', droppedTools: ['web_search', 'code_interpreter'], continuation: { turns: 3, stored: true, chain: ['a', 'b'] },
  }
  const cases: Array<[string, Record<string, unknown>]> = [
    ['a whole record', base],
    ['odd strings', { ...base, model: 'quote " backslash \\ tab \t nl \n nul \u0000 é 日本 🙂', sessionId: 'x'.repeat(100) + '"' }],
    ['a long field, cut', { ...base, runId: 'r'.repeat(FIELD_MAX_CHARS * 2) }],
    ['a line over LINE_MAX_BYTES, re-cut', { ...base, runId: 'a'.repeat(1000), sessionId: 'b'.repeat(1000), model: 'c'.repeat(1000), provider: 'd'.repeat(1000), keyName: 'e'.repeat(1000) }],
    ['a credential-named key deep inside, scrubbed', { ...base, usage: { apiKey: SECRET, nested: { authorization: SECRET } } }],
    ['undefined and non-finite values', { ...base, ttfbMs: undefined, laneMs: Number.NaN, queueMs: Number.POSITIVE_INFINITY }],
    ['no fields', {}],
  ]
  for (const [name, rec] of cases) {
    const viaPino = capture()
    const viaLine = capture()
    viaPino.log.child({ worker: 2, generation: 3 }).info(rec, 'exchange')
    lineWriter(viaLine.log.child({ worker: 2, generation: 3 }), 'exchange')(rec)
    const line = viaLine.text()
    const untimed = (l: string): string => l.replace(/"time":"[^"]*"/, '"time":"T"')
    t.equal(line.split('\n').length, 2, `${name}: one line`)
    t.doesNotThrow(() => viaLine.lines(), `${name}: JSON`)
    t.equal(untimed(line), untimed(viaPino.text()), `${name}: the same bytes`)
    t.ok(Buffer.byteLength(line) <= LINE_MAX_BYTES, `${name}: within LINE_MAX_BYTES`)
    t.notOk(line.includes(SECRET), `${name}: no secret`)
  }
  // A level above info writes nothing, as logger.info would.
  const quiet: string[] = []
  const q = createLogger('warn', { write: (s: string) => { quiet.push(s) } })
  lineWriter(q, 'exchange')(base)
  q.level = 'info'
  lineWriter(q, 'exchange')(base)
  t.equal(quiet.length, 1, 'written once the level allows it')
})

t.test('isoAt is toISOString: across second boundaries, going back in time, before 1970, at random', async (t) => {
  const times: number[] = []
  for (let ms = 1_764_000_000_990; ms < 1_764_000_001_015; ms++) times.push(ms) // across a second
  times.push(1_764_000_001_500, 1_764_000_000_001, 1_764_000_001_002) // back, then forward again
  times.push(0, 1, 999, 1000, -1, -999, -1000, -1001, -86_400_001) // the epoch, and before it
  for (let i = 0; i < 5000; i++) times.push(Math.floor(Math.random() * 4_102_444_800_000)) // 1970-2100
  const wrong = times.filter((ms) => isoAt(ms) !== new Date(ms).toISOString())
  t.same(wrong.map((ms) => [ms, isoAt(ms), new Date(ms).toISOString()]), [], 'every time formats as toISOString does')
  const before = Date.now()
  const field = isoTime()
  const after = Date.now()
  const m = /^,"time":"(.+)"$/.exec(field)
  t.ok(m !== null, 'the field pino.stdTimeFunctions.isoTime writes, in its form')
  const at = Date.parse(m![1])
  t.ok(at >= before && at <= after, 'and now')
})
