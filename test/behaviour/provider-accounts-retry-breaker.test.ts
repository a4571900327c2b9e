// A provider with several accounts, behind the real gateway, against a tiny real node:http
// provider that answers per account (told apart by the key it receives): a burst spreads
// over the accounts, a session sticks to its account, a 429 cools one account down and the
// traffic moves to the other, every account cooling is provider_rate_limited with the
// soonest retry, a reset or a 503 before the first byte is retried on the other account with
// the very same body bytes, a failure after the first byte is never retried, and the circuit
// breaker opens, lets one probe through and closes. The ledger is idle after everything.

import t from 'tap'
import type { Server, ServerResponse } from 'node:http'
import { request } from 'undici'
import { verifyRecord } from '../../src/sse/sign.ts'
import { KEY, SIGNING_KEY } from '../helpers/exchange.ts'
import { sha256Hex } from '../../src/config/load.ts'
import { startGateway, until, waitIdle, type Gateway } from '../helpers/gateway.ts'
import { startUpstream } from '../helpers/upstream.ts'

type Behaviour =
  | { kind: 'ok'; delayMs?: number }
  | { kind: 'status'; status: number; retryAfter?: string }
  | { kind: 'reset' }
  | { kind: 'cut' }

interface Hit { account: string; body: Buffer; at: number }

/** Keys per account: `<provider>-<account>`; the upstream maps a received key back to it. */
const PROVIDERS = ['spread', 'affinity', 'cool', 'allcool', 'retry', 'commit', 'breaker'] as const
const ACCOUNTS = ['a', 'b'] as const
const env: Record<string, string> = { SLUICE_SIGNING_KEY: SIGNING_KEY }
const keyOf = new Map<string, string>()
for (const p of PROVIDERS) {
  for (const a of ACCOUNTS) {
    const v = `KEY_${p.toUpperCase()}_${a.toUpperCase()}`
    env[v] = `sk-up-${p}-${a}-0123456789`
    keyOf.set(env[v], `${p}-${a}`)
  }
}

const behaviour = new Map<string, Behaviour>()
const hits: Hit[] = []
const hitsOf = (p: string): Hit[] => hits.filter((h) => h.account.startsWith(`${p}-`))

function chatOk (account: string): string {
  return JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion', created: 0, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: `from ${account}` }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } })
}
const chunk = (text: string): string => `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 0, model: 'm', choices: [{ index: 0, delta: { content: text }, finish_reason: null }] })}\n\n`

function serve (account: string, b: Behaviour, res: ServerResponse): void {
  switch (b.kind) {
    case 'ok':
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(chatOk(account))
      }, b.delayMs ?? 0)
      return
    case 'status':
      res.writeHead(b.status, { 'content-type': 'application/json', ...(b.retryAfter ? { 'retry-after': b.retryAfter } : {}) })
      res.end(JSON.stringify({ error: { message: `status ${b.status} from ${account}`, type: b.status === 429 ? 'rate_limit_error' : 'server_error' } }))
      return
    case 'reset':
      res.socket?.destroy()
      return
    case 'cut':
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(chunk('one '))
      res.write(chunk('two '))
      setTimeout(() => res.socket?.destroy(), 50)
  }
}

let upstream: Server
let gw: Gateway
let url: string

t.before(async () => {
  const up = await startUpstream((req, body, res) => {
    const key = String(req.headers.authorization ?? '').replace(/^Bearer /, '')
    const account = keyOf.get(key) ?? 'unknown'
    hits.push({ account, body, at: Date.now() })
    serve(account, behaviour.get(account) ?? { kind: 'ok' }, res)
  })
  upstream = up.server
  const base = up.url
  gw = await startGateway({
    workers: 2,
    keys: [{ name: 'test', sha256: sha256Hex(KEY), models: ['*'] }],
    upstream: { retry: { attempts: 2, baseMs: 1, maxMs: 5, totalMs: 5000 }, breaker: { failureThreshold: 3, openMs: 1000 } },
    providers: PROVIDERS.map((p): Record<string, unknown> => ({
      name: p,
      protocol: 'openai-chat',
      baseUrl: base,
      models: [`${p}-*`],
      accounts: ACCOUNTS.map((a) => ({ name: a, apiKeyEnv: `KEY_${p.toUpperCase()}_${a.toUpperCase()}` })),
    })).concat([{
      // Nothing listens on port 1: every attempt is a connection failure.
      name: 'dead', protocol: 'openai-chat', baseUrl: 'http://127.0.0.1:1', models: ['dead-*'],
      accounts: ACCOUNTS.map((a) => ({ name: a, apiKeyEnv: 'KEY_RETRY_A' })),
    }]),
  }, { env })
  url = `http://127.0.0.1:${gw.port}`
})
t.teardown(async () => {
  await gw?.stop()
  await new Promise((resolve) => upstream?.close(resolve))
})

