// Starts the real `sluice serve` as a child process (the real primary, workers, ledger and
// admin plane) and gives tests handles on it: ports, metrics, logs, stop.

import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { closeSync, constants, mkdtempSync, openSync, writeFileSync } from 'node:fs'
import { Socket } from 'node:net'
import type { Readable } from 'node:stream'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Client } from 'undici'
import { notIdle, scrape } from '../../src/load/scrape.ts'

export { scrape }

export const ROOT = new URL('../../', import.meta.url).pathname
export const NODE = process.execPath
export const BIN = join(ROOT, 'bin/sluice.ts')

export interface Gateway {
  proc: ChildProcess
  port: number
  adminPort: number
  logs: string[]
  /** The gateway's stdout as this process reads it (pause it to stop reading). */
  stdout: Readable
  /** Resolves with the exit code once the process has exited. */
  exited: Promise<number | null>
  metrics (): Promise<Map<string, number>>
  stop (): Promise<number | null>
}

export function writeConfig (config: unknown): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-test-'))
  const file = join(dir, 'config.json')
  writeFileSync(file, JSON.stringify(config))
  return file
}

export interface StartOptions {
  env?: Record<string, string>
  args?: string[]
  /** The entry to run (default: the sources' bin/sluice.ts; test/helpers/build.ts gives the compiled one). */
  bin?: string
  /** Node's own flags, before the entry. */
  nodeArgs?: string[]
  /** fd 1 of the gateway: the socket Node gives a child (default), or a FIFO (as a container's). */
  stdout?: 'socket' | 'fifo'
}

/** A FIFO in a fresh folder: the end to pass a child as its fd 1, and this end as a stream. */
export function fifo (): { childFd: number; reader: Readable } {
  const path = join(mkdtempSync(join(tmpdir(), 'sluice-test-')), 'stdout')
  const made = spawnSync('mkfifo', [path])
  if (made.status !== 0) throw new Error(`mkfifo failed: ${made.stderr}`)
  const readFd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK)
  return { childFd: openSync(path, constants.O_WRONLY), reader: new Socket({ fd: readFd, readable: true, writable: false }) }
}

export async function startGateway (config: Record<string, unknown>, opts: StartOptions = {}): Promise<Gateway> {
  const file = writeConfig({ listen: { port: 0, adminPort: 0 }, ...config })
  const pipe = opts.stdout === 'fifo' ? fifo() : null
  const proc = spawn(NODE, [...(opts.nodeArgs ?? []), opts.bin ?? BIN, 'serve', '--config', file, ...(opts.args ?? [])], {
    env: { ...process.env, SLUICE_TEST_HOOKS: '1', ...opts.env },
    stdio: ['ignore', pipe === null ? 'pipe' : pipe.childFd, 'pipe'],
  })
  if (pipe !== null) closeSync(pipe.childFd)
  const stdout = pipe?.reader ?? proc.stdout!
  const logs: string[] = []
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)))
  const ready = new Promise<{ port: number; adminPort: number }>((resolve, reject) => {
    let buf = ''
    stdout.setEncoding('utf8')
    stdout.on('data', (chunk: string) => {
      buf += chunk
      let nl
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl)
        buf = buf.slice(nl + 1)
        logs.push(line)
        try {
          const j = JSON.parse(line)
          if (j.msg === 'sluice ready') resolve({ port: j.port, adminPort: j.adminPort })
        } catch {}
      }
    })
    proc.stderr!.setEncoding('utf8')
    proc.stderr!.on('data', (chunk: string) => logs.push(`stderr: ${chunk}`))
    void exited.then((code) => reject(new Error(`sluice exited with ${code} before ready:\n${logs.join('\n')}`)))
  })
  const { port, adminPort } = await ready
  return {
    proc,
    port,
    adminPort,
    logs,
    stdout,
    exited,
    metrics: () => scrape(adminPort),
    async stop () {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM')
      return exited
    },
  }
}

/** Polls until the gateway's ledger is idle (or the attempts run out); returns what is not. */
export async function waitIdle (gw: Gateway, attempts = 100): Promise<Record<string, number>> {
  let bad: Record<string, number> = {}
  for (let i = 0; i < attempts; i++) {
    bad = notIdle(await gw.metrics())
    if (Object.keys(bad).length === 0) return bad
    await new Promise((r) => setTimeout(r, 20))
  }
  return bad
}

/** A one-connection client pinned to the worker on `row` (reusePort spreads connections). */
export async function clientOnRow (port: number, row: number, tries = 200): Promise<Client> {
  for (let i = 0; i < tries; i++) {
    const c = new Client(`http://127.0.0.1:${port}`, { pipelining: 1 })
    // A probe that lands on a worker that is dying fails: try another connection.
    const j = await c.request({ method: 'GET', path: '/_test/whoami' })
      .then((res) => res.body.json() as Promise<{ row: number }>, () => null)
    if (j?.row === row) return c
    await c.destroy().catch(() => {})
  }
  throw new Error(`no connection landed on worker row ${row}`)
}

export async function until (pred: () => Promise<boolean> | boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms
  while (Date.now() < end) {
    if (await pred()) return
    await new Promise((r) => setTimeout(r, 20))
  }
  throw new Error(`timed out waiting for ${what}`)
}
