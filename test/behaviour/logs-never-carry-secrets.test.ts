// One gateway (2 workers), every path a caller can reach — successes on every route, each
// refusal, each provider fault of the sim, a hang-up mid-stream, non-blocking mode, JSON-RPC,
// a worker's death and a drain — with distinctive secrets in every place a caller or the
// operator puts one. After the gateway has drained and exited, every line it wrote (stdout and
// stderr) is scanned for each secret; stdout is JSON lines only; each exchange ended with
// exactly one "exchange" line carrying its figures; the workers' lifecycle is logged.

import t from 'tap'
import { once } from 'node:events'
import { request } from 'undici'
import { sha256Hex } from '../../src/config/load.ts'
import { errorCodes } from '../../src/errors.ts'
import { FAULTS } from '../../src/sim/directive.ts'
import { KEY, PROVIDER_KEY, SIGNING_KEY, chatBody, messagesBody, responsesBody, simProvidersNoTranslation, startRig, type Rig } from '../helpers/exchange.ts'
import { clientOnRow, until } from '../helpers/gateway.ts'

const WRONG_KEY = 'sk-wrong-but-secret-looking-7f3a9c2e1b04d5'
const WRONG_X_API_KEY = 'sk-ant-wrong-x-api-key-55aa66bb77cc'
const X_API_KEY_SECRET = 'sk-extra-x-api-key-beside-bearer-0d1e2f'
const PINNED = 'sk-pinned-secret-to-gpt5-only-9e8d7c'
const LIMITED = 'sk-limited-secret-one-turn-4b3a2f'
const COOKIE_SECRET = 'cookie-secret-d41d8cd98f00b204'
const PROXY_SECRET = 'proxy-secret-e3b0c44298fc1c14'

const SECRETS: Record<string, string> = {
  'gateway key': KEY,
  'provider key': PROVIDER_KEY,
  'signing key': SIGNING_KEY,
  'signing key, base64 (as the workers get it)': Buffer.from(SIGNING_KEY, 'utf8').toString('base64'),
  'wrong key': WRONG_KEY,
  'wrong x-api-key': WRONG_X_API_KEY,
  'x-api-key beside a bearer key': X_API_KEY_SECRET,
  'pinned key': PINNED,
  'limited key': LIMITED,
  cookie: COOKIE_SECRET,
  'proxy-authorization': PROXY_SECRET,
  'gateway key hash (config)': sha256Hex(KEY),
  'pinned key hash (config)': sha256Hex(PINNED),
}

/** Sent with (almost) every request: credentials that are not the gateway key. */
const EXTRA = { cookie: `sid=${COOKIE_SECRET}; theme=dark`, 'proxy-authorization': `Basic ${PROXY_SECRET}`, 'x-api-key': X_API_KEY_SECRET }
const AUTH = { authorization: `Bearer ${KEY}`, ...EXTRA }

/** run id -> the codes of the exchange lines it must produce (empty: none at all). */
const expected = new Map<string, string[]>()
let seq = 0
function run (name: string, ...codes: string[]): string {
  const id = `logs-${++seq}-${name}`
  expected.set(id, codes)
  return id
}
/** A fault's code is checked against the catalogue, not pinned here (exchange-faults pins it). */
const ANY_FAILURE = '*failure'

interface Answer { status: number; headers: Record<string, string | string[] | undefined>; text: string; json: Record<string, unknown> }

let rig: Rig
t.before(async () => {
  rig = await startRig({
    workers: 2,
    // The protocol_mismatch case needs a provider that does not translate.
    providers: simProvidersNoTranslation,
    limits: { maxBodyBytes: 8192, maxJsonDepth: 16, maxJsonNodes: 2000, maxPendingPromptsPerSession: 1, maxActiveExchanges: 8, maxQueuedExchanges: 1, queueWaitMs: 1000, drainMs: 10_000 },
    upstream: { idleTimeoutMs: 400 },
    keys: [
      { name: 'test', sha256: sha256Hex(KEY), models: ['*'] },
      { name: 'pinned', sha256: sha256Hex(PINNED), models: ['gpt-5*'] },
      { name: 'limited', sha256: sha256Hex(LIMITED), models: ['*'], maxTurnsPerRun: 1 },
    ],
  })
})
t.teardown(async () => { await rig.gw.stop(); await rig.sim.close() })

