// HAProxy for the scale-out tests: ops/haproxy/haproxy.cfg rendered for the instances a test
// started (their ports), run from a temporary folder in the foreground, and its runtime API
// (the stats socket) to see which servers it holds up.
//
// The rendering changes only what must differ on a test machine — the frontend port, the
// servers' ports, the stats socket's path, the check timing — and fails loudly when the
// template no longer has the lines it replaces, so the test always runs the shipped file.

import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { createConnection, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ROOT } from './gateway.ts'

export const HAPROXY_TEMPLATE = join(ROOT, 'ops/haproxy/haproxy.cfg')

export interface Backend { port: number; adminPort: number }

export interface RenderOptions {
  bindPort: number
  instances: Backend[]
  statsSocket: string
  /** Replaces the template's `default-server` timing, e.g. 'inter 200ms fall 1 rise 1'. */
  check?: string
}

/** The template with the test's ports; every replaced line must be there (else it throws). */
export function renderHaproxy (template: string, o: RenderOptions): string {
  let out = template
  // `by` is what follows the line's kept prefix (the first group).
  const swap = (re: RegExp, by: string, what: string): void => {
    const n = out.match(new RegExp(re.source, 'gm'))?.length ?? 0
    if (n !== 1) throw new Error(`ops/haproxy/haproxy.cfg: expected exactly one ${what}, found ${n}`)
    out = out.replace(new RegExp(re.source, 'm'), (_m, prefix: string) => prefix + by)
  }
  swap(/^(\s*bind )127\.0\.0\.1:8080$/, `127.0.0.1:${o.bindPort}`, 'frontend bind on 127.0.0.1:8080')
  swap(/^(\s*stats socket )\S+/, o.statsSocket, 'stats socket')
  if (o.check) swap(/^(\s*default-server ).*$/, o.check, 'default-server line')
  // Each backend's server lines: the first is the model, one line per instance replaces them.
  for (const backend of ['sluice_sessions', 'sluice_spread']) {
    const start = out.indexOf(`\nbackend ${backend}\n`)
    if (start < 0) throw new Error(`ops/haproxy/haproxy.cfg: no backend ${backend}`)
    const end = out.indexOf('\nbackend ', start + 1) < 0 ? out.length : out.indexOf('\nbackend ', start + 1)
    const lines = out.slice(start, end).split('\n')
    const servers = lines.filter((l) => /^\s*server /.test(l))
    const model = servers[0]
    if (!model || !/^\s*server sluice1 127\.0\.0\.1:\d+ id 1 /.test(model)) throw new Error(`ops/haproxy/haproxy.cfg: ${backend} has no "server sluice1 127.0.0.1:PORT id 1 ..." line`)
    const generated = o.instances.map((b, i) => model
      .replace(/server sluice1 127\.0\.0\.1:\d+ id 1 /, `server sluice${i + 1} 127.0.0.1:${b.port} id ${i + 1} `)
      .replace(/check port \d+/, `check port ${b.adminPort}`)
      .replace(/track (\w+)\/sluice1$/, (_m, px: string) => `track ${px}/sluice${i + 1}`))
    const first = lines.indexOf(model)
    const kept = lines.filter((l) => !/^\s*server /.test(l))
    kept.splice(first, 0, ...generated)
    out = out.slice(0, start) + kept.join('\n') + out.slice(end)
  }
  return out
}

/** The haproxy binary, or a thrown error saying how to get it (the test must not skip). */
export function haproxyBin (): string {
  for (const p of ['/usr/sbin/haproxy', '/usr/local/sbin/haproxy', '/usr/bin/haproxy']) if (existsSync(p)) return p
  const which = spawnSync('sh', ['-c', 'command -v haproxy'], { encoding: 'utf8' })
  if (which.status === 0 && which.stdout.trim()) return which.stdout.trim()
  throw new Error('haproxy is not installed: apt-get install -y haproxy (.ci/run installs it)')
}

export async function freePort (): Promise<number> {
  const srv = createServer()
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve))
  const port = (srv.address() as { port: number }).port
  await new Promise<void>((resolve) => srv.close(() => resolve()))
  return port
}

export interface Haproxy {
  proc: ChildProcess
  port: number
  url: string
  dir: string
  config: string
  logs: string[]
  /** Server name -> status ("UP", "DOWN", "MAINT", ...) in the sluice_sessions backend. */
  servers (): Promise<Map<string, string>>
  stop (): Promise<void>
}

/** Runs the runtime API command `cmd` on the stats socket and returns its answer. */
export function runtimeApi (socket: string, cmd: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = createConnection(socket)
    let out = ''
    c.setEncoding('utf8')
    c.on('data', (d: string) => { out += d })
    c.on('end', () => resolve(out))
    c.on('error', reject)
    c.write(`${cmd}\n`)
  })
}

export async function startHaproxy (instances: Backend[], check = 'inter 200ms fall 1 rise 1'): Promise<Haproxy> {
  const bin = haproxyBin()
  const dir = mkdtempSync(join(tmpdir(), 'sluice-haproxy-'))
  const port = await freePort()
  const statsSocket = join(dir, 'admin.sock')
  const config = renderHaproxy(readFileSync(HAPROXY_TEMPLATE, 'utf8'), { bindPort: port, instances, statsSocket, check })
  const file = join(dir, 'haproxy.cfg')
  writeFileSync(file, config)
  // -db: foreground, no daemon; logs ("log stdout") on its stdout.
  const proc = spawn(bin, ['-db', '-f', file], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] })
  const logs: string[] = []
  proc.stdout!.setEncoding('utf8').on('data', (d: string) => logs.push(...d.split('\n').filter(Boolean)))
  proc.stderr!.setEncoding('utf8').on('data', (d: string) => logs.push(...d.split('\n').filter(Boolean).map((l) => `stderr: ${l}`)))
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()))
  const servers = async (): Promise<Map<string, string>> => {
    const csv = await runtimeApi(statsSocket, 'show stat')
    const lines = csv.split('\n').filter(Boolean)
    const head = lines[0].replace(/^# /, '').split(',')
    const px = head.indexOf('pxname')
    const sv = head.indexOf('svname')
    const st = head.indexOf('status')
    const out = new Map<string, string>()
    for (const l of lines.slice(1)) {
      const f = l.split(',')
      if (f[px] === 'sluice_sessions' && f[sv] !== 'BACKEND') out.set(f[sv], f[st])
    }
    return out
  }
  const h: Haproxy = {
    proc,
    port,
    url: `http://127.0.0.1:${port}`,
    dir,
    config,
    logs,
    servers,
    async stop () {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM')
      await exited
    },
  }
  // Ready: the socket answers and every server has passed its first check.
  const end = Date.now() + 10_000
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`haproxy exited with ${proc.exitCode}:\n${logs.join('\n')}`)
    const s = await servers().catch(() => null)
    if (s && s.size === instances.length && [...s.values()].every((v) => v === 'UP')) return h
    if (Date.now() > end) {
      await h.stop()
      throw new Error(`haproxy did not see every instance up: ${JSON.stringify(s && [...s])}\n${logs.join('\n')}`)
    }
    await new Promise((r) => setTimeout(r, 50))
  }
}
