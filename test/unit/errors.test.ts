// The error catalogue is pinned: its size, and every row against README.md's table.

import t from 'tap'
import { readFileSync } from 'node:fs'
import { catalogue, errorCodes, SluiceError } from '../../src/errors.ts'

t.test('the catalogue has the expected codes, each documented with the same status, side and Retry-After', async (t) => {
  t.equal(errorCodes.length, 39, 'a new code needs this count, README.md and a reason; codes are never reused')
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8')
  const rows = new Map<string, [number, string, string]>()
  for (const m of readme.matchAll(/^\| `([a-z_]+)` \| (\d{3}) \| (local|caller|provider) \| ([\d—]+) \|$/gm)) {
    rows.set(m[1], [Number(m[2]), m[3], m[4]])
  }
  t.equal(rows.size, errorCodes.length, 'README documents every code, and no other')
  for (const code of errorCodes) {
    const e = catalogue[code]
    t.same(rows.get(code), [e.status, e.side, e.retryAfterSeconds === null ? '—' : String(e.retryAfterSeconds)], code)
  }
  // DESIGN.md names these codes; they must exist.
  for (const code of ['capacity_exhausted', 'capacity_timeout', 'prompt_queue_full', 'storage_budget_exhausted', 'worker_heap_exhausted',
    'payload_too_large', 'invalid_json', 'json_too_deep', 'unauthorized', 'model_not_allowed', 'turn_limit', 'provider_unavailable',
    'provider_timeout', 'provider_rate_limited']) t.ok(code in catalogue, code)
})

t.test('local refusals never claim the provider', async (t) => {
  for (const code of errorCodes) {
    if (code.startsWith('provider_')) t.equal(catalogue[code].side, 'provider', code)
    else t.not(catalogue[code].side, 'provider', code)
  }
})

t.test('SluiceError: body shape, headers, and a round trip across threads without instanceof', async (t) => {
  const e = new SluiceError('capacity_exhausted', { limit: 32, queueLimit: 128 })
  t.same(e.toBody(), { code: 'capacity_exhausted', error: catalogue.capacity_exhausted.message, limit: 32, queueLimit: 128 })
  t.same(e.headers(), { 'retry-after': '1' })
  t.same(new SluiceError('invalid_json').headers(), {})
  const back = SluiceError.from(structuredClone(e.toJSON()))
  t.equal(back.code, 'capacity_exhausted')
  t.equal(back.status, 503)
  t.same(back.details, { limit: 32, queueLimit: 128 })
  t.equal(SluiceError.from(new Error('boom')).code, 'internal_error')
  t.equal(new SluiceError('prompt_queue_full', { retryAfterSeconds: 9 }).retryAfterSeconds, 9)
})
