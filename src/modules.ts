// Where sluice's own files are, whether it runs from its TypeScript sources (development and
// tests: Node's type stripping) or bundled to JavaScript under dist/ (production: `npm ci`
// runs the `prepare` build, scripts/build.ts; `npm start` runs dist/bin/sluice.js).
//
// The build bundles imports, but not the URLs handed to `new Worker` or to piscina: those go
// through moduleUrl(), which picks the `.js` sibling when the caller was itself loaded as
// `.js`, and each thread entry is a bundle at that `.js` path. In a bundle, `import.meta.url`
// is still the source file's own (its place in a one-file-per-source dist/: the build sees to
// it), so COMPILED and ROOT_URL below hold there too. A compiled process therefore never
// loads a `.ts` file (a worker thread that strips types costs ~20 MB more RSS).

import { enableCompileCache } from 'node:module'

/** This module was loaded from dist/ (compiled), not from the sources. */
export const COMPILED: boolean = import.meta.url.endsWith('.js')

/**
 * `specifier` (a `.ts` path relative to `base`) resolved against `base` (the caller's
 * `import.meta.url`), with `.js` in place of `.ts` when `base` is a `.js` file.
 */
export function moduleUrl (specifier: string, base: string): URL {
  const url = new URL(specifier, base)
  if (base.endsWith('.js') && url.pathname.endsWith('.ts')) url.pathname = url.pathname.slice(0, -3) + '.js'
  return url
}

/**
 * Compiled runs only: Node's on-disk compile cache for this thread's modules loaded from now
 * on ($NODE_COMPILE_CACHE, else Node's default under the temporary directory). Measured: ~10 %
 * less CPU from exec to /readyz once the cache is warm. A thread's static imports are compiled
 * before its first line runs, so the entries that call this load the rest with import().
 * A cache that cannot be used (no permission, a full disk) only means a cold start.
 */
export function useCompileCache (): void {
  if (!COMPILED || process.env.SLUICE_COMPILE_CACHE === '0') return
  try { enableCompileCache() } catch {}
}

/** The repository root (where package.json and ops/ are), from the sources or from dist/. */
export const ROOT_URL: URL = new URL(COMPILED ? '../../' : '../', import.meta.url)
