// The one hash that scopes a client-chosen id (a session id, a run id) to a gateway key, for
// the shared tables keyed by it (session lanes, the run table, the event ring's sessions).
//
// SHA-256 over the key name's UTF-8 length (4 bytes, little endian), the key name, then the
// id. The length prefix keeps the two fields apart: with a plain separator, key "a\0b" with id
// "c" and key "a" with id "b\0c" would be the same input (ids cannot carry NUL today, but the
// tables must not depend on that). Every table key comes from `scopedKey64`.

// ## Layout
//
// A Key64 is the digest's first 8 bytes as two little-endian Int32 words (A, B); tables store
// it in two cells (E_SESSION_A/B, RUN_HASH_A/B, the ring's REC_SESSION_A/B).
//
// ## Invariants
//
//   H1  (0, 0) is never a key (it marks an empty run slot): a digest starting with 8 zero
//       bytes maps to (1, 0).
//   H2  Two different (key name, id) inputs hash differently except by a 64-bit collision.
//
// ## Policy
//
// One hash for every shared table: nothing else hashes session or run ids.
//
// ## Cancel safety, Memory ordering, Death
//
// Do not apply: a pure function of its arguments, touching no shared memory.

import { createHash } from 'node:crypto'

/** A 64-bit key as two Int32 halves; (0, 0) is never produced (tables use it for "empty"). */
export type Key64 = readonly [number, number]

/** The 64-bit table key of `id` under `keyName`: the hash's first 8 bytes, never (0, 0). */
export function scopedKey64 (keyName: string, id: string): Key64 {
  const d = scopedHash(keyName, id)
  const a = d.readInt32LE(0)
  const b = d.readInt32LE(4)
  return a === 0 && b === 0 ? [1, 0] : [a, b]
}

/** The full SHA-256 scoped hash (the tables use its first 8 bytes; the continuation store 16). */
export function scopedHash (keyName: string, id: string): Buffer {
  const name = Buffer.from(keyName, 'utf8')
  const len = Buffer.allocUnsafe(4)
  len.writeUInt32LE(name.length, 0)
  return createHash('sha256').update(len).update(name).update(id, 'utf8').digest()
}
