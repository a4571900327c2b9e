// `npm run build` (and the `prepare` script, which `npm ci` runs): bundles the runtime into
// dist/ with esbuild, one bundle per file a thread or process is started from. Production
// (`npm start`, the systemd unit, the container) runs dist/bin/sluice.js; development and
// tests keep running the sources directly (type stripping). `npm run typecheck` is the type
// check: esbuild only strips types.
//
//   node scripts/build.ts [--out-dir DIR] [--no-minify]
//     DIR: elsewhere than dist/ (the build test uses it); --no-minify keeps names and layout
//     (for reading CPU and heap profiles; about 3 MB more idle RSS)
//
// Why bundle: every thread is its own V8 isolate and keeps the source text of every module it
// loads in its heap (functions compile lazily), plus the loader's cost per module. Loaded as
// files, the HTTP worker reads hundreds of modules (fastify with ajv, semver, avvio,
// find-my-way..., undici, pino), the primary zod and pino. One minified file per thread costs
// less: figures in docs/benchmarks.md ("Bundled build").
//
// Layout: each entry sits where compiling one file per source would put it (its path, `.js`),
// so src/modules.ts's moduleUrl() (the `.js` sibling of a `.ts` entry) and every start
// command find it:
//   dist/bin/sluice.js          the process                 dist/primary/main.js   import()ed by it
//   dist/worker/boot.js         an HTTP worker thread       dist/worker/main.js    import()ed by it
//   dist/primary/sim-thread.js  the embedded sim's thread   dist/src/json/task.js  a parser thread
//   dist/src/load/sim-child.js  `sluice load`'s sim process
// The rest of bin/sluice.ts's import()s (config, tracing, the load and sim commands) and the
// code two of these share go to dist/chunks/ (esbuild's code splitting), so a thread loads
// only what it imports and nothing twice. The import()s stay import()s: what
// useCompileCache() is called before is still loaded after it.
//
// `import.meta.url` in a bundle is the bundle's URL, not the source file's. Each of our source
// files gets its own back: while loading it, every `import.meta.url` becomes
// `__sluiceUrl("src/json/pool.js")` (its path under dist/ in the one-file-per-source layout),
// and once the output files and their places are known, each such call becomes
// `new URL("../src/json/pool.js", import.meta.url).href`, relative to the file it landed in.
// So src/modules.ts (COMPILED, ROOT_URL), the thread entries named in src/json/pool.ts,
// primary/supervisor.ts and primary/main.ts, and src/load/*'s paths keep their meaning.
//
// Dependencies are bundled, except:
//   piscina         a parser thread runs piscina's own dist/worker.js (by path), which checks
//                   results against piscina's private symbols: src/json/task.ts must share that
//                   module instance, and the HTTP worker's copy must find worker.js beside it.
//   @opentelemetry  import()ed only when OTEL_* configures tracing: nothing of it at idle, and
//                   the exporters' protobuf code is not worth the risk of bundling.
//   gpt-tokenizer   required lazily (createRequire) by src/translate/request/count-tokens.ts
//                   on the first count: its encoder tables (~2 MB of source) are never loaded
//                   at idle, and bundled they would be text in every heap that has the code.
//   undici's WebAssembly HTTP parsers (LAZY_UNDICI below), required lazily by undici itself.
// src/net/pool.ts requires undici's Pool by path through createRequire (see there); here that
// require is the bundle's (BUNDLED_REQUIRE), so the Pool is bundled. CommonJS code inside an
// ESM bundle needs `require`, `__filename` and `__dirname`: each output file opens with them,
// made from its own URL. Only pino's transports use `__dirname` (thread-stream starts its
// worker files by path); sluice has none (src/log.ts writes fd 1 through sonic-boom), and one
// would need pino's `__bundlerPathsOverrides`.
//
// Minified: whitespace, syntax and identifiers. Names are not kept (esbuild's keepNames sets
// `name` on every function and class as the modules load: measured +3.3 MB idle RSS over the
// four threads of the demo config). Nothing at run time depends on a function or class name
// (errors are matched by `code`; SluiceError and ConfigError set their own `name`, so a stack's
// first line still says which), but a stack frame from dist/ names a minified function, and so
// does pino's `type` of a logged error of our own classes: reproduce with the sources
// (`npm run sluice:src`) to read one. No legal comments: they would be source text in every
// heap; each package's licence stays in node_modules beside dist/.
//
// dist/ is emptied first, so nothing stale survives a rename.

