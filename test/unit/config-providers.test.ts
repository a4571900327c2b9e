// Provider accounts, upstream.retry and upstream.breaker: validated at start, each bad value
// named by its key; the single apiKeyEnv stays one implicit account.

import t from 'tap'
import { ConfigError, validateConfig } from '../../src/config/load.ts'
import { providerSlots } from '../../src/routing.ts'

const provider = { name: 'p', protocol: 'openai-chat', baseUrl: 'http://127.0.0.1:1', models: ['m', 'n*'] }
const acc = (name: string, extra: Record<string, unknown> = {}) => ({ name, apiKeyEnv: `KEY_${name.toUpperCase()}`, ...extra })

const invalid: Array<[string, unknown, string]> = [
  ['no accounts', { providers: [{ ...provider, accounts: [] }] }, 'providers.0.accounts'],
  ['accounts and apiKeyEnv', { providers: [{ ...provider, apiKeyEnv: 'K', accounts: [acc('a')] }] }, 'providers.0.apiKeyEnv'],
  ['duplicate account', { providers: [{ ...provider, accounts: [acc('a'), acc('a')] }] }, 'providers.0.accounts.1.name'],
  ['account name with a space', { providers: [{ ...provider, accounts: [acc('a b')] }] }, 'providers.0.accounts.0.name'],
  ['zero maxConcurrent', { providers: [{ ...provider, accounts: [acc('a', { maxConcurrent: 0 })] }] }, 'providers.0.accounts.0.maxConcurrent'],
  ['fractional maxConcurrent', { providers: [{ ...provider, accounts: [acc('a', { maxConcurrent: 1.5 })] }] }, 'providers.0.accounts.0.maxConcurrent'],
  ['bad key variable', { providers: [{ ...provider, accounts: [acc('a', { apiKeyEnv: '1X' })] }] }, 'providers.0.accounts.0.apiKeyEnv'],
  ['unknown account key', { providers: [{ ...provider, accounts: [acc('a', { weight: 2 })] }] }, 'providers.0.accounts.0'],
  ['three retries', { upstream: { retry: { attempts: 3 } } }, 'upstream.retry.attempts'],
  ['negative retries', { upstream: { retry: { attempts: -1 } } }, 'upstream.retry.attempts'],
  ['maxMs below baseMs', { upstream: { retry: { baseMs: 500, maxMs: 100 } } }, 'upstream.retry.maxMs'],
  ['fractional totalMs', { upstream: { retry: { totalMs: 1.5 } } }, 'upstream.retry.totalMs'],
  ['unknown retry key', { upstream: { retry: { tries: 1 } } }, 'upstream.retry'],
  ['zero breaker threshold', { upstream: { breaker: { failureThreshold: 0 } } }, 'upstream.breaker.failureThreshold'],
  ['breaker open too short', { upstream: { breaker: { openMs: 50 } } }, 'upstream.breaker.openMs'],
]

for (const [name, cfg, key] of invalid) {
  t.test(`invalid: ${name}`, async (t) => {
    const err = t.throws(() => validateConfig(cfg)) as ConfigError
    t.equal(err.name, 'ConfigError')
    t.match(err.key, new RegExp(`^${key.replace(/\./g, '\\.')}`), err.message)
  })
}

t.test('defaults: two retries with full jitter, a breaker at twenty failures', async (t) => {
  const c = validateConfig({})
  t.same(c.upstream.retry, { attempts: 2, baseMs: 100, maxMs: 2000, totalMs: 10_000, sameAccount: false })
  t.same(c.upstream.breaker, { failureThreshold: 20, openMs: 30_000 })
})

t.test('accounts and breakers are indexed in config order; apiKeyEnv is one implicit account', async (t) => {
  const c = validateConfig({
    providers: [
      { ...provider, apiKeyEnv: 'ONE' },
      { ...provider, name: 'q', models: ['q*'], accounts: [acc('a', { maxConcurrent: 4 }), acc('b')] },
    ],
  })
  const slots = providerSlots(c.providers)
  t.same(slots.accounts, [
    { provider: 'p', name: 'default', apiKeyEnv: 'ONE', maxConcurrent: null },
    { provider: 'q', name: 'a', apiKeyEnv: 'KEY_A', maxConcurrent: 4 },
    { provider: 'q', name: 'b', apiKeyEnv: 'KEY_B', maxConcurrent: null },
  ])
  t.same(slots.breakers, [{ provider: 'p', model: 'm' }, { provider: 'p', model: 'n*' }, { provider: 'q', model: 'q*' }])
})
