// eachChunk (src/net/chunks.ts): a body's chunks one by one, as they arrived, never joined;
// errors, premature closes and early exits as the stream's own async iterator has them.

import t from 'tap'
import { Readable } from 'node:stream'
import { eachChunk } from '../../src/net/chunks.ts'

const bufs = (...s: string[]) => s.map((x) => Buffer.from(x))

t.test('chunks buffered before the read come one by one, the same objects, where the iterator joins them', async (t) => {
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
  for await (const c of eachChunk(r)) got.push(c)
  t.equal(got.length, 3, 'three chunks')
  t.ok(got.every((c, i) => c === pushed[i]), 'the very buffers pushed, in order: no copy')
})

t.test('reads no further than the consumer asks: one chunk in hand at a time', async (t) => {
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
  const it = eachChunk(r)
  const first = await it.next()
  t.equal(first.value?.length, 4)
  // Give the stream every chance to read ahead while the consumer holds its chunk.
  await new Promise((resolve) => setTimeout(resolve, 20))
  const readsWhileHolding = reads
  t.ok(readsWhileHolding <= 3, `the stream read ${readsWhileHolding} times while one chunk was in hand (its own high-water mark only)`)
  let total = 4
  for await (const c of { [Symbol.asyncIterator]: () => it }) total += c.length
  t.equal(total, 80, 'every byte, once')
})

t.test('an error reaches the pending read; a destroy without end is a premature close', async (t) => {
  const r = new Readable({ read () {} })
  r.push(Buffer.from('one'))
  const seen: string[] = []
  await t.rejects((async () => {
    for await (const c of eachChunk(r)) {
      seen.push(c.toString())
      setImmediate(() => r.destroy(Object.assign(new Error('socket hang up'), { code: 'UND_ERR_SOCKET' })))
    }
  })(), { code: 'UND_ERR_SOCKET' })
  t.same(seen, ['one'], 'the chunk before the error was delivered')

  const q = new Readable({ read () {} })
  q.push(Buffer.from('two'))
  await t.rejects((async () => {
    for await (const _ of eachChunk(q)) setImmediate(() => q.destroy())
  })(), { code: 'ERR_STREAM_PREMATURE_CLOSE' })

  const gone = new Readable({ read () {} })
  gone.destroy()
  await new Promise((resolve) => setImmediate(resolve))
  await t.rejects((async () => { for await (const _ of eachChunk(gone)) {} })(), { code: 'ERR_STREAM_PREMATURE_CLOSE' }, 'already destroyed')
})

t.test('leaving early destroys the body, and a later error from it is not uncaught', async (t) => {
  const r = new Readable({ read () {} })
  r.push(Buffer.from('a'))
  r.push(Buffer.from('b'))
  for await (const _ of eachChunk(r)) break
  t.ok(r.destroyed, 'destroyed on break')
  t.equal(r.listenerCount('data'), 0, 'no listener left behind')

  const s = new Readable({ read () {} })
  s.push(Buffer.from('a'))
  await t.rejects((async () => { for await (const _ of eachChunk(s)) throw new Error('consumer failed') })(), /consumer failed/)
  t.ok(s.destroyed, 'destroyed when the consumer threw')

  // A body still open when the loop ends by return(), later failed by its owner.
  const u = new Readable({ read () {} })
  u.push(Buffer.from('a'))
  const it = eachChunk(u)
  await it.next()
  await it.return(undefined)
  u.emit('error', new Error('late'))
  t.pass('a late error had a listener')
})

t.test('an ended body gives its chunks and ends; an empty one ends at once', async (t) => {
  const empty = Readable.from([], { objectMode: false })
  const got: Buffer[] = []
  for await (const c of eachChunk(empty)) got.push(c)
  t.equal(got.length, 0)
  const r = Readable.from([Buffer.from('x'), Buffer.from('y')], { objectMode: false })
  const out: string[] = []
  for await (const c of eachChunk(r)) out.push(c.toString())
  t.same(out, ['x', 'y'])
})
