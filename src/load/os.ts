// OS plumbing for the load qualification (`npm run load`, src/load/) and exchange.bench.ts:
// a CPU quota per gateway process (cgroup v2 cpu.max, else cgroup v1 CFS quota, else
// `taskset -c 0`, else none — detected in that order and reported; default one vCPU), and the
// /proc readers (CPU time, RSS) they sample.
//
// A process is put under its quota from its first instruction: it is spawned through
// `sh -c 'echo $$ > <cgroup>/cgroup.procs && exec "$@"'` (or `taskset -c 0 ...`), so the pid
// the benchmark sees is the gateway's own and start-up runs under the quota too.

import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { availableParallelism, cpus } from 'node:os'

export type QuotaKind = 'cgroup-v2' | 'cgroup-v1' | 'taskset' | 'none'

const PERIOD_US = 100_000
const QUOTA_US = 100_000 // one vCPU

export interface QuotaSize {
  /** CFS quota per period, µs (50000 of 100000 = half a vCPU). */
  quotaUs: number
  periodUs: number
}

export interface Quota {
  readonly kind: QuotaKind
  /** What was set up, for the report (e.g. "cgroup v1 cpu.cfs_quota_us=100000/100000"). */
  readonly detail: string
  /** Why earlier methods were not used. */
  readonly fallbacks: string[]
  /** The cgroup directory, null when not a cgroup. */
  readonly dir: string | null
  /** The command and arguments that run `cmd args` under the quota. */
  wrap (cmd: string, args: string[]): [string, string[]]
  /** Whether the quota really holds for this pid (its cgroup, or its CPU affinity). */
  holds (pid: number): boolean
  /** Throttling statistics of the cgroup so far ("" when not a cgroup). */
  throttled (): string
  /** Removes the cgroup (once its processes have exited). Idempotent; returns false if it could not. */
  remove (): boolean
}

function tryWrite (file: string, value: string): boolean {
  try { writeFileSync(file, value); return true } catch { return false }
}
function tryRead (file: string): string | null {
  try { return readFileSync(file, 'utf8') } catch { return null }
}

function shWrap (procsFile: string) {
  return (cmd: string, args: string[]): [string, string[]] =>
    ['/bin/sh', ['-c', `echo $$ > '${procsFile}' && exec "$@"`, 'sh', cmd, ...args]]
}

function cgroupQuota (kind: 'cgroup-v2' | 'cgroup-v1', dir: string, detail: string, fallbacks: string[]): Quota {
  let removed = false
  const statFile = join(dir, 'cpu.stat')
  return {
    kind,
    detail,
    fallbacks,
    dir,
    wrap: shWrap(join(dir, 'cgroup.procs')),
    holds (pid) {
      const procs = tryRead(join(dir, 'cgroup.procs'))
      return procs !== null && procs.split('\n').includes(String(pid))
    },
    throttled () {
      const s = tryRead(statFile)
      if (s === null) return ''
      const f = Object.fromEntries(s.trim().split('\n').map((l) => l.split(' ')).map(([k, v]) => [k, Number(v)]))
      const ms = kind === 'cgroup-v1' ? (f.throttled_time ?? 0) / 1e6 : (f.throttled_usec ?? 0) / 1e3
      return `${f.nr_throttled ?? 0}/${f.nr_periods ?? 0} periods throttled, ${ms.toFixed(0)} ms`
    },
    remove () {
      if (removed) return true
      try { rmdirSync(dir); removed = true } catch (e) { if ((e as NodeJS.ErrnoException).code === 'ENOENT') removed = true }
      return removed
    },
  }
}

/**
 * Detects what the host offers and sets up a CPU quota named `name` (default one vCPU).
 * `taskset` pins to one whole CPU whatever the size asked; callers that need a fraction of a
 * CPU must check `kind`.
 */
