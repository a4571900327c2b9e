// Deterministic randomness for the simulated provider.
//
// Every choice the sim makes (ids, words, tool arguments) comes from the SHA-256 of the raw
// request body, so two identical requests produce byte-identical responses and a client can
// compare them. Two generators:
//   - `Rng` (sfc32, sequential): ids and tool arguments, drawn once per request in a fixed order.
//   - `mix(seed, j)` (stateless): the j-th text piece, so a stream can render any delta by index
//     without keeping an array of choices (a million-token stream costs no memory).

import { createHash } from 'node:crypto'

export interface Seed {
  /** Hex SHA-256 of the request body. */
  readonly hex: string
  readonly words: readonly [number, number, number, number]
}

export function seedFrom(body: Uint8Array): Seed {
  const digest = createHash('sha256').update(body).digest()
  return {
    hex: digest.toString('hex'),
    words: [digest.readUInt32LE(0), digest.readUInt32LE(4), digest.readUInt32LE(8), digest.readUInt32LE(12)],
  }
}

/** sfc32: small, fast, good enough for a simulator (not for anything secret). */
export class Rng {
  #a: number
  #b: number
  #c: number
  #d: number

  constructor(seed: Seed, stream = 0) {
    this.#a = seed.words[0] ^ stream
    this.#b = seed.words[1]
    this.#c = seed.words[2]
    this.#d = seed.words[3] | 1
    for (let i = 0; i < 12; i++) this.next() // warm up: the first outputs of sfc32 are weak
  }

  /** Uniform unsigned 32-bit integer. */
  next(): number {
    const t = (((this.#a + this.#b) | 0) + this.#d) | 0
    this.#d = (this.#d + 1) | 0
    this.#a = this.#b ^ (this.#b >>> 9)
    this.#b = (this.#c + (this.#c << 3)) | 0
    this.#c = (this.#c << 21) | (this.#c >>> 11)
    this.#c = (this.#c + t) | 0
    return t >>> 0
  }

  /** Uniform integer in [0, n). */
  below(n: number): number {
    return this.next() % n
  }

  /** Lower-case base-36 identifier of `len` characters, like the providers' own ids. */
  id(len = 24): string {
    let s = ''
    for (let i = 0; i < len; i++) s += ALPHABET[this.next() % 36]
    return s
  }
}

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyz'

/** Stateless 32-bit hash of (seed, j) — murmur3's finaliser over a seeded index. */
export function mix(seed: number, j: number): number {
  let h = (seed ^ Math.imul(j + 1, 0x9e3779b1)) >>> 0
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}
