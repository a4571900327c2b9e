// ops/systemd/sluice.service: systemd's own verifier on a copy whose paths exist here, the
// hardening it must carry, memory and stop timing consistent with the config's defaults, and
// — with strace — that every system call sluice makes is allowed by its SystemCallFilter.

import t from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { request } from 'undici'
import { limitsSchema } from '../../src/config/schema.ts'
import { NODE_FLAGS } from '../../src/node-flags.ts'
import { scrape } from '../../src/load/scrape.ts'
import { ROOT } from '../helpers/gateway.ts'
import { buildDist } from '../helpers/build.ts'

const UNIT = join(ROOT, 'ops/systemd/sluice.service')
const text = readFileSync(UNIT, 'utf8')
const ANALYZE = '/usr/bin/systemd-analyze'
const hasAnalyze = existsSync(ANALYZE)

/** section -> key -> values (a key may repeat: SystemCallFilter). */
function parseUnit (s: string): Map<string, Map<string, string[]>> {
  const out = new Map<string, Map<string, string[]>>()
  let cur: Map<string, string[]> | null = null
  for (const raw of s.split('\n')) {
    const line = raw.trim()
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue
    const sec = /^\[(.+)\]$/.exec(line)
    if (sec) { cur = new Map(); out.set(sec[1], cur); continue }
    const eq = line.indexOf('=')
    if (cur === null || eq < 0) throw new Error(`not a unit line: ${line}`)
    const k = line.slice(0, eq).trim()
    cur.set(k, [...(cur.get(k) ?? []), line.slice(eq + 1).trim()])
  }
  return out
}
const unit = parseUnit(text)
const service = unit.get('Service')!
const one = (k: string) => { const v = service.get(k); return v === undefined ? undefined : v[v.length - 1] }

/** The unit with its /opt/sluice paths pointing at this checkout (which exists). */
function localCopy (extra = ''): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-unit-'))
  const file = join(dir, 'sluice.service')
  const local = text
    .replaceAll('/opt/sluice/node_modules/.bin/node', join(ROOT, 'node_modules/.bin/node'))
    .replaceAll('/opt/sluice/dist/bin/sluice.js', join(ROOT, 'dist/bin/sluice.js'))
    .replace(/^WorkingDirectory=.*$/m, `WorkingDirectory=${ROOT.replace(/\/$/, '')}`)
    .replace('[Service]\n', `[Service]\n${extra}`)
  writeFileSync(file, local)
  return file
}

// Messages meaning systemd-analyze could not work here at all (no manager, no bus), as
// opposed to findings about the unit.
const ENVIRONMENTAL = /Failed to (initialize|create|set up|setup) manager|Failed to connect to (system )?bus|System has not been booted with systemd|Failed to (allocate|open) (manager|runtime)/i

t.test('systemd-analyze verify accepts the unit (paths pointed at this checkout)', { skip: hasAnalyze ? false : `${ANALYZE} is not installed: only the content checks below run` }, async (t) => {
  const r = spawnSync(ANALYZE, ['verify', localCopy()], { encoding: 'utf8', timeout: 30_000 })
  const said = (r.stdout + r.stderr).trim()
  if (r.status !== 0 && ENVIRONMENTAL.test(said)) {
    t.pass(`systemd-analyze cannot run here (${said.split('\n')[0]}): content checks only`)
    return
  }
  t.equal(r.status, 0, `verify exits 0${said ? `: ${said}` : ''}`)
  // Unknown keys and unparsable values are only warnings (exit 0): any output is a finding.
  t.equal(said, '', 'no warnings')

  // The check has teeth: the same verifier flags a bad key and a bad value.
  const bad = spawnSync(ANALYZE, ['verify', localCopy('MemoryMaxx=2G\nCPUQuota=lots\n')], { encoding: 'utf8', timeout: 30_000 })
  t.match(bad.stderr, /Unknown key name 'MemoryMaxx'|Unknown key 'MemoryMaxx'/, 'an unknown key is reported')
  t.match(bad.stderr, /Invalid CPU quota 'lots'|CPUQuota/, 'a bad value is reported')
})

t.test('systemd-analyze security rates the unit OK or better', { skip: hasAnalyze ? false : 'no systemd-analyze' }, async (t) => {
  const r = spawnSync(ANALYZE, ['security', '--offline=true', '--no-pager', localCopy()], { encoding: 'utf8', timeout: 30_000 })
  const m = /Overall exposure level for \S+: ([\d.]+) (\w+)/.exec(r.stdout)
  if (m === null) { t.pass(`no offline security analysis in this systemd: ${(r.stderr || r.stdout).trim().split('\n')[0]}`); return }
  t.ok(Number(m[1]) <= 2, `exposure ${m[1]} ${m[2]} (at most 2.0)`)
})

