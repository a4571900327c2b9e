// src/helper-nice.ts: V8's platform threads ("V8Worker") run at limits.v8HelperNice (10) once the
// gateway is ready, and the threads that run JavaScript (the primary, the HTTP workers) stay
// at the process's own priority. Read from /proc, the kernel's view: a real gateway, and the
// function alone in a child process (a thread's priority, once lowered, cannot be raised back
// without CAP_SYS_NICE, so never in this test's own process).

import t from 'tap'
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { demoConfig } from '../../src/config/load.ts'
import { NODE, ROOT, startGateway, until } from '../helpers/gateway.ts'
import { threads } from '../helpers/threads.ts'

const LINUX = process.platform === 'linux'

const helpers = (pid: number) => threads(pid).filter((x) => x.name === 'V8Worker')
const ownNice = (pid: number) => threads(pid).find((x) => x.name === 'MainThread' || x.name === 'node')!.nice

t.test('a ready gateway: V8Worker threads at 10, the JavaScript threads at the process\'s own', { skip: LINUX ? false : 'Linux only' }, async (t) => {
  const gw = await startGateway({ ...demoConfig(), workers: 2 })
  t.teardown(() => gw.stop())
  const pid = gw.proc.pid!
  const base = ownNice(pid)
  t.ok(base < 10, `the test runs below nice 10 (${base}), so a change can be seen`)
  await until(() => helpers(pid).every((x) => x.nice === 10), 'V8Worker threads at nice 10 (the default)')
  const all = threads(pid)
  const v8 = all.filter((x) => x.name === 'V8Worker')
  t.ok(v8.length >= 1, `V8's platform threads found (${v8.length})`)
  t.same(v8.map((x) => x.nice), v8.map(() => 10))
  const js = all.filter((x) => x.name === 'MainThread' || x.name.startsWith('sluice-http-'))
  t.equal(js.filter((x) => x.name.startsWith('sluice-http-')).length, 2, 'both HTTP workers seen')
  t.same(js.map((x) => x.nice), js.map(() => base), 'the primary and the HTTP workers keep the process\'s priority')
})

t.test('limits.v8HelperNice 0 leaves them alone', { skip: LINUX ? false : 'Linux only' }, async (t) => {
  const gw = await startGateway({ ...demoConfig(), workers: 1, limits: { v8HelperNice: 0 } })
  t.teardown(() => gw.stop())
  const pid = gw.proc.pid!
  // The call comes right after the "sluice ready" line; give it the time the test above needed.
  await new Promise((r) => setTimeout(r, 500))
  const base = ownNice(pid)
  const v8 = helpers(pid)
  t.ok(v8.length >= 1)
  t.same(v8.map((x) => x.nice), v8.map(() => base))
})

t.test('niceV8Helpers: lowers, never raises, and says why it did nothing', { skip: LINUX ? false : 'Linux only' }, async (t) => {
  const script = `
    import { niceV8Helpers } from ${JSON.stringify(join(ROOT, 'src/helper-nice.ts'))}
    import { threads } from ${JSON.stringify(join(ROOT, 'test/helpers/threads.ts'))}
    const nices = () => threads(process.pid).filter((x) => x.name === 'V8Worker').map((x) => x.nice)
    const before = nices()
    const first = niceV8Helpers(10)
    const after10 = nices()
    const second = niceV8Helpers(5)
    const after5 = nices()
    const off = niceV8Helpers(0)
    const none = niceV8Helpers(10, '/nonexistent/task')
    // A listed thread that is gone by the time it is set (ESRCH): passed over, not a failure.
    const { mkdtempSync, mkdirSync, writeFileSync } = await import('node:fs')
    const fake = mkdtempSync('/tmp/sluice-tasks-')
    mkdirSync(fake + '/2147483646')
    writeFileSync(fake + '/2147483646/comm', 'V8Worker\\n')
    const gone = niceV8Helpers(10, fake)
    const { rmSync } = await import('node:fs')
    rmSync(fake, { recursive: true })
    console.log(JSON.stringify({ before, first, after10, second, after5, off, none, gone }))
  `
  const r = spawnSync(NODE, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000 })
  t.equal(r.status, 0, r.stderr)
  const j = JSON.parse(r.stdout)
  t.ok(j.before.length >= 1, 'the child has V8Worker threads')
  t.ok(j.before.every((n: number) => n < 10), `they start below 10 (${j.before})`)
  t.same(j.first, { lowered: j.before.length, already: 0, failed: 0, error: null, skipped: null })
  t.same(j.after10, j.before.map(() => 10), 'lowered to 10')
  t.same(j.second, { lowered: 0, already: j.before.length, failed: 0, error: null, skipped: null }, 'asked for 5: counted as already lower')
  t.same(j.after5, j.before.map(() => 10), 'and left at 10, not raised')
  t.same(j.off, { lowered: 0, already: 0, failed: 0, error: null, skipped: 'nice 0' })
  t.same(j.none, { lowered: 0, already: 0, failed: 0, error: null, skipped: 'no /nonexistent/task' })
  t.same(j.gone, { lowered: 0, already: 0, failed: 0, error: null, skipped: null }, 'a thread gone meanwhile is no failure')
})
