// Provider text without credentials: configured keys, bearer tokens, key-shaped strings and
// long tokens are replaced, ordinary text is kept, the cap applies after scrubbing.

import t from 'tap'
import { Scrubber, PROVIDER_MESSAGE_CAP, REDACTED } from '../../../src/protocols/scrub.ts'
import { mapProviderError, retryAfterSeconds, MAX_RETRY_AFTER_SECONDS } from '../../../src/protocols/index.ts'

const KEY = 'pk-live-configured-1234'
const s = new Scrubber([KEY, null, 'short'])

t.test('credentials are replaced', async (t) => {
  const cases: Array<[string, string]> = [
    [`bad key ${KEY} given`, `bad key ${REDACTED} given`],
    ['Authorization: Bearer abc.def-ghi_jkl', `Authorization: Bearer ${REDACTED}`],
    ['basic dXNlcjpwYXNz', `basic ${REDACTED}`],
    ['key sk-abcdef123456 rejected', `key ${REDACTED} rejected`],
    ['key sk-ant-api03-AbCd_EfGh-1234 rejected', `key ${REDACTED} rejected`],
    ['AIzaSyA1234567890abcdefghijklmnop', REDACTED],
    ['ghp_abcdefghijklmnopqrstuvwxyz0123', REDACTED],
    ['AKIAIOSFODNN7EXAMPLE', REDACTED],
    ['api_key=hunter2 and password: "swordfish"', `api_key=${REDACTED} and password: "${REDACTED}"`],
    ['id 0123456789abcdef0123456789abcdef', `id ${REDACTED}`],
    ['t dGhpcyBpcyBhIHNlY3JldCB0b2tlbiAxMjM0NTY3ODkw', `t ${REDACTED}`],
  ]
  for (const [input, want] of cases) t.equal(s.text(input), want, input)
})

t.test('ordinary text is kept', async (t) => {
  for (const text of [
    'You exceeded your current quota, please check your plan and billing details.',
    'organization_verification_required_for_this_model_family',
    'max_tokens: 4096 is too large for gpt-4o-mini-2024-07-18',
    'short',
  ]) t.equal(s.text(text), text, text)
  t.equal(s.text(null), null)
})

t.test('the cap applies after scrubbing, visibly, without splitting a surrogate pair', async (t) => {
  const long = `${'a '.repeat(200)}`
  t.equal(s.text(long)!.length, PROVIDER_MESSAGE_CAP + 1)
  t.ok(s.text(long)!.endsWith('…'))
  // A key straddling the cap is scrubbed whole, never cut into a piece the patterns miss.
  const straddle = 'x'.repeat(PROVIDER_MESSAGE_CAP - 5) + ' ' + KEY
  t.notOk(s.text(straddle)!.includes(KEY.slice(0, 4)))
  const emoji = 'x'.repeat(9) + '😀'
  t.equal(s.text(emoji, 10), 'x'.repeat(9) + '…')
})

t.test('carriesSecret finds configured keys in bytes only', async (t) => {
  t.equal(s.carriesSecret(Buffer.from(`data: {"error":"${KEY}"}`)), true)
  t.equal(s.carriesSecret(Buffer.from('data: {"error":"sk-abcdef123456"}')), false, 'patterns are for text; frames are withheld for configured keys')
})

t.test('mapProviderError scrubs message, type and code', async (t) => {
  const info = mapProviderError(401, { error: { message: `bad ${KEY}`, type: `t ${KEY}`, code: 'sk-abcdef123456' } }, null, s)
  t.equal(info.providerMessage, `bad ${REDACTED}`)
  t.equal(info.providerType, `t ${REDACTED}`)
  t.equal(info.providerCode, REDACTED)
  t.equal(mapProviderError(401, { error: { message: 'Bearer sk-abcdef123456' } }).providerMessage, `Bearer ${REDACTED}`, 'the patterns apply without a Router too')
})

t.test('Retry-After is clamped', async (t) => {
  t.equal(MAX_RETRY_AFTER_SECONDS, 3600)
  t.equal(retryAfterSeconds('999999999'), 3600)
  t.equal(retryAfterSeconds('99999999999999999999'), 3600)
  t.equal(retryAfterSeconds('3599'), 3599)
  t.equal(retryAfterSeconds('0'), 0)
  const now = Date.parse('2026-12-01T00:00:00Z')
  t.equal(retryAfterSeconds('Tue, 01 Dec 2026 00:00:30 GMT', now), 30)
  t.equal(retryAfterSeconds('Fri, 01 Jan 2100 00:00:00 GMT', now), 3600)
  t.equal(retryAfterSeconds('Mon, 30 Nov 2026 00:00:00 GMT', now), 0, 'a date in the past: now')
  t.equal(retryAfterSeconds('-5'), null)
  t.equal(retryAfterSeconds('1e9'), null)
})