t.test('runs Node 24 from the install with the config file; secrets from an optional env file', async (t) => {
  t.equal(one('ExecStart'), `/opt/sluice/node_modules/.bin/node ${NODE_FLAGS.join(' ')} /opt/sluice/dist/bin/sluice.js serve --config /etc/sluice/config.json`, 'the compiled entry npm ci builds, with the launch flags')
  t.equal(one('EnvironmentFile'), '-/etc/sluice/env')
  t.equal(one('Restart'), 'on-failure')
  t.equal(one('RestartPreventExitStatus'), '2', 'an invalid config (exit 2) does not restart in a loop')
  t.equal(one('CPUQuota'), '100%')
  t.equal(unit.get('Install')?.get('WantedBy')?.[0], 'multi-user.target')
})

t.test('stop: SIGTERM, and systemd waits longer than the drain', async (t) => {
  t.equal(one('KillSignal'), 'SIGTERM')
  const stop = /^(\d+)s$/.exec(one('TimeoutStopSec') ?? '')
  t.ok(stop, 'TimeoutStopSec in seconds')
  const drainMs = limitsSchema.parse({}).drainMs
  t.ok(Number(stop![1]) * 1000 >= drainMs + 10_000, `TimeoutStopSec ${stop![1]} s leaves at least 10 s after drainMs ${drainMs} ms`)
})

