// The flags sluice's production launchers give Node (`npm start`, the systemd units, the
// container's CMD), and with which its own benchmarks and load runs start it. V8's flags are
// process-wide and are read when V8 starts: a running process cannot set them for its worker
// threads (`v8.setFlagsFromString('--no-concurrent-marking')` before a Worker: measured, a
// fatal V8 check in Node 24; `--single-threaded-gc` that way: no effect), so they are on the
// command line. test/ops/node-flags.test.ts holds every launcher to this list.
//
// --no-parallel-scavenge: the HTTP worker's young generation is small on purpose
// (limits.workerYoungGenMb, 4 MiB: the relay's allocations stay in cache), so it is scavenged
// often (~265 times per 1,500 exchanges at 96 streams). V8 runs each scavenge with tasks on its
// platform threads, and on sluice's one vCPU those threads only take turns with the worker on
// the same core: measured at 96 streams (three paired runs), V8's helper threads 0.28-0.50 ms of
// CPU per exchange against 0.21 with the flag, the worker's own thread no slower
// (docs/benchmarks.md). Concurrent marking, sweeping and compaction stay on.
//
// --heap-growing-percent=100: after each full (mark-compact) collection V8 sets the next one's
// trigger at twice the live heap instead of its own choice, which for the HTTP worker was ~1.65x
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
export const NODE_FLAGS: readonly string[] = ['--no-parallel-scavenge', '--heap-growing-percent=100']
