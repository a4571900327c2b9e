// The flags sluice's production launchers give Node (`npm start`, the systemd units, the
// container's CMD), and with which its own benchmarks and load runs start it, and the one V8
// flag the primary sets itself once it is up (LATE_V8_FLAGS). V8's flags are process-wide; most
// are read when V8 starts or a thread's heap is set up, so a running process cannot set them for
// its worker threads (`v8.setFlagsFromString('--no-concurrent-marking')` before a Worker:
// measured, a fatal V8 check in Node 24; `--single-threaded-gc` that way: no effect), and those
// are on the command line. test/ops/node-flags.test.ts holds every launcher to this list.

import { setFlagsFromString } from 'node:v8'

// --no-parallel-scavenge: the HTTP worker's young generation is small on purpose
// (limits.workerYoungGenMb, 4 MiB: the relay's allocations stay in cache), so it is scavenged
// often (~265 times per 1,500 exchanges at 96 streams). V8 runs each scavenge with tasks on its
// platform threads, and on sluice's one vCPU those threads only take turns with the worker on
// the same core: measured at 96 streams (three paired runs), V8's helper threads 0.28-0.50 ms of
// CPU per exchange against 0.21 with the flag, the worker's own thread no slower
// (docs/benchmarks.md). Concurrent marking, sweeping and compaction stay on.
//
// Weighed and left off the list: --no-concurrent-recompilation (TurboFan compiles on the thread
// whose function got hot, not in a job on those platform threads). In one spell of this host,
// with the helpers lowered (limits.v8HelperNice, src/helper-nice.ts), background compiles
// waited 50-98 ms of wall for them at saturation and the peak RSS rose 25-40 MB in glibc's heap
// (translated saturation 162-172 MB, 126-134 with the flag); in a later spell the difference
// was gone. But after a change of traffic (96-stream latency work, then 2000-event streams)
// sluice relayed at more CPU per event with the flag: the median block 8-29 % more in five
// paired runs, and counting the gaps too, in which deferred background work runs, 12 and 19 %
// in the two runs that did (docs/benchmarks.md). The relay is the figure DESIGN.md holds to
// 1.5x the pass-through's, so the flag is not the default; README says when to add it.
export const NODE_FLAGS: readonly string[] = ['--no-parallel-scavenge']

// --heap-growing-percent=100, set by the primary once every thread it starts at boot runs
// (setLateV8Flags, at "sluice ready"), not on the command line: V8 checks a code cache against
// a hash of its flags, and this flag is in that hash, so with it on the command line every one
// of Node's built-in modules that is not in its startup snapshot (node:http, node:net, the
// worker bootstrap's own, ...) was compiled from source in every thread instead of read from the
// code cache Node ships: measured, requiring http, https, zlib, worker_threads and
// child_process took 50-52 ms with it against 24-27 without (`--no-parallel-scavenge`,
// `--min-semi-space-size` and `--max-semi-space-size` are not in the hash: 23-35 ms;
// `--initial-old-space-size` and `--initial-heap-size` are: 52-55), and the gateway's start
// (exec -> /readyz, pinned, six starts each, docs/benchmarks.md) 370-385 ms with it on the
// command line against 290-297 set late, the primary and the HTTP worker each ~40 ms of CPU
// less. V8 reads this one at each full collection, for every thread's heap, so set late it acts
// as before: the HTTP worker's full GCs in a throughput run (400 streams of 2000 events, 8 in
// parallel) 4 with it on the command line, 5 set late, 63 without it; test/ops/node-flags.test.ts
// reads the growing factor V8 traces for the worker's next full GC (2.0). A thread started after
// it is set (a parser thread on demand, a restarted worker) compiles its built-ins from source
// again, as every thread did before.
//
// What it does: after each full (mark-compact) collection V8 sets the next one's trigger at
// twice the live heap instead of its own choice, which for the HTTP worker was ~1.65x
// (trace-gc-nvp: old_gen_allocation_limit 24.7 MB at 14.9 MB live; the pass-through's main thread
// 29-37 MB at 14.5). At throughput the worker's full GCs were started by that trigger
// (--trace-incremental-marking: "Start (task)" at 14-15 MB of a 20-24 MB limit) with only
// 0.2-1.9 MB allocated in the old generation between two of them; what fills the rest, as far as
// the traces show, is the external memory V8 counts with it (the socket chunks' ArrayBuffers
// still held since the last full GC). So the margin sets how often the whole heap is marked: in the
// throughput run (8 streams of 2000 events) 28 full GCs per 1.63M events became 9, the V8
// helper threads' CPU 0.40 -> 0.19 ms per 1000 events and the worker's 0.67 -> 0.62, the relay
// figure 1.04-1.17 -> 0.81-0.84 ms per 1000 events (pass-through 0.62-0.68), two paired runs.
// 50 did nothing (below V8's own choice). The heap limits (resourceLimits) are V8's hard limits
// and do not move; near them the flag made no difference either (measured: a 128 MB worker
// churning garbage over a large live set peaked at the same ~110-114 MB of used heap with and
// without it), so the admission check (workerHeapAdmitFraction of the limit) acts as before.
// The cost is memory held between full GCs: the bench's RSS peak 121-122 -> 128 MB; idle 12 s
// after load 96.8-98.1 MB without it, 97.8-98.2 with it (two and three full runs,
// docs/benchmarks.md).
export const LATE_V8_FLAGS: readonly string[] = ['--heap-growing-percent=100']

/**
 * Sets LATE_V8_FLAGS (process-wide: every thread's heap, from its next full collection), each
 * unless the process was started with that flag itself (on its command line or in
 * NODE_OPTIONS, in either spelling): an operator's own value stands. Returns the flags set.
 */
export function setLateV8Flags (execArgv: readonly string[] = process.execArgv, nodeOptions = process.env.NODE_OPTIONS ?? ''): string[] {
  const given = new Set([...execArgv, ...nodeOptions.split(/\s+/)].map(flagName))
  const set: string[] = []
  for (const f of LATE_V8_FLAGS) {
    if (given.has(flagName(f))) continue
    setFlagsFromString(f)
    set.push(f)
  }
  return set
}

/** `--heap_growing_percent=1` -> `heap-growing-percent` (V8 takes both spellings). */
function flagName (arg: string): string {
  return arg.replace(/^--/, '').split('=')[0].replaceAll('_', '-')
}