t.test('MemoryMax sits above every declared bound (2 workers, default limits) and leaves the 6 GiB host room', async (t) => {
  const m = /^(\d+)([KMG])$/.exec(one('MemoryMax') ?? '')
  t.ok(m, 'MemoryMax in K/M/G')
  const MiB = 1024 * 1024
  const max = Number(m![1]) * { K: 1024, M: MiB, G: 1024 * MiB }[m![2] as 'K' | 'M' | 'G']
  const L = limitsSchema.parse({})
  const workers = 2
  const declared = workers * (L.workerHeapMb + L.workerYoungGenMb) * MiB +
    workers * L.parserThreads * (L.parserHeapMb + L.parserYoungGenMb) * MiB +
    L.storageBytes + L.sessionEventBytes +
    (64 + 150) * MiB // the primary's heap and the measured baseline (see the unit's comment)
  t.ok(max >= declared * 1.4, `MemoryMax ${max / MiB} MiB is >= 1.4 x the declared ${Math.round(declared / MiB)} MiB`)
  t.ok(max <= 3 * 1024 * MiB, 'at most half of a 6 GiB host')
  t.equal(one('MemorySwapMax'), '0')
  t.match(text, /MemoryMax[\s\S]*?=2G/, 'present')
  t.match(text, /# +total +~1\.3 GiB/, 'the arithmetic is written down in the unit')
})

t.test('hardening', async (t) => {
  const expected: Record<string, string> = {
    DynamicUser: 'yes',
    NoNewPrivileges: 'yes',
    ProtectSystem: 'strict',
    ProtectHome: 'yes',
    PrivateTmp: 'yes',
    PrivateDevices: 'yes',
    ProtectKernelTunables: 'yes',
    ProtectKernelModules: 'yes',
    ProtectKernelLogs: 'yes',
    ProtectControlGroups: 'yes',
    RestrictAddressFamilies: 'AF_INET AF_INET6 AF_UNIX',
    RestrictNamespaces: 'yes',
    LockPersonality: 'yes',
    CapabilityBoundingSet: '',
    UMask: '0077',
  }
  for (const [k, v] of Object.entries(expected)) t.equal(one(k), v, `${k}=${v}`)
  t.ok(service.get('SystemCallFilter')?.includes('@system-service'), 'SystemCallFilter=@system-service')
  t.match(one('LimitNOFILE') ?? '', /^\d+$/, 'LimitNOFILE is a number')
  t.ok(Number(one('LimitNOFILE')) >= 4096, 'LimitNOFILE leaves room for 160 clients and the provider pools')
  t.notOk(service.has('MemoryDenyWriteExecute'), 'MemoryDenyWriteExecute is not set (V8 JIT needs W+X)')
  t.match(text, /#[^\n]*MemoryDenyWriteExecute[^\n]*NOT set[\s\S]{0,200}V8[\s\S]{0,100}W\+X/, 'and a comment says why')
})

// ---------------------------------------------------------------------------------------
// The system call filter against what sluice really calls

/** Expands `systemd-analyze syscall-filter` (all groups) into group -> system calls. */
function syscallGroups (): Map<string, Set<string>> | null {
  const r = spawnSync(ANALYZE, ['syscall-filter', '--no-pager'], { encoding: 'utf8', timeout: 30_000 })
  if (r.status !== 0) return null
  const raw = new Map<string, string[]>()
  let cur: string[] | null = null
  for (const line of r.stdout.split('\n')) {
    if (/^@\S+/.test(line)) { cur = []; raw.set(line.split(/\s+/)[0], cur); continue }
    const s = line.trim()
    if (cur === null || s === '' || s.startsWith('#')) continue
    cur.push(s)
  }
  const expand = (g: string, seen: Set<string>): Set<string> => {
    const out = new Set<string>()
    for (const x of raw.get(g) ?? []) {
      if (!x.startsWith('@')) out.add(x)
      else if (!seen.has(x)) { seen.add(x); for (const y of expand(x, seen)) out.add(y) }
    }
    return out
  }
  return new Map([...raw.keys()].map((g) => [g, expand(g, new Set([g]))]))
}

/**
 * The set an allow-list unit allows, as systemd.exec(5) applies its lines: in order, an allow
 * line adds its calls and a `~` line removes them, so a later line overrides an earlier one
 * (the unit allows `setpriority` back after removing @resources).
 */
function allowedBy (lines: string[], groups: Map<string, Set<string>>): Set<string> {
  const allowed = new Set<string>()
  if (lines.length > 0 && lines[0].startsWith('~')) throw new Error('a deny-list SystemCallFilter: not what this test models')
  for (const line of lines) {
    const deny = line.startsWith('~')
    for (const item of (deny ? line.slice(1) : line).split(/\s+/).filter(Boolean)) {
      const calls = item.startsWith('@') ? groups.get(item) : new Set([item])
      if (calls === undefined) throw new Error(`unknown system call group ${item}`)
      for (const c of calls) if (deny) allowed.delete(c); else allowed.add(c)
    }
  }
  return allowed
}

const strace = ['/usr/bin/strace', '/bin/strace'].find((p) => existsSync(p))
t.test('every system call sluice makes (start, exchanges on all three protocols, metrics, drain) passes the filter', { skip: hasAnalyze && strace !== undefined ? false : 'needs strace and systemd-analyze' }, async (t) => {
  const groups = syscallGroups()
  if (groups === null) { t.fail('systemd-analyze syscall-filter failed'); return }
  const allowed = allowedBy(service.get('SystemCallFilter') ?? [], groups)
  t.ok(allowed.size > 100, `the filter allows ${allowed.size} system calls`)

  const out = join(mkdtempSync(join(tmpdir(), 'sluice-strace-')), 'summary.txt')
  // What ExecStart runs: the compiled entry (built afresh, as npm ci builds it), with its flags.
  const p = spawn(strace!, ['-f', '-qq', '-c', '-o', out, process.execPath, ...NODE_FLAGS, buildDist().entry, 'serve'], {
    env: { ...process.env, SLUICE_PORT: '0', SLUICE_ADMIN_PORT: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let err = ''
  p.stderr.on('data', (d) => { err += d })
  const exited = new Promise<number | null>((resolve) => p.once('exit', (code) => resolve(code)))
  const ready = await new Promise<{ port: number; adminPort: number; pid: number } | null>((resolve) => {
    let buf = ''
    p.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      buf += chunk
      for (const line of buf.split('\n')) if (line.includes('"sluice ready"')) resolve(JSON.parse(line))
      buf = buf.slice(buf.lastIndexOf('\n') + 1)
    })
    void exited.then(() => resolve(null))
    setTimeout(() => resolve(null), 30_000).unref()
  })
  if (ready === null) {
    p.kill('SIGKILL')
    if (/ptrace|Operation not permitted/i.test(err)) { t.pass(`strace cannot trace here (${err.trim().split('\n')[0]}): not checked`); return }
    t.fail(`sluice did not start under strace: ${err}`)
    return
  }
  const auth = { authorization: 'Bearer sk-sluice-demo', 'content-type': 'application/json', 'anthropic-version': '2023-06-01' }
  const text = 'hello\n#sim tokens=20 interval=1 tools=1'
  const calls: Array<[string, unknown]> = [
    ['/v1/chat/completions', { model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: text }] }],
    ['/v1/responses', { model: 'gpt-5.5', stream: true, input: text }],
    ['/v1/messages', { model: 'claude-opus-5-5', max_tokens: 64, stream: true, messages: [{ role: 'user', content: text }] }],
    ['/v1/chat/completions', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: text }] }],
  ]
  for (const [path, body] of calls) {
    const res = await request(`http://127.0.0.1:${ready.port}${path}`, { method: 'POST', headers: auth, body: JSON.stringify(body) })
    const said = await res.body.text()
    t.equal(res.statusCode, 200, `${path} answered${res.statusCode === 200 ? '' : `: ${said.slice(0, 300)}`}`)
  }
  for (const path of ['/metrics', '/healthz', '/readyz', '/capabilities']) await (await request(`http://127.0.0.1:${ready.adminPort}${path}`)).body.text()
  // And an idle spell long enough for the idle collection and the malloc_trim after it (koffi
  // loaded, the call made on the thread pool: src/malloc-trim.ts).
  let trims = 0
  for (let i = 0; i < 120 && trims === 0; i++) {
    await new Promise((r) => setTimeout(r, 250))
    trims = (await scrape(ready.adminPort)).get('sluice_malloc_trims_total') ?? 0
  }
  t.ok(trims >= 1, `an idle malloc_trim ran under strace (${trims})`)
  process.kill(ready.pid, 'SIGTERM') // sluice itself, not strace
  t.equal(await exited, 0, 'drained and exited 0 under strace')

  const used = readFileSync(out, 'utf8').split('\n')
    .map((l) => l.trim().split(/\s+/))
    .filter((f) => f.length >= 5 && /^[\d.]+$/.test(f[0]) && f[f.length - 1] !== 'total')
    .map((f) => f[f.length - 1])
  t.ok(used.length > 20, `${used.length} distinct system calls seen`)
  const outside = used.filter((s) => !allowed.has(s))
  t.same(outside, [], `all inside SystemCallFilter (${used.join(' ')})`)
})

