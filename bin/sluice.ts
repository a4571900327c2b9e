#!/usr/bin/env node
// The sluice command: `serve` (what npm start runs), `sim`, `check-config`, `load`.

import { parseArgs } from 'node:util'
import type { Overrides } from '../src/config/load.ts'
import { useCompileCache } from '../src/modules.ts'

// The compile cache before the rest of the program is loaded (hence the import()s below).
useCompileCache()
const { ConfigError, loadConfig } = await import('../src/config/load.ts')
const { TracingConfigError, tracingFromEnv } = await import('../src/telemetry/tracing.ts')

const USAGE = `usage: sluice <command> [options]

commands:
  serve          run the gateway (default: the embedded demo config with the simulated provider)
  sim            run the simulated provider alone
  check-config   validate a config file without starting (sluice check-config FILE)
  load           qualify limits under a CPU quota (sluice load model-capacity --profile half-vcpu|one-vcpu|all
                 [--smoke] [--record-baseline], or sluice load recall-burst --profile ... for
                 seed 003's agent sessions; see ops/load/README.md)

serve options:
  --config PATH                          JSON config file (else $SLUICE_CONFIG, else the demo config)
  --port N                               data plane port (else $SLUICE_PORT, else config, 8080)
  --admin-port N                         admin plane port (else $SLUICE_ADMIN_PORT, else config, 9090)
  --workers N                            HTTP worker threads
  --max-pending-prompts-per-session N    per-session pending cap, a non-negative integer (0 = no cap)
  --instance-id ID                       this instance's id in a fleet (else $SLUICE_INSTANCE_ID, else
                                         config instanceId, else <hostname>:<port>)
`

async function main (argv: string[]): Promise<number> {
  const [command, ...rest] = argv
  switch (command) {
    case 'serve': return serve(rest)
    case 'check-config': return checkConfig(rest)
    case 'load': {
      const { loadMain } = await import('../src/load/cli.ts')
      return loadMain(rest)
    }
    case 'sim': {
      const { simMain } = await import('../src/sim/cli.ts')
      await simMain(rest)
      return -1
    }
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(USAGE)
      return command === undefined ? 2 : 0
    default:
      process.stderr.write(`sluice: unknown command ${JSON.stringify(command)}\n\n${USAGE}`)
      return 2
  }
}

function parseServeArgs (args: string[]): { file?: string; overrides: Overrides } {
  const { values } = parseArgs({
    args,
    strict: true,
    options: {
      config: { type: 'string' },
      port: { type: 'string' },
      'admin-port': { type: 'string' },
      workers: { type: 'string' },
      'max-pending-prompts-per-session': { type: 'string' },
      'instance-id': { type: 'string' },
    },
  })
  return {
    file: values.config,
    overrides: {
      port: values.port,
      adminPort: values['admin-port'],
      workers: values.workers,
      maxPendingPromptsPerSession: values['max-pending-prompts-per-session'],
      instanceId: values['instance-id'],
    },
  }
}

async function serve (args: string[]): Promise<number> {
  let loaded
  try {
    const { file, overrides } = parseServeArgs(args)
    loaded = loadConfig({ file, overrides })
    // The OTEL_* variables are configuration too: a bad one stops the start, named.
    tracingFromEnv(process.env, loaded.config.telemetry.serviceName)
  } catch (err) {
    return configFailure(err)
  }
  const { startPrimary } = await import('../primary/main.ts')
  try {
    const h = await startPrimary({ config: loaded.config, signals: true })
    if (loaded.demo) {
      h.log.info({ port: h.port, adminPort: h.adminPort, demoKey: 'sk-sluice-demo' }, 'demo config: the simulated provider on loopback; use the demo key')
    }
  } catch (err) {
    process.stderr.write(`sluice: cannot start: ${(err as Error).message}\n`)
    return 1
  }
  return -1 // keep running
}

function checkConfig (args: string[]): number {
  const file = args[0]
  if (!file) {
    process.stderr.write('usage: sluice check-config FILE\n')
    return 2
  }
  try {
    const { config } = loadConfig({ file, env: {} })
    process.stdout.write(`${file}: ok (${config.providers.length} providers, ${config.keys.length} keys, ${config.workers} workers)\n`)
    return 0
  } catch (err) {
    return configFailure(err)
  }
}

function configFailure (err: unknown): number {
  if (err instanceof ConfigError || err instanceof TracingConfigError) {
    process.stderr.write(`sluice: invalid configuration: ${err.message}\n`)
    return 2
  }
  const e = err as { code?: string; message?: string }
  if (e?.code?.startsWith('ERR_PARSE_ARGS')) {
    process.stderr.write(`sluice: ${e.message}\n\n${USAGE}`)
    return 2
  }
  throw err
}

const code = await main(process.argv.slice(2))
if (code >= 0) process.exitCode = code
