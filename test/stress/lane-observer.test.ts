// The lane observer itself (lane-hammer.ts): it must see what it exists to see, and a row
// forgotten after its thread's death must take back exactly what that row believed.

import t from 'tap'
import { LaneObserver } from './lane-hammer.ts'

t.test('two runners of one session, a stop without a run, FIFO, and a dead row forgotten', async (t) => {
  const o = new LaneObserver(4)
  o.running(0, 1, 0)
  t.equal(o.violations, 0)
  t.equal(o.believed(0), 1)
  o.running(1, 2, 0)
  t.equal(o.violations, 0, 'another session runs beside it')
  o.running(0, 3, 1)
  t.equal(o.violations, 1, 'two runners of session 0 at once')
  t.equal(o.maxRunning(0), 2)
  o.stopping(0, 3)
  o.stopping(0, 3)
  t.equal(o.violations, 2, 'a stop the row did not believe')
  o.running(0, 3, 1)
  t.equal(o.violations, 3, 'a ticket that is not newer than the last one run (FIFO)')
  t.match(o.seen, [/2 exchanges believed running at once/, /stop with no believed runner \(row 3 -1\)/, /ticket 1 ran after ticket 1/])
  // Row 1 dies while it believes it runs session 0: forgetting it takes back exactly its
  // belief, and the next runner of session 0 is alone.
  o.stopping(0, 3)
  o.forgetRow(1)
  t.equal(o.believed(0), -1, 'what is left is row 3\'s own miscount, nothing of the dead row')
  const clean = new LaneObserver(3)
  clean.running(2, 1, 5)
  clean.forgetRow(1)
  clean.running(2, 2, 6)
  t.equal(clean.violations, 0, 'after the dead runner is forgotten the next one runs alone')
  t.equal(clean.believed(2), 1)
})
