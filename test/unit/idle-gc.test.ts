// src/idle-gc.ts: the decision (no clock), and a real collection in this thread.
import t from 'tap'
import { PerformanceObserver, constants } from 'node:perf_hooks'
import { IdleDecider, startIdleCollector } from '../../src/idle-gc.ts'

t.test('one collection per idle period, only after the thread was busy', async (t) => {
  const d = new IdleDecider(0.02)
  t.same([0.001, 0.001, 0.5, 0.3, 0.01, 0.0, 0.019, 0.02, 0.01].map((u) => d.tick(u)),
    [true, false, false, false, true, false, false, false, true],
    'idle after start-up: collect; stays idle: not again; busy then idle: once more; 0.02 is busy')
})

t.test('a window with work in flight is not idle, whatever its utilisation, and makes the thread dirty', async (t) => {
  const d = new IdleDecider(0.02)
  t.same([[0.001, true], [0.001, true], [0.001, false], [0.001, false], [0.001, true], [0.0, false]].map(([u, f]) => d.tick(u as number, f as boolean)),
    [false, false, true, false, false, true],
    'in flight: no collection; the first idle window after it collects; in flight again, then idle: once more')
})

t.test('with a quiet period: no collection until the thread has been idle for all of it', async (t) => {
  const d = new IdleDecider(0.02, 30_000)
  // One window every 5 s; busy at t=0 (start-up), then idle.
  const at = (u: number, now: number) => d.tick(u, false, 0, now)
  t.equal(at(0.5, 0), false, 'busy')
  t.same([5_000, 10_000, 15_000, 20_000, 25_000].map((now) => at(0.001, now)), [false, false, false, false, false], 'idle, but for less than 30 s')
  t.equal(at(0.001, 30_000), true, 'idle for 30 s: collect')
  t.same([35_000, 60_000, 600_000].map((now) => at(0.001, now)), [false, false, false], 'once per idle period')
  t.equal(at(0.3, 605_000), false, 'busy again')
  t.equal(at(0.001, 630_000), false, '25 s after: not yet')
  t.equal(at(0.001, 635_000), true, '30 s after: once more')
})

t.test('work counted by activity makes a window busy, however little time it took', async (t) => {
  const d = new IdleDecider(0.02, 10_000)
  // An exchange every few seconds, each far under 2 % of a window: the count moves.
  t.same([[1, 5_000], [2, 10_000], [3, 15_000], [3, 20_000], [4, 25_000]].map(([n, now]) => d.tick(0.001, false, n, now)),
    [false, false, false, false, false], 'exchanges keep coming: never 10 s quiet')
  t.equal(d.tick(0.001, false, 4, 30_000), false, '5 s after the last one: not yet')
  t.equal(d.tick(0.001, false, 4, 35_000), true, '10 s after it: collect')
  t.equal(d.tick(0.001, false, 5, 40_000), false, 'one more exchange')
  t.equal(d.tick(0.001, false, 5, 45_000), false, 'quiet for 5 s')
  t.equal(d.tick(0.001, true, 5, 50_000), false, 'in flight: busy')
  t.equal(d.tick(0.001, false, 5, 55_000), false, '5 s after the in-flight window')
  t.equal(d.tick(0.001, false, 5, 60_000), true, 'and 10 s: collect')
})

t.test('the collector reads activity and the clock: a moving count holds the collection off', async (t) => {
  const keepAlive = setInterval(() => {}, 1000)
  let n = 0
  let collected = 0
  const stop = startIdleCollector({ everyMs: 10, idleBelow: 1.01, quietMs: 60, activity: () => n, collect: async () => {}, onCollect: () => { collected++ } })
  const moving = setInterval(() => { n++ }, 5)
  await new Promise((r) => setTimeout(r, 300))
  t.equal(collected, 0, `no collection while the count moves (${n} exchanges)`)
  clearInterval(moving)
  const stoppedAt = performance.now()
  for (let i = 0; i < 200 && collected === 0; i++) await new Promise((r) => setTimeout(r, 5))
  const after = performance.now() - stoppedAt
  stop()
  clearInterval(keepAlive)
  t.equal(collected, 1, 'one collection once it stopped')
  t.ok(after >= 60, `not before the quiet period (${after.toFixed(0)} ms)`)
})

t.test('the collector asks inFlight at every window: while it says yes, nothing is collected', async (t) => {
  const keepAlive = setInterval(() => {}, 1000)
  let asked = 0
  let collected = 0
  let inFlight = true
  const stop = startIdleCollector({ everyMs: 10, idleBelow: 1.01, inFlight: () => { asked++; return inFlight }, onCollect: () => { collected++ } })
  for (let i = 0; i < 200 && asked < 8; i++) await new Promise((r) => setTimeout(r, 10))
  t.ok(asked >= 8, `asked at every window (${asked})`)
  t.equal(collected, 0, 'no collection while work is in flight')
  inFlight = false
  for (let i = 0; i < 300 && collected === 0; i++) await new Promise((r) => setTimeout(r, 10))
  stop()
  clearInterval(keepAlive)
  t.equal(collected, 1, 'one collection once nothing is in flight')
})

t.test('a real collection through the in-process inspector', async (t) => {
  let junk: unknown[] | null = Array.from({ length: 200_000 }, (_, i) => ({ i, s: 'x'.repeat(8) }))
  t.ok(junk.length > 0)
  junk = null
  const majors: number[] = []
  const obs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) if ((e as unknown as { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR) majors.push(e.startTime)
  })
  obs.observe({ entryTypes: ['gc'] })
  const keepAlive = setInterval(() => {}, 1000) // the collector's own timer is unref'd
  const done = new Promise<void>((resolve) => {
    const stop = startIdleCollector({ everyMs: 10, idleBelow: 1.01, onCollect: () => { stop(); resolve() } })
  })
  await done
  clearInterval(keepAlive)
  for (let i = 0; i < 50 && majors.length === 0; i++) await new Promise((r) => setTimeout(r, 10)) // gc entries arrive asynchronously
  obs.disconnect()
  t.ok(majors.length >= 1, `a major collection ran (${majors.length})`)
})

t.test('the collection\'s own time does not make the next window busy: one collection per idle period', async (t) => {
  // A stand-in for a full GC's cost on the thread: 40 ms of this thread's time, in windows of
  // 25 ms whose threshold is 30 %. Counted in the next window, it would make that window busy,
  // the thread dirty, and the one after it would collect again.
  let collected = 0
  const keepAlive = setInterval(() => {}, 1000)
  const stop = startIdleCollector({
    everyMs: 25,
    idleBelow: 0.3,
    collect: async () => { const end = performance.now() + 40; while (performance.now() < end); },
    onCollect: () => { collected++ },
  })
  for (let i = 0; i < 100 && collected === 0; i++) await new Promise((r) => setTimeout(r, 10))
  t.equal(collected, 1, 'the first idle window collects')
  await new Promise((r) => setTimeout(r, 400)) // ~16 more windows, all idle
  stop()
  clearInterval(keepAlive)
  t.equal(collected, 1, 'and no window after it does')
})
