// What a conversation-state entry holds, and how a chain becomes a request again (issue 13,
// DESIGN.md "Conversation state"). Pure functions over parsed JSON: they run in the parser
// pool (src/json/prepare.ts), which has the client's items parsed anyway.
//
// An entry's payload is the JSON text of one flat array of Responses input items: the items
// the client sent in that turn, then the output items of the response it got (what a
// Responses client would put in `input` to replay the turn). Root first, a chain's payloads
// concatenated are the whole history.
//
// Large payloads: every string inside an item longer than the store's blob threshold (in
// practice image data URLs, big tool outputs, pasted files) is replaced by a reference
//   {"$sluice_blob":"<sha256 hex of its UTF-8 bytes>"}
// and its bytes go to the store as a content-addressed blob (src/state/store.ts: stored once
// per key however many entries name it). A client object that itself has a `$sluice_blob` or
// `$sluice_lit` member is stored wrapped as {"$sluice_lit": <object>}, so a reference is
// never ambiguous: restoring unwraps it and never reads a blob for it.

import { createHash } from 'node:crypto'

export const BLOB_REF = '$sluice_blob'
const LITERAL = '$sluice_lit'

export interface BlobBytes { hash: string, bytes: Uint8Array }

const encoder = new TextEncoder()
const decoder = new TextDecoder('utf-8', { fatal: true })

/** A Responses `input` as an array of items (a string is one user message; absent is none). */
export function inputItems (input: unknown): unknown[] {
  if (typeof input === 'string') return [{ type: 'message', role: 'user', content: input }]
  if (Array.isArray(input)) return input
  return []
}

/**
 * `items` with every string longer than `threshold` bytes replaced by a blob reference, and
 * the blobs (each hash once). The input is not modified.
 */
export function splitBlobs (items: readonly unknown[], threshold: number): { items: unknown[], blobs: BlobBytes[] } {
  const blobs = new Map<string, Uint8Array>()
  const walk = (v: unknown): unknown => {
    // A string of more than `threshold` UTF-8 bytes has more than threshold / 3 characters.
    if (typeof v === 'string') {
      if (v.length * 3 <= threshold) return v
      const bytes = encoder.encode(v)
      if (bytes.byteLength <= threshold) return v
      const hash = createHash('sha256').update(bytes).digest('hex')
      if (!blobs.has(hash)) blobs.set(hash, bytes)
      return { [BLOB_REF]: hash }
    }
    if (Array.isArray(v)) return v.map(walk)
    if (v !== null && typeof v === 'object') {
      const out: Record<string, unknown> = {}
      for (const [k, x] of Object.entries(v)) out[k] = walk(x)
      return Object.hasOwn(out, BLOB_REF) || Object.hasOwn(out, LITERAL) ? { [LITERAL]: out } : out
    }
    return v
  }
  const out = items.map(walk)
  return { items: out, blobs: [...blobs].map(([hash, bytes]) => ({ hash, bytes })) }
}

/**
 * The stored items with their blob references replaced by the blobs' text (and literals
 * unwrapped). A reference to a blob that is not in `blobs` throws `missing` (a store that
 * keeps its invariant never gets there: a live entry's blobs are live, and pinned).
 */
export function restoreBlobs (items: unknown[], blobs: ReadonlyMap<string, Uint8Array>): unknown[] {
  const text = new Map<string, string>()
  const walk = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(walk)
    if (v === null || typeof v !== 'object') return v
    const o = v as Record<string, unknown>
    const keys = Object.keys(o)
    if (keys.length === 1 && keys[0] === BLOB_REF && typeof o[BLOB_REF] === 'string') {
      const hash = o[BLOB_REF]
      let s = text.get(hash)
      if (s === undefined) {
        const bytes = blobs.get(hash)
        if (bytes === undefined) throw new MissingBlob(hash)
        s = decoder.decode(bytes)
        text.set(hash, s)
      }
      return s
    }
    const inner = keys.length === 1 && keys[0] === LITERAL && o[LITERAL] !== null && typeof o[LITERAL] === 'object' ? o[LITERAL] as Record<string, unknown> : o
    const out: Record<string, unknown> = {}
    for (const [k, x] of Object.entries(inner)) out[k] = walk(x)
    return out
  }
  return items.map(walk)
}

export class MissingBlob extends Error {
  readonly hash: string
  constructor (hash: string) {
    super('a stored entry names a blob that is not there')
    this.hash = hash
  }
}

/**
 * The history a chain stands for: its payloads (each the JSON text of an array of items,
 * root first) as one JSON text `[[...],[...]]`, which historyItems() reads back. The
 * payloads are copied once into one buffer that the caller hands to the parser pool.
 */
export function joinPayloads (payloads: readonly Uint8Array[]): Uint8Array {
  let n = 2 + Math.max(0, payloads.length - 1)
  for (const p of payloads) n += p.byteLength
  const out = new Uint8Array(n)
  let at = 0
  out[at++] = 0x5b // [
  payloads.forEach((p, i) => {
    if (i > 0) out[at++] = 0x2c // ,
    out.set(p, at)
    at += p.byteLength
  })
  out[at++] = 0x5d // ]
  return out
}

/** The flat item list of a joinPayloads() text. Throws on anything else (a corrupt entry). */
export function historyItems (joined: unknown): unknown[] {
  if (!Array.isArray(joined)) throw new TypeError('history is not an array')
  const out: unknown[] = []
  for (const p of joined) {
    if (!Array.isArray(p)) throw new TypeError('a stored payload is not an array')
    for (const it of p) out.push(it)
  }
  return out
}

/**
 * One entry's payload: the turn's input items (their JSON array text) followed by its output
 * items (a JSON array text), as one JSON array text. No parse: both halves are arrays.
 */
export function entryPayload (turnInput: Uint8Array, output: Uint8Array): Uint8Array {
  const a = inner(turnInput)
  const b = inner(output)
  const out = new Uint8Array(2 + a.byteLength + b.byteLength + (a.byteLength > 0 && b.byteLength > 0 ? 1 : 0))
  let at = 0
  out[at++] = 0x5b
  out.set(a, at); at += a.byteLength
  if (a.byteLength > 0 && b.byteLength > 0) out[at++] = 0x2c
  out.set(b, at); at += b.byteLength
  out[at++] = 0x5d
  return out
}

/** The bytes between an array text's brackets (JSON.stringify output: no outer whitespace). */
function inner (arrayText: Uint8Array): Uint8Array {
  if (arrayText.byteLength < 2 || arrayText[0] !== 0x5b || arrayText[arrayText.byteLength - 1] !== 0x5d) throw new TypeError('not a JSON array text')
  return arrayText.subarray(1, arrayText.byteLength - 1)
}
