// Property-based fuzzing of the stream layer without I/O (issue 14, "Fuzzing"): the SSE framer
// against a byte-by-byte reference reading of the line grammar, under every split; the three
// protocol inspectors and the StreamTracker over generated provider streams (well-formed ones
// must pass with their usage, broken ones must fail with a catalogued code); and the signed
// failure tails, which every protocol's own reader must see as one whole error frame.
//
// Bounded in `npm test`; SLUICE_FUZZ_RUNS=20000 for a long run (see test/fuzz/runs.ts).

import t from 'tap'
import fc from 'fast-check'
import { catalogue, errorCodes, isErrorCode, type ErrorCode } from '../../src/errors.ts'
import { inspectorFor, StreamTracker, type Protocol, type StreamVerdict } from '../../src/protocols/index.ts'
import { SseFramer } from '../../src/sse/framer.ts'
import { buildFailureRecord, signRecord, verifyRecord, type FailureRecord } from '../../src/sse/sign.ts'
import { fuzzParams, numRuns } from './runs.ts'
import { findSluice } from './tails.ts'
import { chunksOf, refFrames, splits, streamCase, type RefEvent, type StreamCase } from './sse-model.ts'

const PROTOCOLS: Protocol[] = ['openai-chat', 'openai-responses', 'anthropic']
const MAX_FRAME = 1024

/** Bytes drawn mostly from the characters that matter to SSE framing. */
const sseish = fc.array(fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(10, 13) },
  { weight: 6, arbitrary: fc.constantFrom(...Buffer.from('data: {}"event:x')) },
  { weight: 1, arbitrary: fc.nat({ max: 255 }) },
), { maxLength: 160 }).map((a) => Buffer.from(a))

interface FramerRun { events: RefEvent[]; trailing: Buffer | null; problems: string[] }

/** Feeds `bytes` in chunks of `lengths` and checks each push against the reference. */
function runFramer (bytes: Buffer, lengths: number[], max: number, offsets = false): FramerRun {
  const ref = refFrames(bytes, max)
  const events: RefEvent[] = []
  const problems: string[] = []
  let offset = 0
  const onOversize = (_bytes: number, at: number) => { events.push({ kind: 'oversize', start: offset + at }) }
  const framer = new SseFramer(offsets
    // The relay's way (offsets into the chunk, or into a copy of a frame that spanned chunks).
    ? { onFrameAt: (buf, start, end, at) => { events.push({ kind: 'frame', bytes: Buffer.from(buf.subarray(start, end)), start: offset + at }) }, onOversize }
    : { onFrame: (frame, at) => { events.push({ kind: 'frame', bytes: Buffer.from(frame), start: offset + at }) }, onOversize },
  { maxFrameBytes: max })
  for (const chunk of chunksOf(bytes, lengths)) {
    // A fresh copy per chunk: a view the framer kept into an earlier chunk would show here.
    framer.push(Buffer.from(chunk))
    offset += chunk.length
    if (framer.bufferedBytes > max) problems.push(`holds ${framer.bufferedBytes} bytes at ${offset} (cap ${max})`)
    const discarding = framer.midFrame && framer.partialFrameBytes === 0
    if (!discarding && !ref.boundaries.has(offset - framer.partialFrameBytes)) {
      problems.push(`at ${offset}, ${framer.partialFrameBytes} partial bytes do not start at a frame boundary`)
    }
  }
  const trailing = framer.end()
  return { events, trailing: trailing === null ? null : Buffer.from(trailing), problems }
}

function comparable (events: RefEvent[]): Array<[string, string]> {
  return events.map((e) => e.kind === 'frame' ? ['frame', e.bytes.toString('latin1')] : ['oversize', ''])
}