export function makeQuota (name: string, size: QuotaSize = { quotaUs: QUOTA_US, periodUs: PERIOD_US }): Quota {
  const fallbacks: string[] = []
  const { quotaUs, periodUs } = size

  // cgroup v2: a unified hierarchy whose root offers the cpu controller.
  const v2root = [
    '/sys/fs/cgroup',
    '/sys/fs/cgroup/unified',
  ].find((d) => existsSync(join(d, 'cgroup.controllers')))
  if (v2root === undefined) fallbacks.push('cgroup v2: no unified hierarchy')
  else {
    const controllers = (tryRead(join(v2root, 'cgroup.controllers')) ?? '').trim().split(/\s+/)
    if (!controllers.includes('cpu')) fallbacks.push(`cgroup v2: ${v2root} has no cpu controller`)
    else {
      const subtree = (tryRead(join(v2root, 'cgroup.subtree_control')) ?? '').split(/\s+/)
      const dir = join(v2root, name)
      if (!subtree.includes('cpu') && !tryWrite(join(v2root, 'cgroup.subtree_control'), '+cpu')) fallbacks.push('cgroup v2: cannot enable +cpu')
      else {
        try {
          mkdirSync(dir)
          writeFileSync(join(dir, 'cpu.max'), `${quotaUs} ${periodUs}`)
          if ((tryRead(join(dir, 'cpu.max')) ?? '').trim() === `${quotaUs} ${periodUs}`) {
            return cgroupQuota('cgroup-v2', dir, `cgroup v2 cpu.max=${quotaUs} ${periodUs}`, fallbacks)
          }
          fallbacks.push('cgroup v2: cpu.max did not take')
        } catch (e) { fallbacks.push(`cgroup v2: ${(e as Error).message}`) }
        try { rmdirSync(dir) } catch {}
      }
    }
  }

  // cgroup v1: the cpu controller's CFS quota (root only).
  const v1root = '/sys/fs/cgroup/cpu'
  if (!existsSync(join(v1root, 'cpu.cfs_quota_us'))) fallbacks.push('cgroup v1: no cpu controller mounted')
  else {
    const dir = join(v1root, name)
    try {
      mkdirSync(dir)
      writeFileSync(join(dir, 'cpu.cfs_period_us'), String(periodUs))
      writeFileSync(join(dir, 'cpu.cfs_quota_us'), String(quotaUs))
      if (Number(tryRead(join(dir, 'cpu.cfs_quota_us'))) === quotaUs) {
        return cgroupQuota('cgroup-v1', dir, `cgroup v1 cpu.cfs_quota_us=${quotaUs}/${periodUs}`, fallbacks)
      }
      fallbacks.push('cgroup v1: quota did not take')
    } catch (e) { fallbacks.push(`cgroup v1: ${(e as Error).message}`) }
    try { rmdirSync(dir) } catch {}
  }

  // taskset: pins to one CPU (a whole core, not a CFS share).
  return tasksetQuota(fallbacks) ?? noQuota('no quota', [...fallbacks, 'taskset: not available'])
}

/** `taskset -c 0` (one whole CPU), or null when taskset does not work here. */
export function tasksetQuota (fallbacks: string[] = []): Quota | null {
  if (spawnSync('taskset', ['-c', '0', 'true']).status !== 0) return null
  return {
    kind: 'taskset',
    detail: 'taskset -c 0',
    fallbacks,
    dir: null,
    wrap: (cmd, args) => ['taskset', ['-c', '0', cmd, ...args]],
    holds: (pid) => /Cpus_allowed_list:\s*0\s*$/m.test(tryRead(`/proc/${pid}/status`) ?? ''),
    throttled: () => '',
    remove: () => true,
  }
}

/** No quota: runs the command as it is. */
export function noQuota (detail: string, fallbacks: string[] = []): Quota {
  return { kind: 'none', detail, fallbacks, dir: null, wrap: (cmd, args) => [cmd, args], holds: () => false, throttled: () => '', remove: () => true }
}

/**
 * Each living thread's CPU time so far, in ns: the first field of /proc/<pid>/task/<tid>/schedstat,
 * the scheduler's own run time (/proc/<pid>/stat's utime + stime come in clock ticks, 10 ms: a
 * 30 ms block read that way is off by up to a third). Empty when the process is gone.
 */
export function threadCpuNs (pid: number): Map<number, number> {
  const out = new Map<number, number>()
  let tids: string[]
  try { tids = readdirSync(`/proc/${pid}/task`) } catch { return out }
  for (const tid of tids) {
    const s = tryRead(`/proc/${pid}/task/${tid}/schedstat`)
    if (s !== null) out.set(Number(tid), Number(s.slice(0, s.indexOf(' '))))
  }
  return out
}

/**
 * CPU ms of `pid` since `before` (threadCpuNs), thread by thread: a thread started since counts
 * from zero; one that ended since is not counted (what it ran after `before` is lost, not its
 * whole life). NaN when the process is gone.
 */
export function cpuMsSince (pid: number, before: ReadonlyMap<number, number>): number {
  const now = threadCpuNs(pid)
  if (now.size === 0) return NaN
  let ns = 0
  for (const [tid, t] of now) ns += t - (before.get(tid) ?? 0)
  return ns / 1e6
}

/** VmRSS in MB (MiB), NaN when the process is gone. */
export function rssMb (pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(tryRead(`/proc/${pid}/status`) ?? '')
  return m ? Number(m[1]) / 1024 : NaN
}

