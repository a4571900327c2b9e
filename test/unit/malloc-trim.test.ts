// src/malloc-trim.ts: the real malloc_trim returns the free middle of malloc's arenas, and the
// trimmer coalesces requests into one trim.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { MallocTrimmer, trimMalloc } from '../../src/malloc-trim.ts'
import { collectGarbage } from '../../src/idle-gc.ts'
import { HAS_GLIBC as glibc } from '../helpers/platform.ts'


/** Resident anonymous memory of this process, bytes (smaps_rollup: what malloc holds is here). */
function anonBytes (): number {
  return Number(/^Anonymous:\s+(\d+) kB/m.exec(readFileSync('/proc/self/smaps_rollup', 'utf8'))![1]) * 1024
}

/**
 * ~88 MiB freed in the middle of malloc's arenas: 48 KiB backing stores come from malloc (below
 * its mmap threshold), and every 16th is kept, so the freed ones are holes that free() alone
 * never returns. Returns the kept ones.
 */
async function fragment (): Promise<Buffer[]> {
  let bufs: Buffer[] = Array.from({ length: 2000 }, () => Buffer.allocUnsafeSlow(48 * 1024).fill(1))
  const kept = bufs.filter((_, i) => i % 16 === 0)
  bufs = []
  await collectGarbage()
  await collectGarbage() // backing stores are freed after the collection that finds them dead
  return kept
}

t.test('malloc_trim gives back the free pages in the middle of an arena', { skip: glibc ? false : 'needs glibc' }, async (t) => {
  const kept = await fragment()
  const before = anonBytes()
  t.equal(await trimMalloc(), true, 'malloc_trim is available here (glibc), run on the thread pool')
  const after = anonBytes()
  t.ok(before - after > 32 * 2 ** 20, `resident anonymous memory fell by more than 32 MiB (${((before - after) / 2 ** 20).toFixed(1)} MiB of ~88 freed)`)
  t.equal(kept.every((b) => b[100] === 1), true, 'the buffers still alive are intact')
})

t.test('the trimmer counts the RSS its trims gave back', { skip: glibc ? false : 'needs glibc' }, async (t) => {
  const falls: number[] = []
  const trimmer = new MallocTrimmer({ delayMs: 1, onTrim: (r) => falls.push(Math.max(0, r.rssBefore - r.rssAfter)) })
  t.equal(trimmer.releasedBytes, 0, 'nothing before a trim')
  const kept = await fragment()
  trimmer.request('test')
  for (let i = 0; i < 200 && trimmer.trims === 0; i++) await new Promise((r) => setTimeout(r, 10))
  t.equal(trimmer.trims, 1)
  t.ok(trimmer.releasedBytes > 32 * 2 ** 20, `more than 32 MiB given back (${(trimmer.releasedBytes / 2 ** 20).toFixed(1)} MiB)`)
  t.equal(trimmer.releasedBytes, falls[0], 'the fall it reported')
  t.equal(kept.length, 125)
  trimmer.close()
})

t.test('requests coalesce into one trim after the delay; close cancels one armed', async (t) => {
  let calls = 0
  const results: (readonly string[])[] = []
  const trimmer = new MallocTrimmer({ delayMs: 20, trim: async () => { calls++; return true }, onTrim: (r) => results.push(r.reasons) })
  trimmer.request('a'); trimmer.request('b'); trimmer.request('a')
  t.equal(calls, 0, 'nothing at once')
  await new Promise((r) => setTimeout(r, 60))
  t.equal(calls, 1, 'three requests, one trim')
  t.same(results, [['a', 'b']], 'reported once, with each reason once')
  t.equal(trimmer.trims, 1)
  trimmer.request('c')
  await new Promise((r) => setTimeout(r, 60))
  t.equal(calls, 2, 'a request after the trim arms another')
  t.same(results[1], ['c'], 'with only its own reason')
  trimmer.request()
  trimmer.close()
  await new Promise((r) => setTimeout(r, 60))
  t.equal(calls, 2, 'closed: the armed trim does not run')
  trimmer.request()
  await new Promise((r) => setTimeout(r, 60))
  t.equal(calls, 2, 'and later requests are ignored')
})

t.test('where malloc_trim is unavailable nothing is reported', async (t) => {
  const reported: unknown[] = []
  const trimmer = new MallocTrimmer({ delayMs: 1, trim: async () => false, onTrim: (r) => reported.push(r) })
  trimmer.request()
  await new Promise((r) => setTimeout(r, 30))
  t.same(reported, [])
  t.equal(trimmer.trims, 0)
})

t.test('a request while a trim runs arms exactly one more, after it', async (t) => {
  const gates: (() => void)[] = []
  const reasons: (readonly string[])[] = []
  const trimmer = new MallocTrimmer({
    delayMs: 5,
    trim: () => new Promise<boolean>((resolve) => gates.push(() => resolve(true))),
    onTrim: (r) => reasons.push(r.reasons),
  })
  trimmer.request('first')
  await new Promise((r) => setTimeout(r, 30))
  t.equal(gates.length, 1, 'the first trim is running')
  trimmer.request('during'); trimmer.request('during too')
  await new Promise((r) => setTimeout(r, 30))
  t.equal(gates.length, 1, 'no second trim while the first runs')
  gates[0]()
  await new Promise((r) => setTimeout(r, 30))
  t.equal(gates.length, 2, 'one more after it')
  gates[1]()
  await new Promise((r) => setTimeout(r, 30))
  t.same(reasons, [['first'], ['during', 'during too']])
  t.equal(gates.length, 2, 'and no third')
  trimmer.close()
})

t.test('a trim that throws counts as not run, and the trimmer goes on', async (t) => {
  let n = 0
  const trimmer = new MallocTrimmer({ delayMs: 1, trim: async () => { if (n++ === 0) throw new Error('boom'); return true } })
  trimmer.request()
  await new Promise((r) => setTimeout(r, 30))
  t.equal(trimmer.trims, 0)
  trimmer.request()
  await new Promise((r) => setTimeout(r, 30))
  t.equal(trimmer.trims, 1)
  trimmer.close()
})
