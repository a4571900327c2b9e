// The test command's tap run, with a failure summary at the end.
//
//   npm run test:tap [-- tap options and files]
//
// Runs tap (its `tap` reporter, raw TAP, as on a terminal without colours), passes every line
// through unchanged, and remembers each failed assertion: the test file, the subtests that lead
// to it, and the first lines of its YAML diagnostics. After tap ends it prints them again,
// together, as TAP comments. A CI log that keeps only its last lines then still names what
// failed. Exits with tap's own exit code (1 when it was killed by a signal).

import { spawn } from 'node:child_process'
import { dirname, join, resolve } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath, pathToFileURL } from 'node:url'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const TAP = join(ROOT, 'node_modules/.bin/tap')
/** Diagnostic lines kept per failure (the YAML block after a `not ok`). */
const DIAG_LINES = 24
/** Failures printed in the summary; the rest are counted. */
const MAX_FAILURES = 40

export interface Failure { path: string[], line: string, diag: string[] }

/**
 * Collects failed assertions from raw TAP, line by line. Subtests are indented four spaces per
 * level; `# Subtest: name` opens one at its indent, a `not ok` at indent d belongs to the
 * subtests open at indents below d.
 */
export class FailureCollector {
  readonly failures: Failure[] = []
  #open: Array<{ indent: number, name: string }> = []
  #diag: Failure | null = null
  #diagIndent = -1

  push (line: string): void {
    const indent = line.length - line.trimStart().length
    const body = line.trimStart()
    if (this.#diag !== null) {
      if (body === '...' && indent === this.#diagIndent) { this.#diag = null; return }
      if (body === '---' && this.#diag.diag.length === 0) { this.#diagIndent = indent; return }
      if (this.#diagIndent >= 0 && indent >= this.#diagIndent) {
        if (this.#diag.diag.length < DIAG_LINES) this.#diag.diag.push(line.slice(this.#diagIndent))
        return
      }
      this.#diag = null
    }
    const sub = /^# Subtest: (.*)$/.exec(body)
    if (sub !== null) {
      while (this.#open.length > 0 && this.#open[this.#open.length - 1].indent >= indent) this.#open.pop()
      this.#open.push({ indent, name: sub[1] })
      return
    }
    if (/^not ok \d+/.test(body) && !/# (TODO|SKIP)\b/i.test(body)) {
      const path = this.#open.filter((s) => s.indent < indent).map((s) => s.name)
      const failure: Failure = { path, line: body, diag: [] }
      this.failures.push(failure)
      this.#diag = failure
      this.#diagIndent = -1
    }
  }

  /** The summary, as TAP comment lines (empty when nothing failed). Leaf failures only: a failed
   *  subtest whose own failures are listed is not repeated. */
  summary (): string[] {
    const leaves = this.failures.filter((f) => !this.failures.some((g) => g !== f &&
      g.path.length > f.path.length && f.path.every((p, i) => g.path[i] === p) &&
      g.path[f.path.length] === f.line.replace(/^not ok \d+ - /, '').replace(/ # time=.*$/, '')))
    if (leaves.length === 0) return []
    const out = ['#', `# ${leaves.length} failed assertion(s):`]
    for (const f of leaves.slice(0, MAX_FAILURES)) {
      out.push(`#   ${[...f.path, f.line].join(' > ')}`)
      for (const d of f.diag) out.push(`#       ${d}`)
    }
    if (leaves.length > MAX_FAILURES) out.push(`#   ... and ${leaves.length - MAX_FAILURES} more`)
    return out
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const child = spawn(TAP, process.argv.slice(2), { cwd: process.cwd(), stdio: ['inherit', 'pipe', 'inherit'] })
  const collector = new FailureCollector()
  const lines = createInterface({ input: child.stdout })
  lines.on('line', (line) => { process.stdout.write(line + '\n'); collector.push(line) })
  const closed = new Promise<void>((resolve) => lines.once('close', resolve))
  child.once('exit', (code, signal) => {
    void closed.then(() => {
      for (const l of collector.summary()) process.stdout.write(l + '\n')
      process.exitCode = code ?? (signal !== null ? 1 : 0)
    })
  })
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => child.kill(sig))
}
