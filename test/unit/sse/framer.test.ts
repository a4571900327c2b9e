// SseFramer: every boundary kind, split anywhere, zero-copy within a chunk, the frame cap
// with resynchronisation, trailing bytes.
import t from 'tap'
import { DEFAULT_MAX_FRAME_BYTES, SseFramer } from '../../../src/sse/framer.ts'

interface Run {
  frames: string[]
  views: Buffer[]
  oversize: number[]
  trailing: string | null
  maxBuffered: number
  framer: SseFramer
}

function run (chunks: Array<Buffer | string>, maxFrameBytes?: number): Run {
  const out: Run = { frames: [], views: [], oversize: [], trailing: null, maxBuffered: 0, framer: null as unknown as SseFramer }
  const framer = new SseFramer({
    onFrame: f => {
      out.frames.push(f.toString('latin1'))
      out.views.push(f)
    },
    onOversize: n => out.oversize.push(n),
  }, maxFrameBytes === undefined ? {} : { maxFrameBytes })
  out.framer = framer
  for (const c of chunks) {
    framer.push(typeof c === 'string' ? Buffer.from(c, 'latin1') : c)
    out.maxBuffered = Math.max(out.maxBuffered, framer.bufferedBytes)
  }
  const rest = framer.end()
  out.trailing = rest === null ? null : rest.toString('latin1')
  return out
}

t.test('every boundary kind ends a frame', async t => {
  const cases: Array<[string, string[]]> = [
    ['data: a\n\ndata: b\n\n', ['data: a', 'data: b']],
    ['data: a\r\rdata: b\r\r', ['data: a', 'data: b']],
    ['data: a\r\n\r\ndata: b\r\n\r\n', ['data: a', 'data: b']],
    ['data: a\n\r\ndata: b\r\n\ndata: c\n\rdata: d\r\r\n', ['data: a', 'data: b', 'data: c', 'data: d']],
    ['event: x\ndata: 1\n\nevent: y\r\ndata: 2\r\n\r\n', ['event: x\ndata: 1', 'event: y\r\ndata: 2']],
    ['event: x\rdata: 1\r\r', ['event: x\rdata: 1']],
    [': comment\ndata: a\nid: 7\n\n', [': comment\ndata: a\nid: 7']],
  ]
  for (const [input, frames] of cases) {
    const r = run([input])
    t.same(r.frames, frames, JSON.stringify(input))
    t.equal(r.trailing, null)
    t.equal(r.framer.frames, frames.length)
  }
})

t.test('extra blank lines make no empty frames', async t => {
  const r = run(['\n\n\r\n', 'data: a\n\n\n\n\r\r', '\n\ndata: b\n\n\n'])
  t.same(r.frames, ['data: a', 'data: b'])
  t.equal(r.trailing, null)
})

// A stream with every terminator mixed in, and the frames it must give.
const CORPUS = 'event: message_start\ndata: {"a":1}\n\n' +
  'data: {"b":2}\r\n\r\n' +
  ': keepalive\r\rdata: [DONE]\n\r\n' +
  'event: e\r\ndata: x\ndata: y\r\n\n' +
  '\n\ndata: {"c":"\\u00e9 é"}\r\n\r\n' +
  'data: z\n\r'
const CORPUS_FRAMES = [
  'event: message_start\ndata: {"a":1}',
  'data: {"b":2}',
  ': keepalive',
  'data: [DONE]',
  'event: e\r\ndata: x\ndata: y',
  'data: {"c":"\\u00e9 é"}',
  'data: z',
]

t.test('the corpus frames as expected in one chunk', async t => {
  const r = run([Buffer.from(CORPUS)])
  t.same(r.frames.map(f => Buffer.from(f, 'latin1').toString()), CORPUS_FRAMES)
})

