// Bounded JSON: count values and nesting in one pass over the raw UTF-8 bytes, and refuse
// the moment a cap is crossed, so a hostile body never reaches JSON.parse.
//
// Counting rule
//   nodes  = the number of JSON values: every object, array, string, number, true, false and
//            null counts 1, at any depth, the top-level value included. Object member NAMES
//            are not values and do not count. `{"a":[1,"x",{"b":null}]}` has 6 nodes:
//            {…}, […], 1, "x", {…}, null.
//   depth  = the largest number of containers open at once. A top-level scalar has depth 0,
//            `[]` and `{}` have depth 1, `{"a":[1,"x",{"b":null}]}` has depth 3.
//
// Refusal
//   The node that makes `nodes > maxNodes` throws json_too_many_nodes { limit }; the
//   container that makes `depth > maxDepth` throws json_too_deep { limit, depth } (depth is
//   then limit + 1). A body exactly at a cap passes. Nothing after the refusal is read, so
//   1e6 `[` costs maxDepth + 1 steps, and there is no recursion at any depth.
//
// What it is not
//   A validator: JSON.parse validates afterwards. The counts are exact for valid JSON and
//   for every valid PREFIX of a body: JSON.parse builds nothing past the first byte that
//   breaks the grammar (it throws there), so the caps bound what JSON.parse can build even
//   for malformed input. After such a byte the counts mean nothing, and that is fine.
//
// Strings
//   A string ends at the first `"` preceded by an even number of backslashes (`\\"` ends,
//   `\"` does not). Brackets, commas and colons inside strings are ignored. UTF-8 needs no
//   decoding: every byte of a multi-byte sequence is >= 0x80, never `"` or `\`. The closing
//   quote is found by a short JS loop, then TypedArray indexOf (a native scan) for long
//   strings: bodies are mostly string content, so this is where the time goes (quoteAt,
//   native-bench/parse.bench.ts).
//   The backslash count walks back only over bytes after the opening quote, so a body of
//   backslashes costs linear time.
//
// Allocation: none per value; one shared container-kind stack per thread, grown by doubling
// up to the deepest nesting seen (bounded by maxDepth + 1).

import { SluiceError } from '../errors.ts'

export interface JsonLimits {
  readonly maxDepth: number
  readonly maxNodes: number
}

export interface JsonShape {
  /** The largest number of containers open at once (0 for a top-level scalar). */
  readonly depth: number
  /** The number of JSON values (object member names excluded). */
  readonly nodes: number
}

const QUOTE = 0x22 // "
const BACKSLASH = 0x5c // \
const OPEN_OBJECT = 0x7b // {
const CLOSE_OBJECT = 0x7d // }
const OPEN_ARRAY = 0x5b // [
const CLOSE_ARRAY = 0x5d // ]
const COMMA = 0x2c // ,
const MINUS = 0x2d // -
const ZERO = 0x30
const NINE = 0x39
const LOWER_A = 0x61
const LOWER_Z = 0x7a

/** Bytes scanned in JS before handing a string to the native indexOf (see quoteAt). */
const SHORT_SCAN = 32

// Byte classes for the main loop: one table load and a switch (a jump table) instead of a
// chain of compares; worth 1.7x on indented bodies, where whitespace is most of the bytes.
const C_OTHER = 0 // every byte not set below (the zero fill): whitespace, `:`, invalid bytes
const C_QUOTE = 1
const C_OPEN = 2
const C_CLOSE = 3
const C_COMMA = 4
const C_NUMBER = 5
const C_WORD = 6
const CLASS = new Uint8Array(256)
CLASS[QUOTE] = C_QUOTE
CLASS[OPEN_OBJECT] = C_OPEN
CLASS[OPEN_ARRAY] = C_OPEN
CLASS[CLOSE_OBJECT] = C_CLOSE
CLASS[CLOSE_ARRAY] = C_CLOSE
CLASS[COMMA] = C_COMMA
CLASS[MINUS] = C_NUMBER
for (let c = ZERO; c <= NINE; c++) CLASS[c] = C_NUMBER
for (let c = LOWER_A; c <= LOWER_Z; c++) CLASS[c] = C_WORD

