// The one hash that scopes a client-chosen id (a session id, a run id) to a gateway key, for
// the shared tables keyed by it (session lanes, the run table, the event ring's sessions).
//
// SHA-256 over the key name's UTF-8 length (4 bytes, little endian), the key name, then the
// id. The length prefix keeps the two fields apart: with a plain separator, key "a\0b" with id
// "c" and key "a" with id "b\0c" would be the same input (ids cannot carry NUL today, but the
// tables must not depend on that).

import { createHash } from 'node:crypto'

export function scopedHash (keyName: string, id: string): Buffer {
  const name = Buffer.from(keyName, 'utf8')
  const len = Buffer.allocUnsafe(4)
  len.writeUInt32LE(name.length, 0)
  return createHash('sha256').update(len).update(name).update(id, 'utf8').digest()
}
