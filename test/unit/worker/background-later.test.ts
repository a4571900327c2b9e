// Background.later (worker/background.ts): an exchange's closing bookkeeping runs after its
// response, not in the same turn; in order; at most a slice of them per turn of the loop, so a
// burst of ends never holds the loop long; and close() (the drain) runs whatever still waits.

import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { Background, LATER_DELAY_MS } from '../../../worker/background.ts'

t.test('later: not in this turn, then in order', async (t) => {
  const bg = new Background()
  const ran: number[] = []
  for (let i = 0; i < 3; i++) bg.later(() => ran.push(i))
  await null
  t.same(ran, [], 'nothing in the turn that queued it, nor its microtasks')
  t.equal(bg.laterQueued, 3)
  await sleep(LATER_DELAY_MS + 50)
  t.same(ran, [0, 1, 2], 'then all of them, in order')
  t.equal(bg.laterQueued, 0)
})

t.test('a burst runs a slice per turn, every one of it in the end', async (t) => {
  const bg = new Background()
  const leftWhenRun: number[] = []
  // A new slice begins when the previous one's microtasks have run (Node runs them after each
  // timer callback): counted by a flag that a microtask clears.
  let slices = 0
  let inSlice = false
  for (let i = 0; i < 40; i++) {
    bg.later(() => {
      leftWhenRun.push(bg.laterQueued)
      if (!inSlice) { slices++; inSlice = true; queueMicrotask(() => { inSlice = false }) }
    })
  }
  while (bg.laterQueued > 0) await sleep(5)
  await sleep(5)
  t.equal(leftWhenRun.length, 40, 'every one ran')
  t.same(leftWhenRun.slice(0, 8), [39, 38, 37, 36, 35, 34, 33, 32], 'the first slice: 8 of them')
  t.equal(slices, 5, '40 in slices of 8')
})

t.test('close() runs what still waits, at once', async (t) => {
  const bg = new Background()
  const ran: string[] = []
  bg.later(() => ran.push('a'))
  bg.later(() => ran.push('b'))
  await bg.close()
  t.same(ran, ['a', 'b'])
  await sleep(LATER_DELAY_MS + 20)
  t.same(ran, ['a', 'b'], 'and not again')
})
