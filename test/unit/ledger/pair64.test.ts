// The 64-bit (lo, hi) counter pair (pair64.ts): carries across 2^32 in every writer, reads
// back whole, and a lock-free reader racing carries in another thread never sees a value
// that is not one the counter held (no torn carry: never 2^32 low or high, never backwards).
// Also: a carry left half done by a writer that died inside it reads back right and is
// finished by the next add.

import t from 'tap'
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import { addLocked, addOwned, read, readLocked, writeLocked } from '../../../src/ledger/pair64.ts'

const TWO32 = 2 ** 32
/** The largest single step: every add of it carries at least every other time. */
const STEP = 0x7fffffff
/** Adds the writer makes at most (the total stays a safe integer). */
const MAX_ADDS = 4_000_000
/** Reads the reader makes while the writer runs (it then tells the writer to stop). */
const READS = 1_000_000

// Cells of the race buffer: the pair, then a start flag, a stop flag, and the writer's count.
const PAIR = 0
const START = 2
const STOP = 3
const ADDED = 4

interface Job { sab: SharedArrayBuffer; mode: 'locked' | 'owned' }

if (!isMainThread) {
  const { sab, mode } = workerData as Job
  const i32 = new Int32Array(sab)
  parentPort!.postMessage('ready')
  while (Atomics.load(i32, START) === 0) Atomics.wait(i32, START, 0, 50)
  // The worker is the pair's only writer: for 'locked' that stands for the lock holder.
  let k = 0
  for (; k < MAX_ADDS && Atomics.load(i32, STOP) === 0; k++) {
    if (mode === 'locked') addLocked(i32, PAIR, STEP)
    else addOwned(i32, PAIR, STEP)
  }
  Atomics.store(i32, ADDED, k)
}

if (isMainThread) {
  t.test('every writer carries across 2^32 and the pair reads back whole', async (t) => {
    const i32 = new Int32Array(4)
    writeLocked(i32, 0, 0xffffffff)
    t.equal(read(i32, 0), 0xffffffff)
    addLocked(i32, 0, 1)
    t.equal(read(i32, 0), TWO32)
    t.same([i32[0], i32[1]], [0, 1], 'lo wrapped to 0, hi carried')
    addLocked(i32, 0, 5)
    t.equal(readLocked(i32, 0), TWO32 + 5)
    writeLocked(i32, 0, 2 * TWO32 - 2)
    addLocked(i32, 0, 3)
    t.equal(read(i32, 0), 2 * TWO32 + 1)

    writeLocked(i32, 2, TWO32 - 1)
    addOwned(i32, 2, 1)
    t.equal(read(i32, 2), TWO32)
    addOwned(i32, 2, 5 * TWO32 + 7) // larger than one step: added in steps, every carry counted
    t.equal(read(i32, 2), 6 * TWO32 + 7)
    addLocked(i32, 2, 3 * TWO32)
    t.equal(read(i32, 2), 9 * TWO32 + 7)

    writeLocked(i32, 0, 2 ** 53 - 10)
    t.equal(readLocked(i32, 0), 2 ** 53 - 10, 'whole up to the safe-integer range')
    addOwned(i32, 0, 9)
    t.equal(read(i32, 0), 2 ** 53 - 1)
  })

  t.test('a carry left half done by a dead writer reads back right and the next add finishes it', async (t) => {
    const i32 = new Int32Array(2)
    // The writer died after announcing the carry from hi 7, before writing lo: the old value.
    i32[1] = ~7
    i32[0] = 0xfffffff0 | 0
    t.equal(read(i32, 0), 7 * TWO32 + 0xfffffff0)
    t.equal(readLocked(i32, 0), 7 * TWO32 + 0xfffffff0)
    // ... or after writing lo, before the final hi: the new value.
    i32[0] = 0x10
    t.equal(read(i32, 0), 8 * TWO32 + 0x10)
    addLocked(i32, 0, 1)
    t.same([i32[0], i32[1]], [0x11, 8], 'the next add leaves a plain pair')
    i32[1] = ~8
    i32[0] = 0xfffffff0 | 0
    addOwned(i32, 0, 0x20)
    t.same([i32[0], i32[1]], [0x10, 9], 'and so does the owner\'s, carrying on')
    t.equal(read(i32, 0), 9 * TWO32 + 0x10)
  })

  for (const mode of ['locked', 'owned'] as const) {
    t.test(`a reader racing ${mode} carries in another thread sees only values the counter held`, async (t) => {
      const sab = new SharedArrayBuffer(20)
      const i32 = new Int32Array(sab)
      const w = new Worker(new URL(import.meta.url), { workerData: { sab, mode } satisfies Job })
      const exited = new Promise((resolve) => w.once('exit', resolve))
      await new Promise((resolve) => w.once('message', resolve))
      Atomics.store(i32, START, 1)
      Atomics.notify(i32, START)
      let last = 0
      let reads = 0
      let bad = 0
      let firstBad = ''
      const seenHi = new Set<number>()
      for (; reads < READS; reads++) {
        const v = read(i32, PAIR)
        if (v % STEP !== 0 || v < last) {
          if (bad++ === 0) firstBad = `read ${v} (${v / STEP} steps) after ${last}`
        } else last = v
        seenHi.add(Math.floor(v / TWO32))
      }
      Atomics.store(i32, STOP, 1)
      await exited
      t.equal(bad, 0, `no torn or backward read among ${reads}${bad > 0 ? `; first: ${firstBad}` : ''}`)
      t.equal(read(i32, PAIR), Atomics.load(i32, ADDED) * STEP, 'every add counted')
      t.ok(seenHi.size > 1, `the reader overlapped the writer (${seenHi.size} distinct hi words seen)`)
    })
  }
}
