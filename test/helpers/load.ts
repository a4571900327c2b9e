// `sluice load ...` as the user runs it (bin/sluice.ts in a child process), bounded at 60 s:
// its exit code and everything it printed.

import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { ROOT } from './gateway.ts'

export function runLoad (args: string[]): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [join(ROOT, 'bin/sluice.ts'), 'load', ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    p.stdout.on('data', (c) => { out += c })
    p.stderr.on('data', (c) => { out += c })
    const timer = setTimeout(() => p.kill('SIGTERM'), 60_000)
    p.on('exit', (code) => { clearTimeout(timer); resolve({ code, out }) })
  })
}
