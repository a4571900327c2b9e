// The OS plumbing (quotas, /proc readers) lives in src/load/os.ts, shared with the load
// qualification command (`npm run load`); this module re-exports it for exchange.bench.ts.
export * from '../src/load/os.ts'
