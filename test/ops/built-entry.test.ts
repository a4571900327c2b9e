// Production runs the JavaScript `npm ci` compiles (scripts/build.ts -> dist/): started with
// type stripping switched off, so any thread that loaded a `.ts` file (the HTTP worker, the
// embedded sim's thread, a parser thread, a lazily imported module) would fail, the compiled
// gateway serves every protocol, streaming and not, and returns to idle.

import t from 'tap'
import { spawnSync } from 'node:child_process'
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { request } from 'undici'
import { demoConfig } from '../../src/config/load.ts'
import { BIN, NODE, startGateway, waitIdle } from '../helpers/gateway.ts'
import { buildDist } from '../helpers/build.ts'

const NO_TS = '--no-experimental-strip-types'

t.test('the flag has teeth: the sources do not start without type stripping', async (t) => {
  const r = spawnSync(NODE, [NO_TS, BIN, 'check-config', '/nonexistent.json'], { encoding: 'utf8', timeout: 30_000 })
  t.not(r.status, 0)
  t.match(r.stderr, /ERR_UNKNOWN_FILE_EXTENSION|Unknown file extension ".ts"/)
})

t.test('the build emits JavaScript only, one module per runtime source', async (t) => {
  const { root } = buildDist()
  const files = (readdirSync(join(root, 'dist'), { recursive: true }) as string[]).filter((f) => /\.[a-z]+$/.test(f))
  t.same(files.filter((f) => !f.endsWith('.js')), [], 'no other file in dist/')
  for (const f of ['bin/sluice.js', 'primary/main.js', 'primary/sim-thread.js', 'worker/boot.js', 'worker/main.js', 'src/json/task.js', 'src/modules.js']) t.ok(files.includes(f), f)
})

t.test('the compiled gateway, no type stripping anywhere: every protocol, the sim thread, the parser pool, idle after', async (t) => {
  const { entry } = buildDist()
  const gw = await startGateway({ ...demoConfig(), workers: 1 }, { bin: entry, nodeArgs: [NO_TS] })
  t.teardown(() => gw.stop())
  const ready = await request(`http://127.0.0.1:${gw.adminPort}/readyz`)
  await ready.body.text()
  t.equal(ready.statusCode, 200, '/readyz')
  const auth = { authorization: 'Bearer sk-sluice-demo', 'content-type': 'application/json', 'anthropic-version': '2023-06-01' }
  const text = 'hello\n#sim tokens=5 interval=1'
  const calls: Array<[string, unknown, RegExp]> = [
    ['/v1/chat/completions', { model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: text }] }, /data: \[DONE\]/],
    ['/v1/responses', { model: 'gpt-5.5', stream: true, input: text }, /response\.completed/],
    ['/v1/messages', { model: 'claude-opus-5-5', max_tokens: 64, stream: true, messages: [{ role: 'user', content: text }] }, /message_stop/],
    ['/v1/chat/completions', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: text }] }, /"choices"/],
  ]
  for (const [path, body, expect] of calls) {
    const res = await request(`http://127.0.0.1:${gw.port}${path}`, { method: 'POST', headers: auth, body: JSON.stringify(body) })
    const got = await res.body.text()
    t.equal(res.statusCode, 200, `${path} answered`)
    t.match(got, expect, `${path}: the whole answer`)
  }
  t.same(await waitIdle(gw), {}, 'the ledger is idle')
  t.equal(await gw.stop(), 0, 'drained and exited 0')
  t.notMatch(gw.logs.join('\n'), /ERR_UNKNOWN_FILE_EXTENSION|\.ts\b"/, 'no thread asked for a .ts file')
})
