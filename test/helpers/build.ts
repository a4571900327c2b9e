// The production build, made for a test: scripts/build.ts (what `npm ci` runs) compiles the
// sources into a fresh temporary tree laid out like the repository (package.json, links to
// node_modules and ops/, dist/), so a test runs exactly what production runs and never a stale
// dist/ of the checkout.

import { spawnSync } from 'node:child_process'
import { copyFileSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { NODE, ROOT } from './gateway.ts'

export interface Built { root: string; entry: string }

let built: Built | null = null

/** Builds once per test process; returns the temporary root and its dist/bin/sluice.js. */
export function buildDist (): Built {
  if (built !== null) return built
  const root = mkdtempSync(join(tmpdir(), 'sluice-built-'))
  process.once('exit', () => rmSync(root, { recursive: true, force: true }))
  copyFileSync(join(ROOT, 'package.json'), join(root, 'package.json'))
  symlinkSync(join(ROOT, 'node_modules'), join(root, 'node_modules'), 'dir')
  symlinkSync(join(ROOT, 'ops'), join(root, 'ops'), 'dir')
  const r = spawnSync(NODE, [join(ROOT, 'scripts/build.ts'), '--out-dir', join(root, 'dist')], { encoding: 'utf8', timeout: 120_000 })
  if (r.status !== 0) throw new Error(`the build failed (${r.status ?? r.signal}):\n${r.stdout}${r.stderr}`)
  built = { root, entry: join(root, 'dist/bin/sluice.js') }
  return built
}