async function chat (model: string, opts: { session?: string; stream?: boolean; text?: string } = {}) {
  const res = await request(url + '/v1/chat/completions', {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...(opts.session ? { 'x-session-id': opts.session } : {}) },
    body: JSON.stringify({ model, stream: opts.stream === true, messages: [{ role: 'user', content: opts.text ?? 'hello' }] }),
  })
  const body = Buffer.from(await res.body.arrayBuffer()).toString('utf8')
  return { status: res.statusCode, headers: res.headers, body }
}

const metric = async (name: string): Promise<number> => (await gw.metrics()).get(name) ?? NaN

t.test('a synchronised burst spreads over the accounts', async (t) => {
  behaviour.set('spread-a', { kind: 'ok', delayMs: 400 })
  behaviour.set('spread-b', { kind: 'ok', delayMs: 400 })
  const rs = await Promise.all(Array.from({ length: 16 }, (_, i) => chat('spread-1', { session: `burst-${i}` })))
  t.same(rs.map((r) => r.status), new Array(16).fill(200), 'every exchange answered')
  const a = hitsOf('spread').filter((h) => h.account === 'spread-a').length
  const b = hitsOf('spread').filter((h) => h.account === 'spread-b').length
  t.equal(a + b, 16, 'each exchange reached the provider once')
  t.ok(Math.abs(a - b) <= 1, `spread within one of even across 2 workers: a=${a} b=${b}`)
  t.equal(await metric('sluice_provider_account_selections_total{provider="spread",account="a"}'), a, 'the selections metric counts them')
  t.same(await waitIdle(gw), {}, 'idle')
})

t.test('a session sticks to the account that served it', async (t) => {
  // All idle and equal: the first selection takes the first account. Make it the slower one,
  // so least-loaded (first-byte latency counts) would now prefer the other.
  behaviour.set('affinity-a', { kind: 'ok', delayMs: 300 })
  t.equal((await chat('affinity-1', { session: 'sticky' })).status, 200)
  t.same(hitsOf('affinity').map((h) => h.account), ['affinity-a'])
  const fresh = await chat('affinity-1', { session: 'newcomer' })
  t.equal(fresh.status, 200)
  t.equal(hitsOf('affinity')[1].account, 'affinity-b', 'a new session goes to the cheaper account')
  for (let i = 0; i < 3; i++) t.equal((await chat('affinity-1', { session: 'sticky' })).status, 200)
  t.same(hitsOf('affinity').slice(2).map((h) => h.account), ['affinity-a', 'affinity-a', 'affinity-a'], 'the session stays on the account that served it')
  t.equal((await chat('affinity-1', { session: 'newcomer' })).status, 200)
  t.equal(hitsOf('affinity').at(-1)!.account, 'affinity-b', 'and so does the other session')
  t.same(await waitIdle(gw), {}, 'idle')
})

t.test('a 429 cools that account down and the traffic moves to the other', async (t) => {
  const before = await metric('sluice_retries_total{reason="rate_limited"}')
  behaviour.set('cool-a', { kind: 'status', status: 429, retryAfter: '30' })
  const r = await chat('cool-1')
  t.equal(r.status, 200, 'answered by the other account')
  t.match(r.body, /from cool-b/)
  t.same(hitsOf('cool').map((h) => h.account), ['cool-a', 'cool-b'], 'one 429, then the retry on the free account')
  t.equal(await metric('sluice_retries_total{reason="rate_limited"}'), before + 1, 'the retry is counted by reason')
  behaviour.set('cool-a', { kind: 'ok' })
  for (let i = 0; i < 4; i++) t.equal((await chat('cool-1', { session: `c${i}` })).status, 200)
  t.same(hitsOf('cool').slice(2).map((h) => h.account), ['cool-b', 'cool-b', 'cool-b', 'cool-b'], 'the cooling account gets nothing for its Retry-After')
  t.ok(await metric('sluice_provider_account_cooldown_seconds{provider="cool",account="a"}') > 25, 'its cooldown is on /metrics')
  t.same(await waitIdle(gw), {}, 'idle')
})

