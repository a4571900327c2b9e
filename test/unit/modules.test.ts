import t from 'tap'
import { COMPILED, moduleUrl, ROOT_URL } from '../../src/modules.ts'
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

t.test('a thread file is the .ts source beside a source, the .js sibling beside compiled code', async (t) => {
  t.equal(moduleUrl('./task.ts', 'file:///r/src/json/pool.ts').href, 'file:///r/src/json/task.ts')
  t.equal(moduleUrl('./task.ts', 'file:///r/dist/src/json/pool.js').href, 'file:///r/dist/src/json/task.js')
  t.equal(moduleUrl('../worker/main.ts', 'file:///r/dist/primary/supervisor.js').href, 'file:///r/dist/worker/main.js')
  t.equal(moduleUrl('./data.json', 'file:///r/dist/x.js').href, 'file:///r/dist/data.json', 'only .ts is renamed')
})

t.test('from the sources: not compiled, and the root holds package.json', async (t) => {
  t.equal(COMPILED, false)
  t.ok(existsSync(fileURLToPath(new URL('package.json', ROOT_URL))))
})
