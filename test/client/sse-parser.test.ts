// The SDK's own text/event-stream parser: every line ending, split at every position, the
// fields the session stream uses, comments, and what is not dispatched.
import t from 'tap'
import { SseParser, type SseEvent } from '../../src/client/sse.ts'

function parse (chunks: string[]): SseEvent[] {
  const p = new SseParser()
  const out: SseEvent[] = []
  for (const c of chunks) out.push(...p.push(c))
  p.end()
  return out
}

/** Every way of cutting `text` in two, and one character at a time. */
function splits (text: string): string[][] {
  const ways: string[][] = [[text], [...text]]
  for (let i = 1; i < text.length; i++) ways.push([text.slice(0, i), text.slice(i)])
  return ways
}

const STREAM = [
  ': heartbeat',
  'id: 1',
  'event: turn_started',
  'data: {"exchangeId":"e1"}',
  '',
  'id: 2',
  'event: turn_progress',
  'data: line one',
  'data:line two',
  'data:  two spaces',
  '',
  ': a comment between events',
  '',
  'data: no event name, id persists',
  '',
  '',
]
const EXPECTED: SseEvent[] = [
  { id: '1', event: 'turn_started', data: '{"exchangeId":"e1"}' },
  { id: '2', event: 'turn_progress', data: 'line one\nline two\n two spaces' },
  { id: '2', event: 'message', data: 'no event name, id persists' },
]

for (const [name, eol] of [['LF', '\n'], ['CRLF', '\r\n'], ['CR', '\r']] as const) {
  t.test(`${name} line ends, split at every position`, async (t) => {
    const text = STREAM.join(eol)
    for (const chunks of splits(text)) {
      t.same(parse(chunks), EXPECTED, `split ${JSON.stringify(chunks.length === 2 ? chunks[0].length : chunks.length)}`)
    }
  })
}

t.test('mixed line ends, and a CRLF split exactly between CR and LF is one line end', async (t) => {
  t.same(parse(['data: a\r', '\nid: 9\r\n', 'data: b\n\r\n']), [{ id: '9', event: 'message', data: 'a\nb' }])
  // CR then an empty chunk then LF: still one line end
  t.same(parse(['data: a\r', '', '\n\n']), [{ id: null, event: 'message', data: 'a' }])
  // a lone CR followed by a new line's text is a line end of its own
  t.same(parse(['data: a\r', 'data: b\r\r']), [{ id: null, event: 'message', data: 'a\nb' }])
})

t.test('what is not dispatched', async (t) => {
  t.same(parse(['event: x\nid: 3\n\n']), [], 'an event without data')
  t.same(parse(['data: cut off at the end']), [], 'an unterminated event at the end of the stream')
  t.same(parse(['data: x\n']), [], 'one line end is not the end of an event')
  t.same(parse([': only\n: comments\n\n']), [])
})

t.test('fields', async (t) => {
  t.same(parse(['data\n\n']), [{ id: null, event: 'message', data: '' }], 'a field name without a colon has an empty value')
  t.same(parse(['data:\n\n']), [{ id: null, event: 'message', data: '' }])
  t.same(parse(['id: 4\nid: a\0b\ndata: x\n\n']), [{ id: '4', event: 'message', data: 'x' }], 'an id with NUL is ignored')
  t.same(parse(['retry: 100\nfoo: bar\ndata: x\n\n']), [{ id: null, event: 'message', data: 'x' }], 'retry and unknown fields are ignored')
  t.same(parse(['event: a\ndata: 1\n\ndata: 2\n\n']).map((e) => e.event), ['a', 'message'], 'the event name does not persist')
  t.same(parse(['data: {"a":"b: c"}\n\n'])[0].data, '{"a":"b: c"}', 'only the first colon splits')
  const p = new SseParser()
  p.push('id: 7\ndata: x\n\nid: 8\n')
  t.equal(p.lastEventId, '8', 'lastEventId follows the id lines')
})

t.test('an unterminated line is bounded', async (t) => {
  const p = new SseParser(16)
  t.same(p.push('data: 0123456789\n'), [])
  t.throws(() => p.push('data: 0123456789abcdef'), RangeError)
})
