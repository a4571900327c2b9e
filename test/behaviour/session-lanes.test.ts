// Session lanes on the data path (DESIGN.md "Sessions", lifecycle step 2), against the real
// `sluice serve` and the simulated provider: one exchange of a session at a time, FIFO behind
// it, sessions independent; every header a CLI uses names a session; a failure or a caller
// that leaves never blocks the session's FIFO; everything back at idle after each test.
//
// Every request carries an `x-test-tag` header, which the gateway forwards, so the sim's
// request/end events say which request reached the upstream, and in which order.

import t, { type Test } from 'tap'
import { connect, type Socket } from 'node:net'
import { request } from 'undici'
import { sha256Hex } from '../../src/config/load.ts'
import { KEY, chatBody, messagesBody, startRig, type Rig } from '../helpers/exchange.ts'
import { until, waitIdle } from '../helpers/gateway.ts'
import { CHAT, LaneWatch, OUTCOMES, delta, type Lanes, type PostOpts, type Reply } from '../helpers/lanes.ts'

const OTHER_KEY = 'sk-second-gateway-key-9876543210'

let rig: Rig
let w: LaneWatch
t.before(async () => {
  rig = await startRig({
    workers: 2,
    keys: [
      { name: 'test', sha256: sha256Hex(KEY), models: ['*'] },
      { name: 'other', sha256: sha256Hex(OTHER_KEY), models: ['*'] },
    ],
  })
  w = new LaneWatch(rig)
})
t.teardown(() => rig?.close())

const post = (tag: string, sim: string, o: PostOpts = {}): Promise<Reply> => w.post(tag, sim, o)
const lanes = (): Promise<Lanes> => w.lanes()
const gauge = (name: string): Promise<number> => w.gauge(name)
const entered = (go: () => Promise<Reply>): Promise<[Promise<Reply>]> => w.entered(go)
const seen = (prefix: string): string[] => w.seen(prefix)
const outcomeOf = (tag: string): string | undefined => w.outcomeOf(tag)
const maxInFlight = (match: (tag: string) => boolean): number => w.maxInFlight(match)
const settled = (t: Test): Promise<void> => w.settled(t)

let n = 0
const sid = (what: string): string => `${what}-${process.pid}-${++n}`

/** An exchange written by hand: headers now, the body (or a hang-up) later. */
function rawRequest (headers: Record<string, string>, contentLength: number): Promise<{ socket: Socket; response: Promise<string> }> {
  return new Promise((resolve, reject) => {
    const socket = connect(rig.gw.port, '127.0.0.1', () => {
      const lines = [`POST ${CHAT} HTTP/1.1`, 'host: 127.0.0.1', `authorization: Bearer ${KEY}`, 'content-type: application/json',
        `content-length: ${contentLength}`, 'connection: close', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)]
      socket.write(lines.join('\r\n') + '\r\n\r\n')
      const chunks: Buffer[] = []
      const response = new Promise<string>((resolve) => {
        socket.on('data', (c: Buffer) => chunks.push(c))
        socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')))
      })
      resolve({ socket, response })
    })
    socket.on('error', () => {})
    socket.once('error', reject)
  })
}

t.test('FIFO within a session: one at a time at the provider, in arrival order', async (t) => {
  const s = sid('fifo')
  const before = await lanes()
  const replies: Array<Promise<Reply>> = []
  for (const i of [1, 2, 3]) {
    replies.push(...await entered(() => post(`fifo.${i}`, 'ttft=200', { session: { 'x-session-id': s } })))
    await new Promise((r) => setTimeout(r, 50))
  }
  for (const r of await Promise.all(replies)) t.equal(r.status, 200, r.text.slice(0, 120))
  t.same(seen('fifo.'), ['fifo.1', 'fifo.2', 'fifo.3'], 'the provider saw them in arrival order')
  t.equal(maxInFlight((tag) => tag.startsWith('fifo.')), 1, 'never two of the session at the provider: each starts after the previous ended')
  // Released once the HTTP responses have closed: count after idle.
  await settled(t)
  const d = delta(before, await lanes())
  t.equal(d.entered, 3)
  t.equal(d.released, 3)
  t.equal(d.refused_full, 0)
  t.comment(`queued behind the active one: ${d.queued}`)
})