t.test('the framer reads any bytes, split anywhere, exactly as the reference does', async (t) => {
  const input = fc.oneof(
    sseish.chain((bytes) => fc.tuple(fc.constant(bytes), splits(bytes.length), fc.integer({ min: 1, max: 48 }))),
    fc.constantFrom(...PROTOCOLS).chain((p) => streamCase(p, { maxFrame: MAX_FRAME })).map((c) => [c.bytes, c.chunks, MAX_FRAME] as [Buffer, number[], number]),
  )
  let ran = 0
  fc.assert(fc.property(input, fc.boolean(), ([bytes, lengths, max], offsets) => {
    ran++
    const ref = refFrames(bytes, max)
    const got = runFramer(bytes, lengths, max, offsets)
    if (got.problems.length > 0) throw new Error(got.problems.join('; '))
    const want = comparable(ref.events)
    const have = comparable(got.events)
    if (JSON.stringify(want) !== JSON.stringify(have)) throw new Error(`frames differ:\nwant ${JSON.stringify(want)}\nhave ${JSON.stringify(have)}`)
    // Where each frame (oversize ones too) began: `at` is relative to the chunk being pushed.
    const refStarts = ref.events.map((e) => e.start)
    const starts = got.events.map((e) => e.start)
    if (JSON.stringify(refStarts) !== JSON.stringify(starts)) throw new Error(`frame starts differ: want ${refStarts} have ${starts}`)
    const wantTrail = ref.trailing?.toString('latin1') ?? null
    const haveTrail = got.trailing?.toString('latin1') ?? null
    if (wantTrail !== haveTrail) throw new Error(`trailing differs: want ${JSON.stringify(wantTrail)} have ${JSON.stringify(haveTrail)}`)
  }), fuzzParams(1000))
  t.equal(ran, numRuns(1000), 'every case agreed with the reference')
})

/** The relay's use of the stream layer, without the I/O: frames in order, inspect under no permit. */
function track (c: StreamCase, lengths: number[]): { verdict: StreamVerdict; thrown: unknown[] } {
  const inspector = inspectorFor(c.protocol)
  const tracker = new StreamTracker(inspector)
  const thrown: unknown[] = []
  const framer = new SseFramer({
    onFrame: (frame) => {
      let cls
      try {
        cls = inspector.classify(frame)
      } catch (err) {
        thrown.push(err)
        return
      }
      if (cls !== 'pass' && cls !== 'inspect' && cls !== 'malformed') thrown.push(new Error(`classify gave ${String(cls)}`))
      if (tracker.frame(frame, cls)) {
        try {
          tracker.apply(inspector.inspect(frame))
        } catch (err) {
          const code = (err as { code?: unknown }).code
          // inspect() may refuse a payload only with a catalogued code.
          if (!isErrorCode(code) || code === 'internal_error') thrown.push(err)
          tracker.inspectFailed(err)
        }
      }
    },
    onOversize: (bytes) => tracker.oversize(bytes),
  }, { maxFrameBytes: MAX_FRAME })
  for (const chunk of chunksOf(c.bytes, lengths)) framer.push(chunk)
  return { verdict: tracker.end({ trailingBytes: framer.end()?.length ?? 0 }), thrown }
}

/**
 * The relay's per-frame path: each frame judged in place, as offsets into the chunk that
 * holds it (onFrameAt, classifyAt, frameAt), beside the view path (onFrame, classify, frame)
 * on the same split. Returns what each path saw, frame by frame.
 */
function inPlaceAgainstViews (c: StreamCase, lengths: number[]): { views: string[]; inPlace: string[] } {
  const inspector = inspectorFor(c.protocol)
  const views: string[] = []
  const inPlace: string[] = []
  const viewTracker = new StreamTracker(inspector)
  const placeTracker = new StreamTracker(inspector)
  const seen = (tr: StreamTracker, cls: string, wants: boolean) => `${cls} ${wants} ${tr.end({ trailingBytes: 0 }).framesSeen}`
  const a = new SseFramer({
    onFrame: (frame) => { const cls = inspector.classify(frame); views.push(seen(viewTracker, cls, viewTracker.frame(frame, cls)) + ' ' + (inspector.peekSequenceNumber?.(frame) ?? '')) },
  }, { maxFrameBytes: MAX_FRAME })
  const b = new SseFramer({
    onFrameAt: (buf, start, end) => {
      const cls = inspector.classifyAt(buf, start, end)
      inPlace.push(seen(placeTracker, cls, placeTracker.frameAt(buf, start, end, cls)) + ' ' + (inspector.peekSequenceNumberAt?.(buf, start, end) ?? ''))
    },
  }, { maxFrameBytes: MAX_FRAME })
  for (const chunk of chunksOf(c.bytes, lengths)) { a.push(chunk); b.push(chunk) }
  return { views, inPlace }
}

