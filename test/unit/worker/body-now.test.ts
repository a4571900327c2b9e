// Every test of body.test.ts again, with the body read as runExchange (worker/exchange.ts)
// reads it: one microtask while bodyNotInHand, then readBodyNow (no promise) when all of it is
// there, else readBody. The same bytes, reservations and refusals, whichever way it goes; the
// last test checks that both ways were taken.

import t from 'tap'
import { bodyNotInHand, readBody, readBodyNow } from '../../../worker/body.ts'

const taken = { now: 0, readBody: 0 }
const asTheExchangeReads: typeof readBody = async (req, scope, limits, signal) => {
  if (bodyNotInHand(req)) await null
  const now = readBodyNow(req, scope, limits, signal)
  if (now !== null) { taken.now++; return now }
  taken.readBody++
  return await readBody(req, scope, limits, signal)
}
;(globalThis as { sluiceBodyRead?: typeof readBody }).sluiceBodyRead = asTheExchangeReads
await import('./body.test.ts')

t.test('both ways were taken', async (t) => {
  t.ok(taken.now >= 3, `read at once (readBodyNow): ${taken.now}`)
  t.ok(taken.readBody >= 3, `read through readBody: ${taken.readBody}`)
})
