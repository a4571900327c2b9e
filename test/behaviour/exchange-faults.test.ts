// Provider faults: before the first byte a signed JSON failure with its code; after it, the
// client protocol's own error event carrying a signed failure record, then a clean end.
// Never a retry, never a replay; the ledger back at idle after each.

import t from 'tap'
import OpenAI from 'openai'
import Anthropic from '@anthropic-ai/sdk'
import { verifyRecord, type FailureRecord } from '../../src/sse/sign.ts'
import { KEY, SIGNING_KEY, chatBody, messagesBody, responsesBody, exchangeLogLine, postToRig, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'

const key = Buffer.from(SIGNING_KEY, 'utf8')
let rig: Rig
t.before(async () => { rig = await startRig({ workers: 1, upstream: { idleTimeoutMs: 400 } }) })
t.teardown(() => rig.close())

const ROUTES = [
  ['/v1/chat/completions', (d: string) => chatBody(`go\n${d}`, { stream: true })],
  ['/v1/responses', (d: string) => responsesBody(`go\n${d}`, { stream: true })],
  ['/v1/messages', (d: string) => messagesBody(`go\n${d}`, { stream: true })],
] as const

const post = (path: string, body: unknown) => postToRig(rig, path, body)

/** Finds `{ record, signature }` anywhere in the last data frame of an SSE body. */
function signedTail (sse: string): { record: FailureRecord; signature: string } | null {
  const datas = [...sse.matchAll(/^data: (.*)$/gm)].map((m) => m[1]).filter((d) => d !== '[DONE]')
  const last = datas.at(-1)
  if (!last) return null
  const find = (v: unknown): { record: FailureRecord; signature: string } | null => {
    if (v && typeof v === 'object') {
      const o = v as Record<string, unknown>
      if (o.record && typeof o.signature === 'string') return o as unknown as { record: FailureRecord; signature: string }
      for (const x of Object.values(o)) { const f = find(x); if (f) return f }
    }
    return null
  }
  return find(JSON.parse(last))
}

t.test('faults before the first byte: signed JSON with the provider-side code', async (t) => {
  const cases: Array<[string, number, string]> = [
    ['fault=reset-before-first-byte', 502, 'provider_unavailable'],
    ['fault=status-503', 502, 'provider_unavailable'],
    ['fault=status-429', 429, 'provider_rate_limited'],
  ]
  for (const [path, mk] of ROUTES) {
    for (const [d, status, code] of cases) {
      const before = rig.requests.length
      const r = await post(path, mk(`#sim ${d}`))
      const j = JSON.parse(r.body.toString())
      t.equal(r.status, status, `${path} ${d}: status`)
      t.equal(j.code, code, `${path} ${d}: code`)
      t.equal(j.record.side, 'provider', 'signed as the provider\'s failure')
      t.ok(verifyRecord(j.record, j.signature, key), `${path} ${d}: signature verifies`)
      t.notOk(verifyRecord({ ...j.record, code: 'capacity_exhausted' }, j.signature, key), 'a tampered record does not verify')
      if (code === 'provider_rate_limited') t.equal(r.headers['retry-after'], '7', 'the provider\'s Retry-After is kept')
      t.equal(rig.requests.length - before, 1, `${path} ${d}: sent once, never retried`)
      t.same(await waitIdle(rig.gw), {}, 'idle')
    }
  }
})

t.test('faults after the first byte: exact prefix, then a signed tail in the client protocol', async (t) => {
  const cases: Array<[string, string]> = [
    ['fault=cut-mid-stream at=6 tokens=20', 'provider_unavailable'],
    ['fault=malformed-frame at=5 tokens=20', 'provider_protocol_error'],
    ['fault=oversize-frame at=5 tokens=20 size=1200000', 'provider_protocol_error'],
    ['fault=stall at=5 tokens=20', 'provider_timeout'],
  ]
  for (const [path, mk] of ROUTES) {
    for (const [d, code] of cases) {
      const before = rig.requests.length
      const r = await post(path, mk(`#sim ${d}`))
      const text = r.body.toString()
      t.equal(r.status, 200, `${path} ${d}: the stream had started`)
      const tail = signedTail(text)
      t.ok(tail, `${path} ${d}: ends with a signed tail`)
      if (!tail) continue
      t.equal(tail.record.code, code, `${path} ${d}: code`)
      t.ok(verifyRecord(tail.record, tail.signature, key), `${path} ${d}: signature verifies`)
      t.ok(tail.record.framesRelayed >= 4, `${path} ${d}: ${tail.record.framesRelayed} frames relayed before the failure`)
      t.equal(tail.record.partial, true)
      if (d.includes('malformed')) t.notMatch(text, /\{not json|"malformed/, 'the malformed frame never reached the client')
      if (d.includes('oversize')) t.ok(r.body.length < 1_200_000, 'the oversize frame was not relayed whole')
      t.equal(rig.requests.length - before, 1, 'never retried')
      t.same(await waitIdle(rig.gw), {}, 'idle')
    }
  }
})

t.test('the provider\'s own error event is relayed, then signed', async (t) => {
  for (const [path, mk] of ROUTES) {
    const r = await post(path, mk('#sim fault=error-event at=4 tokens=10'))
    const tail = signedTail(r.body.toString())
    t.ok(tail, `${path}: signed tail`)
    t.equal(tail?.record.side, 'provider')
    t.ok(tail && verifyRecord(tail.record, tail.signature, key))
    t.same(await waitIdle(rig.gw), {})
  }
})

const logLine = (exchangeId: string): Promise<Record<string, unknown>> => exchangeLogLine(rig, exchangeId)

// A Responses stream that ends with its own `response.failed` (error=KIND) has had its
// terminal: the relay ends after it, and adds no second one. Messages `event: error`, a Chat
// error frame and a Responses `error` event are no terminal of their protocol: the signed tail
// follows them, the stream's one terminal (or its one failure for Messages and Chat).
t.test('a provider stream ending with its own terminal failure has exactly one terminal', async (t) => {
  const kinds: Array<[string, string, string]> = [
    ['rate_limit', 'rate_limit_exceeded', 'provider_rate_limited'],
    ['overloaded', 'server_is_overloaded', 'provider_unavailable'],
    ['context_length', 'context_length_exceeded', 'provider_error'],
  ]
  for (const [kind, providerCode, code] of kinds) {
    const r = await post('/v1/responses', responsesBody(`go\n#sim tokens=6 error=${kind} at=3`, { stream: true }))
    const text = r.body.toString()
    t.equal(r.status, 200, `${kind}: the stream had started`)
    const terminals = [...text.matchAll(/^event: response\.(completed|incomplete|failed)$/gm)].map((m) => m[1])
    t.same(terminals, ['failed'], `${kind}: exactly one terminal, response.failed`)
    t.notMatch(text, /"sluice":\{"record"/, `${kind}: no sluice tail after the provider's terminal`)
    const last = JSON.parse([...text.matchAll(/^data: (.*)$/gm)].at(-1)![1])
    t.equal(last.type, 'response.failed', `${kind}: the stream ends with it`)
    t.equal(last.response?.error?.code, providerCode, `${kind}: the provider's own failure, relayed whole`)
    const line = await logLine(String(r.headers['x-sluice-exchange-id']))
    t.equal(line.code, code, `${kind}: the exchange counts the failure`)
    t.equal(line.evidence, false, `${kind}: never evidence`)
    t.same(await waitIdle(rig.gw), {}, `${kind}: idle`)
  }
  const openai = new OpenAI({ apiKey: KEY, baseURL: rig.url + '/v1', maxRetries: 0 })
  const events: string[] = []
  const s = openai.responses.stream({ model: 'gpt-5.5', input: 'x\n#sim tokens=6 error=rate_limit at=3' })
  s.on('event', (e) => events.push(e.type))
  const failed = await s.finalResponse()
  t.equal(failed.status, 'failed', 'the openai SDK: a failed response')
  t.equal(failed.error?.code, 'rate_limit_exceeded', 'with the provider\'s code')
  t.equal(events.filter((e) => e.startsWith('response.') && /completed|incomplete|failed/.test(e)).length, 1, 'one terminal event')

  // Not terminals of their protocol: the provider's event, then the one signed tail.
  for (const [path, mk, d] of [...ROUTES.map(([p, m]) => [p, m, '#sim tokens=6 fault=error-event at=3'] as const), ['/v1/messages', ROUTES[2][1], '#sim tokens=6 error=rate_limit at=3'] as const, ['/v1/chat/completions', ROUTES[0][1], '#sim tokens=6 error=rate_limit at=3'] as const]) {
    const r = await post(path, mk(d))
    const text = r.body.toString()
    const tail = signedTail(text)
    t.ok(tail && verifyRecord(tail.record, tail.signature, key), `${path} ${d}: the signed tail follows`)
    t.equal(text.match(/"sluice":\{"record"/g)?.length, 1, `${path} ${d}: one tail`)
    if (path === '/v1/responses') t.equal(text.match(/^event: response\.failed$/gm)?.length, 1, `${path} ${d}: one terminal, the tail`)
    t.same(await waitIdle(rig.gw), {})
  }
})

t.test('the official SDKs see the failure as an error naming the code', async (t) => {
  const openai = new OpenAI({ apiKey: KEY, baseURL: rig.url + '/v1', maxRetries: 0 })
  await t.rejects(async () => {
    const s = await openai.chat.completions.create({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'x\n#sim fault=cut-mid-stream at=4 tokens=20' }] })
    for await (const _ of s) { /* drain */ }
  }, /provider_unavailable/, 'chat stream')
  // Responses reports failure in-band: response.failed resolves as a failed response.
  const failed = await openai.responses.stream({ model: 'gpt-5.5', input: 'x\n#sim fault=malformed-frame at=5 tokens=20' }).finalResponse()
  t.equal(failed.status, 'failed', 'responses stream: a failed response')
  t.equal(failed.error?.code, 'provider_protocol_error', 'responses stream: naming the code')
  const anthropic = new Anthropic({ apiKey: KEY, baseURL: rig.url, maxRetries: 0 })
  await t.rejects(async () => {
    const s = anthropic.messages.stream({ model: 'claude-opus-5-5', max_tokens: 50, messages: [{ role: 'user', content: 'x\n#sim fault=stall at=4 tokens=20' }] })
    await s.finalMessage()
  }, /provider_timeout/, 'messages stream')
  t.same(await waitIdle(rig.gw), {})
})
