// The token lock (token-lock.ts): K1 (the word is 0 or the holder's token), K2 (re-entry and
// a foreign unlock throw and change nothing), a dead holder is stolen (or freed) exactly
// once, mutual exclusion between threads that park, and the parked count back at 0.

import t from 'tap'
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import { releaseDead, TL_PARKED, TL_WORD, TOKEN_LOCK_FIELDS, TokenLock } from '../../../src/ledger/token-lock.ts'

const AT = 1 // the lock's cells start at an offset, as in a real layout
const COUNTER = AT + TOKEN_LOCK_FIELDS // a plain counter the lock guards
const ROUNDS = 20_000

interface Job { sab: SharedArrayBuffer; token: number; mode: 'count' | 'die-holding' }

if (!isMainThread) {
  const { sab, token, mode } = workerData as Job
  const i32 = new Int32Array(sab)
  const lock = new TokenLock(i32, AT, token, 'test')
  if (mode === 'die-holding') {
    lock.lock()
    parentPort!.postMessage('holding')
    process.exit(0) // dies inside the critical section
  }
  for (let k = 0; k < ROUNDS; k++) {
    lock.lock()
    // A non-atomic read-modify-write with a yield point's worth of work in between: lost
    // updates show if two threads are ever inside at once.
    const v = i32[COUNTER]
    for (let spin = 0; spin < 20; spin++) Atomics.load(i32, 0)
    i32[COUNTER] = v + 1
    lock.unlock()
  }
  parentPort!.postMessage('done')
}

function cells (): Int32Array { return new Int32Array(new SharedArrayBuffer(4 * (COUNTER + 1))) }
const word = (i32: Int32Array): number => Atomics.load(i32, AT + TL_WORD)

if (isMainThread) {
  t.test('lock writes the holder token, unlock clears it', async (t) => {
    const i32 = cells()
    const a = new TokenLock(i32, AT, 3, 'test')
    a.lock()
    t.equal(word(i32), 3)
    t.equal(a.holder, 3)
    a.unlock()
    t.equal(word(i32), 0)
    t.equal(i32[AT - 1], 0, 'cells outside the lock untouched')
    t.throws(() => new TokenLock(i32, AT, 0, 'test'), RangeError, 'token 0 means "free"')
    t.throws(() => new TokenLock(i32, COUNTER, 1, 'test'), RangeError, 'cells past the buffer')
  })

  t.test('re-entry throws and leaves the lock held by its holder', async (t) => {
    const i32 = cells()
    const a = new TokenLock(i32, AT, 2, 'test')
    a.lock()
    t.throws(() => a.lock(), /test lock re-entered by its holder/)
    t.throws(() => a.tryLock(), /re-entered/)
    t.throws(() => a.tryLockOrSteal(() => true), /re-entered/, 'its own token is never "dead"')
    t.equal(word(i32), 2)
    a.unlock()
    t.equal(word(i32), 0)
  })

  t.test('a foreign unlock throws and leaves the lock held', async (t) => {
    const i32 = cells()
    const a = new TokenLock(i32, AT, 2, 'test')
    const b = new TokenLock(i32, AT, 5, 'test')
    a.lock()
    t.throws(() => b.unlock(), /test lock released by a thread that does not hold it/)
    t.equal(word(i32), 2, 'still held by token 2')
    t.equal(b.tryLock(), false, 'tryLock gives up instead of parking')
    a.unlock()
    t.throws(() => a.unlock(), /does not hold it/, 'unlocking a free lock too')
    t.equal(word(i32), 0)
    t.equal(b.tryLock(), true)
    b.unlock()
  })

  t.test('a dead holder is stolen once', async (t) => {
    const i32 = cells()
    const w = new Worker(new URL(import.meta.url), { workerData: { sab: i32.buffer as SharedArrayBuffer, token: 4, mode: 'die-holding' } satisfies Job })
    await new Promise((resolve) => w.once('exit', resolve))
    t.equal(word(i32), 4, 'the dead thread\'s token stays in the word')
    const primary = new TokenLock(i32, AT, 1, 'test')
    const other = new TokenLock(i32, AT, 7, 'test')
    t.equal(primary.tryLockOrSteal((tok) => tok === 2), null, 'not stolen from a token not known dead')
    t.equal(word(i32), 4)
    t.equal(primary.tryLockOrSteal((tok) => tok === 4), 'stolen')
    t.equal(word(i32), 1)
    t.equal(other.tryLockOrSteal((tok) => tok === 4), null, 'a second repairer finds the lock held by a live token')
    t.equal(releaseDead(i32, AT, 4), false, 'nor can the dead token be freed again')
    primary.unlock()
    t.equal(primary.tryLockOrSteal((tok) => tok === 4), 'locked', 'free now: taken, not stolen')
    primary.unlock()
    t.equal(word(i32), 0)
  })

  t.test('releaseDead frees a dead holder\'s lock once, never a live one', async (t) => {
    const i32 = cells()
    const a = new TokenLock(i32, AT, 3, 'test')
    a.lock()
    t.equal(releaseDead(i32, AT, 2), false, 'token 2 does not hold it')
    t.equal(word(i32), 3)
    Atomics.store(i32, AT + TL_WORD, 2) // token 2 took it and died
    t.equal(releaseDead(i32, AT, 2), true)
    t.equal(releaseDead(i32, AT, 2), false, 'once')
    t.equal(word(i32), 0)
    t.throws(() => releaseDead(i32, AT, 0), RangeError)
  })

  t.test('threads that spin and park never share the critical section', async (t) => {
    const i32 = cells()
    const sab = i32.buffer as SharedArrayBuffer
    const workers = [2, 3, 4].map((token) => new Worker(new URL(import.meta.url), { workerData: { sab, token, mode: 'count' } satisfies Job }))
    const done = workers.map((w) => new Promise<unknown>((resolve, reject) => {
      // tap talks to a worker's parent too: wait for our own message.
      w.on('message', (m) => { if (m === 'done') resolve(m) })
      w.once('error', reject)
    }))
    const exited = workers.map((w) => new Promise((resolve) => w.once('exit', resolve)))
    t.same(await Promise.all(done), ['done', 'done', 'done'])
    await Promise.all(exited)
    t.equal(i32[COUNTER], 3 * ROUNDS, 'no update lost')
    t.equal(word(i32), 0, 'free')
    t.equal(Atomics.load(i32, AT + TL_PARKED), 0, 'no thread left counted as parked')
  })
}
