// What the stream fuzzers generate and what they compare with.
//
// refFrames(): a reference reading of the SSE line grammar, byte by byte, written for clarity
// (no chunks, no buffers held): a line ends with CRLF, LF or CR; an empty line ends a frame;
// stray empty lines between frames are nothing. A frame's size runs from its first byte
// through the byte that starts its blank line, and a frame larger than the cap is oversize.
// It also gives every "boundary": an offset at which no frame is pending, the only places
// where a relay may stop sending and put a failure tail.
//
// streamCase(protocol): provider streams for the three wire protocols, from a well-formed
// skeleton (start, deltas, usage, finish, terminal) through mutations: the terminal dropped, a
// provider error event, a malformed or junk frame, an oversize frame, invalid UTF-8 inside a
// text, CRLF / CR line ends, a cut at any byte; then split into chunks (often at every byte).

import fc from 'fast-check'
import type { Protocol } from '../../src/protocols/index.ts'

const LF = 10
const CR = 13

export type RefEvent = { kind: 'frame'; bytes: Buffer; start: number } | { kind: 'oversize'; start: number }

export interface RefReading {
  events: RefEvent[]
  /** The unterminated frame at the end (not oversize), or null. */
  trailing: Buffer | null
  /** Offsets 0..n at which no frame is pending. */
  boundaries: Set<number>
}

export function refFrames (b: Uint8Array, max: number): RefReading {
  const events: RefEvent[] = []
  const boundaries = new Set<number>([0])
  let frameStart = -1
  let lineHasContent = false
  let lastContentEnd = 0
  let prevCR = false
  for (let p = 0; p < b.length; p++) {
    const c = b[p]
    if (c === LF && prevCR) {
      // The LF of a CRLF: the line (or blank line) already ended at the CR.
      prevCR = false
    } else {
      prevCR = c === CR
      if (c === LF || c === CR) {
        if (lineHasContent) {
          lineHasContent = false
          lastContentEnd = p
        } else if (frameStart !== -1) {
          const size = p - frameStart + 1
          if (size > max) events.push({ kind: 'oversize', start: frameStart })
          else events.push({ kind: 'frame', bytes: Buffer.from(b.subarray(frameStart, lastContentEnd)), start: frameStart })
          frameStart = -1
        }
      } else {
        if (frameStart === -1) frameStart = p
        lineHasContent = true
      }
    }
    if (frameStart === -1) boundaries.add(p + 1)
  }
  let trailing: Buffer | null = null
  if (frameStart !== -1) {
    if (b.length - frameStart > max) events.push({ kind: 'oversize', start: frameStart })
    else trailing = Buffer.from(b.subarray(frameStart))
  }
  return { events, trailing, boundaries }
}

// ---- Building blocks ----

const INVALID_UTF8: Buffer[] = [
  Buffer.from([0xff]), // never valid
  Buffer.from([0xc3, 0x28]), // a lead byte without its continuation
  Buffer.from([0x80]), // a lone continuation byte
  Buffer.from([0xed, 0xa0, 0x80]), // an encoded surrogate (U+D800)
  Buffer.from([0xc0, 0xaf]), // an overlong '/'
  Buffer.from([0xf4, 0x90, 0x80, 0x80]), // above U+10FFFF
  Buffer.from([0xe2, 0x82]), // a truncated three-byte sequence
]

/** The inside of a JSON string literal, as bytes: text of any plane, escapes, and sometimes invalid UTF-8. */
export const textBytes: fc.Arbitrary<Buffer> = fc.array(fc.oneof(
  { weight: 6, arbitrary: fc.string({ unit: 'grapheme', maxLength: 12 }).map((s) => Buffer.from(JSON.stringify(s).slice(1, -1))) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 6 }).map((s) => Buffer.from(JSON.stringify(s).slice(1, -1))) },
  { weight: 1, arbitrary: fc.constantFrom(...INVALID_UTF8) },
), { maxLength: 4 }).map((parts) => Buffer.concat(parts))

