// Authentication before the body is read: gateway key -> principal (the key's config entry).
//
// The presented key is hashed once (SHA-256) and compared against EVERY configured hash with
// timingSafeEqual, without an early exit, so the time taken does not depend on which key (if
// any) matched.

import { hash, timingSafeEqual } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'
import type { KeyConfig } from '../src/config/schema.ts'
import { SluiceError } from '../src/errors.ts'

export class Authenticator {
  private readonly keys: ReadonlyArray<{ hash: Buffer; key: KeyConfig }>

  constructor (keys: readonly KeyConfig[]) {
    this.keys = keys.map((key) => ({ hash: Buffer.from(key.sha256, 'hex'), key }))
  }

  /** The principal for these headers, or throws `unauthorized`. */
  authenticate (headers: IncomingHttpHeaders): KeyConfig {
    const presented = presentedKey(headers)
    if (presented === null) throw new SluiceError('unauthorized', {}, 'no gateway key: send Authorization: Bearer <key> or x-api-key')
    // One-shot hash: the same digest without a Hash object per request (~0.4 us of ~1.2 measured).
    // Asked for as a 'binary' (latin1) string, one char per byte, and made a Buffer here, from Node's
    // pool: a 'buffer' answer is a fresh native backing store per call, measured ~10 us against
    // ~3.5 us in a thread calling it once per exchange (the string is the digest's bytes, no
    // less secret than the Buffer, and as short-lived).
    const digest = Buffer.from(hash('sha256', presented, 'binary'), 'latin1')
    let found: KeyConfig | null = null
    for (const k of this.keys) {
      if (timingSafeEqual(digest, k.hash) && found === null) found = k.key
    }
    if (found === null) throw new SluiceError('unauthorized')
    return found
  }
}

export function presentedKey (headers: IncomingHttpHeaders): string | null {
  const auth = headers.authorization
  if (typeof auth === 'string') {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(auth)
    if (m) return m[1]
  }
  const x = headers['x-api-key']
  if (typeof x === 'string' && x.length > 0) return x
  return null
}