t.test('judged in place inside its chunk, every frame gets what its own view gets', async (t) => {
  let frames = 0
  for (const protocol of PROTOCOLS) {
    fc.assert(fc.property(streamCase(protocol, { maxFrame: MAX_FRAME }), (c) => {
      const got = inPlaceAgainstViews(c, c.chunks)
      frames += got.views.length
      if (JSON.stringify(got.views) !== JSON.stringify(got.inPlace)) throw new Error(`in place:\n${got.inPlace.join('\n')}\nviews:\n${got.views.join('\n')}`)
    }), fuzzParams(300))
  }
  t.ok(frames > 0, `${frames} frames compared`)
})

// Pieces of the byte patterns the classifiers look for, to build frames and the bytes around
// them: a classifier reading past its frame's bounds would see the neighbours.
const PIECES = ['data: ', 'event: ', 'data: {', '}', '{"type":"', '"', 'response.created', 'response.output_text.delta',
  'message_start', 'content_block_delta', '","sequence_number":', '7', '12', ',"obfuscation":"', '"finish_reason":null}]',
  '"finish_reason":"stop"}]', ',"usage":null', '"usage":{', '"error":', 'null', '[DONE]', '\n', '\r\n', ' ', ',', '{"choices":[{']
const pieceText = fc.array(fc.constantFrom(...PIECES), { maxLength: 12 }).map((a) => a.join(''))
// Frames shaped like the fast paths' (a data or event + data frame around an object), and
// neighbours that end the way a quiet Chat chunk ends.
const frameText = fc.oneof(
  pieceText,
  fc.tuple(fc.constantFrom('data: {', 'data:{', 'event: response.created\ndata: {', 'event: ping\ndata: {', 'data: {"type":"'), pieceText).map(([h, b]) => h + b + '}'),
)
const around = fc.oneof(pieceText, pieceText.map((p) => p + '"finish_reason":null}],"obfuscation":"'))

t.test('classifyAt and peekSequenceNumberAt read only their frame, whatever surrounds it', async (t) => {
  let ran = 0
  fc.assert(fc.property(around, frameText, around, fc.constantFrom(...PROTOCOLS), (before, frameText, after, protocol) => {
    const frame = Buffer.from(frameText, 'latin1')
    const chunk = Buffer.from(before + frameText + after, 'latin1')
    const start = before.length
    const end = start + frame.length
    const inspector = inspectorFor(protocol)
    ran++
    const want = inspector.classify(Buffer.from(frame))
    const got = inspector.classifyAt(chunk, start, end)
    if (want !== got) throw new Error(`${protocol}: ${JSON.stringify(frameText)} is ${want} alone, ${got} between ${JSON.stringify(before)} and ${JSON.stringify(after)}`)
    if (inspector.peekSequenceNumber !== undefined) {
      const ws = inspector.peekSequenceNumber(Buffer.from(frame))
      const gs = inspector.peekSequenceNumberAt!(chunk, start, end)
      if (ws !== gs) throw new Error(`sequence number ${ws} alone, ${gs} in place`)
    }
  }), fuzzParams(3000))
  t.equal(ran, numRuns(3000), 'every frame agreed with its view')
})

const TERMINAL_OF: Record<string, 'completed' | 'incomplete'> = { stop: 'completed', length: 'incomplete' }

