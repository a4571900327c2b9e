// Production runs the JavaScript `npm ci` bundles (scripts/build.ts -> dist/: one bundle per
// thread entry with its dependencies inside, and the chunks they share). Started with type
// stripping switched off, so any thread that loaded a `.ts` file (the HTTP worker, the
// embedded sim's thread, a parser thread, a lazily imported module) would fail, the compiled
// gateway serves every protocol, streaming and not, and returns to idle.

import t from 'tap'
import { spawnSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { builtinModules } from 'node:module'
import { dirname, join } from 'node:path'
import { request } from 'undici'
import { demoConfig } from '../../src/config/load.ts'
import { BIN, NODE, startGateway, waitIdle } from '../helpers/gateway.ts'
import { buildDist } from '../helpers/build.ts'
import { NODE_FLAGS } from '../../src/node-flags.ts'

const NO_TS = '--no-experimental-strip-types'

t.test('the flag has teeth: the sources do not start without type stripping', async (t) => {
  const r = spawnSync(NODE, [NO_TS, BIN, 'check-config', '/nonexistent.json'], { encoding: 'utf8', timeout: 30_000 })
  t.not(r.status, 0)
  t.match(r.stderr, /ERR_UNKNOWN_FILE_EXTENSION|Unknown file extension ".ts"/)
})

/** The files a thread or process is started from, and what those import() after the compile cache. */
const ENTRIES = ['bin/sluice.js', 'primary/main.js', 'primary/sim-thread.js', 'worker/boot.js', 'worker/main.js', 'src/json/task.js', 'src/load/sim-child.js']
/** What the build leaves to node_modules (scripts/build.ts says why); everything else is bundled. */
const EXTERNAL = /^(node:.*|piscina|@opentelemetry\/.+)$/

/** An output file's static imports (statements of their own, minified) and its import()s. */
function importsOf (text: string): { statics: string[]; dynamics: string[] } {
  const statics = [...text.matchAll(/(?:^|[;\n])\s*import\s*(?:[\w$*{},\s]+?\s*from\s*)?(["'])([^"']+)\1/g)].map((m) => m[2])
  const dynamics = [...text.matchAll(/\bimport\((["'])([^"']+)\1\)/g)].map((m) => m[2])
  return { statics, dynamics }
}

t.test('the build emits one bundle per thread entry, dependencies inside, and chunks they share', async (t) => {
  const { root } = buildDist()
  const dist = join(root, 'dist')
  const files = (readdirSync(dist, { recursive: true }) as string[]).filter((f) => /\.[a-z]+$/.test(f))
  t.same(files.filter((f) => !f.endsWith('.js')), [], 'no other file in dist/')
  t.same(files.filter((f) => !f.startsWith('chunks/')).sort(), [...ENTRIES].sort(), 'outside dist/chunks/: the entries, no module per source')
  const source = new Map(files.map((f) => [f, readFileSync(join(dist, f), 'utf8')]))
  const graph = new Map<string, { statics: string[]; dynamics: string[] }>()
  const missing: string[] = []
  const outside: string[] = []
  for (const f of files) {
    const { statics, dynamics } = importsOf(source.get(f)!)
    const local = (s: string) => join(dirname(f), s)
    for (const s of [...statics, ...dynamics]) {
      if (s.startsWith('.')) { if (!files.includes(local(s))) missing.push(`${f} -> ${s}`) } else if (!builtinModules.includes(s) && !EXTERNAL.test(s)) outside.push(`${f} -> ${s}`)
    }
    graph.set(f, { statics: statics.filter((s) => s.startsWith('.')).map(local), dynamics: dynamics.filter((s) => s.startsWith('.')).map(local) })
  }
  t.same(missing, [], 'every relative import names a file of dist/')
  t.same(outside, [], 'every other import is a builtin or a declared external')
  // node:http as an ES import builds its ESM facade, whose lazy WebSocket/CloseEvent/MessageEvent
  // exports load Node's bundled undici in that thread (src/net/node-http.ts): required instead.
  const esmHttp = files.filter((f) => /(?:from|import)\s*["']node:http["']/.test(source.get(f)!))
  t.same(esmHttp, [], 'no file imports node:http as an ES module')
  // fastify's server.js requires node:https and node:http2 at load, for options sluice never
  // sets; the build makes both lazy (scripts/build.ts LAZY_REQUIRES), so https and tls stay out
  // of the HTTP worker. Every call naming node:https must go through that lazy proxy.
  const eagerHttps: string[] = []
  let lazyHttps = 0
  for (const [f, text] of source) {
    for (const m of text.matchAll(/([\w$]+)\("node:https"\)/g)) {
      const callee = m[1]!.replace(/[$]/g, '\\$')
      if (new RegExp(`[^\\w$]${callee}=\\(?[\\w$]+\\)?=>\\{let [\\w$]+;return new Proxy\\(`).test(text)) lazyHttps++
      else eagerHttps.push(`${f}: ${m[0]}`)
    }
  }
  t.same(eagerHttps, [], 'no bundle requires node:https at load')
  t.ok(lazyHttps >= 1, 'fastify\'s node:https goes through the lazy proxy')
  t.ok(graph.get('worker/main.js')!.statics.length > 0 && graph.get('bin/sluice.js')!.dynamics.length >= 3, 'imports are seen (the parse has teeth)')
  // What a thread loads before it runs: its entry and the chunks it imports statically.
  const loads = (f: string, seen = new Set<string>()): Set<string> => {
    if (seen.has(f)) return seen
    seen.add(f)
    for (const s of graph.get(f)?.statics ?? []) loads(s, seen)
    return seen
  }
  // Each thread carries the dependencies it runs and not the others' (zod validates the
  // config in the primary; fastify serves in the HTTP worker), each recognised by its own text.
  const text = (set: Set<string>) => [...set].map((f) => source.get(f)!).join('\n')
  const zod = /"ZodObject"/
  const fastify = /FST_ERR_/
  const primary = new Set<string>()
  for (const f of ['bin/sluice.js', ...graph.get('bin/sluice.js')!.dynamics]) loads(f, primary)
  t.match(text(primary), zod, 'the primary (bin/sluice.js and what it import()s) carries zod')
  t.notMatch(text(primary), fastify, 'and not fastify')
  const worker = new Set<string>()
  for (const f of ['worker/boot.js', ...graph.get('worker/boot.js')!.dynamics]) loads(f, worker)
  t.match(text(worker), fastify, 'an HTTP worker (worker/boot.js, then main.js) carries fastify')
  t.notMatch(text(worker), zod, 'and not zod')
  // gpt-tokenizer's encoder (megabytes) is required on the first count_tokens, from node_modules.
  const all = text(new Set(files))
  t.ok(all.includes('"gpt-tokenizer/encoding/o200k_base"') && !all.includes('mergeable tokens and special tokens'), 'gpt-tokenizer is required at run time, not bundled')
  // koffi is required at run time: by the primary for malloc_trim (src/malloc-trim.ts), and by
  // every thread that logs to a socket for send(2) (src/log-writer.ts); never bundled.
  t.ok(text(primary).includes('"koffi"') && text(worker).includes('"koffi"') && !all.includes('koffi.node'), 'koffi is required at run time (primary and HTTP worker), not bundled')
  for (const thread of ['primary/sim-thread.js', 'src/json/task.js']) {
    const got = text(loads(thread))
    t.ok(!zod.test(got) && !fastify.test(got), `${thread}: neither zod nor fastify`)
  }
})

t.test('compiled, `sluice load` finds its profiles in ops/ (the repository root, not dist/)', async (t) => {
  const { entry } = buildDist()
  for (const [command, said] of [['model-capacity', /no profile "nope" \(have: half-vcpu, one-vcpu\)/], ['recall-burst', /no recall-burst profile "nope" \(have: half-vcpu, one-vcpu\)/]] as const) {
    const r = spawnSync(NODE, [NO_TS, entry, 'load', command, '--profile', 'nope'], { encoding: 'utf8', timeout: 30_000 })
    t.equal(r.status, 2, `${command}: exit 2`)
    t.match(r.stderr, said, `${command}: the profiles listed`)
  }
})

t.test('the compiled gateway, no type stripping anywhere: every protocol, the sim thread, the parser pool, idle after', async (t) => {
  const { entry } = buildDist()
  const gw = await startGateway({ ...demoConfig(), workers: 1 }, { bin: entry, nodeArgs: [NO_TS, ...NODE_FLAGS] })
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
    // Translated, so estimated here: gpt-tokenizer, required from node_modules on this first count.
    ['/v1/messages/count_tokens', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: text }] }, /^\{"input_tokens":[1-9]\d*\}$/],
  ]
  for (const [path, body, expect] of calls) {
    const res = await request(`http://127.0.0.1:${gw.port}${path}`, { method: 'POST', headers: auth, body: JSON.stringify(body) })
    const got = await res.body.text()
    t.equal(res.statusCode, 200, `${path} answered`)
    t.match(got, expect, `${path}: the whole answer`)
  }
  // The build makes the requires of what sluice never uses lazy (scripts/build.ts
  // LAZY_REQUIRES): after serving every protocol, the worker has not loaded them.
  const loaded = await request(`http://127.0.0.1:${gw.port}/_test/builtins`)
  const { builtins } = await loaded.body.json() as { builtins: string[] }
  t.ok(builtins.includes('http') && builtins.includes('net'), 'the list has teeth (node:http and node:net are loaded)')
  t.same(builtins.filter((m) => /^(http2|https|tls|_tls_wrap|internal\/http2\/.*)$/.test(m)), [], 'an HTTP worker that served every protocol loaded no http2, https or tls')
  t.same(await waitIdle(gw), {}, 'the ledger is idle')
  t.equal(await gw.stop(), 0, 'drained and exited 0')
  t.notMatch(gw.logs.join('\n'), /ERR_UNKNOWN_FILE_EXTENSION|\.ts\b"/, 'no thread asked for a .ts file')
})