t.test('split into two chunks at every byte position: same frames', async t => {
  const bytes = Buffer.from(CORPUS)
  const whole = run([bytes]).frames
  let bad = 0
  for (let cut = 0; cut <= bytes.length; cut++) {
    const r = run([bytes.subarray(0, cut), bytes.subarray(cut)])
    if (JSON.stringify(r.frames) !== JSON.stringify(whole) || r.trailing !== null) {
      bad++
      t.fail(`cut at ${cut}: ${JSON.stringify(r.frames)} trailing ${JSON.stringify(r.trailing)}`)
    }
  }
  t.equal(bad, 0, `${bytes.length + 1} cut positions`)
})

t.test('split into three chunks at every pair of positions: same frames', async t => {
  const bytes = Buffer.from(CORPUS)
  const whole = JSON.stringify(run([bytes]).frames)
  let bad = 0
  let runs = 0
  for (let a = 0; a <= bytes.length; a++) {
    for (let b = a; b <= bytes.length; b++) {
      runs++
      const r = run([bytes.subarray(0, a), bytes.subarray(a, b), bytes.subarray(b)])
      if (JSON.stringify(r.frames) !== whole || r.trailing !== null) bad++
    }
  }
  t.equal(bad, 0, `${runs} splits`)
})

t.test('one byte at a time: same frames', async t => {
  const bytes = Buffer.from(CORPUS)
  const chunks: Buffer[] = []
  for (let i = 0; i < bytes.length; i++) chunks.push(bytes.subarray(i, i + 1))
  t.same(run(chunks).frames, run([bytes]).frames)
})

t.test('a frame within one chunk is a view of it; a frame across chunks is a copy', async t => {
  const chunk = Buffer.from('data: one\n\ndata: two\n\ndata: thr')
  const r = run([chunk, Buffer.from('ee\n\n')])
  t.same(r.frames, ['data: one', 'data: two', 'data: three'])
  t.equal(r.views[0].buffer, chunk.buffer, 'same ArrayBuffer')
  t.equal(r.views[0].byteOffset, chunk.byteOffset)
  t.equal(r.views[1].buffer, chunk.buffer)
  t.equal(r.views[1].byteOffset, chunk.byteOffset + 11)
  // Writing into the chunk shows through a view, not through a copy.
  chunk[6] = 0x4f // 'O'
  chunk[chunk.length - 1] = 0x52 // 'R'
  t.equal(r.views[0].toString(), 'data: One', 'single-chunk frame is the chunk itself')
  t.equal(r.views[2].toString(), 'data: three', 'spanning frame is a copy')
  // The terminator in the next chunk only: the frame's bytes were held, so it is a copy.
  const a = Buffer.from('data: x\n')
  const r2 = run([a, Buffer.from('\n')])
  a[6] = 0x58
  t.equal(r2.views[0].toString(), 'data: x')
  // A plain Uint8Array chunk works too (viewed, not copied).
  const u8 = new Uint8Array(Buffer.from('data: u\n\n'))
  const seen: Buffer[] = []
  const f = new SseFramer({ onFrame: b => seen.push(b) })
  f.push(u8)
  t.equal(seen[0].buffer, u8.buffer)
  t.equal(seen[0].byteOffset, u8.byteOffset)
})

t.test('bufferedBytes: what the framer holds between chunks', async t => {
  const f = new SseFramer({ onFrame: () => {} })
  t.equal(f.bufferedBytes, 0)
  f.push(Buffer.from('data: {"a":1}\n\ndata: {"b"'))
  t.ok(f.bufferedBytes >= 10 && f.bufferedBytes <= 256, `holds the partial frame (${f.bufferedBytes})`)
  t.ok(f.midFrame)
  f.push(Buffer.from(':2}\n\n'))
  t.equal(f.bufferedBytes, 0, 'released when the frame completes')
  t.notOk(f.midFrame)
  t.equal(f.frames, 2)
  t.equal(f.bytesSeen, 30)
})

