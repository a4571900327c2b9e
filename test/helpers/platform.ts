// What this machine's runtime is, for tests that need it.

/** glibc is the process's C library (malloc_trim exists): Node's report names its version. */
export const HAS_GLIBC = process.platform === 'linux' &&
  Boolean((process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header?.glibcVersionRuntime)
