// The simulated provider for exchange.bench.ts, in its own process (the same startSim that
// `sluice sim` runs), reporting what the benchmark cannot see from outside: when a request
// arrived, when its answer's first bytes went out, and when it saw an exchange end. For each
// exchange whose request carried `x-bench-id`, stdout lines
//   {"req":"<x-bench-id>","t":"<process.hrtime ns>"}      the request's headers arrived
//   {"first":"<x-bench-id>","t":"..."}                     the streamed answer's first write
//   {"end":"<x-bench-id>","outcome":"client-closed","eventsSent":12,"t":"..."}
// hrtime is CLOCK_MONOTONIC, the same clock in every process on the machine, so the
// benchmark can subtract its own times. First line: {"url":"http://127.0.0.1:PORT"}.
// Exits when its stdin closes (its parent is gone) or on SIGTERM.

import { startSim } from '../src/sim/index.ts'

const sim = await startSim({ port: 0 })
const tagged = new Map<number, string>()
sim.events.on('request', (e) => {
  const t = process.hrtime.bigint()
  const id = e.headers['x-bench-id']
  if (typeof id !== 'string') return
  tagged.set(e.id, id)
  process.stdout.write(JSON.stringify({ req: id, t: String(t) }) + '\n')
})
sim.events.on('first', (e) => {
  const t = process.hrtime.bigint()
  const id = tagged.get(e.id)
  if (id !== undefined) process.stdout.write(JSON.stringify({ first: id, t: String(t) }) + '\n')
})
sim.events.on('end', (e) => {
  const t = process.hrtime.bigint()
  const id = tagged.get(e.id)
  if (id === undefined) return
  tagged.delete(e.id)
  process.stdout.write(JSON.stringify({ end: id, outcome: e.outcome, eventsSent: e.eventsSent, t: String(t) }) + '\n')
})
process.stdout.write(JSON.stringify({ url: sim.url }) + '\n')
process.stdin.on('end', () => process.exit(0)).resume()
process.on('SIGTERM', () => process.exit(0))
