// scripts/test-tap.ts's failure summary, from raw TAP as tap 21 prints it (nested subtests,
// YAML diagnostics), and from a real tap run of a failing file.

import t from 'tap'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { FailureCollector } from '../../../scripts/test-tap.ts'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..')

const TAP_TEXT = `TAP version 14
# Subtest: test/unit/a.test.ts
    # Subtest: outer
        # Subtest: inner
            ok 1 - fine
            not ok 2 - should be equal
              ---
              diff: |
                --- expected
                +++ actual
              at:
                fileName: test/unit/a.test.ts
              ...
            1..2
        not ok 1 - inner # time=3ms
        1..1
    not ok 1 - outer # time=4ms
    ok 2 - later # time=1ms
    not ok 3 - todo one # TODO later
    1..3
not ok 1 - test/unit/a.test.ts # time=10ms
# Subtest: test/unit/b.test.ts
    not ok 1 - timeout!
    1..1
not ok 2 - test/unit/b.test.ts # time=120000ms
# Subtest: test/unit/c.test.ts
    ok 1 - all good
    1..1
ok 3 - test/unit/c.test.ts # time=1ms
`

t.test('leaf failures with their subtest path and diagnostics; parents and TODOs not repeated', async (t) => {
  const c = new FailureCollector()
  for (const line of TAP_TEXT.split('\n')) c.push(line)
  t.equal(c.failures.length, 6, 'every not ok is collected, the TODO is not')
  const summary = c.summary()
  t.equal(summary[1], '# 2 failed assertion(s):')
  t.equal(summary[2], '#   test/unit/a.test.ts > outer > inner > not ok 2 - should be equal')
  t.equal(summary[3], '#       diff: |')
  t.ok(summary.includes('#         fileName: test/unit/a.test.ts'), 'the YAML block, indented as in it')
  t.notOk(summary.some((l) => l.includes('...')), 'the YAML end marker is not part of it')
  t.equal(summary.at(-1), '#   test/unit/b.test.ts > not ok 1 - timeout!')
  t.notOk(summary.some((l) => l.includes('c.test.ts')), 'passing files are absent')
})

t.test('nothing failed: no summary', async (t) => {
  const c = new FailureCollector()
  for (const line of TAP_TEXT.split('\n').slice(25)) c.push(line)
  t.same(c.summary(), [])
})

t.test('a real tap run: the summary names the failing assertion, the exit code is tap\'s', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-test-tap-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(join(dir, 'x.test.mjs'), `import t from 'tap'
t.test('group', async (t) => { t.equal(1 + 1, 3, 'arithmetic'); t.pass('fine') })
`)
  writeFileSync(join(dir, 'y.test.mjs'), `import t from 'tap'\nt.pass('ok')\n`)
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'))
  writeFileSync(join(dir, 'package.json'), '{"private":true}\n')
  // A tap run of its own, in its own folder: none of this run's TAP_* settings (a child's).
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^_?TAP/i.test(k)))
  const run = (files: string[]) => spawnSync(process.execPath, [join(ROOT, 'scripts/test-tap.ts'), '--disable-coverage', '--jobs=1', '--reporter=tap', ...files], {
    cwd: dir, encoding: 'utf8', env, timeout: 60_000,
  })
  const failing = run(['x.test.mjs', 'y.test.mjs'])
  t.equal(failing.status, 1, 'tap\'s failure exit code')
  const tail = failing.stdout.trimEnd().split('\n')
  const at = tail.indexOf('# 1 failed assertion(s):')
  t.ok(at > 0, 'the summary is printed after the run')
  t.match(tail[at + 1], /x\.test\.mjs > group > not ok 1 - arithmetic$/)
  t.match(tail.slice(at).join('\n'), /expected/, 'with its diagnostics')
  const passing = run(['y.test.mjs'])
  t.equal(passing.status, 0)
  t.notMatch(passing.stdout, /failed assertion/)
})
