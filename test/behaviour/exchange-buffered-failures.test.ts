// A non-streaming answer is held whole before any byte goes out, so when the provider cuts
// it, stalls or sends something that is not JSON, the caller gets the signed JSON refusal
// with the provider's code (never an empty reply), on every protocol, and the exchange's log
// line records the status and code that were sent. An answer larger than maxOutputBytes is
// refused as output_too_large. The ledger is back at idle after each.

import t from 'tap'
import { request } from 'undici'
import { verifyRecord } from '../../src/sse/sign.ts'
import { SIGNING_KEY, chatBody, messagesBody, responsesBody, exchangeLogLine, postToRig, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'

const key = Buffer.from(SIGNING_KEY, 'utf8')
const MAX_OUTPUT = 64 * 1024
let rig: Rig
t.before(async () => { rig = await startRig({ workers: 1, upstream: { idleTimeoutMs: 400 }, limits: { maxOutputBytes: MAX_OUTPUT } }) })
t.teardown(() => rig.close())

const ROUTES = [
  ['/v1/chat/completions', (d: string) => chatBody(`go\n${d}`)],
  ['/v1/responses', (d: string) => responsesBody(`go\n${d}`)],
  ['/v1/messages', (d: string) => messagesBody(`go\n${d}`)],
] as const

const post = (path: string, body: unknown) => postToRig(rig, path, body)

/** The exchange's log line (written at its release, so it may come a moment after the reply). */
const logLine = (exchangeId: string): Promise<Record<string, unknown>> => exchangeLogLine(rig, exchangeId)

t.test('a non-streaming provider failure is a signed JSON refusal, never an empty reply', async (t) => {
  const cases: Array<[string, number, string]> = [
    ['fault=cut-mid-stream tokens=40', 502, 'provider_unavailable'],
    ['fault=stall tokens=40', 504, 'provider_timeout'],
    ['fault=malformed-frame tokens=40', 502, 'provider_protocol_error'],
  ]
  for (const [path, mk] of ROUTES) {
    for (const [d, status, code] of cases) {
      const before = rig.requests.length
      const r = await post(path, mk(`#sim ${d}`))
      t.equal(r.status, status, `${path} ${d}: status`)
      t.match(String(r.headers['content-type']), /^application\/json/, `${path} ${d}: our JSON`)
      const j = JSON.parse(r.body.toString()) as { code: string; exchangeId: string; record: Parameters<typeof verifyRecord>[0] & { side: string; code: string }; signature: string }
      t.equal(j.code, code, `${path} ${d}: code`)
      t.equal(j.record.side, 'provider', `${path} ${d}: signed as the provider's failure`)
      t.equal(j.record.code, code)
      t.ok(verifyRecord(j.record, j.signature, key), `${path} ${d}: signature verifies`)
      t.equal(r.headers['x-sluice-exchange-id'], j.exchangeId)
      t.equal(rig.requests.length - before, 1, `${path} ${d}: sent once, never retried`)
      const line = await logLine(j.exchangeId)
      t.equal(line.status, status, `${path} ${d}: the log line has the status sent`)
      t.equal(line.code, code, `${path} ${d}: the log line has the code sent`)
      t.equal(line.evidence, false, 'never evidence')
      t.equal(line.bytesOut, 0, 'none of the provider\'s bytes went out')
      t.same(await waitIdle(rig.gw), {}, 'idle')
    }
  }
})

t.test('an answer within maxOutputBytes is delivered exactly, with its usage logged', async (t) => {
  for (const [path, mk] of ROUTES) {
    const body = mk('#sim tokens=30')
    const r = await post(path, body)
    t.equal(r.status, 200, `${path}: ok`)
    const direct = await request(rig.sim.url + path, { method: 'POST', headers: { authorization: 'Bearer sk-provider-secret-abcdef', 'content-type': 'application/json' }, body: JSON.stringify(body) })
    t.ok(r.body.equals(Buffer.from(await direct.body.arrayBuffer())), `${path}: the provider's bytes exactly`)
    t.equal(r.headers['content-length'], String(r.body.length), `${path}: content-length`)
    const line = await logLine(String(r.headers['x-sluice-exchange-id']))
    t.equal(line.code, 'ok')
    t.equal(line.status, 200)
    t.equal(line.evidence, true)
    t.equal(line.bytesOut, r.body.length)
    t.ok((line.usage as { outputTokens?: number } | null)?.outputTokens, `${path}: usage read from the answer`)
    t.same(await waitIdle(rig.gw), {}, 'idle')
  }
})

t.test('an answer larger than maxOutputBytes is refused as output_too_large', async (t) => {
  for (const [path, mk] of ROUTES) {
    const r = await post(path, mk('#sim tokens=2000 bytes=100'))
    t.equal(r.status, 502, `${path}: status`)
    const j = JSON.parse(r.body.toString()) as { code: string; exchangeId: string; limit: number; record?: unknown }
    t.equal(j.code, 'output_too_large', `${path}: code`)
    t.equal(j.limit, MAX_OUTPUT, `${path}: names the limit`)
    t.equal(j.record, undefined, 'a local limit: no provider failure record')
    const line = await logLine(j.exchangeId)
    t.equal(line.status, 502)
    t.equal(line.code, 'output_too_large')
    t.same(await waitIdle(rig.gw), {}, 'idle')
  }
})