import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { dirname, posix, relative, resolve, sep } from 'node:path'
import type * as Esbuild from 'esbuild'

const root = fileURLToPath(new URL('../', import.meta.url))
const args = process.argv.slice(2)
const at = args.indexOf('--out-dir')
const outDir = at >= 0 ? resolve(args[at + 1]) : resolve(root, 'dist')

/** Every file a thread or a process is started from, and what they import() after the compile cache. */
const ENTRIES = [
  'bin/sluice.ts', 'primary/main.ts', 'primary/sim-thread.ts',
  'worker/boot.ts', 'worker/main.ts', 'src/json/task.ts', 'src/load/sim-child.ts',
]
const EXTERNAL = ['piscina', '@opentelemetry/*', 'gpt-tokenizer', 'koffi']
/**
 * Files undici requires lazily, on its first connection: its HTTP/1 parsers as WebAssembly
 * (llhttp and milo, each with and without SIMD, ~300 KB of base64 between them, one of which
 * is ever used). Bundled, all four would be source text in every HTTP worker's heap from the
 * start; left external, the one used is read from node_modules when it is first needed.
 */
const LAZY_UNDICI = /^\.\.\/(llhttp\/llhttp(_simd)?-wasm|milo\/(no-)?simd)\.js$/
/**
 * Requires the build makes lazy (loaded on first use instead of at load), each in one file of a
 * dependency, for features sluice never uses; the build fails if a file's lines change.
 *
 * - fastify's server.js requires `node:https` and `node:http2` at load, for the `https` and
 *   `http2` options sluice never sets (it hands fastify its own node:http server through
 *   `serverFactory`). That keeps https and tls (and tls's wrap) out of every HTTP worker,
 *   ~10 ms of its start profiled under one vCPU.
 * - undici's client.js requires its HTTP/2 client (client-h2.js, which requires `node:http2`)
 *   at load, for a connection whose TLS handshake chose h2, and only with `allowH2`, which
 *   sluice never sets (worker/upstream.ts): ~20 ms of an HTTP worker's start under one vCPU
 *   (unbundled: 25 of the 38 ms undici's Pool takes to load), and node:http2's heap.
 */
const LAZY_REQUIRES = [
  {
    file: /[\\/]node_modules[\\/]fastify[\\/]lib[\\/]server\.js$/,
    lines: "const https = require('node:https')\nconst http2 = require('node:http2')\n",
    lazy: "const __sluiceLazy = (id) => { let m; return new Proxy({}, { get: (_, k) => (m ??= require(id))[k] }) }\n" +
      "const https = __sluiceLazy('node:https')\nconst http2 = __sluiceLazy('node:http2')\n",
  },
  {
    file: /[\\/]node_modules[\\/]undici[\\/]lib[\\/]dispatcher[\\/]client\.js$/,
    lines: "const connectH2 = require('./client-h2.js')\n",
    lazy: "let __sluiceH2\nconst connectH2 = (client, socket) => (__sluiceH2 ??= require('./client-h2.js'))(client, socket)\n",
  },
]
/** Source files whose createRequire'd require is to be the bundle's (so esbuild bundles what they require). */
const BUNDLED_REQUIRE = new Map([['src/net/pool.ts', 'const require = createRequire(import.meta.url)\n']])

const URL_CALL = '__sluiceUrl'
const BANNER = [
  "import{createRequire as __sluiceRequire}from'node:module';",
  "import{fileURLToPath as __sluicePath}from'node:url';",
  "import{dirname as __sluiceDirname}from'node:path';",
  'const require=__sluiceRequire(import.meta.url),__filename=__sluicePath(import.meta.url),__dirname=__sluiceDirname(__filename);',
].join('')