t.test('parallel across sessions: 8 sessions x 3, each session serial, sessions overlap', async (t) => {
  const S = 8
  const ids = Array.from({ length: S }, (_, i) => sid(`par${i}`))
  const before = await lanes()
  const replies: Array<Promise<Reply>> = []
  // Three waves of one request per session, each wave counted into the lanes before the next
  // is sent, so each session's arrival order is known.
  for (let wave = 0; wave < 3; wave++) {
    const base = (await lanes()).entered
    for (let s = 0; s < S; s++) {
      const p = post(`par.${s}.${wave}`, 'ttft=200 tokens=5', { session: { 'x-session-id': ids[s] } })
      p.catch(() => {})
      replies.push(p)
    }
    await until(async () => (await lanes()).entered >= base + S, `wave ${wave} in the lanes`)
  }
  const results = await Promise.all(replies)
  t.equal(results.filter((r) => r.status === 200).length, S * 3, 'all succeed')
  for (let s = 0; s < S; s++) {
    t.same(seen(`par.${s}.`), [`par.${s}.0`, `par.${s}.1`, `par.${s}.2`], `session ${s}: in order`)
    t.equal(maxInFlight((tag) => tag.startsWith(`par.${s}.`)), 1, `session ${s}: one at a time`)
  }
  const overlap = maxInFlight((tag) => tag.startsWith('par.'))
  t.ok(overlap >= 4, `different sessions ran together (${overlap} at once at the provider)`)
  // Released once the HTTP responses have closed: count after idle.
  await settled(t)
  const d = delta(before, await lanes())
  t.equal(d.entered, S * 3)
  t.equal(d.released, S * 3)
  t.equal(d.refused_full, 0)
})

t.test('abort while queued in the lane: never reaches the provider, the next one runs', async (t) => {
  const s = sid('abq')
  const before = await lanes()
  const [a] = await entered(() => post('abq.a', 'ttft=1500', { session: { 'x-session-id': s } }))
  await until(() => seen('abq.a').length === 1, 'A at the provider')
  const ac = new AbortController()
  const [b] = await entered(() => post('abq.b', 'ttft=0', { session: { 'x-session-id': s }, signal: ac.signal }))
  const [c] = await entered(() => post('abq.c', 'ttft=0', { session: { 'x-session-id': s } }))
  t.equal(await gauge('sluice_session_queued'), 2, 'B and C queued behind A')
  ac.abort()
  t.ok(await b.then(() => null, (e: Error) => e) instanceof Error, 'the caller of B gave up')
  await until(async () => (await gauge('sluice_session_queued')) === 1, 'B out of the lane')
  t.equal(await gauge('sluice_session_pending'), 2, 'A and C still pending')
  t.equal((await a).status, 200, 'A finishes')
  t.equal((await c).status, 200, 'C runs after A')
  t.same(seen('abq.'), ['abq.a', 'abq.c'], 'B never reached the provider')
  t.equal(maxInFlight((tag) => tag.startsWith('abq.')), 1)
  // Released once the HTTP responses have closed: count after idle.
  await settled(t)
  const d = delta(before, await lanes())
  t.equal(d.entered, 3)
  t.equal(d.cancel, 1, 'B counted as a cancel of a queued entry')
  t.equal(d.cancel_after_promote, 0)
  t.equal(d.released, 2)
})

t.test('abort mid-stream of the active one: the queued one then runs', async (t) => {
  const s = sid('abm')
  const before = await lanes()
  const ac = new AbortController()
  const res = await request(rig.url + CHAT, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-test-tag': 'abm.a', 'x-session-id': s },
    body: JSON.stringify(chatBody('abm.a\n#sim tokens=400 interval=10', { stream: true })),
    signal: ac.signal,
  })
  t.equal(res.statusCode, 200)
  res.body.on('error', () => {})
  await new Promise<void>((resolve) => res.body.once('data', () => resolve()))
  const [b] = await entered(() => post('abm.b', 'ttft=0', { session: { 'x-session-id': s } }))
  t.equal(await gauge('sluice_session_queued'), 1, 'B queued behind the streaming A')
  t.same(seen('abm.'), ['abm.a'], 'B waits while A streams')
  ac.abort()
  t.equal((await b).status, 200, 'B runs once A\'s caller left')
  t.equal(outcomeOf('abm.a'), 'client-closed', 'the provider saw A\'s caller leave')
  t.same(seen('abm.'), ['abm.a', 'abm.b'])
  t.ok(w.goneSeen('abm.a'), 'the sim read the end of A\'s connection (what orders A\'s end before B\'s request)')
  t.equal(maxInFlight((tag) => tag.startsWith('abm.')), 1, 'B started after A ended at the provider')
  // Released once the HTTP responses have closed: count after idle.
  await settled(t)
  const d = delta(before, await lanes())
  t.equal(d.entered, 2)
  t.equal(d.released, 2, 'the aborted active exchange releases its entry')
  t.equal(d.cancel, 0)
})