t.test('every account cooling down: provider_rate_limited with the soonest retry, never a local code', async (t) => {
  behaviour.set('allcool-a', { kind: 'status', status: 429, retryAfter: '40' })
  behaviour.set('allcool-b', { kind: 'status', status: 429, retryAfter: '20' })
  const r = await chat('allcool-1')
  t.equal(r.status, 429)
  const j = JSON.parse(r.body) as { code: string; retryAfterSeconds: number; record: { side: string } }
  t.equal(j.code, 'provider_rate_limited')
  t.equal(j.record.side, 'provider', 'the provider\'s side')
  t.ok(Number(r.headers['retry-after']) <= 20 && Number(r.headers['retry-after']) >= 19, `the soonest account's retry: ${String(r.headers['retry-after'])}`)
  t.equal(hitsOf('allcool').length, 2, 'both accounts were asked once')
  const again = await chat('allcool-1')
  t.equal(again.status, 429)
  t.equal((JSON.parse(again.body) as { code: string }).code, 'provider_rate_limited', 'refused while every account cools down')
  t.ok(Number(again.headers['retry-after']) <= 20, 'with the soonest retry time')
  t.equal(hitsOf('allcool').length, 2, 'without asking the provider')
  t.same(await waitIdle(gw), {}, 'idle')
})

t.test('a reset or a 503 before the first byte is retried on the other account, with the same bytes', async (t) => {
  const resets = await metric('sluice_retries_total{reason="reset"}')
  const statuses = await metric('sluice_retries_total{reason="status"}')
  behaviour.set('retry-a', { kind: 'reset' })
  const text = `replay me exactly: ${'é∑'.repeat(500)}`
  const r1 = await chat('retry-1', { text })
  t.equal(r1.status, 200, 'a reset on one account, answered by the other')
  t.match(r1.body, /from retry-b/)
  const h1 = hitsOf('retry')
  t.same(h1.map((h) => h.account), ['retry-a', 'retry-b'])
  t.ok(h1[0].body.equals(h1[1].body), 'the replayed body is byte-identical')
  t.ok(h1[0].body.toString('utf8').includes(text), 'and it is the client\'s body')
  t.equal(await metric('sluice_retries_total{reason="reset"}'), resets + 1, 'counted as a reset')
  // Account a failed just now (its failure EWMA): b is chosen first. b answers 503, a serves.
  behaviour.set('retry-a', { kind: 'ok' })
  behaviour.set('retry-b', { kind: 'status', status: 503 })
  hits.length = 0
  const r2 = await chat('retry-1', { session: 'r2' })
  t.equal(r2.status, 200, 'a 503 on one account, answered by the other')
  const h2 = hitsOf('retry')
  t.same(h2.map((h) => h.account), ['retry-b', 'retry-a'], 'recent failures steer the choice; the retry goes to the other account')
  t.ok(h2.length === 2 && h2[0].body.equals(h2[1].body), 'byte-identical again')
  t.equal(await metric('sluice_retries_total{reason="status"}'), statuses + 1, 'counted as a status retry')
  behaviour.set('retry-a', { kind: 'status', status: 503 })
  behaviour.set('retry-b', { kind: 'status', status: 503 })
  hits.length = 0
  const r3 = await chat('retry-1', { session: 'r3' })
  t.equal(r3.status, 502, 'both accounts fail: the provider\'s failure')
  t.equal((JSON.parse(r3.body) as { code: string }).code, 'provider_unavailable')
  t.equal(hitsOf('retry').length, 2, 'one attempt per account, never the same one twice (sameAccount: false)')
  t.same(await waitIdle(gw), {}, 'idle')
})

t.test('a connection failure is retried on the other account, then refused as the provider\'s', async (t) => {
  const before = await metric('sluice_retries_total{reason="connect"}')
  const r = await chat('dead-1')
  t.equal(r.status, 502)
  t.equal((JSON.parse(r.body) as { code: string }).code, 'provider_unavailable')
  t.equal(await metric('sluice_retries_total{reason="connect"}'), before + 1, 'one retry, on the other account')
  t.equal(await metric('sluice_provider_account_selections_total{provider="dead",account="a"}') + await metric('sluice_provider_account_selections_total{provider="dead",account="b"}'), 2, 'each account tried once')
  t.same(await waitIdle(gw), {}, 'idle')
})

