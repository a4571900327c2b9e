// Invalid configuration stops the process with a message naming the key.

import t from 'tap'
import { spawn } from 'node:child_process'
import { ConfigError, DEMO_KEY, loadConfig, pendingCap, sha256Hex, validateConfig } from '../../src/config/load.ts'
import { BIN, NODE, writeConfig } from '../helpers/gateway.ts'

const provider = { name: 'p', protocol: 'openai-chat', baseUrl: 'http://127.0.0.1:1', models: ['m'] }

const invalid: Array<[string, unknown, string]> = [
  ['negative', { limits: { maxActiveExchanges: -1 } }, 'limits.maxActiveExchanges'],
  ['zero permits', { limits: { parsePermits: 0 } }, 'limits.parsePermits'],
  ['fractional', { limits: { maxQueuedExchanges: 1.5 } }, 'limits.maxQueuedExchanges'],
  ['NaN', { limits: { queueWaitMs: NaN } }, 'limits.queueWaitMs'],
  ['Infinity where an integer is needed', { limits: { storageBytes: Infinity } }, 'limits.storageBytes'],
  ['wrong type', { workers: '2' }, 'workers'],
  ['unknown top-level key', { limitz: {} }, 'limitz'],
  ['unknown nested key', { limits: { maxActive: 3 } }, 'limits.maxActive'],
  ['negative pending cap', { limits: { maxPendingPromptsPerSession: -1 } }, 'limits.maxPendingPromptsPerSession'],
  ['fractional pending cap', { limits: { maxPendingPromptsPerSession: 2.5 } }, 'limits.maxPendingPromptsPerSession'],
  ['bad protocol', { providers: [{ ...provider, protocol: 'grpc' }] }, 'providers.0.protocol'],
  ['bad base URL', { providers: [{ ...provider, baseUrl: 'ftp://x' }] }, 'providers.0.baseUrl'],
  ['sim base URL without the sim', { providers: [{ ...provider, baseUrl: 'sim' }] }, 'providers.0.baseUrl'],
  ['alias to an unserved model', { providers: [{ ...provider, aliases: { fast: 'other' } }] }, 'providers.0.aliases.fast'],
  ['duplicate provider', { providers: [provider, provider] }, 'providers.1.name'],
  ['key not a sha256', { keys: [{ name: 'k', sha256: 'abc' }] }, 'keys.0.sha256'],
  ['port out of range', { listen: { port: 70000 } }, 'listen.port'],
  ['heap fraction above 1', { limits: { workerHeapAdmitFraction: 1.5 } }, 'limits.workerHeapAdmitFraction'],
  ['demo key off loopback', { listen: { host: '0.0.0.0' }, keys: [{ name: 'd', sha256: sha256Hex(DEMO_KEY) }] }, 'listen.host'],
  ['not an object', [], '(root)'],
  ['provider pool smaller than the active limit', { limits: { maxActiveExchanges: 96 } }, 'upstream.connections'],
  ['provider pool smaller than the active limit, both set', { limits: { maxActiveExchanges: 40 }, upstream: { connections: 39 } }, 'upstream.connections'],
]

for (const [name, cfg, key] of invalid) {
  t.test(`invalid: ${name}`, async (t) => {
    const err = t.throws(() => validateConfig(cfg)) as ConfigError
    t.equal(err.name, 'ConfigError')
    t.equal(err.key, key, err.message)
    t.ok(err.message.startsWith(`${key}: `), err.message)
  })
}

t.test('upstream.connections below limits.maxActiveExchanges: the message names both keys and both values', async (t) => {
  const err = t.throws(() => validateConfig({ limits: { maxActiveExchanges: 96 } })) as ConfigError
  t.match(err.message, /^upstream\.connections: 64 is below limits\.maxActiveExchanges \(96\)/)
  t.match(err.message, /upstream\.connections >= limits\.maxActiveExchanges/)
  t.equal(validateConfig({ limits: { maxActiveExchanges: 96 }, upstream: { connections: 96 } }).upstream.connections, 96, 'equal is enough')
  t.equal(validateConfig({ limits: { maxActiveExchanges: 8 }, upstream: { connections: 1000 } }).upstream.connections, 1000, 'more is allowed')
})

