// pumpChunks (src/net/chunks.ts): a body's chunks one by one, as they arrived, never joined,
// handed to a callback; a handler's promise pauses the body; errors, premature closes and early
// exits as the stream's own async iterator has them.

import t from 'tap'
import fc from 'fast-check'
import { Readable } from 'node:stream'
import { pumpChunks, STOP, type ChunkStep } from '../../src/net/chunks.ts'

const bufs = (...s: string[]) => s.map((x) => Buffer.from(x))
const tick = () => new Promise<void>((resolve) => setImmediate(resolve))

t.test('chunks buffered before the pump come one by one, the same objects, where the iterator joins them', async (t) => {
  const make = () => {
    const r = new Readable({ read () {} })
    const pushed = bufs('data: a\n\n', 'data: b\n\n', 'data: c\n\n')
    for (const b of pushed) r.push(b)
    r.push(null)
    return { r, pushed }
  }
  const viaIterator: Buffer[] = []
  for await (const c of make().r) viaIterator.push(c as Buffer)
  t.equal(viaIterator.length, 1, 'control: the stream\'s iterator joins what was buffered into one copy')

  const { r, pushed } = make()
  const got: Buffer[] = []
  await pumpChunks(r, (c) => { got.push(c) })
  t.equal(got.length, 3, 'three chunks')
  t.ok(got.every((c, i) => c === pushed[i]), 'the very buffers pushed, in order: no copy')
})

t.test('a handler\'s promise pauses the body: no read ahead beyond the chunk in hand', async (t) => {
  let reads = 0
  let n = 0
  const r = new Readable({
    highWaterMark: 4,
    read () {
      reads++
      n++
      if (n <= 20) this.push(Buffer.from('x'.repeat(4)))
      else this.push(null)
    },
  })
  let total = 0
  let first = true
  let readsWhileHolding = -1
  await pumpChunks(r, (c) => {
    total += c.length
    if (!first) return
    first = false
    // Give the stream every chance to read ahead while the handler holds its chunk.
    return new Promise<void>((resolve) => setTimeout(() => { readsWhileHolding = reads; resolve() }, 20))
  })
  t.ok(readsWhileHolding >= 1 && readsWhileHolding <= 3, `the stream read ${readsWhileHolding} times while one chunk was in hand (its own high-water mark only)`)
  t.equal(total, 80, 'every byte, once')
})

t.test('a body that flows is not paused by handlers that finish at once', async (t) => {
  const r = new Readable({ read () {} })
  let pauses = 0
  const pause = r.pause.bind(r)
  r.pause = () => { pauses++; return pause() }
  const done = pumpChunks(r, () => {})
  for (let i = 0; i < 50; i++) { r.push(Buffer.from('data: x\n\n')); await tick() }
  r.push(null)
  await done
  t.equal(pauses, 0, 'no pause()')
})

t.test('an error rejects; one during a pending handler waits for it; a destroy without end is a premature close', async (t) => {
  const r = new Readable({ read () {} })
  r.push(Buffer.from('one'))
  const seen: string[] = []
  await t.rejects(pumpChunks(r, (c) => {
    seen.push(c.toString())
    setImmediate(() => r.destroy(Object.assign(new Error('socket hang up'), { code: 'UND_ERR_SOCKET' })))
  }), { code: 'UND_ERR_SOCKET' })
  t.same(seen, ['one'], 'the chunk before the error was delivered')

  const s = new Readable({ read () {} })
  s.push(Buffer.from('one'))
  let settled = false
  let handlerDone = false
  const p = pumpChunks(s, () => new Promise<void>((resolve) => {
    setImmediate(() => s.destroy(Object.assign(new Error('reset'), { code: 'ECONNRESET' })))
    setTimeout(() => { handlerDone = true; resolve() }, 30)
  }))
  p.catch(() => {}).finally(() => { settled = true })
  await new Promise((resolve) => setTimeout(resolve, 10))
  t.notOk(settled, 'not settled while the handler is pending')
  await t.rejects(p, { code: 'ECONNRESET' })
  t.ok(handlerDone, 'rejected only after the handler settled')

  const q = new Readable({ read () {} })
  q.push(Buffer.from('two'))
  await t.rejects(pumpChunks(q, () => { setImmediate(() => q.destroy()) }), { code: 'ERR_STREAM_PREMATURE_CLOSE' })

  const gone = new Readable({ read () {} })
  gone.destroy()
  await tick()
  await t.rejects(pumpChunks(gone, () => {}), { code: 'ERR_STREAM_PREMATURE_CLOSE' }, 'already destroyed')
})

