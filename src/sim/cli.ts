// `sluice sim`: run the simulated provider in the foreground until SIGINT/SIGTERM.

import { startSim } from './server.ts'

export interface SimArgs {
  host: string
  port: number
  apiKey: string | undefined
}

export function parseSimArgs(argv: readonly string[]): SimArgs {
  const args: SimArgs = { host: '127.0.0.1', port: 8089, apiKey: undefined }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    const eq = arg.indexOf('=')
    const name = eq > 0 ? arg.slice(0, eq) : arg
    const value = (): string => {
      const v = eq > 0 ? arg.slice(eq + 1) : argv[++i]
      if (v === undefined || v === '') throw new Error(`sluice sim: ${name} needs a value`)
      return v
    }
    switch (name) {
      case '--port': {
        const v = value()
        const port = Number(v)
        if (!/^\d+$/.test(v) || port > 65535) throw new Error(`sluice sim: --port must be 0..65535, got ${v}`)
        args.port = port
        break
      }
      case '--host':
        args.host = value()
        break
      case '--api-key':
        args.apiKey = value()
        break
      default:
        throw new Error(`sluice sim: unknown argument ${arg} (usage: sluice sim [--port N] [--host H] [--api-key K])`)
    }
  }
  return args
}

/** Starts the sim, prints its URL, and resolves once a signal has closed it. */
export async function simMain(argv: string[]): Promise<void> {
  const args = parseSimArgs(argv)
  const sim = await startSim({ host: args.host, port: args.port, apiKey: args.apiKey })
  process.stdout.write(`sluice sim listening on ${sim.url}\n`)
  await new Promise<void>(resolve => {
    const stop = (): void => {
      process.off('SIGINT', stop)
      process.off('SIGTERM', stop)
      sim.close().then(resolve, resolve)
    }
    process.on('SIGINT', stop)
    process.on('SIGTERM', stop)
  })
}