const KIND_ARRAY = 0
const KIND_OBJECT = 1

/** Container kinds by level (index depth - 1). Shared: checkJson is synchronous and not re-entrant. */
let kinds: Uint8Array = new Uint8Array(256)

/** Bytes that may continue a number: digits . e E + - (validity is JSON.parse's job). */
const NUMBER_BYTE = new Uint8Array(256)
for (const c of '0123456789.eE+-') NUMBER_BYTE[c.charCodeAt(0)] = 1

/**
 * Count the values and the nesting depth of the JSON text in `bytes`, refusing as soon as a
 * cap is crossed. Throws SluiceError json_too_deep { limit, depth } or json_too_many_nodes
 * { limit }; never throws for malformed JSON (JSON.parse reports that).
 */
export function checkJson (bytes: Uint8Array, limits: JsonLimits): JsonShape {
  const maxDepth = limits.maxDepth
  const maxNodes = limits.maxNodes
  const n = bytes.length
  let i = 0
  let depth = 0
  let deepest = 0
  let nodes = 0
  // Whether the innermost open container is an object, and whether the next string in it is
  // a member name (right after `{` or `,`) rather than a value (after `:`).
  let inObject = false
  let nameNext = false

  while (i < n) {
    const c = bytes[i]
    switch (CLASS[c]) {
      case C_QUOTE: {
        let end = i + 1
        for (;;) {
          end = quoteAt(bytes, end, n)
          if (end === n) break // unterminated: JSON.parse refuses it
          let k = end - 1
          while (bytes[k] === BACKSLASH) k--
          if (((end - 1 - k) & 1) === 0) break // an even run of backslashes: a real closing quote
          end++
        }
        if (nameNext) nameNext = false
        else if (++nodes > maxNodes) throw tooManyNodes(maxNodes)
        i = end + 1
        break
      }
      case C_OPEN:
        if (++nodes > maxNodes) throw tooManyNodes(maxNodes)
        if (++depth > maxDepth) throw new SluiceError('json_too_deep', { limit: maxDepth, depth })
        if (depth > deepest) {
          deepest = depth
          if (depth > kinds.length) kinds = grow(kinds)
        }
        inObject = c === OPEN_OBJECT
        nameNext = inObject
        kinds[depth - 1] = inObject ? KIND_OBJECT : KIND_ARRAY
        i++
        break
      case C_CLOSE:
        if (depth > 0) depth--
        inObject = depth > 0 && kinds[depth - 1] === KIND_OBJECT
        nameNext = false
        i++
        break
      case C_COMMA:
        nameNext = inObject
        i++
        break
      case C_NUMBER:
        if (++nodes > maxNodes) throw tooManyNodes(maxNodes)
        i++
        while (i < n && NUMBER_BYTE[bytes[i]] === 1) i++
        break
      case C_WORD: // true, false, null (any other word is invalid: JSON.parse says so)
        if (++nodes > maxNodes) throw tooManyNodes(maxNodes)
        i++
        while (i < n && CLASS[bytes[i]] === C_WORD) i++
        break
      default: // whitespace, `:`, or a byte JSON.parse will refuse
        i++
    }
  }
  return { depth: deepest, nodes }
}

/**
 * The index of the first `"` at or after `from`, or `n`. A short JS loop first: most strings
 * in a request are short (names, ids, roles), and a native indexOf call costs more than 32
 * byte compares; long strings (prompts, tool output) go to the native scan. Measured: 2-3x
 * faster than either alone on small-object bodies, 1.5x on prompt-heavy ones.
 */
function quoteAt (bytes: Uint8Array, from: number, n: number): number {
  const stop = from + SHORT_SCAN < n ? from + SHORT_SCAN : n
  while (from < stop) {
    if (bytes[from] === QUOTE) return from
    from++
  }
  if (from === n) return n
  const at = bytes.indexOf(QUOTE, from)
  return at === -1 ? n : at
}

function tooManyNodes (limit: number): SluiceError {
  return new SluiceError('json_too_many_nodes', { limit })
}

function grow (old: Uint8Array): Uint8Array {
  const next = new Uint8Array(old.length * 2)
  next.set(old)
  return next
}
