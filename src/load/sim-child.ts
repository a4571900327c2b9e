// The simulated provider in its own process for the load qualification (the same startSim
// that `sluice sim` runs). First stdout line: {"url":"http://127.0.0.1:PORT"}. Then, for each
// request carrying `x-load-id`, one line {"req":"<id>","t":"<process.hrtime ns>"} when the
// provider saw it (CLOCK_MONOTONIC, the same clock as the load generator's), from which the
// generator computes the queue wait. Exits when its stdin closes or on SIGTERM.
//
// With `--script` (recall-burst, src/load/recall.ts) it also says what it answered each such
// request, once its body is read: {"said":"<id>","rid":"<response id key>","calls":[[key,
// itemId,name,kind,namespace,args]],"text":"<the text>"} — computed by the sim's own
// buildScript from the same bytes (the sim is deterministic), so the load generator can check
// that every id, argument and word a session received is the one the provider sent for that
// very request, whatever protocol translation did in between.

import { startSim } from '../sim/index.ts'
import type { SimProtocol } from '../sim/directive.ts'
import { saidFor } from './recall-wire.ts'

const withScript = process.argv.includes('--script')
const sim = await startSim({ port: 0 })
const loadIds = new Map<number, string>()
sim.events.on('request', (e) => {
  const t = process.hrtime.bigint()
  const id = e.headers['x-load-id']
  if (typeof id === 'string') {
    process.stdout.write(JSON.stringify({ req: id, t: String(t) }) + '\n')
    if (withScript) loadIds.set(e.id, id)
  }
})
if (withScript) {
  sim.events.on('body', (e) => {
    const id = loadIds.get(e.id)
    loadIds.delete(e.id)
    if (id === undefined || e.protocol === null || typeof e.json !== 'object' || e.json === null) return
    process.stdout.write(JSON.stringify({ said: id, ...saidFor(e.protocol as SimProtocol, e.bytes, e.json as Record<string, unknown>) }) + '\n')
  })
  // requests that never sent a body (refused, reset) must not accumulate
  sim.events.on('end', (e) => { loadIds.delete(e.id) })
}
process.stdout.write(JSON.stringify({ url: sim.url }) + '\n')
process.stdin.on('end', () => process.exit(0)).resume()
process.on('SIGTERM', () => process.exit(0))