t.test('defaults are the DESIGN.md fixed limits', async (t) => {
  const c = validateConfig({})
  t.equal(c.limits.maxActiveExchanges, 32)
  t.equal(c.limits.maxQueuedExchanges, 128)
  t.equal(c.limits.queueWaitMs, 30_000)
  t.equal(c.limits.parsePermits, 1)
  t.equal(c.limits.maxPendingPromptsPerSession, 5)
  t.equal(c.limits.maxActivePerSession, 1)
  t.equal(c.limits.sseFrameBytes, 1024 * 1024)
  t.equal(c.limits.maxOutputItems, 256)
  t.equal(c.limits.healthGuardMs, 1000)
  t.equal(c.listen.host, '127.0.0.1')
  t.equal(c.listen.port, 8080)
  t.equal(c.listen.adminPort, 9090)
})

t.test('pending cap: 0, null and "Infinity" disable it', async (t) => {
  for (const v of [0, null, 'Infinity']) t.equal(pendingCap(validateConfig({ limits: { maxPendingPromptsPerSession: v } }).limits), null, String(v))
  t.equal(pendingCap(validateConfig({ limits: { maxPendingPromptsPerSession: 3 } }).limits), 3)
})

t.test('environment and flags override the file; bad values name the flag', async (t) => {
  const file = writeConfig({ listen: { port: 1000 } })
  t.equal(loadConfig({ file, env: { SLUICE_PORT: '2000' } }).config.listen.port, 2000)
  t.equal(loadConfig({ file, env: { SLUICE_PORT: '2000' }, overrides: { port: '3000' } }).config.listen.port, 3000)
  t.equal(loadConfig({ file, env: {}, overrides: { maxPendingPromptsPerSession: '0' } }).config.limits.maxPendingPromptsPerSession, 0)
  for (const bad of ['-1', '1.5', 'abc', 'NaN', 'Infinity', '']) {
    const err = t.throws(() => loadConfig({ file, env: {}, overrides: { maxPendingPromptsPerSession: bad } })) as ConfigError
    t.equal(err.key, '--max-pending-prompts-per-session', bad)
  }
  const err = t.throws(() => loadConfig({ file, env: { SLUICE_ADMIN_PORT: 'x1' } })) as ConfigError
  t.equal(err.key, 'SLUICE_ADMIN_PORT')
  const demo = loadConfig({ env: {} })
  t.equal(demo.demo, true)
  t.ok(demo.config.sim.enabled)
  t.ok(demo.config.keys.some((k) => k.sha256 === sha256Hex(DEMO_KEY)))
})

function run (args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const p = spawn(NODE, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, SLUICE_PORT: '', SLUICE_ADMIN_PORT: '' } })
    let out = ''; let err = ''
    p.stdout.on('data', (d) => { out += d })
    p.stderr.on('data', (d) => { err += d })
    p.on('exit', (code) => resolve({ code, out, err }))
  })
}

t.test('the CLI stops with exit 2 and names the key', async (t) => {
  const bad = writeConfig({ limits: { maxActiveExchanges: 0.5 } })
  for (const args of [['check-config', bad], ['serve', '--config', bad]]) {
    const r = await run(args)
    t.equal(r.code, 2, args[0])
    t.match(r.err, /invalid configuration: limits\.maxActiveExchanges: /)
  }
  const flag = await run(['serve', '--config', writeConfig({}), '--max-pending-prompts-per-session=-3'])
  t.equal(flag.code, 2)
  t.match(flag.err, /--max-pending-prompts-per-session: must be a non-negative integer/)
  const good = await run(['check-config', writeConfig({ providers: [provider] })])
  t.equal(good.code, 0)
  t.match(good.out, /ok \(1 providers/)
  const unknown = await run(['frobnicate'])
  t.equal(unknown.code, 2)
})