/** Valid UTF-8 text only (for streams that must pass). */
const cleanText: fc.Arbitrary<Buffer> = fc.string({ unit: 'grapheme', maxLength: 16 }).map((s) => Buffer.from(JSON.stringify(s).slice(1, -1)))

/** One SSE frame before line ends are chosen: its lines (no terminators). */
export interface Piece {
  lines: Buffer[]
  /** What the piece is, for the properties that need to know (and for reading a counterexample). */
  tag: string
}

const b = (s: string): Buffer => Buffer.from(s)
const data = (...parts: Buffer[]): Buffer => Buffer.concat([b('data: '), ...parts])
const named = (event: string, payload: Buffer, tag = event): Piece => ({ lines: [b('event: ' + event), data(payload)], tag })

interface Usage { input: number; output: number }
const usage: fc.Arbitrary<Usage> = fc.record({ input: fc.nat({ max: 100_000 }), output: fc.nat({ max: 100_000 }) })

/** How a skeleton ends. */
type Finish = 'stop' | 'length'

interface Skeleton { texts: Buffer[]; usage: Usage; finish: Finish }

function chatSkeleton (s: Skeleton): { body: Piece[]; terminal: Piece[] } {
  const id = '"id":"chatcmpl-fz","object":"chat.completion.chunk","created":1,"model":"fz-chat"'
  const body: Piece[] = [{ lines: [data(b(`{${id},"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`))], tag: 'role' }]
  for (const t of s.texts) body.push({ lines: [data(b(`{${id},"choices":[{"index":0,"delta":{"content":"`), t, b('"},"finish_reason":null}]}'))], tag: 'delta' })
  const terminal: Piece[] = [
    { lines: [data(b(`{${id},"choices":[{"index":0,"delta":{},"finish_reason":"${s.finish}"}]}`))], tag: 'finish' },
    { lines: [data(b(`{${id},"choices":[],"usage":{"prompt_tokens":${s.usage.input},"completion_tokens":${s.usage.output},"total_tokens":${s.usage.input + s.usage.output}}}`))], tag: 'usage' },
    { lines: [b('data: [DONE]')], tag: 'terminal' },
  ]
  return { body, terminal }
}

function responsesSkeleton (s: Skeleton): { body: Piece[]; terminal: Piece[] } {
  // sequence_number is filled in at render time ("#SEQ#"), in frame order.
  const resp = (status: string, extra = '') => `{"id":"resp_fz","object":"response","created_at":1,"status":"${status}","model":"fz-resp","output":[]${extra}}`
  const body: Piece[] = [named('response.created', b(`{"type":"response.created","sequence_number":#SEQ#,"response":${resp('in_progress')}}`))]
  for (const t of s.texts) {
    body.push(named('response.output_text.delta', Buffer.concat([b('{"type":"response.output_text.delta","sequence_number":#SEQ#,"item_id":"msg_fz","output_index":0,"content_index":0,"delta":"'), t, b('"}')]), 'delta'))
  }
  const u = `,"usage":{"input_tokens":${s.usage.input},"output_tokens":${s.usage.output},"total_tokens":${s.usage.input + s.usage.output}}`
  const term = s.finish === 'stop' ? 'response.completed' : 'response.incomplete'
  const terminal: Piece[] = [named(term, b(`{"type":"${term}","sequence_number":#SEQ#,"response":${resp(s.finish === 'stop' ? 'completed' : 'incomplete', u)}}`), 'terminal')]
  return { body, terminal }
}