t.test('STOP, a throw or a rejection ends the pump and destroys the body; a later error from it is not uncaught', async (t) => {
  const r = new Readable({ read () {} })
  r.push(Buffer.from('a'))
  r.push(Buffer.from('b'))
  const got: string[] = []
  await pumpChunks(r, (c) => { got.push(c.toString()); return STOP })
  t.same(got, ['a'], 'nothing after STOP')
  t.ok(r.destroyed, 'destroyed on STOP')
  t.equal(r.listenerCount('data'), 0, 'no listener left behind')

  const a = new Readable({ read () {} })
  a.push(Buffer.from('a'))
  a.push(Buffer.from('b'))
  const gotA: string[] = []
  await pumpChunks(a, async (c): Promise<typeof STOP> => { gotA.push(c.toString()); await tick(); return STOP })
  t.same(gotA, ['a'], 'nothing after an asynchronous STOP')
  t.ok(a.destroyed)

  const s = new Readable({ read () {} })
  s.push(Buffer.from('a'))
  await t.rejects(pumpChunks(s, () => { throw new Error('consumer failed') }), /consumer failed/)
  t.ok(s.destroyed, 'destroyed when the handler threw')

  const u = new Readable({ read () {} })
  u.push(Buffer.from('a'))
  await t.rejects(pumpChunks(u, () => Promise.reject(new Error('later failed'))), /later failed/)
  t.ok(u.destroyed, 'destroyed when the handler rejected')
  u.emit('error', new Error('late'))
  t.pass('a late error had a listener')
})

t.test('an ended body gives its chunks and ends; an empty one ends at once', async (t) => {
  const empty = Readable.from([], { objectMode: false })
  const got: Buffer[] = []
  await pumpChunks(empty, (c) => { got.push(c) })
  t.equal(got.length, 0)
  const r = Readable.from([Buffer.from('x'), Buffer.from('y')], { objectMode: false })
  const out: string[] = []
  await pumpChunks(r, (c) => { out.push(c.toString()) })
  t.same(out, ['x', 'y'])
  t.notOk(r.destroyed && !r.readableEnded, 'an ended body is not destroyed by the pump')
})

t.test('fuzz: any mix of pushes, pauses and handlers that finish at once or later keeps every chunk, in order, one handler at a time', async (t) => {
  await fc.assert(fc.asyncProperty(
    fc.array(fc.record({ len: fc.integer({ min: 1, max: 64 }), burst: fc.boolean() }), { minLength: 1, maxLength: 40 }),
    fc.array(fc.constantFrom('sync', 'micro', 'macro'), { minLength: 1, maxLength: 40 }),
    fc.constantFrom('end', 'error', 'stop'),
    async (pushes, modes, ending) => {
      const r = new Readable({ read () {}, highWaterMark: 16 })
      const expected: Buffer[] = []
      const got: Buffer[] = []
      let active = 0
      let overlap = false
      let calls = 0
      const stopAt = ending === 'stop' ? Math.floor(pushes.length / 2) : -1
      const pump = pumpChunks(r, (c): ChunkStep => {
        if (active > 0) overlap = true
        got.push(c)
        const mode = modes[calls % modes.length]
        const stop = calls === stopAt
        calls++
        if (mode === 'sync') return stop ? STOP : undefined
        active++
        const later = mode === 'micro' ? Promise.resolve() : tick()
        return later.then(() => { active--; return stop ? STOP : undefined })
      })
      for (const p of pushes) {
        const b = Buffer.alloc(p.len, expected.length & 0xff)
        expected.push(b)
        r.push(b)
        if (!p.burst) await tick()
      }
      if (ending === 'error') r.destroy(new Error('cut'))
      else r.push(null)
      let rejected: unknown = null
      await pump.catch((err) => { rejected = err })
      if (overlap) return false
      if (ending === 'end') return rejected === null && got.length === expected.length && got.every((c, i) => c === expected[i])
      if (ending === 'stop') return rejected === null && got.length === stopAt + 1 && got.every((c, i) => c === expected[i]) && r.destroyed
      // error: a prefix, in order, then the error
      return rejected instanceof Error && got.length <= expected.length && got.every((c, i) => c === expected[i])
    },
  ), { numRuns: 150 })
  t.pass('property held')
})
