// src/node-flags.ts: the Node flags every production launcher starts sluice with. V8's flags
// are process-wide and cannot be set by the running process for its workers, so they live on
// each command line; this holds `npm start`, both systemd units and the container's CMD to the
// one list, checks Node accepts each flag (a misspelt one would stop the start: exit 9), and
// that a gateway started with them (and another V8 flag) still starts its parser threads.

import t from 'tap'
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { request } from 'undici'
import { demoConfig } from '../../src/config/load.ts'
import { LATE_V8_FLAGS, NODE_FLAGS, setLateV8Flags } from '../../src/node-flags.ts'
import { NODE, ROOT, startGateway, waitIdle } from '../helpers/gateway.ts'
import { parseContainerfile } from './containerfile.ts'

const flags = NODE_FLAGS.join(' ')

t.test('the list is not empty and Node accepts every flag in it', async (t) => {
  t.ok(NODE_FLAGS.length > 0)
  const r = spawnSync(NODE, [...NODE_FLAGS, '-e', 'process.stdout.write(JSON.stringify(process.execArgv))'], { encoding: 'utf8', timeout: 30_000 })
  t.equal(r.status, 0, r.stderr)
  t.same(JSON.parse(r.stdout).slice(0, NODE_FLAGS.length), [...NODE_FLAGS], 'seen by the process as given')
  const typo = spawnSync(NODE, [NODE_FLAGS[0] + 'x', '-e', '0'], { encoding: 'utf8', timeout: 30_000 })
  t.equal(typo.status, 9, 'a flag Node does not know stops it (the check has teeth)')
  t.match(typo.stderr, /bad option/)
})

t.test('npm start (and npm run sluice) run the compiled entry with the flags', async (t) => {
  const scripts = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts
  t.ok(scripts.start.endsWith(` node ${flags} dist/bin/sluice.js serve`), scripts.start)
  t.equal(scripts.sluice, `node ${flags} dist/bin/sluice.js`)
})

t.test('both systemd units run the compiled entry with the flags', async (t) => {
  for (const name of ['sluice.service', 'sluice@.service']) {
    const lines = readFileSync(join(ROOT, 'ops/systemd', name), 'utf8').split('\n').filter((l) => l.startsWith('ExecStart='))
    t.same(lines, [`ExecStart=/opt/sluice/node_modules/.bin/node ${flags} /opt/sluice/dist/bin/sluice.js serve --config /etc/sluice/config.json`], name)
  }
})

t.test("the container's CMD runs the compiled entry with the flags", async (t) => {
  const ins = parseContainerfile(readFileSync(join(ROOT, 'ops/container/Containerfile'), 'utf8'))
  const final = ins.slice(ins.findLastIndex((i) => i.name === 'FROM'))
  const cmd = final.filter((i) => i.name === 'CMD')
  t.equal(cmd.length, 1, 'one CMD in the final stage')
  t.same(JSON.parse(cmd[0].args), ['node', ...NODE_FLAGS, 'dist/bin/sluice.js', 'serve'])
})

t.test('started with the flags (and another V8 flag), the parser threads start and parse', async (t) => {
  // V8's flags are refused in a worker's execArgv: a parser pool handed the parent's flags as
  // they are could not start a thread, and every body or answer it parses would fail.
  const gw = await startGateway({ ...demoConfig(), workers: 1 }, { nodeArgs: [...NODE_FLAGS, '--max-old-space-size=512'] })
  t.teardown(() => gw.stop())
  const auth = { authorization: 'Bearer sk-sluice-demo', 'content-type': 'application/json' }
  // Over the in-worker parse threshold (64 KiB): the request body goes to a parser thread; the
  // non-streaming answer is read there too.
  const big = 'x'.repeat(200 * 1024) + '\n#sim tokens=5 interval=1'
  for (const stream of [false, true]) {
    const res = await request(`http://127.0.0.1:${gw.port}/v1/chat/completions`, { method: 'POST', headers: auth, body: JSON.stringify({ model: 'gpt-4o-mini', stream, messages: [{ role: 'user', content: big }] }) })
    const got = await res.body.text()
    t.equal(res.statusCode, 200, `stream ${stream}: answered${res.statusCode === 200 ? '' : `: ${got.slice(0, 300)}`}`)
  }
  t.same(await waitIdle(gw), {}, 'the ledger is idle')
  t.equal(await gw.stop(), 0, 'drained and exited 0')
})

