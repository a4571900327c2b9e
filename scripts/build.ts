// `npm run build` (and the `prepare` script, which `npm ci` runs): compiles bin/, src/,
// primary/ and worker/ to JavaScript under dist/ with tsc (tsconfig.build.json), the same
// compiler `npm run typecheck` uses. Production (`npm start`, the systemd unit, the
// container) runs dist/bin/sluice.js, so no thread strips types at run time: measured, a
// thread that loads the sources as `.ts` costs ~17-22 MB more RSS than one loading `.js`
// (docs/benchmarks.md). Development and tests keep running the sources directly.
//
//   node scripts/build.ts [--out-dir DIR]    DIR: elsewhere than dist/ (the build test uses it)
//
// dist/ is emptied first, so a source file that was deleted or renamed leaves no stale
// module behind. tsc's imports keep their meaning: `rewriteRelativeImportExtensions` turns
// every relative `.ts` import into `.js`; the files a thread is started from (worker/main.ts,
// primary/sim-thread.ts, src/json/task.ts) are named through src/modules.ts, which picks the
// `.js` sibling when the caller runs compiled.

import { spawnSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { rmSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { resolve } from 'node:path'

const root = fileURLToPath(new URL('../', import.meta.url))
const args = process.argv.slice(2)
const at = args.indexOf('--out-dir')
const outDir = at >= 0 ? resolve(args[at + 1]) : resolve(root, 'dist')

let tsc: string
try {
  tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc')
} catch {
  process.stderr.write('sluice build: typescript is not installed (it is a devDependency). Run `npm ci` (which builds), then `npm prune --omit=dev` if the install should carry only what runs.\n')
  process.exit(1)
}
rmSync(outDir, { recursive: true, force: true })
const r = spawnSync(process.execPath, [tsc, '-p', resolve(root, 'tsconfig.build.json'), '--outDir', outDir], { stdio: 'inherit' })
if (r.status !== 0) {
  rmSync(outDir, { recursive: true, force: true })
  process.stderr.write(`sluice build: tsc failed (exit ${r.status ?? r.signal}); ${outDir} removed\n`)
  process.exit(1)
}