function fail (message: string): never {
  rmSync(outDir, { recursive: true, force: true })
  process.stderr.write(`sluice build: ${message}; ${outDir} removed\n`)
  process.exit(1)
}

let esbuild: typeof Esbuild
try {
  esbuild = await import('esbuild')
} catch {
  process.stderr.write('sluice build: esbuild is not installed (it is a devDependency). Run `npm ci` (which builds), then `npm prune --omit=dev` if the install should carry only what runs.\n')
  process.exit(1)
}

const lazyUndici: Esbuild.Plugin = {
  name: 'sluice-lazy-undici',
  setup (b) {
    b.onResolve({ filter: LAZY_UNDICI }, (a) => {
      if (!a.importer.split(sep).join('/').includes('/node_modules/undici/lib/dispatcher/')) return undefined
      // undici has no "exports" map: its files are reachable by path (src/net/pool.ts relies on it too).
      return { path: `undici/lib/${a.path.slice(3)}`, external: true }
    })
  },
}

const lazyRequires: Esbuild.Plugin = {
  name: 'sluice-lazy-requires',
  setup (b) {
    for (const edit of LAZY_REQUIRES) {
      b.onLoad({ filter: edit.file }, (a) => {
        const text = readFileSync(a.path, 'utf8')
        if (!text.includes(edit.lines)) fail(`${relative(root, a.path)} no longer has the require lines the build makes lazy:\n${edit.lines}`)
        return { contents: text.replace(edit.lines, edit.lazy), loader: 'js' }
      })
    }
  },
}

const ownSources: Esbuild.Plugin = {
  name: 'sluice-own-sources',
  setup (b) {
    b.onLoad({ filter: /\.ts$/ }, (a) => {
      const rel = relative(root, a.path).split(sep).join('/')
      if (rel.startsWith('..') || rel.startsWith('node_modules/')) return undefined
      let text = readFileSync(a.path, 'utf8')
      const own = BUNDLED_REQUIRE.get(rel)
      if (own !== undefined) {
        if (!text.includes(own)) fail(`${rel} no longer has the line \`${own.trim()}\` the build replaces`)
        text = text.replace(own, '\n')
      }
      const url = `${URL_CALL}(${JSON.stringify(rel.replace(/\.ts$/, '.js'))})`
      return { contents: text.replaceAll('import.meta.url', url), loader: 'ts' }
    })
  },
}

rmSync(outDir, { recursive: true, force: true })
let result: Esbuild.BuildResult<{ write: false }>
try {
  result = await esbuild.build({
    absWorkingDir: root,
    entryPoints: ENTRIES,
    outbase: '.',
    outdir: outDir,
    entryNames: '[dir]/[name]',
    chunkNames: 'chunks/[name]-[hash]',
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node24',
    minify: !args.includes('--no-minify'),
    legalComments: 'none',
    external: EXTERNAL,
    banner: { js: BANNER },
    plugins: [ownSources, lazyUndici, lazyRequires],
    write: false,
    logLevel: 'warning',
  })
} catch (err) {
  fail(`esbuild failed: ${(err as Error).message.split('\n')[0]}`)
}

const URL_RE = new RegExp(`${URL_CALL}\\((["'\`])([^"'\`]+)\\1\\)`, 'g')
for (const file of result.outputFiles) {
  const here = posix.dirname(relative(outDir, file.path).split(sep).join('/'))
  const text = file.text.replace(URL_RE, (_m, _q: string, target: string) => {
    const rel = posix.relative(here, target)
    return `new URL(${JSON.stringify(rel.startsWith('.') ? rel : `./${rel}`)},import.meta.url).href`
  })
  if (text.includes(URL_CALL)) fail(`${file.path}: an ${URL_CALL} the build did not replace`)
  mkdirSync(dirname(file.path), { recursive: true })
  writeFileSync(file.path, text)
}