function messagesSkeleton (s: Skeleton): { body: Piece[]; terminal: Piece[] } {
  const body: Piece[] = [
    named('message_start', b(`{"type":"message_start","message":{"id":"msg_fz","type":"message","role":"assistant","model":"fz-msg","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":${s.usage.input},"output_tokens":1}}}`)),
    named('content_block_start', b('{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}')),
  ]
  for (const t of s.texts) body.push(named('content_block_delta', Buffer.concat([b('{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"'), t, b('"}}')]), 'delta'))
  const terminal: Piece[] = [
    named('content_block_stop', b('{"type":"content_block_stop","index":0}')),
    named('message_delta', b(`{"type":"message_delta","delta":{"stop_reason":"${s.finish === 'stop' ? 'end_turn' : 'max_tokens'}","stop_sequence":null},"usage":{"output_tokens":${s.usage.output}}}`)),
    named('message_stop', b('{"type":"message_stop"}'), 'terminal'),
  ]
  return { body, terminal }
}

const SKELETONS: Record<Protocol, (s: Skeleton) => { body: Piece[]; terminal: Piece[] }> = {
  'openai-chat': chatSkeleton,
  'openai-responses': responsesSkeleton,
  anthropic: messagesSkeleton,
}

/** The provider's own error event, in the protocol's shape. */
function errorPiece (protocol: Protocol, type: string): Piece {
  switch (protocol) {
    case 'openai-chat': return { lines: [data(b(`{"error":{"message":"fuzzed failure","type":"${type}","code":null}}`))], tag: 'provider-error' }
    case 'openai-responses': return named('error', b(`{"type":"error","sequence_number":#SEQ#,"code":"${type}","message":"fuzzed failure"}`), 'provider-error')
    case 'anthropic': return named('error', b(`{"type":"error","error":{"type":"${type}","message":"fuzzed failure"}}`), 'provider-error')
  }
}

/** Frames that break the stream, or carry nothing, in any protocol. */
function oddPiece (protocol: Protocol, maxFrame: number): fc.Arbitrary<Piece> {
  return fc.oneof(
    fc.constant<Piece>({ lines: [b(': ping')], tag: 'comment' }),
    fc.constant<Piece>({ lines: [b('retry: 1000')], tag: 'retry' }),
    fc.constantFrom('server_error', 'overloaded_error', 'rate_limit_error', 'invalid_request_error', 'api_error').map((t) => errorPiece(protocol, t)),
    // A payload cut short (the sim's malformed-frame fault ends inside a string).
    fc.constant<Piece>({ lines: [b('data: {"id":"chatcmpl-fz","object":"chat.compl')], tag: 'malformed' }),
    fc.constant<Piece>({ lines: [b('data: not json at all')], tag: 'malformed' }),
    fc.constant<Piece>({ lines: [b('event: message_delta'), b('data: {"type":"message_delta","usage":')], tag: 'malformed' }),
    // Random bytes, terminators included: anything at all.
    fc.uint8Array({ minLength: 1, maxLength: 48 }).map((u) => ({ lines: [Buffer.from(u)], tag: 'junk' })),
    // A frame around the cap, either side of it.
    fc.integer({ min: -8, max: 64 }).map((d) => ({ lines: [b('data: {"pad":"' + 'x'.repeat(Math.max(0, maxFrame + d - 16)) + '"}')], tag: 'big' })),
    // A data line with invalid UTF-8 in a JSON string.
    textBytes.map((t) => ({ lines: [data(b('{"type":"ping","x":"'), t, b('"}'))], tag: 'text' })),
  )
}

export type Eol = '\n' | '\r\n' | '\r'
const eol: fc.Arbitrary<Eol> = fc.oneof({ weight: 6, arbitrary: fc.constant<Eol>('\n') }, { weight: 2, arbitrary: fc.constant<Eol>('\r\n') }, { weight: 1, arbitrary: fc.constant<Eol>('\r') })

/** Lines + one line end for the whole frame (a blank line after the last). */
export function renderPiece (p: Piece, e: Eol, seq: number): Buffer {
  const parts: Buffer[] = []
  for (const line of p.lines) {
    const at = line.indexOf('#SEQ#')
    parts.push(at === -1 ? line : Buffer.concat([line.subarray(0, at), b(String(seq)), line.subarray(at + 5)]), b(e))
  }
  parts.push(b(e))
  return Buffer.concat(parts)
}

