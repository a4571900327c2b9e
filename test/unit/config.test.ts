// Invalid configuration stops the process with a message naming the key.

import t from 'tap'
import { spawn } from 'node:child_process'
import { ConfigError, DEMO_KEY, defaultInstanceId, loadConfig, pendingCap, sha256Hex, validateConfig } from '../../src/config/load.ts'
import { inWorkerParseBytes } from '../../src/config/limits.ts'
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
  ['zero body idle limit', { limits: { bodyIdleMs: 0 } }, 'limits.bodyIdleMs'],
  ['fractional body read limit', { limits: { bodyReadMs: 2.5 } }, 'limits.bodyReadMs'],
  ['zero envelope parses', { limits: { maxEnvelopeParses: 0 } }, 'limits.maxEnvelopeParses'],
  ['instance id with a space', { instanceId: 'a b' }, 'instanceId'],
  ['empty instance id', { instanceId: '' }, 'instanceId'],
  ['instance id too long', { instanceId: 'i'.repeat(129) }, 'instanceId'],
  ['instance id starting with a dash', { instanceId: '-i1' }, 'instanceId'],
  ['instance id not a string', { instanceId: 7 }, 'instanceId'],
  ['provider pool smaller than the active limit', { limits: { maxActiveExchanges: 96 } }, 'upstream.connections'],
  ['provider pool smaller than the active limit, both set', { limits: { maxActiveExchanges: 40 }, upstream: { connections: 39 } }, 'upstream.connections'],
  ['in-worker parse threshold above 1 MiB', { limits: { inWorkerParseBytes: 1024 * 1024 + 1 } }, 'limits.inWorkerParseBytes'],
  ['negative in-worker parse threshold', { limits: { inWorkerParseBytes: -1 } }, 'limits.inWorkerParseBytes'],
  // 128 MiB x 0.15 headroom / 64 = 314572 bytes at most.
  ['in-worker parse threshold past the worker heap headroom', { limits: { inWorkerParseBytes: 314_573 } }, 'limits.inWorkerParseBytes'],
  ['in-worker parse threshold past a small heap\'s headroom', { limits: { workerHeapMb: 16, inWorkerParseBytes: 65536 } }, 'limits.inWorkerParseBytes'],
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

t.test('the in-worker parse threshold: 64 KiB by default, less where the worker heap asks for it', async (t) => {
  t.equal(inWorkerParseBytes(validateConfig({}).limits), 64 * 1024)
  t.equal(inWorkerParseBytes(validateConfig({ limits: { inWorkerParseBytes: 314_572 } }).limits), 314_572, 'the bound itself is allowed')
  t.equal(inWorkerParseBytes(validateConfig({ limits: { inWorkerParseBytes: 0 } }).limits), 0, '0: every body to the pool')
  // 16 MiB x 0.15 / 64
  t.equal(inWorkerParseBytes(validateConfig({ limits: { workerHeapMb: 16 } }).limits), Math.floor(Math.floor(16 * 1024 * 1024 * 0.15) / 64), 'a small heap lowers the default instead of refusing it')
  t.equal(inWorkerParseBytes(validateConfig({ limits: { workerHeapAdmitFraction: 1 } }).limits), 0, 'no headroom: nothing parsed in the worker')
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

t.test('body deadlines and the envelope-parse allowance have their documented defaults', async (t) => {
  const c = validateConfig({})
  t.equal(c.limits.bodyIdleMs, 10_000)
  t.equal(c.limits.bodyReadMs, 60_000)
  t.equal(c.limits.maxEnvelopeParses, 32)
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

t.test('instance id: flag, then SLUICE_INSTANCE_ID, then the file, then <hostname>:<port>', async (t) => {
  const file = writeConfig({ instanceId: 'from-file', listen: { port: 1000 } })
  t.equal(loadConfig({ file, env: {} }).config.instanceId, 'from-file')
  t.equal(loadConfig({ file, env: { SLUICE_INSTANCE_ID: 'from-env' } }).config.instanceId, 'from-env')
  t.equal(loadConfig({ file, env: { SLUICE_INSTANCE_ID: 'from-env' }, overrides: { instanceId: 'from-flag' } }).config.instanceId, 'from-flag')
  for (const [key, env, overrides] of [['SLUICE_INSTANCE_ID', { SLUICE_INSTANCE_ID: 'has space' }, {}], ['--instance-id', {}, { instanceId: 'x/y' }]] as const) {
    const err = t.throws(() => loadConfig({ file, env, overrides })) as ConfigError
    t.equal(err.key, key, err.message)
  }
  const plain = writeConfig({ listen: { port: 8123 } })
  t.equal(loadConfig({ file: plain, env: {} }).config.instanceId, `${defaultInstanceId(8123)}`, 'default')
  t.equal(defaultInstanceId(8123, 'gw-3.example.net'), 'gw-3.example.net:8123', 'hostname:port')
  t.equal(defaultInstanceId(8123, '_odd host!'), 'odd-host-:8123', 'a hostname is made safe')
  const a = defaultInstanceId(0, 'h')
  t.match(a, /^h:[0-9a-f]{8}$/, 'an ephemeral port: a random suffix')
  t.not(a, defaultInstanceId(0, 'h'), 'distinct for two instances with ephemeral ports')
  t.match(validateConfig({}).instanceId, /^[A-Za-z0-9][A-Za-z0-9._:-]*:8080$/, 'validated configs always carry one')
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
