// Byte checks shared by the protocol classifiers. No decoding, no allocation on the fast paths.
//
// A JSON key can be recognised in raw bytes without parsing: inside a JSON string every `"`
// is escaped (`\"`), so the bytes `"usage"` followed by optional whitespace and `:` can only be
// an object key somewhere in the document (it may be a nested one: that costs a needless
// parse, never a missed field).

import { readFrame, shape, shapeOf } from '../sse/fields.ts'
import { SluiceError } from '../errors.ts'

const LF = 10
const CR = 13
const QUOTE = 34
const COLON = 58
const OPEN_BRACE = 123
const CLOSE_BRACE = 125

export function asBuffer (frame: Uint8Array): Buffer {
  return Buffer.isBuffer(frame) ? frame : Buffer.from(frame.buffer, frame.byteOffset, frame.byteLength)
}

export function ascii (s: string): Buffer {
  return Buffer.from(s, 'latin1')
}

function isWs (c: number): boolean {
  return c === 32 || c === 9 || c === LF || c === CR
}

/** [start, end) with JSON whitespace trimmed at both ends; sets `trimmed`. */
export const trimmed = { start: 0, end: 0 }
export function trim (f: Uint8Array, start: number, end: number): void {
  while (start < end && isWs(f[start])) start++
  while (end > start && isWs(f[end - 1])) end--
  trimmed.start = start
  trimmed.end = end
}

/** Bytes [end - tail.length, end) equal `tail` (compared from the end: mismatches fail fast). */
export function endsWith (f: Uint8Array, end: number, tail: Uint8Array, start = 0): boolean {
  const n = tail.length
  if (end - start < n) return false
  for (let k = 1; k <= n; k++) if (f[end - k] !== tail[n - k]) return false
  return true
}

export function startsWith (f: Uint8Array, at: number, head: Uint8Array, end = f.length): boolean {
  const n = head.length
  if (end - at < n) return false
  for (let k = 0; k < n; k++) if (f[at + k] !== head[k]) return false
  return true
}

const DONE = ascii('[DONE]')

/** The payload [start, end) is `[DONE]` (surrounding whitespace allowed). */
export function isDone (f: Uint8Array, start: number, end: number): boolean {
  trim(f, start, end)
  return trimmed.end - trimmed.start === 6 && startsWith(f, trimmed.start, DONE, trimmed.end)
}

/** The payload [start, end) begins with `{` and ends with `}` (surrounding whitespace allowed). */
export function isObjectShaped (f: Uint8Array, start: number, end: number): boolean {
  trim(f, start, end)
  return trimmed.end - trimmed.start >= 2 && f[trimmed.start] === OPEN_BRACE && f[trimmed.end - 1] === CLOSE_BRACE
}

/**
 * Finds the key `quotedKey` (e.g. `"usage"`, quotes included) in [from, end) and returns the
 * offset of the first value after it whose first byte passes `accept`, or -1.
 */
export function findKeyValue (f: Buffer, from: number, end: number, quotedKey: Buffer, accept: (c: number, f: Buffer, at: number) => boolean): number {
  let at = from
  while (at < end) {
    const k = f.indexOf(quotedKey, at)
    if (k === -1 || k >= end) return -1
    let p = k + quotedKey.length
    while (p < end && isWs(f[p])) p++
    if (p < end && f[p] === COLON) {
      p++
      while (p < end && isWs(f[p])) p++
      if (p < end && accept(f[p], f, p)) return p
    }
    at = k + 1
  }
  return -1
}

/** A value that is not the literal `null`. */
export function notNull (c: number, f: Buffer, at: number): boolean {
  return !(c === 110 && f[at + 1] === 117 && f[at + 2] === 108 && f[at + 3] === 108)
}

export function isObjectStart (c: number): boolean {
  return c === OPEN_BRACE
}

/** No CR or LF in [start, end): the payload is one line. */
export function singleLine (f: Buffer, start: number, end: number): boolean {
  const lf = f.indexOf(LF, start)
  if (lf !== -1 && lf < end) return false
  const cr = f.indexOf(CR, start)
  return cr === -1 || cr >= end
}

