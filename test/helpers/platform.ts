// What this machine's runtime is, for tests that need it.

import { readFileSync } from 'node:fs'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'

/** glibc is the process's C library (malloc_trim exists): Node's report names its version. */
export const HAS_GLIBC = process.platform === 'linux' &&
  Boolean((process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header?.glibcVersionRuntime)

/** The third field of a `tcp_rmem` / `tcp_wmem` sysctl: the size a socket's buffer may autotune to. */
function tcpMax (file: string, fallback: number): number {
  try {
    const max = Number(readFileSync(file, 'utf8').trim().split(/\s+/)[2])
    return Number.isFinite(max) && max > 0 ? max : fallback
  } catch {
    return fallback
  }
}

/**
 * The most the kernel may hold of a stream crossing `connections` loopback TCP connections:
 * on each, a receive buffer autotuned up to tcp_rmem's maximum and a send buffer up to
 * tcp_wmem's (32 and 4 MiB on these machines: a 24 MB stream, once thought "more than every
 * buffer", was absorbed whole). A test whose client stops reading must send more than this for
 * the stop to reach the gateway.
 */
export function socketBufferBytes (connections: number): number {
  return connections * (tcpMax('/proc/sys/net/ipv4/tcp_rmem', 6 * 2 ** 20) + tcpMax('/proc/sys/net/ipv4/tcp_wmem', 4 * 2 ** 20))
}

/** A full collection now, in this thread (V8's `gc`, exposed at run time: no flag on the command line). */
export function fullGc (): void {
  setFlagsFromString('--expose-gc')
  ;(runInNewContext('gc') as () => void)()
}
