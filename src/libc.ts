// glibc's libc.so.6 through the FFI library koffi (prebuilt binaries), loaded once per thread
// on first use: `malloc_trim` (src/malloc-trim.ts) and a socket's `send` (src/log-writer.ts).
// Where there is no glibc (not Linux, musl: no library by that soname) or koffi cannot load,
// glibc() is null and the callers do without.

import { createRequire } from 'node:module'

export interface Glibc {
  /** Binds one function by its C declaration; throws when glibc has no such symbol. */
  func<F>(signature: string): F
  /** errno as the last call in this thread left it. */
  errno(): number
}

let loaded: Glibc | null | undefined

export function glibc (): Glibc | null {
  if (loaded !== undefined) return loaded
  loaded = null
  if (process.platform !== 'linux') return loaded
  try {
    const koffi = createRequire(import.meta.url)('koffi') as {
      load(path: string): { func(signature: string): unknown }
      errno(): number
    }
    // libc.so.6 is glibc's soname; musl has none by that name, and then this throws.
    const lib = koffi.load('libc.so.6')
    loaded = { func: <F>(signature: string) => lib.func(signature) as F, errno: () => koffi.errno() }
  } catch {
    loaded = null
  }
  return loaded
}