t.test('a failure after the first downstream byte is never retried', async (t) => {
  behaviour.set('commit-a', { kind: 'cut' })
  behaviour.set('commit-b', { kind: 'cut' })
  const r = await chat('commit-1', { stream: true })
  t.equal(r.status, 200, 'the stream had started')
  t.match(r.body, /one /, 'the client saw the first bytes')
  const frames = [...r.body.matchAll(/^data: (.*)$/gm)].map((m) => m[1]).filter((d) => d !== '[DONE]')
  const tail = JSON.parse(frames.at(-1)!) as { error: { code: string; sluice: { record: Parameters<typeof verifyRecord>[0]; signature: string } } }
  t.equal(tail.error.code, 'provider_unavailable', 'a failure tail')
  t.ok(verifyRecord(tail.error.sluice.record, tail.error.sluice.signature, Buffer.from(SIGNING_KEY)), 'signed')
  t.equal(hitsOf('commit').length, 1, 'the provider saw exactly one request')
  t.equal(await metric('sluice_retries_after_commit_total'), 0, 'no retry after a first byte')
  t.same(await waitIdle(gw), {}, 'idle')
})

t.test('the circuit breaker opens, lets exactly one probe through, and closes', async (t) => {
  const state = () => metric('sluice_circuit_state{provider="breaker",model="breaker-*"}')
  t.equal(await state(), 0, 'closed')
  behaviour.set('breaker-a', { kind: 'status', status: 503 })
  behaviour.set('breaker-b', { kind: 'status', status: 503 })
  // 2 failures (a, then the retry on b), then the 3rd opens it: the retry stops there.
  t.equal((await chat('breaker-1', { session: 'x1' })).status, 502)
  t.equal((await chat('breaker-1', { session: 'x2' })).status, 502)
  t.equal(hitsOf('breaker').length, 3, 'the retry stopped at the open breaker')
  t.equal(await state(), 1, 'open')
  const fast = await chat('breaker-1')
  const fj = JSON.parse(fast.body) as { code: string; reason: string; retryAfterSeconds: number }
  t.equal(fast.status, 502)
  t.equal(fj.code, 'provider_unavailable', 'refused fast as the provider\'s unavailability')
  t.equal(fj.reason, 'circuit_open')
  t.ok(Number(fast.headers['retry-after']) >= 1, 'with a retry time')
  t.equal(hitsOf('breaker').length, 3, 'without asking the provider')
  // Half-open: after openMs one probe goes through; a concurrent exchange is refused.
  await new Promise((resolve) => setTimeout(resolve, 1100))
  behaviour.set('breaker-a', { kind: 'ok', delayMs: 400 })
  behaviour.set('breaker-b', { kind: 'ok', delayMs: 400 })
  const probe = chat('breaker-1', { session: 'p' })
  await until(() => hitsOf('breaker').length === 4, 'the probe reached the provider')
  t.equal(await state(), 2, 'half-open while the probe is out')
  const second = await chat('breaker-1', { session: 'q' })
  t.equal(second.status, 502, 'a second exchange while the probe is out is refused')
  t.equal((JSON.parse(second.body) as { reason: string }).reason, 'circuit_open')
  t.equal((await probe).status, 200, 'the probe succeeded')
  t.equal(await state(), 0, 'closed again')
  t.equal(hitsOf('breaker').length, 4, 'exactly one probe')
  t.equal(await metric('sluice_circuit_transitions_total{provider="breaker",model="breaker-*"}'), 3, 'closed -> open -> half-open -> closed')
  t.equal((await chat('breaker-1')).status, 200, 'traffic flows')
  const lines = gw.logs.map((l) => { try { return JSON.parse(l) as Record<string, unknown> } catch { return null } }).filter((j) => j?.event === 'circuit_breaker')
  t.same(lines.map((j) => `${String(j!.from)}->${String(j!.to)}`), ['closed->open', 'open->half-open', 'half-open->closed'], 'every state change logged, once')
  t.same(await waitIdle(gw), {}, 'idle')
})

t.test('after everything: no retry after a commit, the ledger idle', async (t) => {
  t.equal(await metric('sluice_retries_after_commit_total'), 0)
  t.equal(await metric('sluice_provider_in_flight'), 0)
  t.same(await waitIdle(gw), {}, 'idle')
})