t.test('the cap: exactly at the limit passes, one byte over is oversize, then resync', async t => {
  const max = 1000
  const exact = 'data: ' + 'x'.repeat(max - 8) + '\n\n' // 6 + (max-8) + 2 = max bytes
  const over = 'data: ' + 'y'.repeat(max - 7) + '\n\n'
  t.equal(Buffer.byteLength(exact), max)
  for (const chunked of [false, true]) {
    const stream = exact + over + 'data: after\n\n'
    const chunks = chunked ? stream.match(/[\s\S]{1,97}/g) as string[] : [stream]
    const r = run(chunks, max)
    t.same(r.frames.map(s => s.length), [max - 2, 'data: after'.length], `chunked=${chunked}`)
    t.equal(r.frames[1], 'data: after', 'the next frame is reported normally')
    t.equal(r.oversize.length, 1, 'oversize reported once')
    t.ok(r.oversize[0] > max, `with its byte count (${r.oversize[0]})`)
    t.ok(r.maxBuffered <= max, `never holds more than the cap (${r.maxBuffered})`)
    t.equal(r.framer.oversizeFrames, 1)
  }
})

t.test('the default cap is 1 MiB, exact and past, in 64 KiB chunks', async t => {
  t.equal(DEFAULT_MAX_FRAME_BYTES, 1024 * 1024)
  const max = DEFAULT_MAX_FRAME_BYTES
  const exact = Buffer.from('data: ' + 'a'.repeat(max - 8) + '\n\n')
  const past = Buffer.from('data: ' + 'b'.repeat(max + 5000) + '\n\n')
  const tail = Buffer.from('event: next\ndata: {"ok":true}\n\n')
  const all = Buffer.concat([exact, past, tail])
  for (const size of [64 * 1024, all.length]) {
    const chunks: Buffer[] = []
    for (let i = 0; i < all.length; i += size) chunks.push(all.subarray(i, i + size))
    const r = run(chunks)
    t.equal(r.frames.length, 2, `chunk ${size}: two frames`)
    t.equal(r.frames[0].length, max - 2, 'the exact-cap frame, whole')
    t.equal(r.frames[1], 'event: next\ndata: {"ok":true}')
    t.equal(r.oversize.length, 1)
    t.ok(r.maxBuffered <= max, `held at most ${r.maxBuffered}`)
    if (size < all.length) t.ok(r.oversize[0] > max && r.oversize[0] <= max + size, `detected at the end of the chunk that passed the cap, with the bytes seen so far (${r.oversize[0]})`)
    else t.equal(r.oversize[0], past.length, 'in one chunk: its whole size')
    t.equal(r.framer.discardedBytes, past.length, 'every byte of the oversize frame skipped')
  }
})

t.test('an oversize frame cut by the end of the stream: reported once, no trailing', async t => {
  const r = run(['data: ok\n\n', 'data: ' + 'z'.repeat(300), 'z'.repeat(300)], 200)
  t.same(r.frames, ['data: ok'])
  t.equal(r.oversize.length, 1)
  t.equal(r.trailing, null)
})

t.test('resync across CRLF and a boundary split right after the oversize frame', async t => {
  const big = 'data: ' + 'q'.repeat(500)
  const r = run([big.slice(0, 250), big.slice(250) + '\r', '\n\r', '\ndata: next\r\n\r\n'], 300)
  t.same(r.frames, ['data: next'])
  t.equal(r.oversize.length, 1)
})

t.test('trailing bytes: a stream cut mid-frame', async t => {
  t.equal(run(['data: a\n\ndata: par']).trailing, 'data: par')
  t.equal(run(['data: a\n\n', 'data: b\n']).trailing, 'data: b\n', 'a complete line, no blank line')
  t.equal(run(['data: a\n\n']).trailing, null)
  t.equal(run(['data: a\r\n\r']).trailing, null, 'ended on a CR blank line')
})

