// Replace the value of a top-level member in the raw bytes, leaving every other byte as sent.
//
// Used for a model alias: the provider receives the client's exact bytes with only the value
// of `model` changed. Re-serialising the parsed object instead would also rewrite everything
// else: whitespace, escapes, number spellings (1.0 -> 1), integers above 2^53 (silently
// rounded), and duplicate members (collapsed). It would also cost a full JSON.stringify of a
// body of up to 16 MiB while the parsed graph is still alive.
//
// Precondition: `b` is one valid JSON text (JSON.parse accepted it), so this reads only the
// top level: member names, and values skipped by bracket counting with strings skipped
// whole. A name is compared by its decoded text (JSON.parse of the name when it contains an
// escape, so `"mod\u0065l"` is `model`). EVERY top-level member with that name is replaced:
// JSON.parse keeps the last duplicate, other parsers the first; after the splice all agree.

const QUOTE = 0x22
const BACKSLASH = 0x5c

const utf8 = new TextDecoder()
const encoder = new TextEncoder()

/**
 * `b` with the value of every top-level member called `name` replaced by `valueJson` (a JSON
 * text, e.g. JSON.stringify('gpt-5')), or null when `b` is not an object with such a member.
 */
export function replaceTopLevelMember (b: Uint8Array, name: string, valueJson: string): Uint8Array | null {
  const ranges = topLevelMemberValues(b, name)
  if (ranges.length === 0) return null
  const value = encoder.encode(valueJson)
  let size = b.length
  for (const [start, end] of ranges) size += value.length - (end - start)
  const out = new Uint8Array(size)
  let from = 0
  let to = 0
  for (const [start, end] of ranges) {
    out.set(b.subarray(from, start), to)
    to += start - from
    out.set(value, to)
    to += value.length
    from = end
  }
  out.set(b.subarray(from), to)
  return out
}

/** [start, end) byte ranges of the values of the top-level members called `name`, in order. */
export function topLevelMemberValues (b: Uint8Array, name: string): Array<[number, number]> {
  const n = b.length
  const ranges: Array<[number, number]> = []
  const plain = encoder.encode(JSON.stringify(name)) // the name as sent without escapes
  let i = skipWs(b, n >= 3 && b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf ? 3 : 0)
  if (b[i] !== 0x7b) return ranges
  i = skipWs(b, i + 1)
  while (i < n && b[i] === QUOTE) {
    const nameEnd = stringEnd(b, i)
    const matches = sameName(b, i, nameEnd, plain, name)
    i = skipWs(b, nameEnd) + 1 // past ':'
    const start = skipWs(b, i)
    const end = valueEnd(b, start)
    if (matches) ranges.push([start, end])
    i = skipWs(b, end)
    if (b[i] !== 0x2c) break // '}'
    i = skipWs(b, i + 1)
  }
  return ranges
}

function sameName (b: Uint8Array, start: number, end: number, plain: Uint8Array, name: string): boolean {
  let escaped = false
  for (let k = start; k < end; k++) if (b[k] === BACKSLASH) { escaped = true; break }
  if (escaped) return JSON.parse(utf8.decode(b.subarray(start, end))) === name
  if (end - start !== plain.length) return false
  for (let k = 0; k < plain.length; k++) if (b[start + k] !== plain[k]) return false
  return true
}

function skipWs (b: Uint8Array, i: number): number {
  while (i < b.length) {
    const c = b[i]
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break
    i++
  }
  return i
}

/** The index after the closing quote of the string opening at `start`. */
function stringEnd (b: Uint8Array, start: number): number {
  let i = start + 1
  for (;;) {
    i = b.indexOf(QUOTE, i)
    if (i === -1) return b.length
    let k = i - 1
    while (b[k] === BACKSLASH) k--
    if (((i - 1 - k) & 1) === 0) return i + 1
    i++
  }
}

/** The index after the value starting at `start` (valid JSON assumed). */
function valueEnd (b: Uint8Array, start: number): number {
  const n = b.length
  const c = b[start]
  if (c === QUOTE) return stringEnd(b, start)
  if (c === 0x7b || c === 0x5b) {
    let depth = 0
    let i = start
    while (i < n) {
      const d = b[i]
      if (d === QUOTE) { i = stringEnd(b, i); continue }
      if (d === 0x7b || d === 0x5b) depth++
      else if (d === 0x7d || d === 0x5d) {
        depth--
        if (depth === 0) return i + 1
      }
      i++
    }
    return n
  }
  // number, true, false, null: up to the next delimiter
  let i = start
  while (i < n) {
    const d = b[i]
    if (d === 0x2c || d === 0x7d || d === 0x5d || d === 0x20 || d === 0x0a || d === 0x0d || d === 0x09) break
    i++
  }
  return i
}
