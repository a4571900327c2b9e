// A process's threads as the kernel sees them, for tests that check thread priorities.

import { readdirSync, readFileSync } from 'node:fs'

/** Every thread of `pid`: its name and nice value (field 19 of /proc/<pid>/task/<tid>/stat). */
export function threads (pid: number): Array<{ name: string; nice: number }> {
  const out: Array<{ name: string; nice: number }> = []
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const name = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trimEnd()
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8')
      // After the ")" that closes the name: state is field 3, nice field 19.
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      out.push({ name, nice: Number(rest[19 - 3]) })
    } catch {} // a thread that ended meanwhile
  }
  return out
}