// ops/systemd/sluice@.service: the templated unit for several instances on one host.
const TEMPLATE = join(ROOT, 'ops/systemd/sluice@.service')

t.test('the template sluice@.service is sluice.service plus the instance lines only', async (t) => {
  const tpl = parseUnit(readFileSync(TEMPLATE, 'utf8'))
  const differs: Record<string, string[]> = {
    'Unit.Description': ['sluice model-exchange gateway, instance %i'],
    'Service.Environment': ['NODE_COMPILE_CACHE=/var/cache/sluice', 'MALLOC_ARENA_MAX=1', 'SLUICE_INSTANCE_ID=%H:%i'],
    'Service.EnvironmentFile': ['-/etc/sluice/env', '/etc/sluice/instance-%i.env'],
  }
  t.same([...tpl.keys()], [...unit.keys()], 'the same sections')
  for (const [section, keys] of unit) {
    const other = tpl.get(section)!
    const names = new Set([...keys.keys(), ...other.keys()])
    for (const k of names) {
      const want = differs[`${section}.${k}`] ?? keys.get(k)
      t.same(other.get(k), want, `[${section}] ${k}`)
    }
  }
})

t.test('systemd-analyze verify accepts an instance of the template', { skip: hasAnalyze ? false : `${ANALYZE} is not installed` }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-unit-'))
  const local = (extra: string): string => {
    const file = join(dir, 'sluice@1.service')
    writeFileSync(file, readFileSync(TEMPLATE, 'utf8')
      .replaceAll('/opt/sluice/node_modules/.bin/node', join(ROOT, 'node_modules/.bin/node'))
      .replaceAll('/opt/sluice/dist/bin/sluice.js', join(ROOT, 'dist/bin/sluice.js'))
      .replace(/^WorkingDirectory=.*$/m, `WorkingDirectory=${ROOT.replace(/\/$/, '')}`)
      .replace('[Service]\n', `[Service]\n${extra}`))
    return file
  }
  const r = spawnSync(ANALYZE, ['verify', local('')], { encoding: 'utf8', timeout: 30_000 })
  const said = (r.stdout + r.stderr).trim()
  if (r.status !== 0 && ENVIRONMENTAL.test(said)) {
    t.pass(`systemd-analyze cannot run here (${said.split('\n')[0]}): the content check above only`)
    return
  }
  t.equal(r.status, 0, `verify exits 0${said ? `: ${said}` : ''}`)
  t.equal(said, '', 'no warnings')
  const bad = spawnSync(ANALYZE, ['verify', local('MemoryMaxx=2G\n')], { encoding: 'utf8', timeout: 30_000 })
  t.match(bad.stderr, /MemoryMaxx/, 'the same verifier reports a bad key in it')
})
