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
export const NODE_FLAGS: readonly string[] = ['--no-parallel-scavenge']