t.test('a caller that hangs up right after its headers leaves nothing behind', async (t) => {
  const s = sid('hup')
  // Alone in the session, then behind an active exchange; hang-ups at a few points in time.
  const delays = [0, 0, 1, 5, 20, 50]
  for (const d of delays) {
    const { socket } = await rawRequest({ 'x-session-id': s, 'x-test-tag': `hup.alone.${d}` }, 64)
    if (d > 0) await new Promise((r) => setTimeout(r, d))
    socket.destroy()
  }
  await until(async () => Object.keys(await waitIdle(rig.gw, 1)).length === 0, 'idle after the hang-ups')
  const [a] = await entered(() => post('hup.a', 'ttft=800', { session: { 'x-session-id': s } }))
  for (const d of delays) {
    const { socket } = await rawRequest({ 'x-session-id': s, 'x-test-tag': `hup.behind.${d}` }, 64)
    if (d > 0) await new Promise((r) => setTimeout(r, d))
    socket.destroy()
  }
  t.equal((await a).status, 200, 'the active exchange is untouched')
  t.equal((await post('hup.after', 'ttft=0', { session: { 'x-session-id': s } })).status, 200, 'the session still runs')
  t.same(seen('hup.'), ['hup.a', 'hup.after'], 'no hung-up request reached the provider')
  await settled(t)
})

t.test('a failure never blocks the session\'s FIFO; each caller gets its own result', async (t) => {
  const cases: Array<[string, number, string]> = [
    ['fault=status-503', 502, 'provider_unavailable'],
    ['fault=reset-before-first-byte', 502, 'provider_unavailable'],
    ['fault=status-429', 429, 'provider_rate_limited'],
  ]
  for (const [fault, status, code] of cases) {
    const s = sid('fail')
    const tag = `fail.${fault}`
    const [a] = await entered(() => post(`${tag}.a`, `ttft=200 ${fault}`, { session: { 'x-session-id': s } }))
    const [b] = await entered(() => post(`${tag}.b`, 'ttft=0', { session: { 'x-session-id': s } }))
    const ra = await a
    t.equal(ra.status, status, `${fault}: the first caller gets its own failure`)
    t.equal(ra.json.code, code, `${fault}: code`)
    t.equal((await b).status, 200, `${fault}: the next one in the session still runs`)
    t.same(seen(`${tag}.`), [`${tag}.a`, `${tag}.b`], `${fault}: each reached the provider once, in order`)
    t.equal(maxInFlight((x) => x.startsWith(`${tag}.`)), 1)
  }

  // A fault after the first byte (signed failure tail), then the next one.
  const s = sid('fail')
  const cut = chatBody('fail.cut.a\n#sim ttft=100 tokens=20 interval=5 fault=cut-mid-stream', { stream: true })
  const [a] = await entered(() => post('fail.cut.a', '', { session: { 'x-session-id': s }, body: cut }))
  const [b] = await entered(() => post('fail.cut.b', 'ttft=0', { session: { 'x-session-id': s } }))
  const ra = await a
  t.equal(ra.status, 200, 'the stream had started')
  t.match(ra.text, /signature/, 'the cut stream ends with a signed failure tail')
  t.equal((await b).status, 200, 'the next one in the session still runs')
  t.same(seen('fail.cut.'), ['fail.cut.a', 'fail.cut.b'])
  t.equal(outcomeOf('fail.cut.a'), 'fault')

  // A local refusal while holding the lane (invalid JSON, sent after the next one queued).
  const s2 = sid('fail')
  const bad = '{"model": "gpt-4o-mini", "messages": ['
  const raw = await rawRequest({ 'x-session-id': s2, 'x-test-tag': 'fail.json.a' }, bad.length)
  await until(async () => (await gauge('sluice_session_active')) === 1, 'A holding the session (body unread)')
  const [qb] = await entered(() => post('fail.json.b', 'ttft=0', { session: { 'x-session-id': s2 } }))
  t.equal(await gauge('sluice_session_queued'), 1, 'B queued behind A')
  raw.socket.write(bad)
  const text = await raw.response
  t.match(text, /^HTTP\/1\.1 400 /, 'A gets its own refusal')
  t.match(text, /"code":"invalid_json"/)
  t.equal((await qb).status, 200, 'B runs')
  t.same(seen('fail.json.'), ['fail.json.b'], 'only B reached the provider')
  await settled(t)
})

