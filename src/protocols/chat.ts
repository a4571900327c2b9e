// OpenAI Chat Completions streams: `data: {chat.completion.chunk}` frames, then `data: [DONE]`.
//
// Frames that matter:
//   terminal  a chunk whose choices carry a non-null `finish_reason`, then `data: [DONE]`
//   usage     `"usage":{...}` (the `choices:[]` chunk with stream_options.include_usage, or
//             usage on the finish chunk, as some compatible providers send it)
//   error     a data frame with an `error` object (`{"error":{"message","type","code"}}`)
//
// classify() — what it looks at, fastest first:
//   1. `data: [DONE]`                                                     -> inspect
//   2. `data: {` ... and the payload ends with a known "nothing here" tail: the last choice's
//      `"finish_reason":null}]` closing the object, optionally followed by `,"usage":null`,
//      by vLLM's `,"stop_reason":null` inside the choice, and/or by a trailing
//      `,"obfuscation":"..."` field (OpenAI)                                 -> pass
//      This is the layout of every delta chunk from OpenAI, the sim and the fixtures; it costs
//      ~40 byte compares and no search.
//   3. otherwise, on the exact data payload: not `{`...`}` (whitespace allowed) -> malformed;
//      a key `"finish_reason"` with a non-null value, `"usage"` with an object value, or
//      `"error"` with a non-null value                                     -> inspect;
//      else                                                                -> pass
//      (three substring searches: ~0.3-1 µs; used for the few frames of a stream that are
//      not plain deltas, and for providers with other key orders).
//   A frame with no data line (comments, `retry:`) or an empty one (SSE dispatches no event
//   for it) is pass; a frame with an `event:` line is read with the general parser and judged
//   on its payload the same way.
// What it catches: a payload cut short or not a JSON object (the sim's malformed-frame fault
// ends inside a string), a non-JSON data line, a frame of field lines with no JSON.
// What it cannot catch: damage inside a payload that still begins with `{` and ends with `}`
// (a bad escape, invalid UTF-8, a missing comma) in a frame classified pass — the client's
// SDK decodes those. Step 2 trusts the layout: an `error` or `usage` object placed before
// `choices` in a chunk whose last choice has finish_reason null is not seen (no provider is
// known to send that; OpenAI sends usage in its own `choices:[]` chunk).

import type { FailureRecord } from '../sse/sign.ts'
import { readFrame, shape, shapeAt } from '../sse/fields.ts'
import {
  ascii, asBuffer, endsWith, errorFacts, findKeyValue, isDone, isObjectShaped, isObjectStart, isRecord, notNull, num,
  parseObject, parsePayload, payloadOf, singleLine, str, trim, trimmed, usageReaders,
} from './bytes.ts'
import { tailMessage } from './tail.ts'
import type { FrameClass, FrameFacts, ProtocolInspector, TailContext, Usage } from './types.ts'

const OPEN_BRACE = 123
const CLOSE_BRACE = 125
const QUOTE = 34
const COMMA = 44

// Known tails of a chunk that carries nothing the gateway reads (checked at the position of
// the root object's closing brace, or of the comma before a trailing `obfuscation` field).
const TAILS = [
  ascii('"finish_reason":null}]'),
  ascii('"finish_reason":null}],"usage":null'),
  ascii('"finish_reason":null,"stop_reason":null}]'),
  ascii('"finish_reason":null,"stop_reason":null}],"usage":null'),
]
const OBFUSCATION = ascii(',"obfuscation":"')

const KEY_FINISH = ascii('"finish_reason"')
const KEY_USAGE = ascii('"usage"')
const KEY_ERROR = ascii('"error"')

function quietTail (f: Buffer, start: number, end: number): boolean {
  // `end` is the index of the root object's closing brace; the payload begins at `start`.
  let q = end
  if (f[q - 1] === QUOTE) {
    // maybe `,"obfuscation":"<random>"` last (a short value: a backward scan in JS costs less
    // than the native lastIndexOf call it replaces, once per frame)
    let comma = q - 2
    while (comma >= start && f[comma] !== COMMA) comma--
    if (comma < start) return false
    for (let k = 0; k < OBFUSCATION.length; k++) if (f[comma + k] !== OBFUSCATION[k]) return false
    q = comma
  }
  for (let t = 0; t < TAILS.length; t++) if (endsWith(f, q, TAILS[t], start)) return true
  return false
}

