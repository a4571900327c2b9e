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
// very request, whatever protocol translation did in between. The `req` line also names the
// API key the request carried (`key`: the load's own throwaway account keys, so the generator
// can count requests per provider account), and a request the sim ended with a fault (reset,
// 503, 429: with `fault_key`, only on the faulty account's key) gets one more line
// {"fault":"<id>","status":<0 for a reset>,"key":"<its key>"}.

import { startSim } from '../sim/index.ts'
import type { SimProtocol } from '../sim/directive.ts'
import { saidFor } from './recall-wire.ts'

const withScript = process.argv.includes('--script')
const sim = await startSim({ port: 0 })
const loadIds = new Map<number, { id: string; key: string | null }>()
sim.events.on('request', (e) => {
  const t = process.hrtime.bigint()
  const id = e.headers['x-load-id']
  if (typeof id === 'string') {
    process.stdout.write(JSON.stringify(withScript ? { req: id, t: String(t), key: e.apiKey } : { req: id, t: String(t) }) + '\n')
    if (withScript) loadIds.set(e.id, { id, key: e.apiKey })
  }
})
if (withScript) {
  sim.events.on('body', (e) => {
    const id = loadIds.get(e.id)?.id
    if (id === undefined || e.protocol === null || typeof e.json !== 'object' || e.json === null) return
    process.stdout.write(JSON.stringify({ said: id, ...saidFor(e.protocol as SimProtocol, e.bytes, e.json as Record<string, unknown>) }) + '\n')
  })
  // one entry per request in flight: deleted at its end, whatever it was
  sim.events.on('end', (e) => {
    const r = loadIds.get(e.id)
    loadIds.delete(e.id)
    if (r !== undefined && e.outcome === 'fault') process.stdout.write(JSON.stringify({ fault: r.id, status: e.status, key: r.key }) + '\n')
  })
}
process.stdout.write(JSON.stringify({ url: sim.url }) + '\n')
process.stdin.on('end', () => process.exit(0)).resume()
process.on('SIGTERM', () => process.exit(0))
