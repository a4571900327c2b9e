// Authentication before the body is read: gateway key -> principal (the key's config entry).
//
// The presented key is hashed once (SHA-256) and compared against EVERY configured hash with
// timingSafeEqual, without an early exit, so the time taken does not depend on which key (if
// any) matched.
//
// A connection remembers the one key last verified on it. The next request on that connection
// presenting the same key (every agent client keeps its connection and its key) is matched
// against that remembered key alone, in constant time, with no hash: what it could learn by
// timing is whether it presented the key that was verified on its own connection. On a
// connection a proxy shares between callers, the comparison's time depends on the presented
// key's length only (matchesMasked), never on the remembered one. Keys are fixed for a
// worker's life (config is read at start), so a remembered match never outlives its key.
//
// The remembered key is never kept as a string: it is held masked (each UTF-16 unit XORed with
// a random pad drawn once per thread) in a typed array, so an idle worker's heap, and a heap
// snapshot an operator takes of it, hold no caller's key (test/behaviour/idle-worker-keeps-
// exemplars-not-keys.test.ts searches a real snapshot for it).
//
// Measured (docs/benchmarks.md, tenth session): the hash was ~30 µs of a ~300 µs way in at 32
// staggered streams, cache-cold between exchanges (~1 µs in a hot loop).

import { hash, randomFillSync, timingSafeEqual } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'
import type { KeyConfig } from '../src/config/schema.ts'
import { SluiceError } from '../src/errors.ts'

/** Where a connection keeps the key last verified on it. */
const kVerified = Symbol('sluice.verifiedKey')

/** What a connection may remember: the verified secret, masked (maskSecret), and its principal. */
interface Verified { readonly masked: Uint16Array; readonly key: KeyConfig }

/** The mask's pad, drawn once per thread; used cyclically for longer keys. */
const PAD_UNITS = 256
const PAD = randomFillSync(new Uint16Array(PAD_UNITS))

/** The connection of a request (its socket); anything with no socket remembers nothing. */
export type Connection = object & { [kVerified]?: Verified }

export class Authenticator {
  private readonly keys: ReadonlyArray<{ hash: Buffer; key: KeyConfig }>

  constructor (keys: readonly KeyConfig[]) {
    this.keys = keys.map((key) => ({ hash: Buffer.from(key.sha256, 'hex'), key }))
  }

  /**
   * The principal for these headers, or throws `unauthorized`. `conn`: the request's connection
   * (req.socket), which remembers the key verified on it; a refusal forgets it.
   */
  authenticate (headers: IncomingHttpHeaders, conn?: Connection | null): KeyConfig {
    const presented = presentedKey(headers)
    if (presented === null) throw new SluiceError('unauthorized', {}, 'no gateway key: send Authorization: Bearer <key> or x-api-key')
    const last = conn?.[kVerified]
    if (last !== undefined && matchesMasked(presented, last.masked)) return last.key
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
    if (found === null) {
      if (conn != null) delete conn[kVerified]
      throw new SluiceError('unauthorized')
    }
    if (conn != null) conn[kVerified] = { masked: maskSecret(presented), key: found }
    return found
  }
}

/** `secret`'s UTF-16 units, each XORed with this thread's pad: no string of it is kept. */
export function maskSecret (secret: string): Uint16Array {
  const out = new Uint16Array(secret.length)
  for (let i = 0; i < secret.length; i++) out[i] = secret.charCodeAt(i) ^ PAD[i % PAD_UNITS]
  return out
}

/**
 * Whether `presented` is the secret `masked` holds (maskSecret), in a time that depends on
 * `presented`'s length only: every unit of it is compared (a remembered key shorter than it is
 * read cyclically), the lengths' difference folded in, no early exit.
 */
export function matchesMasked (presented: string, masked: Uint16Array): boolean {
  const n = masked.length
  if (n === 0) return false
  let diff = presented.length ^ n
  for (let i = 0, j = 0; i < presented.length; i++) {
    diff |= (presented.charCodeAt(i) ^ PAD[i % PAD_UNITS]) ^ masked[j]
    j = j + 1 === n ? 0 : j + 1
  }
  return diff === 0
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
