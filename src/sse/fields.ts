// Reading the fields of one SSE frame (as reported by SseFramer), at two speeds.
//
// `shapeOf(frame)` is the per-frame fast path: it recognises the two shapes every provider in
// the field sends — `data: <payload>` and `event: <name>` + `data: <payload>` — from a few
// byte reads and at most one memchr, and allocates nothing. It answers with offsets in the
// module-level `shape` record (valid until the next call). Anything else (comments, `id:` or
// `retry:` lines, field lines in another order, a frame that is not `event`/`data`) returns
// false, and the caller uses `readFrame(frame)`, the general line parser of the SSE
// specification (CR, LF and CRLF line ends; `:` comments; one optional space after the colon;
// several `data:` lines joined with "\n").

const LF = 10
const CR = 13
const SPACE = 32
const COLON = 58

/** Offsets found by shapeOf() / shapeAt(); valid until the next call. */
export const shape = {
  /** The buffer these offsets belong to (null after a failed call). */
  frame: null as Buffer | null,
  /** The frame is frame[start, end). */
  start: 0,
  end: 0,
  /** [nameStart, nameEnd) is the `event:` value; both -1 when there is no event line. */
  nameStart: -1,
  nameEnd: -1,
  /** The payload starts here (after `data:` and its optional space) and runs to the frame's end. */
  payloadStart: 0,
}

function isData (f: Uint8Array, p: number): boolean {
  // "data:"
  return f[p] === 100 && f[p + 1] === 97 && f[p + 2] === 116 && f[p + 3] === 97 && f[p + 4] === COLON
}

function isEvent (f: Uint8Array, p: number): boolean {
  // "event:"
  return f[p] === 101 && f[p + 1] === 118 && f[p + 2] === 101 && f[p + 3] === 110 && f[p + 4] === 116 && f[p + 5] === COLON
}

/**
 * Recognises `data: P` and `event: N` LF|CRLF `data: P`. On success fills `shape` and returns
 * true. The payload is everything after the data line's prefix, to the frame's end: when the
 * frame has further lines they are inside it (a caller that needs the exact payload of such a
 * frame must use readFrame).
 */
export function shapeOf (f: Buffer): boolean {
  return shapeAt(f, 0, f.length)
}

/** shapeOf() for the frame f[start, end) (offsets in `shape` are offsets into f). */
export function shapeAt (f: Buffer, start: number, end: number): boolean {
  const n = end - start
  let p: number
  shape.frame = null
  if (n >= 5 && isData(f, start)) {
    shape.nameStart = -1
    shape.nameEnd = -1
    p = start + 5
  } else if (n >= 6 && isEvent(f, start)) {
    let ns = start + 6
    if (f[ns] === SPACE) ns++
    const lf = f.indexOf(LF, ns)
    if (lf === -1 || lf >= end) return false
    let ne = lf
    if (ne > ns && f[ne - 1] === CR) ne--
    const ds = lf + 1
    if (end < ds + 5 || !isData(f, ds)) return false
    shape.nameStart = ns
    shape.nameEnd = ne
    p = ds + 5
  } else return false
  if (p < end && f[p] === SPACE) p++
  shape.payloadStart = p
  shape.frame = f
  shape.start = start
  shape.end = end
  return true
}

export interface ParsedFrame {
  /** The `event:` value, or null when the frame has none. */
  event: string | null
  /** The data payload (several `data:` lines joined with "\n"), or null when there is none. */
  data: Buffer | null
  /** How many `data:` lines the frame has. */
  dataLines: number
}

/** The general SSE line parser for one frame. Allocates; for the rare frames shapeOf() rejects. */
export function readFrame (f: Buffer): ParsedFrame {
  const n = f.length
  let event: string | null = null
  let single: Buffer | null = null
  let parts: Buffer[] | null = null
  let dataLines = 0
  let i = 0
  while (i <= n) {
    let e = i
    while (e < n && f[e] !== LF && f[e] !== CR) e++
    // the line is [i, e)
    if (e > i && f[i] !== COLON) {
      let c = i
      while (c < e && f[c] !== COLON) c++
      let v = c < e ? c + 1 : e
      if (v < e && f[v] === SPACE) v++
      const nameLen = c - i
      if (nameLen === 4 && f[i] === 100 && f[i + 1] === 97 && f[i + 2] === 116 && f[i + 3] === 97) {
        const value = f.subarray(v, e)
        dataLines++
        if (dataLines === 1) single = value
        else {
          parts ??= [single as Buffer]
          parts.push(value)
        }
      } else if (nameLen === 5 && f[i] === 101 && f[i + 1] === 118 && f[i + 2] === 101 && f[i + 3] === 110 && f[i + 4] === 116) {
        event = f.toString('utf8', v, e)
      }
      // id, retry and unknown fields carry nothing the gateway reads
    }
    if (e >= n) break
    i = e + 1
    if (f[e] === CR && i < n && f[i] === LF) i++
  }
  let data: Buffer | null = single
  if (parts !== null) {
    const joined: Buffer[] = []
    for (let k = 0; k < parts.length; k++) {
      if (k > 0) joined.push(NEWLINE)
      joined.push(parts[k])
    }
    data = Buffer.concat(joined)
  }
  return { event, data, dataLines }
}

const NEWLINE = Buffer.from('\n')

/** True when bytes [start, end) of `f` equal the ASCII string `s`. */
export function bytesEqual (f: Uint8Array, start: number, end: number, s: string): boolean {
  if (end - start !== s.length) return false
  for (let k = 0; k < s.length; k++) if (f[start + k] !== s.charCodeAt(k)) return false
  return true
}

/** A frame's `event:` name and joined `data:` lines as text (null for a comment-only frame). */
export function frameText (f: Buffer): { event: string | null; data: string } | null {
  const r = readFrame(f)
  if (r.event === null && r.dataLines === 0) return null
  return { event: r.event, data: r.data === null ? '' : r.data.toString('utf8') }
}
