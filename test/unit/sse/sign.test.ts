// The signed failure record: round trip, key order independence, tamper detection.
import t from 'tap'
import { createHmac } from 'node:crypto'
import { buildFailureRecord, canonicalJson, signRecord, verifyRecord, type FailureRecord } from '../../../src/sse/sign.ts'

const key = Buffer.from('0123456789abcdef0123456789abcdef')

function record (over: Partial<FailureRecord> = {}): FailureRecord {
  return {
    ...buildFailureRecord({
      code: 'provider_protocol_error',
      message: 'frame 3 is malformed',
      exchangeId: 'ex-42',
      runId: 'run-7',
      provider: 'sim',
      model: 'gpt-5.5',
      at: '2026-11-30T08:00:00.000Z',
      framesRelayed: 3,
      bytesRelayed: 812,
      usage: { inputTokens: 42, outputTokens: 5, totalTokens: 47 },
      partial: true,
    }),
    ...over,
  }
}

t.test('buildFailureRecord fills side from the catalogue and the time', async t => {
  const r = buildFailureRecord({ code: 'storage_budget_exhausted', exchangeId: 'e', runId: null, provider: 'p', model: 'm', framesRelayed: 0, bytesRelayed: 0, usage: null, partial: true })
  t.equal(r.side, 'local')
  t.match(r.message, /storage budget/)
  t.ok(!Number.isNaN(Date.parse(r.at)))
  t.equal(buildFailureRecord({ ...r, at: new Date(0) }).at, '1970-01-01T00:00:00.000Z')
})

t.test('canonical JSON: sorted keys at every depth, no whitespace, undefined left out', async t => {
  t.equal(canonicalJson({ b: 1, a: { d: [1, 'x', null], c: true }, u: undefined }), '{"a":{"c":true,"d":[1,"x",null]},"b":1}')
  t.throws(() => canonicalJson({ n: NaN }))
  t.throws(() => canonicalJson({ n: Infinity }))
  const r = record()
  t.equal(canonicalJson(r), canonicalJson(JSON.parse(JSON.stringify(r))), 'a JSON round trip serialises the same')
})

t.test('sign and verify round trip; the signature is HMAC-SHA256 hex over the canonical form', async t => {
  const r = record()
  const sig = signRecord(r, key)
  t.match(sig, /^[0-9a-f]{64}$/)
  t.ok(verifyRecord(r, sig, key))
  const expected = createHmac('sha256', key).update('sluice-failure-record/v1\n' + canonicalJson(r)).digest('hex')
  t.equal(sig, expected, 'a verifier can reproduce it from the documented rule')
  // As a client would receive it: parsed from JSON, keys in another order.
  const shuffled = Object.fromEntries(Object.entries(JSON.parse(JSON.stringify(r))).reverse()) as unknown as FailureRecord
  t.ok(verifyRecord(shuffled, sig, key), 'key order does not matter')
  t.equal(signRecord(r, key), sig, 'deterministic')
})

t.test('any change to any field breaks the signature', async t => {
  const r = record()
  const sig = signRecord(r, key)
  const tampered: Array<[string, Partial<FailureRecord>]> = [
    ['code', { code: 'provider_error' }],
    ['side', { side: 'local' }],
    ['message', { message: 'frame 4 is malformed' }],
    ['exchangeId', { exchangeId: 'ex-43' }],
    ['runId', { runId: null }],
    ['provider', { provider: 'other' }],
    ['model', { model: 'gpt-4o' }],
    ['at', { at: '2026-11-30T08:00:00.001Z' }],
    ['framesRelayed', { framesRelayed: 4 }],
    ['bytesRelayed', { bytesRelayed: 811 }],
    ['usage', { usage: { inputTokens: 42, outputTokens: 6, totalTokens: 47 } }],
    ['usage null', { usage: null }],
    ['partial', { partial: false }],
  ]
  for (const [name, change] of tampered) t.notOk(verifyRecord(record(change), sig, key), name)
  t.notOk(verifyRecord({ ...r, extra: 1 } as unknown as FailureRecord, sig, key), 'an added field')
})

t.test('wrong key, malformed signatures and empty keys are refused', async t => {
  const r = record()
  const sig = signRecord(r, key)
  t.notOk(verifyRecord(r, sig, Buffer.from('another key of some length......')))
  t.notOk(verifyRecord(r, sig.toUpperCase(), key))
  t.notOk(verifyRecord(r, sig.slice(0, 63), key))
  t.notOk(verifyRecord(r, sig + '0', key))
  t.notOk(verifyRecord(r, '', key))
  t.notOk(verifyRecord(r, 42 as unknown as string, key))
  t.notOk(verifyRecord(r, sig, Buffer.alloc(0)))
  t.notOk(verifyRecord({ ...r, bytesRelayed: NaN }, sig, key), 'a record that cannot be serialised')
  t.throws(() => signRecord(r, Buffer.alloc(0)))
})
