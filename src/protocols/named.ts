// Classification for the two protocols whose frames are named events (Responses, Messages).
//
// classify(), fastest first:
//   1. `event: <name>` LF `data: {` ... `}` (the frame's last byte):  inspect when <name> is one
//      of the protocol's field-carrying events, else pass. One memchr (the end of the event
//      line) and a few byte compares; the payload is not searched.
//   2. `data: {"type":"<name>"` ... `}` with no event line: the same, by the payload's type.
//      `data: {` ... `}` without a leading type: inspect (let the parser read its type).
//   3. anything else goes through the general SSE parser, on the exact data payload: no data
//      line (comment, `retry:`) or an empty one (no event is dispatched) -> pass; `[DONE]` -> pass (not part of these protocols, sent
//      by some compatible servers); not `{`...`}` -> malformed; else by the event name / type.
// What it catches: a data payload cut short or not an object (the sim's malformed-frame fault
// ends inside a string), a data line that is not JSON at all, a frame that is only field
// lines with no JSON.
// What it cannot catch: damage inside a `{`...`}` payload of a pass frame (bad escapes,
// invalid UTF-8), or an event line that disagrees with the payload's `type` (the event line
// is trusted). Unknown event names are pass: new provider events flow through untouched.

import { readFrame, shape, shapeAt } from '../sse/fields.ts'
import { ascii, asBuffer, isDone, isObjectShaped, leadingType, nameIn, parseObject, payloadOf, str, trim, trimmed, typeName } from './bytes.ts'
import type { FrameClass } from './types.ts'

/**
 * The start of inspect() for a named-event protocol: the frame's JSON object and its event
 * name (the `event:` line, else the payload's `type`), or null for a frame with no payload
 * or a `[DONE]`. Parses: run it under the parse permit.
 */
export function namedPayload (frame: Uint8Array): { obj: Record<string, unknown>; name: string | undefined } | null {
  const { event, data } = payloadOf(asBuffer(frame))
  if (data === null || data.length === 0) return null
  trim(data, 0, data.length)
  if (isDone(data, 0, data.length)) return null
  const obj = parseObject(data, event)
  return { obj, name: event ?? str(obj.type) }
}

const OPEN_BRACE = 123
const CLOSE_BRACE = 125

export interface NamedClassifier {
  classify: (frame: Uint8Array) => FrameClass
  /** classify() of f[start, end), f a chunk holding the frame among others. */
  classifyAt: (f: Buffer, start: number, end: number) => FrameClass
}

export function namedClassifier (inspectNames: readonly string[]): NamedClassifier {
  const names = inspectNames.map(ascii)
  const nameSet = new Set(inspectNames)

  const general = (f: Buffer): FrameClass => {
    const r = readFrame(f)
    const data = r.data
    if (data === null || data.length === 0) return 'pass'
    if (isDone(data, 0, data.length)) return 'pass'
    if (!isObjectShaped(data, 0, data.length)) return 'malformed'
    if (r.event !== null) return nameSet.has(r.event) ? 'inspect' : 'pass'
    if (leadingType(data, trimmed.start, trimmed.end)) return nameIn(data, typeName.start, typeName.end, names) ? 'inspect' : 'pass'
    return 'inspect'
  }

  // Every read of the fast path is bounded by the frame's end; the general parser gets a view.
  const classifyAt = (f: Buffer, start: number, end: number): FrameClass => {
    if (shapeAt(f, start, end)) {
      const p = shape.payloadStart
      if (p < end && f[p] === OPEN_BRACE && f[end - 1] === CLOSE_BRACE) {
        if (shape.nameStart !== -1) return nameIn(f, shape.nameStart, shape.nameEnd, names) ? 'inspect' : 'pass'
        if (leadingType(f, p, end)) return nameIn(f, typeName.start, typeName.end, names) ? 'inspect' : 'pass'
        return 'inspect'
      }
    }
    return general(start === 0 && end === f.length ? f : f.subarray(start, end))
  }
  return {
    classify: (frame: Uint8Array): FrameClass => {
      const f = asBuffer(frame)
      return classifyAt(f, 0, f.length)
    },
    classifyAt,
  }
}
