// Where a body stops being JSON: a strict RFC 8259 / UTF-8 check that returns the byte offset
// of the first fault and a fixed reason, for the invalid_json refusal.
//
// Only the error path runs this (after JSON.parse has already refused), so it is written for
// clarity, not speed. It exists because V8's messages either carry a UTF-16 position or none
// at all, and some quote the body ("Unexpected token 'a', "abc…" is not valid JSON"); a
// refusal must never echo body content. Reasons are fixed strings, never body bytes.
//
// Agreement with JSON.parse over `new TextDecoder('utf-8', { fatal: true })` is what matters
// (test/unit/json/syntax.test.ts checks it on mutated bodies): same whitespace set, a leading
// BOM skipped (the decoder strips it), any `\uXXXX` accepted (lone surrogates included).

export interface SyntaxFault {
  /** Byte offset of the first byte that breaks the grammar (== length at an unexpected end). */
  readonly offset: number
  readonly reason: string
}

// what the scanner expects next
const VALUE = 0
const NAME = 1 // a member name, then ':'
const AFTER = 2 // ',' or the close of the innermost container, or the end of input

const OBJECT = 1
const ARRAY = 2

function isWs (c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09
}

function isDigit (c: number): boolean {
  return c >= 0x30 && c <= 0x39
}

function isHex (c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66)
}

/** The first grammar fault in `b` (assumed valid UTF-8), or null when `b` is one JSON text. */
export function findSyntaxError (b: Uint8Array): SyntaxFault | null {
  const n = b.length
  let i = n >= 3 && b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf ? 3 : 0
  const stack: number[] = [] // error path only; depth is already capped by checkJson
  let state = VALUE
  const fault = (offset: number, reason: string): SyntaxFault =>
    ({ offset, reason: offset >= n ? 'unexpected end of input' : reason })

  for (;;) {
    while (i < n && isWs(b[i])) i++
    if (state === VALUE) {
      if (i >= n) return fault(i, 'expected a value')
      const c = b[i]
      if (c === 0x7b || c === 0x5b) { // { [
        stack.push(c === 0x7b ? OBJECT : ARRAY)
        i++
        while (i < n && isWs(b[i])) i++
        if (b[i] === (c === 0x7b ? 0x7d : 0x5d)) { stack.pop(); i++; state = AFTER } else state = c === 0x7b ? NAME : VALUE
      } else if (c === 0x22) {
        const end = stringEnd(b, i)
        if (typeof end !== 'number') return end
        i = end
        state = AFTER
      } else if (c === 0x2d || isDigit(c)) {
        const end = numberEnd(b, i)
        if (typeof end !== 'number') return end
        i = end
        state = AFTER
      } else if (c === 0x74 || c === 0x66 || c === 0x6e) { // t f n
        const word = c === 0x74 ? 'true' : c === 0x66 ? 'false' : 'null'
        for (let k = 0; k < word.length; k++) {
          if (b[i + k] !== word.charCodeAt(k)) return fault(i + k, 'expected true, false or null')
        }
        i += word.length
        state = AFTER
      } else {
        return fault(i, 'expected a value')
      }
    } else if (state === NAME) {
      if (b[i] !== 0x22) return fault(i, 'expected a double-quoted member name')
      const end = stringEnd(b, i)
      if (typeof end !== 'number') return end
      i = end
      while (i < n && isWs(b[i])) i++
      if (b[i] !== 0x3a) return fault(i, "expected ':' after a member name")
      i++
      state = VALUE
    } else {
      if (stack.length === 0) return i < n ? fault(i, 'unexpected content after the JSON value') : null
      const inObject = stack[stack.length - 1] === OBJECT
      const c = b[i]
      if (c === 0x2c) {
        i++
        state = inObject ? NAME : VALUE
      } else if (c === (inObject ? 0x7d : 0x5d)) {
        stack.pop()
        i++
      } else {
        return fault(i, inObject ? "expected ',' or '}' after a member" : "expected ',' or ']' after an element")
      }
    }
  }
}

function stringEnd (b: Uint8Array, start: number): number | SyntaxFault {
  const n = b.length
  let i = start + 1
  while (i < n) {
    const c = b[i]
    if (c === 0x22) return i + 1
    if (c < 0x20) return { offset: i, reason: 'control character in a string' }
    if (c === 0x5c) {
      const e = b[i + 1]
      if (e === 0x75) { // \uXXXX
        for (let k = 2; k < 6; k++) {
          if (i + k >= n) return { offset: n, reason: 'unexpected end of input' }
          if (!isHex(b[i + k])) return { offset: i + k, reason: 'bad \\u escape in a string' }
        }
        i += 6
        continue
      }
      if (i + 1 >= n) break
      // " \ / b f n r t
      if (e !== 0x22 && e !== 0x5c && e !== 0x2f && e !== 0x62 && e !== 0x66 && e !== 0x6e && e !== 0x72 && e !== 0x74) {
        return { offset: i + 1, reason: 'bad escape in a string' }
      }
      i += 2
      continue
    }
    i++
  }
  return { offset: n, reason: 'unexpected end of input' }
}

function numberEnd (b: Uint8Array, start: number): number | SyntaxFault {
  const n = b.length
  let i = start
  const bad = (at: number): SyntaxFault => ({ offset: at, reason: at >= n ? 'unexpected end of input' : 'bad number' })
  if (b[i] === 0x2d) i++
  if (b[i] === 0x30) i++
  else if (isDigit(b[i])) while (isDigit(b[i])) i++
  else return bad(i)
  if (b[i] === 0x2e) {
    i++
    if (!isDigit(b[i])) return bad(i)
    while (isDigit(b[i])) i++
  }
  if (b[i] === 0x65 || b[i] === 0x45) {
    i++
    if (b[i] === 0x2b || b[i] === 0x2d) i++
    if (!isDigit(b[i])) return bad(i)
    while (isDigit(b[i])) i++
  }
  return i
}

/**
 * The offset of the first byte that is not part of well-formed UTF-8 (the rules of the WHATWG
 * decoder in fatal mode: no overlong forms, no surrogates, nothing above U+10FFFF), or -1.
 */
export function utf8ErrorAt (b: Uint8Array): number {
  const n = b.length
  let i = 0
  while (i < n) {
    const c = b[i]
    if (c < 0x80) { i++; continue }
    let need: number
    let lo = 0x80
    let hi = 0xbf
    if (c >= 0xc2 && c <= 0xdf) need = 1
    else if (c >= 0xe0 && c <= 0xef) {
      need = 2
      if (c === 0xe0) lo = 0xa0
      else if (c === 0xed) hi = 0x9f
    } else if (c >= 0xf0 && c <= 0xf4) {
      need = 3
      if (c === 0xf0) lo = 0x90
      else if (c === 0xf4) hi = 0x8f
    } else return i
    // the first continuation byte has the narrowed range, the others the plain one
    for (let k = 1; k <= need; k++) {
      if (i + k >= n) return i
      const d = b[i + k]
      if (k === 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xbf)) return i
    }
    i += need + 1
  }
  return -1
}

/** 1-based line and byte column of `offset`, for a human reading the refusal. */
export function lineColumn (b: Uint8Array, offset: number): { line: number; column: number } {
  let line = 1
  let lineStart = 0
  const end = Math.min(offset, b.length)
  for (let i = 0; i < end; i++) {
    if (b[i] === 0x0a) { line++; lineStart = i + 1 }
  }
  return { line, column: offset - lineStart + 1 }
}
