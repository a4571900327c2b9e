// ARCHITECTURE.md stays true to the tree: every file table names only files that exist, and
// lists every source file of the folder it describes.
//
// A file table is a Markdown table whose header's first cell names a folder in backticks
// ("| file (`src/state/`) | what |"), or that stands under a heading naming one
// ("## The ledger (`src/ledger/`)"); its first column holds file names in backticks, relative
// to that folder (several per cell allowed: `a.ts`, `b.ts`). Every `.ts` file directly in the
// folder must appear in the table.

import t from 'tap'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'

const ROOT = new URL('../../', import.meta.url).pathname
const doc = readFileSync(join(ROOT, 'ARCHITECTURE.md'), 'utf8')

export interface FileTable { folder: string; heading: string; files: string[] }

export function fileTables (text: string): FileTable[] {
  const tables: FileTable[] = []
  let current: FileTable | null = null
  let heading = ''
  let folder: string | null = null
  for (const line of text.split('\n')) {
    const h = /^#{2,4}\s+(.*)$/.exec(line)
    if (h) {
      heading = h[1]
      const f = /`([\w./-]+\/)`/.exec(heading)
      folder = f ? f[1] : null
      current = null
      continue
    }
    if (!line.startsWith('|')) { current = null; continue }
    const first = line.split('|')[1] ?? ''
    if (/^\s*:?-+/.test(first)) continue // the separator row
    if (current === null) {
      // The header row starts the table; its first cell may name the folder itself.
      const own = /`([\w./-]+\/)`/.exec(first)
      const f = own ? own[1] : folder
      if (f === null) continue
      current = { folder: f, heading, files: [] }
      tables.push(current)
      continue
    }
    for (const m of first.matchAll(/`([^`]+)`/g)) current.files.push(m[1])
  }
  return tables
}

const tables = fileTables(doc)

t.test('ARCHITECTURE.md has file tables', async (t) => {
  t.ok(tables.length >= 5, `found ${tables.length} (${tables.map((x) => x.folder).join(', ')})`)
})

for (const table of tables) {
  t.test(`the ${table.folder} table`, async (t) => {
    const dir = join(ROOT, table.folder)
    t.ok(existsSync(dir) && statSync(dir).isDirectory(), `${table.folder} exists`)
    for (const f of table.files) t.ok(existsSync(join(dir, f)), `${table.folder}${f} exists`)
    const listed = new Set(table.files)
    const sources = readdirSync(dir).filter((f) => f.endsWith('.ts') && statSync(join(dir, f)).isFile())
    for (const f of sources) t.ok(listed.has(f), `${table.folder}${f} is listed`)
  })
}

t.test('the parser finds files and folders, and misses nothing it should flag', async (t) => {
  const sample = [
    '## Things (`src/x/`)',
    '| file | what |',
    '|---|---|',
    '| `a.ts`, `b.ts` | two |',
    '| `c.ts` | three |',
    '',
    '## Prose without a folder',
    '| `ignored.ts` | no folder |',
    '',
    '| file (`src/y/`) | what |',
    '|---|---|',
    '| `d.ts` | its own folder |',
  ].join('\n')
  t.same(fileTables(sample), [
    { folder: 'src/x/', heading: 'Things (`src/x/`)', files: ['a.ts', 'b.ts', 'c.ts'] },
    { folder: 'src/y/', heading: 'Prose without a folder', files: ['d.ts'] },
  ])
})