async function post (path: string, body: unknown, headers: Record<string, string>, runId?: string): Promise<Answer> {
  const res = await request(rig.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers, ...(runId ? { 'x-sluice-run-id': runId } : {}) },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    // A fresh connection each time: both workers see traffic, and no request rides a socket
    // of the worker this test kills.
    reset: true,
  }).catch((err: Error) => { throw new Error(`${path} ${runId ?? ''}: ${err.message}`) })
  const text = await res.body.text()
  let json: Record<string, unknown> = {}
  try { json = JSON.parse(text) as Record<string, unknown> } catch {}
  return { status: res.statusCode, headers: res.headers, text, json }
}

/** Reads a session's events from `last` until `done` says so. */
async function events (session: string, last: unknown, done: (evs: Array<{ event: string; data: Record<string, unknown> }>) => boolean): Promise<Array<{ event: string; data: Record<string, unknown> }>> {
  const res = await request(`${rig.url}/v1/sessions/${session}/events`, { headers: { ...AUTH, 'last-event-id': String(last) }, reset: true })
  const evs: Array<{ event: string; data: Record<string, unknown> }> = []
  let buf = ''
  for await (const chunk of res.body) {
    buf += (chunk as Buffer).toString('utf8')
    let at
    while ((at = buf.indexOf('\n\n')) !== -1) {
      const frame = buf.slice(0, at)
      buf = buf.slice(at + 2)
      const event = /^event: (.*)$/m.exec(frame)?.[1]
      const data = frame.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n')
      if (event) evs.push({ event, data: JSON.parse(data) as Record<string, unknown> })
    }
    if (done(evs)) break
  }
  res.body.destroy()
  return evs
}

const ended = (id: unknown) => (evs: Array<{ event: string; data: Record<string, unknown> }>): boolean =>
  evs.some((e) => (e.event === 'turn_complete' || e.event === 'turn_error') && e.data.exchangeId === id)