t.test('inspectors and the tracker: catalogued failures only; well-formed streams pass with their usage, whatever the split', async (t) => {
  const passed: Record<string, number> = {}
  for (const protocol of PROTOCOLS) {
    fc.assert(fc.property(streamCase(protocol, { maxFrame: MAX_FRAME }), (c) => {
      const split = track(c, c.chunks)
      const whole = track(c, c.bytes.length === 0 ? [] : [c.bytes.length])
      if (split.thrown.length > 0) throw split.thrown[0]
      const v = split.verdict
      if (v.failure !== null && (!isErrorCode(v.failure.code) || v.failure.code === 'internal_error')) throw new Error(`uncatalogued failure ${v.failure.code}`)
      if (v.ok !== (v.failure === null && v.terminal !== null && v.terminal !== 'failed')) throw new Error('ok disagrees with failure/terminal')
      const key = (x: StreamVerdict) => JSON.stringify([x.ok, x.terminal, x.failure?.code ?? null, x.usage, x.framesSeen])
      if (key(v) !== key(whole.verdict)) throw new Error(`split changes the verdict: ${key(v)} vs ${key(whole.verdict)}`)
      if (c.mutation === 'none') {
        if (!v.ok) throw new Error(`a well-formed stream failed: ${JSON.stringify(v.failure)}`)
        if (v.usage === null || v.usage.inputTokens === undefined || v.usage.outputTokens === undefined) throw new Error(`usage missing: ${JSON.stringify(v.usage)}`)
      }
      if (c.mutation === 'no-terminal' && v.ok) throw new Error('a stream without its terminal passed')
      if (c.mutation === 'none' && v.terminal !== TERMINAL_OF[c.finish]) {
        throw new Error(`terminal ${v.terminal} for a stream that ended with ${c.pieces.at(-1)}`)
      }
      if (v.ok) passed[protocol] = (passed[protocol] ?? 0) + 1
    }), fuzzParams(400))
  }
  t.same(Object.keys(passed).sort(), [...PROTOCOLS].sort(), 'well-formed streams of every protocol were among the cases')
})

const record: fc.Arbitrary<FailureRecord> = fc.record({
  code: fc.constantFrom(...errorCodes),
  message: fc.string({ unit: 'binary', maxLength: 80 }),
  exchangeId: fc.uuid(),
  runId: fc.option(fc.string({ maxLength: 20 }), { nil: null }),
  provider: fc.string({ maxLength: 12 }),
  model: fc.string({ unit: 'grapheme', maxLength: 12 }),
  framesRelayed: fc.nat(),
  bytesRelayed: fc.nat(),
  usage: fc.option(fc.record({ inputTokens: fc.nat(), outputTokens: fc.nat() }), { nil: null }),
  partial: fc.boolean(),
  at: fc.date({ min: new Date(0), max: new Date(4e12), noInvalidDate: true }),
}).map((f) => buildFailureRecord(f))

t.test('a failure tail is one whole frame its own protocol reads as an error, carrying the signed record', async (t) => {
  const key = Buffer.from('fuzz-signing-key')
  let ran = 0
  for (const protocol of PROTOCOLS) {
    const inspector = inspectorFor(protocol)
    fc.assert(fc.property(record, fc.option(fc.string({ minLength: 1, maxLength: 24 }), { nil: null }), fc.nat({ max: 1e6 }), (rec, responseId, seq) => {
      ran++
      const sig = signRecord(rec, key)
      const tail = inspector.failureTail(rec, sig, { responseId, sequenceNumber: seq, model: 'm', createdAt: 1 })
      const ref = refFrames(tail, 1 << 20)
      if (ref.trailing !== null || ref.events.length !== 1 || ref.events[0].kind !== 'frame') throw new Error(`not one whole frame: ${tail.toString()}`)
      if (!ref.boundaries.has(tail.length)) throw new Error('the tail does not end at a frame boundary')
      const frame = ref.events[0].bytes
      if (inspector.classify(frame) !== 'inspect') throw new Error(`the tail is not inspected: ${frame.toString()}`)
      const facts = inspector.inspect(frame)
      if (facts.error === undefined) throw new Error(`the tail reads as no error: ${JSON.stringify(facts)}`)
      const dataLine = frame.toString().split('\n').find((l) => l.startsWith('data: '))!
      const j = JSON.parse(dataLine.slice(6)) as Record<string, unknown>
      const sluice = findSluice(j)
      if (sluice === null) throw new Error('no sluice record in the tail')
      if (!verifyRecord(sluice.record, sluice.signature, key)) throw new Error('the signature does not verify after the JSON round trip')
      if (JSON.stringify(sluice.record) !== JSON.stringify(JSON.parse(JSON.stringify(rec)))) throw new Error('the record changed')
      const code: ErrorCode = sluice.record.code
      if (catalogue[code] === undefined) throw new Error(`uncatalogued ${code}`)
    }), fuzzParams(300))
  }
  t.equal(ran, numRuns(300) * PROTOCOLS.length, 'every tail read back as its protocol\'s error')
})