t.test('closingBytes: what ends the partial frame a client holds', async t => {
  const f = new SseFramer({ onFrame: () => {} })
  t.equal(f.closingBytes(), '')
  f.push(Buffer.from('data: a\n\n'))
  t.equal(f.closingBytes(), '')
  f.push(Buffer.from('data: b'))
  t.equal(f.closingBytes(), '\n\n')
  f.push(Buffer.from('\n'))
  t.equal(f.closingBytes(), '\n')
  f.push(Buffer.from('\n'))
  t.equal(f.closingBytes(), '')
  f.push(Buffer.from('data: c\r'))
  t.equal(f.closingBytes(), '\n\n', 'a lone CR would pair with one LF')
  // Each closing makes the partial frame a whole frame for a client's parser.
  for (const partial of ['data: p', 'data: p\n', 'data: p\r', 'data: p\r\n', 'event: e\ndata: p']) {
    const g = new SseFramer({ onFrame: () => {} })
    g.push(Buffer.from(partial))
    const frames = run([partial + g.closingBytes() + 'data: tail\n\n']).frames
    t.equal(frames.length, 2, JSON.stringify(partial))
    t.equal(frames[1], 'data: tail')
  }
})

t.test('rejects a bad cap', async t => {
  t.throws(() => new SseFramer({ onFrame: () => {} }, { maxFrameBytes: 0 }))
  t.throws(() => new SseFramer({ onFrame: () => {} }, { maxFrameBytes: 1.5 }))
})

// An independent reference: split the whole text into lines with a regex, group them.
function reference (text: string): string[] {
  const parts = text.split(/(\r\n|\r|\n)/)
  const frames: string[] = []
  let cur = ''
  for (let i = 0; i < parts.length; i += 2) {
    const line = parts[i]
    const sep = parts[i + 1]
    if (sep === undefined) break // unterminated last line: trailing, not a frame
    if (line === '') {
      if (cur !== '') frames.push(cur.replace(/(\r\n|\r|\n)$/, ''))
      cur = ''
    } else cur += line + sep
  }
  return frames
}

t.test('random streams in random chunks agree with a regex reference', async t => {
  let seed = 12345
  const rnd = (n: number): number => {
    seed = (seed * 1103515245 + 12345) >>> 0
    return (seed >>> 8) % n
  }
  const pieces = ['data: {"a":1}', 'event: x', ': c', 'id: 9', 'data: é€', 'data:', 'x']
  const seps = ['\n', '\r', '\r\n']
  let bad = 0
  for (let iter = 0; iter < 3000; iter++) {
    let text = ''
    const lines = 1 + rnd(12)
    for (let l = 0; l < lines; l++) {
      text += rnd(4) === 0 ? '' : pieces[rnd(pieces.length)]
      text += seps[rnd(3)]
    }
    text += 'data: end\n\n'
    const bytes = Buffer.from(text)
    const chunks: Buffer[] = []
    for (let i = 0; i < bytes.length;) {
      const n = 1 + rnd(8)
      chunks.push(bytes.subarray(i, i + n))
      i += n
    }
    const got = run(chunks).frames.map(f => Buffer.from(f, 'latin1').toString())
    const want = reference(text)
    if (JSON.stringify(got) !== JSON.stringify(want)) {
      if (bad++ < 3) t.same(got, want, JSON.stringify(text))
    }
  }
  t.equal(bad, 0, '3000 random streams')
})

t.test('onFrame reports where each frame begins in the pushed chunk', async t => {
  const seen: Array<[string, number]> = []
  class Collector {
    prefix = '>'
    onFrame (frame: Buffer, at: number): void { seen.push([this.prefix + frame.toString(), at]) }
  }
  const framer = new SseFramer(new Collector())
  const c1 = Buffer.from('data: a\n\ndata: bb\n\ndata: c')
  framer.push(c1)
  framer.push(Buffer.from('cc\n\n\ndata: d\n\n'))
  t.same(seen, [['>data: a', 0], ['>data: bb', 9], ['>data: ccc', -7], ['>data: d', 5]], 'a method handler keeps its this')
  // A relay can cut the chunk at `at` to keep a frame from the client.
  t.equal(c1.subarray(0, 9).toString(), 'data: a\n\n')
})

t.test('a callback that throws ends the framer loudly', async t => {
  const boom = new Error('boom')
  const framer = new SseFramer({ onFrame: () => { throw boom } })
  t.throws(() => framer.push(Buffer.from('data: a\n\ndata: b\n\n')), boom)
  t.throws(() => framer.push(Buffer.from('data: c\n\n')), boom, 'later pushes refuse')
  t.throws(() => framer.end(), boom)
})
