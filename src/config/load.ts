// Loading the configuration: file (or the demo config), then environment, then flags, then
// one strict validation. Any failure is a ConfigError naming the key; `sluice serve` and
// `sluice check-config` print it and exit 2.

import { createHash, randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { INSTANCE_ID, configSchema, type Config, type ConfigInput } from './schema.ts'
import { matchesAny } from './models.ts'
import { inWorkerParseBytes } from './limits.ts'

export { matchesAny }

export const DEMO_KEY = 'sk-sluice-demo'

export class ConfigError extends Error {
  readonly key: string
  constructor (key: string, message: string) {
    super(`${key}: ${message}`)
    this.name = 'ConfigError'
    this.key = key
  }
}

export function sha256Hex (s: string): string {
  return createHash('sha256').update(s).digest('hex')
}

/** The embedded default: the simulated provider for all three protocols and the demo key. */
export function demoConfig (): ConfigInput {
  return {
    keys: [{ name: 'demo', sha256: sha256Hex(DEMO_KEY), models: ['*'] }],
    providers: [
      { name: 'sim-chat', protocol: 'openai-chat', baseUrl: 'sim', models: ['gpt-4o*', 'gpt-4.1*', 'sim-chat'] },
      { name: 'sim-responses', protocol: 'openai-responses', baseUrl: 'sim', models: ['gpt-5*', 'o3*', 'o4*', 'sim-responses'] },
      { name: 'sim-messages', protocol: 'anthropic', baseUrl: 'sim', models: ['claude-*', 'sim-messages'] },
    ],
    sim: { enabled: true, port: 0 },
  }
}

export interface Overrides {
  port?: string | number
  adminPort?: string | number
  workers?: string | number
  maxPendingPromptsPerSession?: string | number
  instanceId?: string
}

/** A flag or environment value that must be a non-negative integer. */
export function parseNonNegativeInt (key: string, raw: string | number): number {
  const s = String(raw).trim()
  if (!/^\d+$/.test(s)) throw new ConfigError(key, `must be a non-negative integer, got ${JSON.stringify(String(raw))}`)
  const n = Number(s)
  if (!Number.isSafeInteger(n)) throw new ConfigError(key, `is too large: ${s}`)
  return n
}

export interface LoadOptions {
  /** Path to the JSON config file; absent means the demo config. */
  file?: string
  env?: NodeJS.ProcessEnv
  overrides?: Overrides
}

export interface LoadedConfig {
  config: Config
  /** True when running the embedded demo config. */
  demo: boolean
  source: string
}

export function loadConfig (opts: LoadOptions = {}): LoadedConfig {
  const env = opts.env ?? process.env
  let raw: unknown
  let source = 'embedded demo config'
  const file = opts.file ?? env.SLUICE_CONFIG
  if (file) {
    source = file
    let text: string
    try {
      text = readFileSync(file, 'utf8')
    } catch (err) {
      throw new ConfigError('--config', `cannot read ${file}: ${(err as Error).message}`)
    }
    try {
      raw = JSON.parse(text)
    } catch (err) {
      throw new ConfigError('--config', `${file} is not valid JSON: ${(err as Error).message}`)
    }
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new ConfigError('(root)', 'the config must be a JSON object')
  } else {
    raw = demoConfig()
  }
  const input = structuredClone(raw) as Record<string, any>
  const listen = (input.listen ??= {}) as Record<string, unknown>
  const limits = (input.limits ??= {}) as Record<string, unknown>
  if (typeof listen !== 'object' || typeof limits !== 'object') {
    // let the schema report the type error with its path
  } else {
    if (env.SLUICE_PORT !== undefined && env.SLUICE_PORT !== '') listen.port = parseNonNegativeInt('SLUICE_PORT', env.SLUICE_PORT)
    if (env.SLUICE_ADMIN_PORT !== undefined && env.SLUICE_ADMIN_PORT !== '') listen.adminPort = parseNonNegativeInt('SLUICE_ADMIN_PORT', env.SLUICE_ADMIN_PORT)
    if (env.SLUICE_INSTANCE_ID !== undefined && env.SLUICE_INSTANCE_ID !== '') input.instanceId = checkInstanceId('SLUICE_INSTANCE_ID', env.SLUICE_INSTANCE_ID)
    const o = opts.overrides ?? {}
    if (o.port !== undefined) listen.port = parseNonNegativeInt('--port', o.port)
    if (o.adminPort !== undefined) listen.adminPort = parseNonNegativeInt('--admin-port', o.adminPort)
    if (o.workers !== undefined) input.workers = parseNonNegativeInt('--workers', o.workers)
    if (o.instanceId !== undefined) input.instanceId = checkInstanceId('--instance-id', o.instanceId)
    if (o.maxPendingPromptsPerSession !== undefined) {
      limits.maxPendingPromptsPerSession = parseNonNegativeInt('--max-pending-prompts-per-session', o.maxPendingPromptsPerSession)
    }
  }
  const config = validateConfig(input)
  return { config, demo: !file, source }
}

/** Schema validation plus the cross-field rules; throws ConfigError naming the first bad key. */
export function validateConfig (input: unknown): Config {
  const parsed = configSchema.safeParse(input)
  if (!parsed.success) {
    const issue = parsed.error.issues[0]
    const key = issue.path.length ? issue.path.map(String).join('.') : '(root)'
    let message = issue.message
    if (issue.code === 'unrecognized_keys') {
      throw new ConfigError(key === '(root)' ? issue.keys.join(', ') : `${key}.${issue.keys[0]}`, `unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => JSON.stringify(k)).join(', ')}`)
    }
    if (issue.code === 'invalid_type' && issue.expected === 'number' && typeof valueAt(input, issue.path) === 'number') {
      message = `must be a finite number, got ${String(valueAt(input, issue.path))}`
    }
    throw new ConfigError(key, message)
  }
  const config = { ...parsed.data, instanceId: parsed.data.instanceId ?? defaultInstanceId(parsed.data.listen.port) }
  crossCheck(config)
  return config
}

/** An instance id from the environment or a flag: refused (naming where it came from) unless valid. */
function checkInstanceId (key: string, raw: string): string {
  if (!INSTANCE_ID.test(raw)) throw new ConfigError(key, `must be 1 to 128 letters, digits or ._:- (starting with a letter or digit), got ${JSON.stringify(raw)}`)
  return raw
}

/**
 * The instance id when none is configured: `<hostname>:<data port>` — stable across restarts
 * and distinct for every instance on one host. With an ephemeral port (0) the port is not
 * known yet: 8 random hex digits stand in for it.
 */
export function defaultInstanceId (port: number, host: string = hostname()): string {
  const h = host.replace(/[^A-Za-z0-9.-]/g, '-').replace(/^[^A-Za-z0-9]+/, '').slice(0, 110) || 'sluice'
  return `${h}:${port === 0 ? randomBytes(4).toString('hex') : port}`
}

function valueAt (root: unknown, path: readonly PropertyKey[]): unknown {
  let v: any = root
  for (const p of path) v = v?.[p as any]
  return v
}

function crossCheck (c: Config): void {
  const names = new Set<string>()
  c.providers.forEach((p, i) => {
    if (names.has(p.name)) throw new ConfigError(`providers.${i}.name`, `duplicate provider name ${JSON.stringify(p.name)}`)
    names.add(p.name)
    if (p.baseUrl === 'sim' && !c.sim.enabled) throw new ConfigError(`providers.${i}.baseUrl`, '"sim" needs sim.enabled = true')
    for (const [alias, target] of Object.entries(p.aliases)) {
      if (!matchesAny(target, p.models)) throw new ConfigError(`providers.${i}.aliases.${alias}`, `target ${JSON.stringify(target)} is not among this provider's models`)
    }
  })
  // Every upstream request is made by an exchange holding an exchange permit, and each HTTP
  // worker has its own pool per provider origin: with at least maxActiveExchanges connections
  // no admitted exchange can wait inside undici's pool for a connection (a wait the ledger
  // would not see: the permit held, nothing queued, nothing in /metrics).
  if (c.upstream.connections < c.limits.maxActiveExchanges) {
    throw new ConfigError('upstream.connections', `${c.upstream.connections} is below limits.maxActiveExchanges (${c.limits.maxActiveExchanges}): admitted exchanges beyond ${c.upstream.connections} would hold their permit while waiting, unseen, for a provider connection; set upstream.connections >= limits.maxActiveExchanges`)
  }
  const keyNames = new Set<string>()
  c.keys.forEach((k, i) => {
    if (keyNames.has(k.name)) throw new ConfigError(`keys.${i}.name`, `duplicate key name ${JSON.stringify(k.name)}`)
    keyNames.add(k.name)
  })
  if (c.listen.port !== 0 && c.listen.port === c.listen.adminPort && c.listen.host === c.listen.adminHost) {
    throw new ConfigError('listen.adminPort', 'must differ from listen.port')
  }
  try {
    inWorkerParseBytes(c.limits)
  } catch (err) {
    throw new ConfigError('limits.inWorkerParseBytes', (err as Error).message)
  }
  const demoHash = sha256Hex(DEMO_KEY)
  if (c.keys.some((k) => k.sha256 === demoHash)) {
    for (const key of ['host', 'adminHost'] as const) {
      if (!isLoopback(c.listen[key])) throw new ConfigError(`listen.${key}`, `the demo key ${DEMO_KEY} may only be served on loopback, not ${c.listen[key]}`)
    }
  }
}

export function isLoopback (host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host)
}

export { pendingCap } from './limits.ts'