/** Judges an exact payload [start, end). */
function classifyPayload (f: Buffer, start: number, end: number): FrameClass {
  if (start === end) return 'pass' // an empty data field dispatches no event (SSE)
  if (isDone(f, start, end)) return 'inspect'
  if (!isObjectShaped(f, start, end)) return 'malformed'
  const s = trimmed.start
  const e = trimmed.end
  if (findKeyValue(f, s, e, KEY_FINISH, notNull) !== -1) return 'inspect'
  if (findKeyValue(f, s, e, KEY_USAGE, isObjectStart) !== -1) return 'inspect'
  if (findKeyValue(f, s, e, KEY_ERROR, notNull) !== -1) return 'inspect'
  return 'pass'
}

function classifyGeneral (f: Buffer): FrameClass {
  const r = readFrame(f)
  if (r.data === null) return 'pass'
  return classifyPayload(r.data, 0, r.data.length)
}

export function classify (frame: Uint8Array): FrameClass {
  const f = asBuffer(frame)
  return classifyAt(f, 0, f.length)
}

/**
 * classify() of the frame f[start, end) (f: a chunk holding it among others). Only the fast
 * path reads f in place, with every read bounded by the frame; anything slower runs on a view
 * of the frame (a search in f itself could run on into the frames after it).
 */
export function classifyAt (f: Buffer, start: number, end: number): FrameClass {
  const plain = shapeAt(f, start, end) && shape.nameStart === -1
  const p = shape.payloadStart
  if (plain && p < end && f[p] === OPEN_BRACE && f[end - 1] === CLOSE_BRACE && quietTail(f, p, end - 1)) return 'pass'
  const frame = start === 0 && end === f.length ? f : f.subarray(start, end)
  if (!plain) return classifyGeneral(frame)
  const q = p - start // the payload's start in the view
  if (singleLine(frame, q, frame.length)) return classifyPayload(frame, q, frame.length)
  return classifyGeneral(frame)
}

function usageOf (u: unknown): Usage | undefined {
  if (!isRecord(u)) return undefined
  const out: Usage = {}
  const i = num(u.prompt_tokens)
  const o = num(u.completion_tokens)
  const t = num(u.total_tokens)
  if (i !== undefined) out.inputTokens = i
  if (o !== undefined) out.outputTokens = o
  if (t !== undefined) out.totalTokens = t
  return i === undefined && o === undefined && t === undefined ? undefined : out
}

export function inspect (frame: Uint8Array): FrameFacts {
  const { event, data } = payloadOf(asBuffer(frame))
  if (data === null || data.length === 0) return {}
  trim(data, 0, data.length)
  if (isDone(data, 0, data.length)) return { terminal: 'done' }
  const obj = parseObject(data, event)
  const facts: FrameFacts = {}
  const id = str(obj.id)
  if (id !== undefined) facts.responseId = id
  const model = str(obj.model)
  if (model !== undefined) facts.model = model
  if (obj.error !== undefined && obj.error !== null) facts.error = errorFacts(obj.error, 'error')
  if (Array.isArray(obj.choices)) {
    for (const c of obj.choices) {
      if (isRecord(c) && typeof c.finish_reason === 'string') {
        facts.stopReason = c.finish_reason
        break
      }
    }
  }
  const usage = usageOf(obj.usage)
  if (usage !== undefined) facts.usage = usage
  return facts
}

/** The signed failure as Chat's own in-stream error: `data: {"error":{...}}`. */
export function failureTail (record: FailureRecord, signature: string, ctx: TailContext = {}): Buffer {
  const error = {
    message: tailMessage(record) + (ctx.messageSuffix ?? ''),
    type: ctx.errorType ?? (record.side === 'caller' ? 'invalid_request_error' : 'server_error'),
    param: null,
    code: ctx.errorCode ?? record.code,
    sluice: { record, signature },
  }
  // No `data: [DONE]` after it: the openai SDK throws on the error frame and never reads
  // further, and a client that ignores error frames must not see the sentinel that says the
  // stream completed.
  return Buffer.from((ctx.closing ?? '') + 'data: ' + JSON.stringify({ error }) + '\n\n')
}

export const { usageFromJson, extractUsage } = usageReaders(usageOf)

export const chat: ProtocolInspector = {
  protocol: 'openai-chat',
  classify,
  classifyAt,
  inspect,
  failureTail,
  extractUsage,
  usageFromJson,
}