/**
 * The name in a payload that starts `{"type":"<name>"`, as [start, end) in `typeName`, or
 * false. Names are short: the scan stops after 128 bytes.
 */
export const typeName = { start: 0, end: 0 }
const TYPE_HEAD = ascii('{"type":"')
export function leadingType (f: Uint8Array, start: number, end: number): boolean {
  if (!startsWith(f, start, TYPE_HEAD, end)) return false
  const s = start + TYPE_HEAD.length
  const limit = Math.min(end, s + 128)
  for (let p = s; p < limit; p++) {
    const c = f[p]
    if (c === QUOTE) {
      typeName.start = s
      typeName.end = p
      return true
    }
    if (c === 92) return false // a backslash: not a plain name
  }
  return false
}

/** The event name and data payload of a frame, exactly (for inspect()). */
export interface FramePayload {
  event: string | null
  data: Buffer | null
}

export function payloadOf (frame: Buffer): FramePayload {
  if (shapeOf(frame) && singleLine(frame, shape.payloadStart, frame.length)) {
    const event = shape.nameStart === -1 ? null : frame.toString('latin1', shape.nameStart, shape.nameEnd)
    return { event, data: frame.subarray(shape.payloadStart) }
  }
  const r = readFrame(frame)
  return { event: r.event, data: r.data }
}

/** JSON.parse of a payload; a SluiceError `provider_protocol_error` when it is not JSON. */
export function parsePayload (data: Buffer, event: string | null): unknown {
  try {
    return JSON.parse(data.toString('utf8'))
  } catch {
    throw new SluiceError('provider_protocol_error', { reason: 'frame data is not valid JSON', event, bytes: data.length })
  }
}

/** parsePayload, and the value must be a JSON object. */
export function parseObject (data: Buffer, event: string | null): Record<string, unknown> {
  const v = parsePayload(data, event)
  if (!isRecord(v)) throw new SluiceError('provider_protocol_error', { reason: 'frame data is not a JSON object', event, bytes: data.length })
  return v
}

export function isRecord (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

export function str (v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined
}

export function num (v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined
}

/** A provider error object (`{type, message, code}` in any of the families' spellings). */
export function errorFacts (err: unknown, fallbackType: string): { type: string; message: string; code?: string } {
  if (typeof err === 'string') return { type: fallbackType, message: err }
  if (!isRecord(err)) return { type: fallbackType, message: 'provider error' }
  const code = typeof err.code === 'string' ? err.code : typeof err.code === 'number' ? String(err.code) : undefined
  const out: { type: string; message: string; code?: string } = {
    type: str(err.type) ?? fallbackType,
    message: str(err.message) ?? 'provider error',
  }
  if (code !== undefined) out.code = code
  return out
}

/** True when bytes [start, end) equal one of `names`. */
export function nameIn (f: Uint8Array, start: number, end: number, names: readonly Buffer[]): boolean {
  const len = end - start
  for (let k = 0; k < names.length; k++) {
    const name = names[k]
    if (name.length !== len) continue
    let m = 0
    while (m < len && f[start + m] === name[m]) m++
    if (m === len) return true
  }
  return false
}

/** Reads a non-negative decimal integer at `at` (at most 15 digits); -1 when there is none. */
export function readUint (f: Uint8Array, at: number, end: number): number {
  let v = 0
  let p = at
  const limit = Math.min(end, at + 15)
  while (p < limit) {
    const c = f[p]
    if (c < 48 || c > 57) break
    v = v * 10 + (c - 48)
    p++
  }
  return p === at ? -1 : v
}

/**
 * The non-streaming usage readers of one protocol, from its `usage`-object reader: from an
 * already-parsed response body, and from the body's bytes (parses: take the parse permit).
 */
export function usageReaders<U> (usageOf: (u: unknown) => U | undefined): {
  usageFromJson: (value: unknown) => U | null
  extractUsage: (body: Uint8Array) => U | null
} {
  const usageFromJson = (value: unknown): U | null => isRecord(value) ? usageOf(value.usage) ?? null : null
  return { usageFromJson, extractUsage: (body) => usageFromJson(parsePayload(asBuffer(body), null)) }
}
