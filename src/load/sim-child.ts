// The simulated provider in its own process for the load qualification (the same startSim
// that `sluice sim` runs). First stdout line: {"url":"http://127.0.0.1:PORT"}. Then, for each
// request carrying `x-load-id`, one line {"req":"<id>","t":"<process.hrtime ns>"} when the
// provider saw it (CLOCK_MONOTONIC, the same clock as the load generator's), from which the
// generator computes the queue wait. Exits when its stdin closes or on SIGTERM.

import { startSim } from '../sim/index.ts'

const sim = await startSim({ port: 0 })
sim.events.on('request', (e) => {
  const t = process.hrtime.bigint()
  const id = e.headers['x-load-id']
  if (typeof id === 'string') process.stdout.write(JSON.stringify({ req: id, t: String(t) }) + '\n')
})
process.stdout.write(JSON.stringify({ url: sim.url }) + '\n')
process.stdin.on('end', () => process.exit(0)).resume()
process.on('SIGTERM', () => process.exit(0))
