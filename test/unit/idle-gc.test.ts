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