/**
 * The growing factors V8 traced (--trace-gc-verbose) for the HTTP worker's full collections
 * after ready: V8 prints, per isolate, the factor it set the next full GC's trigger with (2.0
 * with --heap-growing-percent=100; without the flag the worker's is V8's own, at most its
 * small-heap maximum, below 2 for a heap limit of 128 MB). The worker's idle collection (a full
 * GC once workerIdleCollectMs passes without exchanges) is what makes one there after ready.
 */
async function workerGrowingFactors (nodeArgs: string[]): Promise<string[]> {
  const gw = await startGateway({ ...demoConfig(), workers: 1, limits: { workerIdleCollectMs: 1000 } }, { nodeArgs: [...nodeArgs, '--trace-gc-verbose'] })
  try {
    const readyAt = gw.logs.findIndex((l) => l.includes('"sluice ready"'))
    const res = await request(`http://127.0.0.1:${gw.port}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer sk-sluice-demo', 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'hi\n#sim tokens=20 interval=1' }] }),
    })
    await res.body.text()
    if (res.statusCode !== 200 || readyAt < 0) throw new Error(`status ${res.statusCode}, ready line at ${readyAt}`)
    // [pid:isolate:thread] ... [HeapController] factor F based on ...: thread 0 is the primary.
    const factors = (): string[] => gw.logs.slice(readyAt).flatMap((l) => {
      const m = /^\[\d+:0x[0-9a-f]+:(\d+)\]\s+[\d.]+ ms: \[HeapController\] factor ([\d.]+)/.exec(l)
      return m === null || m[1] === '0' ? [] : [m[2]]
    })
    const until = Date.now() + 30_000
    while (factors().length === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 100))
    const idle = await waitIdle(gw)
    if (Object.keys(idle).length > 0) throw new Error(`the ledger is not idle: ${JSON.stringify(idle)}`)
    return factors()
  } finally {
    await gw.stop()
  }
}

t.test('the late V8 flag: not on the command line, set by the primary once ready, and it acts on the HTTP worker', async (t) => {
  // On the command line it would cost every thread's start Node's code cache for its
  // built-ins (src/node-flags.ts); set late, it must still reach a worker that already runs.
  for (const f of LATE_V8_FLAGS) t.notOk(NODE_FLAGS.some((n) => n.split('=')[0] === f.split('=')[0]), `${f} is not among the command-line flags`)
  t.same(LATE_V8_FLAGS, ['--heap-growing-percent=100'], 'the one late flag (the checks below read its factor)')
  const factors = await workerGrowingFactors([...NODE_FLAGS])
  t.ok(factors.length > 0, 'a full collection in the HTTP worker after ready')
  t.same([...new Set(factors)], ['2.0'], "the worker's next full GC at twice its live heap")
})

t.test("an operator's own --heap-growing-percent stands (command line or NODE_OPTIONS, either spelling)", async (t) => {
  const factors = await workerGrowingFactors([...NODE_FLAGS, '--heap-growing-percent=150'])
  t.ok(factors.length > 0, 'a full collection in the HTTP worker after ready')
  t.same([...new Set(factors)], ['2.5'], 'the worker grows by the given 150 %, not the late 100 %')
  t.same(setLateV8Flags(['--heap_growing_percent=30'], ''), [], 'the underscore spelling counts as given')
  t.same(setLateV8Flags([], '--max-old-space-size=512 --heap-growing-percent=30'), [], 'so does NODE_OPTIONS')
})