t.test('every path, then every line', async (t) => {
  const ROUTES = [
    ['/v1/chat/completions', chatBody],
    ['/v1/responses', responsesBody],
    ['/v1/messages', messagesBody],
  ] as const

  // Successes: every route, streaming and not; Anthropic clients' x-api-key too.
  for (const [path, body] of ROUTES) {
    for (const stream of [false, true]) {
      // Chat streams carry usage only when asked to.
      const extra = stream ? { stream, ...(path === '/v1/chat/completions' ? { stream_options: { include_usage: true } } : {}) } : { stream }
      const r = await post(path, body('hello', extra), AUTH, run(`ok-${path}-${stream}`, 'ok'))
      t.equal(r.status, 200, `${path} stream=${stream}`)
    }
  }
  t.equal((await post('/v1/messages', messagesBody('as anthropic'), { ...EXTRA, 'x-api-key': KEY }, run('ok-x-api-key', 'ok'))).status, 200, 'x-api-key')
  t.equal((await post('/v1/messages/count_tokens', messagesBody('count'), AUTH, run('ok-count-tokens', 'ok'))).status, 200, 'count_tokens')

  // Refusals before the provider.
  const refusals: Array<[string, string, unknown, Record<string, string>, number]> = [
    ['unauthorized', '/v1/chat/completions', chatBody('x'), { ...EXTRA, authorization: `Bearer ${WRONG_KEY}` }, 401],
    ['unauthorized', '/v1/messages', messagesBody('x'), { ...EXTRA, 'x-api-key': WRONG_X_API_KEY }, 401],
    ['unauthorized', '/v1/responses', responsesBody('x'), { cookie: EXTRA.cookie }, 401],
    ['model_not_allowed', '/v1/chat/completions', chatBody('x'), { ...EXTRA, authorization: `Bearer ${PINNED}` }, 403],
    ['model_not_found', '/v1/chat/completions', { ...chatBody('x'), model: 'llama-9' }, AUTH, 404],
    ['protocol_mismatch', '/v1/chat/completions', { ...chatBody('x'), model: 'claude-opus-5-5' }, AUTH, 400],
    ['payload_too_large', '/v1/responses', responsesBody('x'.repeat(10_000)), AUTH, 413],
    ['invalid_json', '/v1/responses', `{"model":"gpt-5.5","input":"${KEY}",`, AUTH, 400],
    ['json_too_deep', '/v1/responses', { model: 'gpt-5.5', input: JSON.parse('['.repeat(20) + '"deep"' + ']'.repeat(20)) }, AUTH, 400],
    ['json_too_many_nodes', '/v1/responses', { model: 'gpt-5.5', input: new Array(2100).fill(0) }, AUTH, 400],
    ['invalid_request', '/v1/responses', { input: 'no model' }, AUTH, 400],
  ]
  for (const [code, path, body, headers, status] of refusals) {
    const r = await post(path, body, headers, run(`refused-${code}`, code))
    t.equal(r.json.code, code, `${code} on ${path}`)
    t.equal(r.status, status)
  }
  // Not an exchange: no exchange line.
  t.equal((await post('/v1/embeddings', { model: 'x' }, AUTH, run('not-an-exchange'))).json.code, 'not_found')

  // turn_limit: one turn per run for this key.
  const turns = run('turn-limit', 'ok', 'turn_limit')
  const limited = { ...EXTRA, authorization: `Bearer ${LIMITED}` }
  t.equal((await post('/v1/chat/completions', chatBody('turn 1'), limited, turns)).status, 200)
  t.equal((await post('/v1/chat/completions', chatBody('turn 2'), limited, turns)).json.code, 'turn_limit')

  // prompt_queue_full (blocking, x-session-id): the session's one pending slot is taken.
  const before = rig.requests.length
  const first = post('/v1/chat/completions', chatBody('slow\n#sim ttft=400'), { ...AUTH, 'x-session-id': 'full' }, run('session-first', 'ok'))
  await until(() => rig.requests.length > before, 'the first reached the provider')
  const full = await post('/v1/chat/completions', chatBody('second'), { ...AUTH, 'x-session-id': 'full' }, run('session-full', 'prompt_queue_full'))
  t.equal(full.json.code, 'prompt_queue_full')
  t.equal((await first).status, 200)

  // Capacity: hold every exchange permit, fill the one queue place, overflow it.
  const holds = Array.from({ length: 8 }, () => new AbortController())
  const held = await Promise.all(holds.map((ac) => request(`${rig.url}/_test/hold?ms=5000`, { signal: ac.signal, reset: true })))
  for (const h of held) h.body.on('error', () => {})
  await until(async () => (await rig.gw.metrics()).get('sluice_exchanges_active') === 8, 'every permit held')
  const timedOut = post('/v1/chat/completions', chatBody('waits'), AUTH, run('capacity-timeout', 'capacity_timeout'))
  await until(async () => (await rig.gw.metrics()).get('sluice_exchanges_queued') === 1, 'one queued')
  t.equal((await post('/v1/chat/completions', chatBody('overflows'), AUTH, run('capacity-exhausted', 'capacity_exhausted'))).json.code, 'capacity_exhausted')
  t.equal((await timedOut).json.code, 'capacity_timeout')
  for (const ac of holds) ac.abort()
  await until(async () => (await rig.gw.metrics()).get('sluice_exchanges_active') === 0, 'holds released')

  // Every fault of the simulated provider, on every route streaming, and on chat not.
  for (const fault of FAULTS) {
    const d = `x\n#sim fault=${fault} at=5 tokens=20${fault === 'oversize-frame' ? ' size=1200000' : ''}`
    for (const [path, body] of ROUTES) {
      const r = await post(path, body(d, { stream: true }), AUTH, run(`fault-${fault}-${path}`, ANY_FAILURE))
      t.notOk(r.text.includes(PROVIDER_KEY), `${fault} ${path}: the answer does not carry the provider key`)
    }
    // Not streaming, a failure after the head can only end the connection early; an oversize
    // "frame" is only a large JSON answer.
    // A JSON answer that is not JSON is provider_protocol_error (found by this test).
    const expect = fault === 'oversize-frame' ? 'ok' : fault === 'malformed-frame' ? 'provider_protocol_error' : ANY_FAILURE
    await post('/v1/chat/completions', chatBody(d), AUTH, run(`fault-${fault}-json`, expect)).catch(() => null)
  }

  // A caller that hangs up mid-stream.
  const ac = new AbortController()
  const res = await request(`${rig.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...AUTH, 'content-type': 'application/json', 'x-sluice-run-id': run('client-abort', 'client_closed') },
    body: JSON.stringify(chatBody('long\n#sim tokens=300 interval=10', { stream: true })),
    signal: ac.signal,
    reset: true,
  })
  res.body.on('error', () => {})
  await once(res.body, 'data')
  ac.abort()

  // Non-blocking mode: accepted, run in the background, its end on the events stream.
  const nb = await post('/v1/sessions/nb-ok/exchanges', { route: 'messages', body: messagesBody('in the background', { stream: true }) }, AUTH, run('nb-ok', 'ok'))
  t.equal(nb.status, 202)
  t.ok((await events('nb-ok', nb.json.lastEventId, ended(nb.json.exchangeId))).some((e) => e.event === 'turn_complete'), 'non-blocking: turn_complete')
  const nbSlow = await post('/v1/sessions/nb-full/exchanges', { route: 'chat', body: chatBody('slow\n#sim ttft=300') }, AUTH, run('nb-first', 'ok'))
  t.equal(nbSlow.status, 202)
  t.equal((await post('/v1/sessions/nb-full/exchanges', { route: 'chat', body: chatBody('refused') }, AUTH, run('nb-full', 'prompt_queue_full'))).json.code, 'prompt_queue_full', 'non-blocking prompt_queue_full: no exchange, one refusal line')
  t.equal((await post('/v1/sessions/nb-wrong/exchanges', { route: 'chat', body: chatBody('x') }, { ...EXTRA, authorization: `Bearer ${WRONG_KEY}` }, run('nb-unauthorized', 'unauthorized'))).status, 401)
  await events('nb-full', nbSlow.json.lastEventId, ended(nbSlow.json.exchangeId))
  const nbCancel = await post('/v1/sessions/nb-cancel/exchanges', { route: 'chat', body: chatBody('cancel me\n#sim ttft=5000') }, AUTH, run('nb-cancelled', 'exchange_cancelled'))
  const cancelled = events('nb-cancel', nbCancel.json.lastEventId, ended(nbCancel.json.exchangeId))
  t.equal((await post(`/v1/sessions/nb-cancel/exchanges/${String(nbCancel.json.exchangeId)}/cancel`, {}, AUTH)).json.cancelled, true)
  t.ok((await cancelled).some((e) => e.event === 'turn_error'), 'cancelled: turn_error')

  // JSON-RPC.
  const rpc = (method: string, params: Record<string, unknown>) => ({ jsonrpc: '2.0', id: ++seq, method, params })
  const ok = await post('/rpc', rpc('session/prompt', { sessionId: 'rpc-1', route: 'chat', body: chatBody('over rpc') }), AUTH, run('rpc-ok', 'ok'))
  t.equal((ok.json.result as Record<string, unknown> | undefined)?.status, 200, 'rpc: session/prompt')
  const rpcFault = await post('/rpc', rpc('session/prompt', { sessionId: 'rpc-2', route: 'responses', body: responsesBody('x\n#sim fault=status-503') }), AUTH, run('rpc-fault', 'provider_unavailable'))
  t.equal((rpcFault.json.error as { data?: { errorKind?: string } } | undefined)?.data?.errorKind, 'provider_unavailable', 'rpc: a provider fault')
  const rpcWrong = await post('/rpc', rpc('session/prompt', { sessionId: 'rpc-3', route: 'chat', body: chatBody('x') }), { ...EXTRA, authorization: `Bearer ${WRONG_KEY}` }, run('rpc-unauthorized', 'unauthorized'))
  t.equal((rpcWrong.json.error as { data?: { errorKind?: string } } | undefined)?.data?.errorKind, 'unauthorized', 'rpc: unauthorized, before any exchange')

  // A worker dies holding a blocking and a non-blocking exchange, both laned.
  const one = await clientOnRow(rig.gw.port, 1)
  const killer = await clientOnRow(rig.gw.port, 1)
  const sent = rig.requests.length
  const dying = one.request({
    method: 'POST',
    path: '/v1/chat/completions',
    headers: { ...AUTH, 'content-type': 'application/json', 'x-session-id': 'dying', 'x-sluice-run-id': run('dies-blocking') },
    body: JSON.stringify(chatBody('never ends\n#sim ttft=20000')),
  }).then((r) => r.body.text(), (err: Error) => err)
  const bg = await killer.request({
    method: 'POST',
    path: '/v1/sessions/dying-nb/exchanges',
    headers: { ...AUTH, 'content-type': 'application/json', 'x-sluice-run-id': run('dies-nonblocking') },
    body: JSON.stringify({ route: 'chat', body: chatBody('never ends\n#sim ttft=20000') }),
  })
  const bgId = (await bg.body.json() as { exchangeId: string }).exchangeId
  await until(() => rig.requests.length >= sent + 2, 'both reached the provider')
  await (await killer.request({ method: 'GET', path: '/_test/exit' })).body.text()
  t.ok((await dying) instanceof Error, 'the blocking caller lost its connection')
  await Promise.all([one.close().catch(() => {}), killer.close().catch(() => {})])
  await until(() => parsed().some((l) => l.msg === 'worker listening' && l.worker === 1 && l.generation === 2), 'worker 1 restarted', 10_000)
  const reborn = await clientOnRow(rig.gw.port, 1)
  const after = await reborn.request({ method: 'POST', path: '/v1/chat/completions', headers: { ...AUTH, 'content-type': 'application/json', 'x-sluice-run-id': run('after-restart', 'ok') }, body: JSON.stringify(chatBody('again')) })
  t.equal(after.statusCode, 200)
  await after.body.text()
  await reborn.close()

  // Drain with a blocking and a background exchange in flight: both finish, both log.
  const inflight = post('/v1/chat/completions', chatBody('finishing\n#sim ttft=300'), AUTH, run('drain-blocking', 'ok'))
  const drainBg = await post('/v1/sessions/nb-drain/exchanges', { route: 'responses', body: responsesBody('finishing\n#sim ttft=300') }, AUTH, run('drain-background', 'ok'))
  t.equal(drainBg.status, 202)
  await until(() => rig.requests.length >= sent + 5, 'both draining exchanges reached the provider')
  t.equal(await rig.gw.stop(), 0, 'a clean exit after the drain')
  t.equal((await inflight).status, 200, 'the in-flight exchange finished during the drain')

  // ---- every line ----
  const lines = rig.gw.logs
  t.comment(`${lines.length} lines written`)
  for (const [what, secret] of Object.entries(SECRETS)) {
    const leaks = lines.filter((l) => l.includes(secret))
    t.same(leaks, [], `the ${what} appears in no line`)
  }
  const stdout = lines.filter((l) => !l.startsWith('stderr: '))
  const bad = stdout.filter((l) => { try { return typeof JSON.parse(l) !== 'object' } catch { return true } })
  t.same(bad, [], 'every stdout line is one JSON object')
  const stderr = lines.filter((l) => l.startsWith('stderr: '))
  t.comment(`stderr: ${stderr.length === 0 ? '(empty)' : stderr.join('\n')}`)

  const all = parsed()
  const exchanges = all.filter((l) => l.msg === 'exchange')
  let total = 0
  for (const [runId, codes] of expected) {
    total += codes.length
    const mine = exchanges.filter((l) => l.runId === runId)
    t.equal(mine.length, codes.length, `${runId}: ${codes.length} exchange line(s)`)
    const got = mine.map((l) => l.code as string).sort()
    const want = [...codes].sort()
    if (want.every((c) => c === ANY_FAILURE)) t.ok(got.every((c) => c !== 'ok'), `${runId}: a failure (${got.join(', ')})`)
    else t.same(got, want, `${runId}: codes`)
  }
  t.equal(exchanges.length, total, 'no exchange line besides those')
  const catalogue = new Set<string>(errorCodes)
  for (const l of exchanges) {
    const what = `${String(l.runId)} ${String(l.code)}`
    t.ok(l.code === 'ok' || catalogue.has(l.code as string), `${what}: a catalogue code`)
    if (l.mode === 'blocking' || l.exchangeId !== null) t.ok(typeof l.exchangeId === 'string' && typeof l.route === 'string', `${what}: exchangeId, route`)
    else t.ok(l.mode === 'events' || l.mode === 'rpc', `${what}: refused before acceptance (no exchange id): a non-blocking or JSON-RPC request`)
    for (const f of ['totalMs', 'bytesIn', 'bytesOut', 'frames', 'queueMs', 'status', 'worker', 'generation']) t.type(l[f], 'number', `${what}: ${f}`)
    t.ok((l.totalMs as number) >= 0 && (l.bytesIn as number) >= 0 && (l.bytesOut as number) >= 0, `${what}: figures`)
    t.ok('usage' in l && 'ttfbMs' in l && 'evidence' in l, `${what}: usage, ttfbMs, evidence`)
    if (l.code === 'ok') {
      t.ok((l.bytesOut as number) > 0, `${what}: bytes out`)
      if (l.route !== 'count_tokens') t.ok(l.usage && typeof l.usage === 'object', `${what}: usage`)
    }
  }
  const line = (runId: string): Record<string, unknown> | undefined => exchanges.find((l) => l.runId === runId)
  const nbLine = exchanges.find((l) => l.exchangeId === nb.json.exchangeId)
  t.equal(nbLine?.mode, 'events', 'the non-blocking exchange\'s line, by its id')
  t.equal(line([...expected.keys()].find((k) => k.includes('rpc-ok'))!)?.mode, 'rpc', 'the JSON-RPC exchange\'s line')
  t.equal(line([...expected.keys()].find((k) => k.includes('after-restart'))!)?.generation, 2, 'the restarted worker logs with its new generation')

  // Lifecycle.
  const named = (msg: string) => all.filter((l) => l.msg === msg)
  t.equal(named('sluice ready').length, 1, 'ready')
  for (const [w, g] of [[1, 1], [2, 1], [1, 2]]) {
    t.ok(named('worker started').some((l) => l.worker === w && l.generation === g && typeof l.threadId === 'number'), `worker ${w} generation ${g} started`)
    t.ok(named('worker listening').some((l) => l.worker === w && l.generation === g), `worker ${w} generation ${g} listening`)
  }
  const death = named('worker exited').find((l) => l.worker === 1 && l.generation === 1)
  t.match(death, { level: 50, code: 3, reclaimed: { exchange: 2, lanes: 2 } }, 'the death: an error, with what was reclaimed')
  const lost = ((death?.reclaimed as Record<string, unknown> | undefined)?.lost ?? []) as Array<Record<string, unknown>>
  t.same(lost.map((e) => e.mode).sort(), ['blocking', 'events'], 'both lost exchanges listed')
  t.ok(lost.some((e) => e.exchangeId === bgId), 'the non-blocking one by its id')
  t.match(named('worker restart scheduled'), [{ worker: 1, generation: 1, backoffMs: Number }], 'the restart, with its backoff')
  t.equal(named('draining').length, 1, 'drain begins')
  t.match(named('drained'), [{ level: 30, active: 0, queued: 0 }], 'drain ends with nothing abandoned')
  t.same(named('worker drained').map((l) => l.worker).sort(), [1, 2], 'each worker drained')
  const stops = named('worker exited').filter((l) => l.level === 30)
  t.same(stops.map((l) => l.worker).sort(), [1, 2], 'each worker exited at the stop, at info')
  t.equal(named('stopped').length, 1, 'stopped')
  const order = ['draining', 'drained', 'stopped'].map((m) => all.findIndex((l) => l.msg === m))
  t.ok(order[0] < order[1] && order[1] < order[2], 'in order')
  const drainLines = ['drain-blocking', 'drain-background'].map((n) => line([...expected.keys()].find((k) => k.endsWith(n))!))
  t.ok(drainLines.every((l) => l && all.indexOf(l) < order[2]), 'the drained exchanges logged before the stop')
})

function parsed (): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = []
  for (const l of rig.gw.logs) {
    if (l.startsWith('stderr: ')) continue
    try { out.push(JSON.parse(l) as Record<string, unknown>) } catch {}
  }
  return out
}
