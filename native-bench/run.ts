// `npm run bench`: runs every native-bench/*.bench.ts as its own child process, with this
// same node, one after the other (so they do not disturb each other's timings), and prints
// each one's table followed by a summary.
//
//   npm run bench                    every benchmark
//   npm run bench -- ledger relay    only those whose file name contains one of the words
//   npm run bench -- --quick         passes --quick on to each benchmark (shorter runs)
//
// Exit status: 0 unless a benchmark crashed (non-zero exit, signal, or over its time
// bound). A figure that misses its target is reported, never a failure.

import { spawn } from 'node:child_process'
import { readdirSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const dir = fileURLToPath(new URL('.', import.meta.url))
/** Per benchmark; a benchmark that runs longer is killed and counted as crashed. The longest,
 *  exchange.bench.ts, takes ~4 min on a 2-core host (its 96-stream rounds and staggered
 *  blocks are many so that the CPU-share and p99 rows rest on enough samples). */
const TIME_BOUND_MS = 360_000

const args = process.argv.slice(2)
const passOn = args.filter((a) => a.startsWith('--'))
const words = args.filter((a) => !a.startsWith('--'))
const benches = readdirSync(dir)
  .filter((f) => f.endsWith('.bench.ts'))
  .filter((f) => words.length === 0 || words.some((w) => f.includes(w)))
  .sort()

interface Outcome { name: string; ok: boolean; status: string; seconds: number }

function runOne (file: string): Promise<Outcome> {
  const started = Date.now()
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [dir + file, ...passOn], { stdio: ['ignore', 'pipe', 'pipe'] })
    const out: Buffer[] = []
    const err: Buffer[] = []
    child.stdout.on('data', (c: Buffer) => out.push(c))
    child.stderr.on('data', (c: Buffer) => err.push(c))
    let timedOut = false
    const timer = setTimeout(() => { timedOut = true; child.kill('SIGKILL') }, TIME_BOUND_MS)
    child.on('error', (e) => err.push(Buffer.from(String(e))))
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      const seconds = (Date.now() - started) / 1000
      const text = Buffer.concat(out).toString('utf8').trimEnd()
      const errText = Buffer.concat(err).toString('utf8').trimEnd()
      console.log(`\n== ${file} ==`)
      if (text) console.log(text)
      const ok = code === 0 && !timedOut
      if (!ok && errText) console.log(errText)
      const status = timedOut ? `killed after ${TIME_BOUND_MS / 1000} s` : code === 0 ? 'ok' : signal ? `crashed (${signal})` : `crashed (exit ${code})`
      resolve({ name: file, ok, status, seconds })
    })
  })
}

const outcomes: Outcome[] = []
for (const b of benches) outcomes.push(await runOne(b))

console.log(`\n== summary (Node ${process.versions.node}) ==`)
if (outcomes.length === 0) console.log(`  no benchmark matched ${JSON.stringify(words)}`)
const width = Math.max(0, ...outcomes.map((o) => o.name.length))
for (const o of outcomes) console.log(`  ${o.name.padEnd(width)}  ${o.status.padEnd(10)}  ${o.seconds.toFixed(1).padStart(6)} s`)
process.exitCode = outcomes.every((o) => o.ok) ? 0 : 1
