// The renderers on their own: frame counts known up front, every combination well-formed,
// oversize frames exact wherever they land.
import t from 'tap'
import { chat } from '../../../src/sim/chat.ts'
import { parseDirective, type SimProtocol } from '../../../src/sim/directive.ts'
import { messages } from '../../../src/sim/messages.ts'
import type { Renderer } from '../../../src/sim/protocol.ts'
import { responses } from '../../../src/sim/responses.ts'
import { seedFrom } from '../../../src/sim/rng.ts'
import { buildScript } from '../../../src/sim/script.ts'
import { parseSse, streamProblems } from '../../../src/sim/index.ts'

const RENDERERS: Array<[SimProtocol, Renderer]> = [['openai-chat', chat], ['openai-responses', responses], ['anthropic', messages]]

function script(protocol: SimProtocol, directive: string, extra: Record<string, unknown> = {}) {
  const body = { model: 'm', stream: true, stream_options: { include_usage: true }, ...extra, messages: [{ role: 'user', content: directive }], input: directive }
  const raw = Buffer.from(JSON.stringify(body))
  return buildScript(protocol, body, raw.length, seedFrom(raw), parseDirective(directive))
}

const DIRECTIVES = [
  '#sim',
  '#sim tokens=0',
  '#sim tokens=0 tools=1',
  '#sim tokens=3 tools=3 parallel=1',
  '#sim tokens=1 tools=4',
  '#sim tokens=5 bytes=2000 thinking=2',
  '#sim tokens=0 tools=2 thinking=3',
]

for (const [protocol, renderer] of RENDERERS) {
  t.test(`${protocol}: plan.total is the frame count; every stream well-formed`, async t => {
    for (const d of DIRECTIVES) {
      const plan = renderer.stream(script(protocol, d))
      const frames = [...plan.frames()]
      t.equal(frames.length, plan.total, `${d}: total`)
      t.same(streamProblems(protocol, frames.join('')), [], d)
      t.doesNotThrow(() => JSON.parse(renderer.json(script(protocol, d))), `${d}: JSON body parses`)
    }
  })

  t.test(`${protocol}: the oversize frame is exactly size bytes wherever it lands`, async t => {
    for (const [d, wantAt] of [
      ['#sim tokens=4 fault=oversize-frame size=5000 at=4', 4],
      ['#sim tokens=4 fault=oversize-frame size=70000 at=0', null],
      ['#sim tokens=4 fault=oversize-frame size=3000 at=999', null],
      ['#sim tokens=0 tools=1 fault=oversize-frame size=4096', null],
    ] as const) {
      const size = Number(/size=(\d+)/.exec(d)![1])
      const plan = renderer.stream(script(protocol, d))
      const frames = [...plan.frames()]
      t.equal(frames.length, plan.total)
      const exact = frames.flatMap((f, i) => (Buffer.byteLength(f) === size ? [i] : []))
      t.equal(exact.length, 1, `${d}: one frame of ${size} bytes`)
      if (wantAt !== null) t.equal(exact[0], wantAt, `${d}: at frame ${wantAt}`)
      t.same(streamProblems(protocol, frames.join('')), [], `${d}: still well-formed`)
    }
  })

  t.test(`${protocol}: malformed and error frames`, async t => {
    const bad = parseSse(renderer.malformed(3))
    t.equal(bad.length, 1)
    t.throws(() => JSON.parse(bad[0].data))
    const err = parseSse(renderer.errorEvent(3))
    t.equal(err.length, 1)
    t.doesNotThrow(() => JSON.parse(err[0].data))
  })
}

t.test('a million-delta stream keeps no per-delta state', async t => {
  const s = script('anthropic', '#sim tokens=1000000')
  const before = process.memoryUsage().heapUsed
  const plan = messages.stream(s)
  let n = 0
  let bytes = 0
  for (const f of plan.frames()) {
    n++
    bytes += f.length
  }
  t.equal(n, plan.total)
  t.ok(bytes > 50_000_000, `${(bytes / 1e6).toFixed(0)} MB rendered`)
  const grown = process.memoryUsage().heapUsed - before
  t.ok(grown < 40_000_000, `heap grew ${(grown / 1e6).toFixed(1)} MB`)
})