export interface StreamCase {
  protocol: Protocol
  /** The mutation applied to the well-formed skeleton ('none': the stream must pass). */
  mutation: 'none' | 'no-terminal' | 'insert' | 'cut' | 'dirty-text'
  pieces: string[]
  /** How the skeleton ended (before any mutation). */
  finish: 'stop' | 'length'
  bytes: Buffer
  /** Chunk lengths, summing to bytes.length. */
  chunks: number[]
}

/** Splits n bytes: every byte alone (up to 4 KiB), a few random cuts, or one chunk. */
export function splits (n: number): fc.Arbitrary<number[]> {
  const toLengths = (cuts: number[]): number[] => {
    const at = [...new Set(cuts.filter((c) => c > 0 && c < n))].sort((x, y) => x - y)
    const out: number[] = []
    let prev = 0
    for (const c of [...at, n]) { out.push(c - prev); prev = c }
    return out.filter((x) => x > 0)
  }
  const every: number[] = n === 0 ? [] : n <= 4096 ? new Array<number>(n).fill(1) : [n]
  const whole: number[] = n === 0 ? [] : [n]
  return fc.oneof(
    fc.constant(every),
    fc.array(fc.nat({ max: Math.max(0, n) }), { maxLength: 12 }).map(toLengths),
    fc.constant(whole),
  )
}

export function chunksOf (bytes: Buffer, lengths: number[]): Buffer[] {
  const out: Buffer[] = []
  let at = 0
  for (const len of lengths) { out.push(bytes.subarray(at, at + len)); at += len }
  return out
}

export interface StreamOptions {
  /** The frame cap the stream is read with (odd pieces land around it). */
  maxFrame: number
  /** Mutations to draw from (default all). */
  mutations?: StreamCase['mutation'][]
}

export function streamCase (protocol: Protocol, opts: StreamOptions): fc.Arbitrary<StreamCase> {
  const mutations = opts.mutations ?? ['none', 'no-terminal', 'insert', 'cut', 'dirty-text']
  return fc.record({
    texts: fc.array(cleanText, { maxLength: 5 }),
    dirty: textBytes,
    usage,
    finish: fc.constantFrom<Finish>('stop', 'length'),
    mutation: fc.constantFrom(...mutations),
    odd: fc.array(oddPiece(protocol, opts.maxFrame), { minLength: 1, maxLength: 3 }),
    at: fc.nat(),
    cutAt: fc.nat(),
    eols: fc.array(eol, { minLength: 1, maxLength: 4 }),
  }).chain((g) => {
    const texts = g.mutation === 'dirty-text' ? [...g.texts, g.dirty] : g.texts
    const { body, terminal } = SKELETONS[protocol]({ texts, usage: g.usage, finish: g.finish })
    let pieces = [...body, ...terminal]
    if (g.mutation === 'no-terminal') pieces = body
    if (g.mutation === 'insert') {
      const at = g.at % (pieces.length + 1)
      pieces = [...pieces.slice(0, at), ...g.odd, ...pieces.slice(at)]
    }
    let bytes = Buffer.concat(pieces.map((p, i) => renderPiece(p, g.eols[i % g.eols.length], i)))
    if (g.mutation === 'cut') bytes = bytes.subarray(0, g.cutAt % (bytes.length + 1))
    const tags = pieces.map((p) => p.tag)
    return splits(bytes.length).map((chunks): StreamCase => ({ protocol, mutation: g.mutation, pieces: tags, finish: g.finish, bytes, chunks }))
  })
}

/** The frame of a stream's terminal event, by protocol (what a client reads as "done"). */
export const TERMINAL_FRAME: Record<Protocol, RegExp> = {
  'openai-chat': /^data: ?\[DONE\]\s*$/,
  'openai-responses': /^event: ?response\.(completed|incomplete|failed)\b/,
  anthropic: /^event: ?message_stop\b/,
}
