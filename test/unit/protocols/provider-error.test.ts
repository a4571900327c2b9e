// Provider HTTP errors and in-stream errors onto the catalogue, using the sim's own bodies.
import t from 'tap'
import { rawRequest, startSim } from '../../../src/sim/index.ts'
import {
  mapProviderError, providerErrorCode, providerErrorFromResponse, providerSluiceError, retryAfterSeconds, streamErrorCode,
} from '../../../src/protocols/index.ts'
import { catalogue } from '../../../src/errors.ts'
import { PATH, simBody } from './feed.ts'

const sim = await startSim()
t.teardown(() => sim.close())

t.test("the sim's refusals map to provider codes, with the provider's details", async t => {
  const cases = [
    ['openai-chat', 'status-429', 'provider_rate_limited', 429],
    ['anthropic', 'status-429', 'provider_rate_limited', 429],
    ['openai-responses', 'status-503', 'provider_unavailable', 503],
    ['anthropic', 'status-503', 'provider_unavailable', 503],
  ] as const
  for (const [protocol, fault, code, status] of cases) {
    const r = await rawRequest(sim.url, { path: PATH[protocol], body: simBody(protocol, `#sim fault=${fault}`) })
    t.equal(r.status, status)
    const info = providerErrorFromResponse(r.status, r.body, r.headers['retry-after'] as string | undefined)
    t.equal(info.code, code, `${protocol} ${fault}`)
    t.equal(catalogue[info.code].side, 'provider', 'never a local capacity code')
    t.equal(info.providerStatus, status)
    t.ok(info.providerMessage?.startsWith('sim:'))
    if (fault === 'status-429') t.equal(info.retryAfterSeconds, 7, 'Retry-After kept')
    const err = providerSluiceError(info)
    t.equal(err.code, code)
    t.equal(err.toBody().providerStatus, status)
    if (fault === 'status-429') t.equal(err.headers()['retry-after'], '7')
  }
  const wrongKey = await startSim({ apiKey: 'sk-real' })
  t.teardown(() => wrongKey.close())
  const r = await rawRequest(wrongKey.url, { path: PATH['openai-chat'], body: simBody('openai-chat', 'x') })
  const info = providerErrorFromResponse(r.status, r.body)
  t.equal(info.code, 'provider_error', "the provider refusing the gateway's key is a provider error, not the caller's")
  t.equal(info.providerCode, 'invalid_api_key')
})

t.test('status and type rules', async t => {
  t.equal(providerErrorCode(500, 'api_error', null), 'provider_unavailable')
  t.equal(providerErrorCode(529, 'overloaded_error', null), 'provider_unavailable')
  t.equal(providerErrorCode(504, null, null), 'provider_timeout')
  t.equal(providerErrorCode(408, null, null), 'provider_timeout')
  t.equal(providerErrorCode(429, 'insufficient_quota', 'insufficient_quota'), 'provider_error', 'a quota is not a rate limit')
  t.equal(providerErrorCode(400, 'invalid_request_error', null), 'provider_error')
  t.equal(providerErrorCode(404, 'not_found_error', null), 'provider_error')
  t.equal(streamErrorCode({ type: 'overloaded_error', message: 'x' }), 'provider_unavailable')
  t.equal(streamErrorCode({ type: 'error', message: 'x', code: 'rate_limit_exceeded' }), 'provider_rate_limited')
  t.equal(streamErrorCode({ type: 'server_error', message: 'x', code: 'server_error' }), 'provider_error')
  t.same(mapProviderError(502, undefined), { code: 'provider_unavailable', providerStatus: 502, providerType: null, providerCode: null, providerMessage: null, retryAfterSeconds: null }, 'a body that is not JSON')
  t.equal(providerErrorFromResponse(400, Buffer.from('<html>')).code, 'provider_error')
  t.equal(mapProviderError(400, { error: 'x'.repeat(1000) }).providerMessage?.length, 301, 'messages are capped')
  t.equal(mapProviderError(400, { error: { message: 'm', code: 42 } }).providerCode, '42')
  t.equal(retryAfterSeconds('12'), 12)
  t.equal(retryAfterSeconds(new Date(Date.now() + 30_000).toUTCString()) !== null, true)
  t.equal(retryAfterSeconds('soon'), null)
  t.equal(retryAfterSeconds(undefined), null)
})
