// Just enough of the Containerfile and .dockerignore grammars for test/ops/containerfile.test.ts.

export interface Instruction { name: string; args: string; line: number }

/**
 * Instructions in order: comments and blank lines dropped, `\` continuations joined (comment
 * lines inside a continuation are skipped, as BuildKit does), the name upper-cased.
 */
export function parseContainerfile (text: string): Instruction[] {
  const out: Instruction[] = []
  const lines = text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    let s = lines[i].trim()
    if (s === '' || s.startsWith('#')) continue
    const line = i + 1
    while (s.endsWith('\\') && i + 1 < lines.length) {
      s = s.slice(0, -1).trimEnd()
      let next = lines[++i].trim()
      while (next.startsWith('#') && i + 1 < lines.length) next = lines[++i].trim()
      s += ' ' + next
    }
    const m = /^(\S+)\s*(.*)$/s.exec(s)!
    out.push({ name: m[1].toUpperCase(), args: m[2].trim(), line })
  }
  return out
}

function globToRegExp (pattern: string): RegExp {
  let re = ''
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]
    if (c === '*' && pattern[i + 1] === '*') {
      i++
      if (pattern[i + 1] === '/') { i++; re += '(?:.*/)?' } else re += '.*'
    } else if (c === '*') re += '[^/]*'
    else if (c === '?') re += '[^/]'
    else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&')
  }
  return new RegExp(`^${re}$`)
}

/**
 * Whether `path` (relative to the context) is sent to the builder: the last pattern that
 * matches the path or one of its parent directories decides; `!` re-includes.
 */
export function dockerignoreIncludes (ignoreText: string, path: string): boolean {
  const patterns = ignoreText.split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'))
  const parts = path.replace(/\/+$/, '').split('/')
  const prefixes = parts.map((_, i) => parts.slice(0, i + 1).join('/'))
  let included = true
  for (const p of patterns) {
    const negate = p.startsWith('!')
    const re = globToRegExp((negate ? p.slice(1) : p).replace(/^\/+|\/+$/g, ''))
    if (prefixes.some((pre) => re.test(pre))) included = negate
  }
  return included
}