t.test('session headers: each CLI header names the same lane; first present wins', async (t) => {
  const s = sid('hdr')
  const before = await lanes()
  // Codex's, Claude Code's and the generic header, one session id: one lane, FIFO.
  const [a] = await entered(() => post('hdr.codex', 'ttft=200', { session: { 'session-id': s } }))
  const [b] = await entered(() => post('hdr.claude', 'ttft=200', {
    session: { 'x-claude-code-session-id': s },
    path: '/v1/messages',
    body: messagesBody('hdr.claude\n#sim ttft=200'),
  }))
  const [c] = await entered(() => post('hdr.generic', 'ttft=200', { session: { 'x-session-id': s } }))
  for (const r of await Promise.all([a, b, c])) t.equal(r.status, 200, r.text.slice(0, 120))
  t.same(seen('hdr.'), ['hdr.codex', 'hdr.claude', 'hdr.generic'], 'one FIFO across the three header names')
  t.equal(maxInFlight((x) => x.startsWith('hdr.')), 1, 'one at a time')
  t.equal(delta(before, await lanes()).entered, 3)

  // x-session-id comes first: a request naming Q there and P in session-id is laned as Q.
  const p = sid('hdrP')
  const q = sid('hdrQ')
  const [e] = await entered(() => post('prec.p', 'ttft=300', { session: { 'session-id': p } }))
  const [f] = await entered(() => post('prec.q', 'ttft=300', { session: { 'x-session-id': q, 'session-id': p } }))
  for (const r of await Promise.all([e, f])) t.equal(r.status, 200)
  t.equal(maxInFlight((x) => x.startsWith('prec.')), 2, 'laned under x-session-id, so not behind P')
  await settled(t)
})

t.test('no session header: not laned, requests overlap', async (t) => {
  const before = await lanes()
  const rs = await Promise.all([post('none.1', 'ttft=300'), post('none.2', 'ttft=300')])
  for (const r of rs) t.equal(r.status, 200)
  t.equal(maxInFlight((x) => x.startsWith('none.')), 2, 'both at the provider at once')
  t.same(delta(before, await lanes()), Object.fromEntries(OUTCOMES.map((o) => [o, 0])), 'the lanes never saw them')
  await settled(t)
})

t.test('session id validation: 1 to 256 printable characters, else 400 invalid_request', async (t) => {
  const before = await lanes()
  const refused: Array<[string, Record<string, string>]> = [
    ['300 characters', { 'x-session-id': 'x'.repeat(300) }],
    ['257 characters', { 'session-id': 's'.repeat(257) }],
    ['empty', { 'x-claude-code-session-id': '' }],
    ['a tab inside', { 'x-session-id': 'a\tb' }],
  ]
  for (const [what, session] of refused) {
    const r = await post(`bad.${what}`, 'ttft=0', { session })
    t.equal(r.status, 400, `${what}: status`)
    t.equal(r.json.code, 'invalid_request', `${what}: code (${r.text.slice(0, 160)})`)
    t.notOk(r.headers['retry-after'], `${what}: no Retry-After`)
  }
  t.same(seen('bad.'), [], 'none reached the provider')
  t.equal(delta(before, await lanes()).entered, 0, 'none was counted into a lane')
  const ok = await post('good.256', 'ttft=0', { session: { 'x-session-id': 'y'.repeat(256) } })
  t.equal(ok.status, 200, '256 characters is a session id')
  const m = await rig.gw.metrics()
  t.ok((m.get('sluice_refusals_total{code="invalid_request"}') ?? 0) >= refused.length, 'counted as invalid_request refusals')
  await settled(t)
})

t.test('a session header given twice is refused, not merged into another id', async (t) => {
  // Node joins a repeated unknown header with ", ": `x-session-id: a` + `x-session-id: b` is
  // the one string "a, b" in req.headers, which would be laned as a third session. sessionIdOf
  // (worker/session-id.ts) counts the header in req.rawHeaders and refuses it.
  const s = sid('dup')
  const res = await request(rig.url + CHAT, {
    method: 'POST',
    headers: ['authorization', `Bearer ${KEY}`, 'content-type', 'application/json', 'x-test-tag', 'dup',
      'x-session-id', s, 'x-session-id', 'other'],
    body: JSON.stringify(chatBody('dup\n#sim ttft=0')),
  })
  const text = await res.body.text()
  t.equal(res.statusCode, 400, `refused (${text.slice(0, 160)})`)
  t.match(text, /"code":"invalid_request"/)
  t.same(seen('dup'), [], 'never reached the provider')
  await settled(t)
})

t.test('one session id under two gateway keys is two lanes', async (t) => {
  const s = sid('keys')
  const rs = await Promise.all([
    post('keys.test', 'ttft=300', { session: { 'x-session-id': s } }),
    post('keys.other', 'ttft=300', { session: { 'x-session-id': s }, key: OTHER_KEY }),
  ])
  for (const r of rs) t.equal(r.status, 200)
  t.equal(maxInFlight((x) => x.startsWith('keys.')), 2, 'both ran at once')
  // The control: the same key twice is one lane.
  const same = await Promise.all([
    post('same.1', 'ttft=300', { session: { 'x-session-id': s } }),
    post('same.2', 'ttft=300', { session: { 'x-session-id': s } }),
  ])
  for (const r of same) t.equal(r.status, 200)
  t.equal(maxInFlight((x) => x.startsWith('same.')), 1, 'one at a time under one key')
  t.equal(seen('same.').length, 2)
  await settled(t)
})
