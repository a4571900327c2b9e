// Imports point one way: no module of bin/, primary/, worker/ or src/ imports itself back
// through a chain of others (type-only imports included: a cycle of types is still a tangle).

import t from 'tap'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'

const ROOT = new URL('../../', import.meta.url).pathname
const DIRS = ['bin', 'primary', 'worker', 'src']

function sources (dir: string): string[] {
  const out: string[] = []
  for (const name of readdirSync(dir)) {
    const p = join(dir, name)
    if (statSync(p).isDirectory()) out.push(...sources(p))
    else if (name.endsWith('.ts')) out.push(p)
  }
  return out
}

/** The relative `.ts` modules a file imports or re-exports (static forms only). */
export function importsOf (file: string, text: string): string[] {
  const out: string[] = []
  const re = /(?:^|\n)\s*(?:import|export)\b[^'"`;]*?\bfrom\s+['"](\.{1,2}\/[^'"]+\.ts)['"]|(?:^|\n)\s*import\s+['"](\.{1,2}\/[^'"]+\.ts)['"]|import\(\s*['"](\.{1,2}\/[^'"]+\.ts)['"]\s*\)/g
  for (const m of text.matchAll(re)) out.push(resolve(dirname(file), m[1] ?? m[2] ?? m[3]))
  return out
}

/** Every cycle's members (Tarjan's strongly connected components of size > 1, or a self-import). */
export function cycles (graph: Map<string, string[]>): string[][] {
  let index = 0
  const idx = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const on = new Set<string>()
  const out: string[][] = []
  const visit = (v: string): void => {
    idx.set(v, index); low.set(v, index); index++
    stack.push(v); on.add(v)
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue
      if (!idx.has(w)) { visit(w); low.set(v, Math.min(low.get(v)!, low.get(w)!)) } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!))
    }
    if (low.get(v) === idx.get(v)) {
      const c: string[] = []
      let w: string
      do { w = stack.pop()!; on.delete(w); c.push(w) } while (w !== v)
      if (c.length > 1 || (graph.get(v) ?? []).includes(v)) out.push(c.sort())
    }
  }
  for (const v of graph.keys()) if (!idx.has(v)) visit(v)
  return out
}

t.test('no import cycles', async (t) => {
  const graph = new Map<string, string[]>()
  for (const d of DIRS) for (const f of sources(join(ROOT, d))) graph.set(f, importsOf(f, readFileSync(f, 'utf8')))
  t.ok(graph.size > 100, `${graph.size} modules read`)
  const found = cycles(graph).map((c) => c.map((f) => relative(ROOT, f)))
  t.same(found, [], 'imports point one way')
})

t.test('the checker finds a cycle and reads every import form', async (t) => {
  t.same(cycles(new Map([['a', ['b']], ['b', ['c']], ['c', ['a']], ['d', ['a']]])), [['a', 'b', 'c']])
  t.same(cycles(new Map([['a', ['a']]])), [['a']])
  t.same(cycles(new Map([['a', ['b']], ['b', []]])), [])
  const text = "import { x } from './x.ts'\nimport type { Y } from '../y.ts'\nexport { z } from './z.ts'\nimport './side.ts'\nconst m = await import('./lazy.ts')"
  t.same(importsOf('/r/d/f.ts', text), ['/r/d/x.ts', '/r/y.ts', '/r/d/z.ts', '/r/d/side.ts', '/r/d/lazy.ts'])
})