export function alive (pid: number): boolean {
  const s = tryRead(`/proc/${pid}/stat`)
  if (s === null) return false
  const state = s.slice(s.lastIndexOf(')') + 2, s.lastIndexOf(')') + 3)
  return state !== 'Z' && state !== 'X'
}

/** Samples VmRSS of some pids every `everyMs`; `window()` starts a peak window, `peak()` reads it. */
export class RssSampler {
  private readonly timer: NodeJS.Timeout
  private readonly peaks = new Map<number, number>()
  private readonly pids: number[]

  constructor (pids: number[], everyMs = 50) {
    this.pids = pids
    this.timer = setInterval(() => this.sample(), everyMs)
    this.timer.unref()
  }

  private sample (): void {
    for (const pid of this.pids) {
      const mb = rssMb(pid)
      if (!Number.isNaN(mb) && mb > (this.peaks.get(pid) ?? 0)) this.peaks.set(pid, mb)
    }
  }

  /** Starts a new peak window (with a sample at its start). */
  window (): void {
    this.peaks.clear()
    this.sample()
  }

  /** The peak since `window()` (with a sample now). */
  peak (pid: number): number {
    this.sample()
    return this.peaks.get(pid) ?? NaN
  }

  stop (): void { clearInterval(this.timer) }
}

/**
 * CPU model and count, for the report: the CPUs online, and, when a caller's affinity
 * (taskset) narrows them, how many this process may use (`nproc` alone reports the latter).
 */
export function machine (): string {
  const info = tryRead('/proc/cpuinfo') ?? ''
  const model = /^model name\s*:\s*(.+)$/m.exec(info)?.[1]?.trim() ?? 'unknown CPU'
  const online = cpus().length
  const usable = availableParallelism()
  return `${online} CPUs online${usable < online ? ` (${usable} usable by this process)` : ''}, ${model}`
}

// ---------------------------------------------------------------------------------------
// Child processes (load runs and benchmarks start the simulated provider and sluice)

export interface Child {
  name: string
  proc: ChildProcess
  pid: number
  /** The last 4000 characters of its output, for failure reports. */
  tail: string
  exited: Promise<number | null>
  gone: boolean
}

export interface LaunchOptions {
  env?: NodeJS.ProcessEnv
  /** Lines for which this is false are read but not kept in the tail (e.g. per-request lines). */
  keepInTail?: (line: string) => boolean
}

/**
 * Spawns a child and feeds each stdout line to `onLine` until it returns true (e.g. "ready
 * seen"); later output is only kept in the tail.
 */
export function launchChild (name: string, [cmd, argv]: [string, string[]], onLine: (line: string) => boolean | void, opts: LaunchOptions = {}): Child {
  const proc = spawn(cmd, argv, { stdio: ['pipe', 'pipe', 'pipe'], env: opts.env ?? process.env })
  if (proc.pid === undefined) throw new Error(`could not spawn ${name}`)
  const child: Child = {
    name,
    proc,
    pid: proc.pid,
    tail: '',
    gone: false,
    exited: new Promise((resolve) => proc.once('exit', (code) => { child.gone = true; resolve(code) })),
  }
  let reading = true
  let buf = ''
  proc.stdout!.setEncoding('utf8')
  proc.stdout!.on('data', (chunk: string) => {
    if (!reading) { child.tail = (child.tail + chunk).slice(-4000); return }
    buf += chunk
    let nl
    while (reading && (nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl)
      buf = buf.slice(nl + 1)
      if (opts.keepInTail?.(line) ?? true) child.tail = (child.tail + line + '\n').slice(-4000)
      if (onLine(line) === true) reading = false
    }
  })
  proc.stderr!.setEncoding('utf8')
  proc.stderr!.on('data', (chunk: string) => { child.tail = (child.tail + chunk).slice(-4000) })
  proc.stdin!.on('error', () => {})
  proc.on('error', (e) => { child.tail += String(e) })
  return child
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves once it exited (or `killMs` more passed). */
export async function stopChild (c: Child, graceMs = 8000, killMs = 3000): Promise<void> {
  if (c.gone) return
  c.proc.stdin?.end()
  c.proc.kill('SIGTERM')
  const wait = (ms: number) => new Promise<boolean>((resolve) => { const t = setTimeout(() => resolve(false), ms); void c.exited.then(() => { clearTimeout(t); resolve(true) }) })
  if (!(await wait(graceMs)) && !c.gone) {
    c.proc.kill('SIGKILL')
    await wait(killMs)
  }
}
