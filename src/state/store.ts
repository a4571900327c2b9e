// The conversation-state store (DESIGN.md "Conversation state", issue 13): what a translated
// Responses route needs to expand `previous_response_id` for a stateless provider, in one
// SharedArrayBuffer shared by every HTTP worker. A chain started on one worker continues on
// any other; a worker's death loses nothing (the bytes are in the buffer, not in its heap).
// The primary creates it and, like the event ring's, only reads its figures and repairs it.
//
// Each entry holds only what its turn added (opaque bytes the caller serialises: that turn's
// input items and its output items) and names its parent, so a chain of N turns costs the sum
// of its turns, not O(N^2). Payloads over a threshold (images, big tool outputs that a client
// resends every turn) are content-addressed blobs stored once per key and referenced by hash.
//
// ## Layout
//
//   Int32 header:  HEADER_FIELDS cells (dimensions, ring head/tail, figures, totals as pairs)
//   buckets:       BUCKETS x i32      first index slot of each hash bucket, -1 = none
//   index slots:   SLOTS x { KIND, HASH x4, AT, NEXT, REFS }   one per live record
//   tombstones:    TOMBS x { HASH x4, REASON }                 a ring, oldest overwritten
//   data:          CAPACITY bytes, a ring of records (never wrapping, 4-byte aligned):
//     { SIZE, KIND, SLOT, TIME lo, TIME hi, LEN, HASH x4,
//       entry: PARENT x4, HAS_PARENT, NBLOBS, NBLOBS x (blob HASH x4), payload
//       blob:  HLEN, ROWS x pin count, the caller's hash string, bytes }
//   A record that does not fit before the end leaves a WRAP marker (or < 4 bytes) and goes
//   at offset 0, as in the event ring. The free gap never closes completely (one word is kept
//   free), so HEAD = TAIL means empty: a repair can walk the ring by position alone.
//
// Hashes are the first 16 bytes of scopedHash(keyName, id) (src/ledger/scoped-hash.ts), and of
// scopedHash(keyName, '\0blob\0' + hash) for blobs: a key never reads, nor references by hash,
// another key's entries or blobs. Lookups compare the kind too.
//
// ## Invariants (outside the lock)
//
//   S1  every live record (KIND entry or blob) between HEAD and TAIL has exactly one index
//       slot, and every used slot points at its record (AT); DEAD records have none.
//   S2  ENTRY_BYTES = sum of live entries' LEN; BLOB_BYTES = sum of live blobs' LEN
//       <= BLOB_TOTAL_CAP; USED (record bytes incl. headers and dead records) <= CAPACITY.
//   S3  a blob's REFS = the live entries naming it; a blob with REFS = 0 and no pins is
//       removed at once (so BLOB_BYTES is what is actually needed).
//   S4  PINS = sum of every blob's per-row pin counts; PINNED_BYTES = sum of LEN of blobs
//       with at least one pin.
//
// ## Policy
//
// put() refuses at once an entry larger than ENTRY_CAP or a blob larger than BLOB_CAP
// (`entry_too_large`: the caller still delivers its response, the id is tombstoned
// 'not_continuable'). Otherwise it makes room oldest first: the record at the head is
// removed (an entry: tombstoned 'cap'; a dead or unneeded record: dropped), except a blob
// still referenced or pinned, which is moved to the tail (copied whole) so eviction continues
// past it. There is no escape hatch: eviction runs until the new records fit, whatever the
// entry count. When only needed blobs remain (a full pass moved every record without
// freeing one, or a blob at the head finds no room to move), the write is refused
// (`no_room`) and its id tombstoned 'not_continuable'. Expiry (TTL) runs first on every put
// and chain: expired entries are removed wherever they are (entries are in time order, so
// the walk stops at the first live one) and tombstoned 'ttl'.
//
// chain() returns a whole chain or an honest error: the requested id unknown (never stored,
// or another key's) is `continuation_not_found`; the id or any ancestor evicted, expired or
// refused is `continuation_expired`, naming the requested id. It pins the chain's blobs for
// the calling row until release(), so a put() of the next turn may name them by hash alone
// and no eviction removes them meanwhile.
//
// ## Fairness
//
// One lock (src/ledger/token-lock.ts, token = row + 1), short critical sections, no queue,
// spinning then parking in 1 ms Atomics.wait slices, like the event ring. A put copies its
// own bytes and at most the blobs it moves; a chain copies its payloads out.
//
// ## Cancel safety
//
// Nothing here awaits: every call runs to completion inside one critical section. A caller
// that abandons a chain must still call release() (the chain result holds the pins); a
// second release() is a no-op. A put either commits its entry or rolls back the references
// it took.
//
// ## Memory ordering
//
// Every cell is read and written with plain Int32 accesses inside the lock, whose seq-cst
// compareExchange acquire/release orders them; the lock-free snapshot() (metrics) reads
// aligned Int32 cells with Atomics.load and may mix two moments — metrics accept that.
//
// ## Death
//
// A record is written whole before it is committed by advancing TAIL; a move copies the
// record, commits the copy, repoints the slot and only then marks the old copy DEAD and
// advances HEAD. So the records between HEAD and TAIL are always whole, whatever instruction
// a worker dies at: they are the truth. Everything else (the index, refs, figures) is
// derived. The primary (`StoreRepair.reclaimRow`, from the supervisor's exit handler) steals
// the lock from a dead holder and rebuilds every derived cell from the records (a duplicate
// left by an interrupted move keeps its later copy); then — dead holder or not — it zeroes
// the dead row's pin counts once (a second reclaim finds nothing), removing blobs nobody
// needs any more. The primary never parks: if a live thread holds the lock it reports
// 'busy' and the caller retries on a later turn.

import { addLocked as bump, read as readTotal, readLocked as readPair, writeLocked as writePair } from '../ledger/pair64.ts'
import { scopedHash } from '../ledger/scoped-hash.ts'
import { TokenLock } from '../ledger/token-lock.ts'

// ---- header (Int32 cells) ----
const H_MAGIC = 0
const H_LOCK = 1           // TokenLock cells (src/ledger/token-lock.ts): the word, then the parked count
const H_ROWS = 3
const H_SLOTS = 4
const H_BUCKETS = 5
const H_TOMBS = 6
const H_CAPACITY = 7
const H_HEAD = 8
const H_TAIL = 9
const H_RECORDS = 10
const H_FREE_SLOT = 11
const H_TOMB_NEXT = 12
const H_TOMB_COUNT = 13
const H_ENTRIES = 14
const H_ENTRY_BYTES = 15
const H_BLOBS = 16
const H_BLOB_BYTES = 17
const H_PINNED_BYTES = 18
const H_PINS = 19
const H_ENTRY_CAP = 20
const H_BLOB_CAP = 21
const H_BLOB_TOTAL_CAP = 22
const H_TTL = 23            // (lo, hi) ms
const H_USED = 25
const H_BLOB_THRESHOLD = 26
const T_EVICT_CAP = 27      // totals, (lo, hi) pairs
const T_EVICT_TTL = 29
const T_REFUSED_LARGE = 31
const T_REFUSED_ROOM = 33
const T_MOVED = 35
const T_PUTS = 37
const T_REPAIRS = 39
const T_PINS_RECLAIMED = 41
const HEADER_FIELDS = 43

// ---- index slot ----
const S_KIND = 0
const S_HASH = 1            // 4 cells
const S_AT = 5
const S_NEXT = 6
const S_REFS = 7
const SLOT_FIELDS = 8

// ---- tombstone ----
const TB_HASH = 0           // 4 cells
const TB_REASON = 4
const TOMB_FIELDS = 5

// ---- record (Int32 words from the record's offset) ----
const R_SIZE = 0
const R_KIND = 1
const R_SLOT = 2
const R_TIME = 3            // (lo, hi)
const R_LEN = 5
const R_HASH = 6            // 4 words
const R_BASE = 10
// entry
const RE_PARENT = 10        // 4 words
const RE_HAS_PARENT = 14
const RE_NBLOBS = 15
const RE_BLOBS = 16
// blob
const RB_HLEN = 10
const RB_PINS = 11          // ROWS words

const KIND_FREE = 0
const KIND_ENTRY = 1
const KIND_BLOB = 2
const KIND_DEAD = 3

const REASON_CAP = 1
const REASON_TTL = 2
const REASON_NOT_CONTINUABLE = 3
const REASONS = ['', 'evicted', 'expired', 'not_continuable'] as const

const MAGIC = 0x51c1c0de
const WRAP = -1
const MAX_HASH_CHARS = 256

/** The smallest store createStoreBuffer accepts. */
export const MIN_STORE_BYTES = 64 * 1024
/** The largest: byte figures are Int32 cells. */
export const MAX_STORE_BYTES = 1024 * 1024 * 1024

export interface StoreOptions {
  /** The whole SharedArrayBuffer's size: header, index, tombstones and data (the cap). */
  bytes: number
  /** Ledger rows (threads) that may pin blobs: pin counts are kept per row. */
  rows: number
  entryBytes: number
  blobBytes: number
  blobTotalBytes: number
  blobThreshold: number
  ttlMs: number
  /** Index slots (live records at most); default bytes / 4096, at least 64. */
  slots?: number
  /** Tombstones kept; default = slots. */
  tombstones?: number
}

export type PutResult = { ok: true } | { ok: false, reason: 'entry_too_large' | 'no_room' | 'blob_missing' }

export type ChainResult =
  | { ok: true, payloads: Uint8Array[], blobs: string[], release: () => void }
  | { ok: false, code: 'continuation_expired' | 'continuation_not_found', id: string, reason?: string }

export interface StoreSnapshot {
  capacity: number
  bufferBytes: number
  used: number
  records: number
  entries: number
  entryBytes: number
  blobs: number
  blobBytes: number
  blobBytesPinned: number
  pins: number
  tombstones: number
  slots: number
  evictedCap: number
  evictedTtl: number
  refusedTooLarge: number
  refusedNoRoom: number
  moved: number
  puts: number
  repairs: number
  pinsReclaimed: number
}

interface Dims { rows: number; slots: number; buckets: number; tombs: number; capacity: number; bucketsAt: number; slotsAt: number; tombsAt: number; dataAt: number }

function dims (bytes: number, rows: number, slots: number, tombs: number): Dims {
  let buckets = 1
  while (buckets < slots) buckets <<= 1
  const bucketsAt = HEADER_FIELDS * 4
  const slotsAt = bucketsAt + buckets * 4
  const tombsAt = slotsAt + slots * SLOT_FIELDS * 4
  const dataAt = tombsAt + tombs * TOMB_FIELDS * 4
  const capacity = (bytes - dataAt) & ~3
  return { rows, slots, buckets, tombs, capacity, bucketsAt, slotsAt, tombsAt, dataAt }
}

/** Primary: allocates and formats the store. `bytes` is the whole buffer (the hard cap). */
export function createStoreBuffer (o: StoreOptions): SharedArrayBuffer {
  if (!Number.isInteger(o.bytes) || o.bytes < MIN_STORE_BYTES || o.bytes > MAX_STORE_BYTES || o.bytes % 4 !== 0) throw new RangeError(`store size must be a multiple of 4, ${MIN_STORE_BYTES}..${MAX_STORE_BYTES} bytes`)
  if (!Number.isInteger(o.rows) || o.rows < 1) throw new RangeError('store rows must be a positive integer')
  const slots = o.slots ?? Math.max(64, Math.floor(o.bytes / 4096))
  const tombs = o.tombstones ?? slots
  const d = dims(o.bytes, o.rows, slots, tombs)
  if (d.capacity < o.bytes / 2) throw new RangeError('store index and tombstones take more than half the buffer: fewer slots')
  const quarter = Math.floor(d.capacity / 4)
  for (const [name, v] of [['entryBytes', o.entryBytes], ['blobBytes', o.blobBytes]] as const) {
    if (!Number.isInteger(v) || v < 1 || v > quarter) throw new RangeError(`store ${name} must be 1..${quarter} (a quarter of the data region)`)
  }
  if (!Number.isInteger(o.blobTotalBytes) || o.blobTotalBytes < 0) throw new RangeError('store blobTotalBytes must be a non-negative integer')
  if (!Number.isInteger(o.ttlMs) || o.ttlMs < 1) throw new RangeError('store ttlMs must be a positive integer')
  const sab = new SharedArrayBuffer(o.bytes)
  const h = new Int32Array(sab, 0, HEADER_FIELDS)
  h[H_ROWS] = o.rows
  h[H_SLOTS] = slots
  h[H_BUCKETS] = d.buckets
  h[H_TOMBS] = tombs
  h[H_CAPACITY] = d.capacity
  h[H_ENTRY_CAP] = o.entryBytes
  h[H_BLOB_CAP] = o.blobBytes
  h[H_BLOB_TOTAL_CAP] = Math.min(o.blobTotalBytes, d.capacity)
  h[H_BLOB_THRESHOLD] = o.blobThreshold
  writePair(h, H_TTL, o.ttlMs)
  new Int32Array(sab, d.bucketsAt, d.buckets).fill(-1)
  const s = new Int32Array(sab, d.slotsAt, slots * SLOT_FIELDS)
  for (let i = 0; i < slots; i++) s[i * SLOT_FIELDS + S_NEXT] = i + 1 < slots ? i + 1 : -1
  h[H_FREE_SLOT] = 0
  Atomics.store(h, H_MAGIC, MAGIC)
  return sab
}

/** Only the first 16 bytes of the scoped SHA-256 are kept: 128 bits, as four Int32 words. */
function key16 (keyName: string, id: string, blob: boolean): Int32Array {
  const d = scopedHash(keyName, blob ? '\0blob\0' + id : id)
  return new Int32Array(d.buffer.slice(d.byteOffset, d.byteOffset + 16))
}

class StoreCore {
  readonly sab: SharedArrayBuffer
  readonly h: Int32Array
  readonly d: Dims
  readonly buckets: Int32Array
  readonly s: Int32Array
  readonly tb: Int32Array
  readonly d32: Int32Array
  readonly d8: Uint8Array
  readonly token: number
  /** The store's lock (the same token lock as the ledger's and the event ring's). */
  readonly tl: TokenLock

  constructor (sab: SharedArrayBuffer, row: number) {
    this.sab = sab
    this.h = new Int32Array(sab, 0, HEADER_FIELDS)
    if (Atomics.load(this.h, H_MAGIC) !== MAGIC) throw new Error('not a sluice conversation store')
    const h = this.h
    this.d = dims(sab.byteLength, h[H_ROWS], h[H_SLOTS], h[H_TOMBS])
    this.buckets = new Int32Array(sab, this.d.bucketsAt, this.d.buckets)
    this.s = new Int32Array(sab, this.d.slotsAt, this.d.slots * SLOT_FIELDS)
    this.tb = new Int32Array(sab, this.d.tombsAt, this.d.tombs * TOMB_FIELDS)
    this.d32 = new Int32Array(sab, this.d.dataAt, this.d.capacity / 4)
    this.d8 = new Uint8Array(sab, this.d.dataAt, this.d.capacity)
    if (!Number.isInteger(row) || row < 0 || row >= this.d.rows) throw new RangeError(`store row ${row} out of range (rows: ${this.d.rows})`)
    this.token = row + 1
    this.tl = new TokenLock(this.h, H_LOCK, this.token, 'conversation store')
  }

  snapshot (): StoreSnapshot {
    const h = this.h
    const a = (i: number): number => Atomics.load(h, i)
    return {
      capacity: this.d.capacity,
      bufferBytes: this.sab.byteLength,
      used: a(H_USED),
      records: a(H_RECORDS),
      entries: a(H_ENTRIES),
      entryBytes: a(H_ENTRY_BYTES),
      blobs: a(H_BLOBS),
      blobBytes: a(H_BLOB_BYTES),
      blobBytesPinned: a(H_PINNED_BYTES),
      pins: a(H_PINS),
      tombstones: a(H_TOMB_COUNT),
      slots: this.d.slots,
      evictedCap: readTotal(h, T_EVICT_CAP),
      evictedTtl: readTotal(h, T_EVICT_TTL),
      refusedTooLarge: readTotal(h, T_REFUSED_LARGE),
      refusedNoRoom: readTotal(h, T_REFUSED_ROOM),
      moved: readTotal(h, T_MOVED),
      puts: readTotal(h, T_PUTS),
      repairs: readTotal(h, T_REPAIRS),
      pinsReclaimed: readTotal(h, T_PINS_RECLAIMED),
    }
  }

  // ---- the lock ----

  lock (): void { this.tl.lock() }

  unlock (): void { this.tl.unlock() }

  // ---- index (inside the lock) ----

  find (kind: number, k: Int32Array): number {
    const { s } = this
    let i = this.buckets[k[0] & (this.d.buckets - 1)]
    while (i >= 0) {
      const b = i * SLOT_FIELDS
      if (s[b + S_KIND] === kind && s[b + S_HASH] === k[0] && s[b + S_HASH + 1] === k[1] && s[b + S_HASH + 2] === k[2] && s[b + S_HASH + 3] === k[3]) return i
      i = s[b + S_NEXT]
    }
    return -1
  }

  /** Takes a free slot for a record at `at`; the caller made sure one is free. */
  index (kind: number, k: ArrayLike<number>, at: number): number {
    const { s, h } = this
    const i = h[H_FREE_SLOT]
    const b = i * SLOT_FIELDS
    h[H_FREE_SLOT] = s[b + S_NEXT]
    s[b + S_KIND] = kind
    for (let j = 0; j < 4; j++) s[b + S_HASH + j] = k[j]
    s[b + S_AT] = at
    s[b + S_REFS] = 0
    const bucket = k[0] & (this.d.buckets - 1)
    s[b + S_NEXT] = this.buckets[bucket]
    this.buckets[bucket] = i
    return i
  }

  unindex (i: number): void {
    const { s, h } = this
    const b = i * SLOT_FIELDS
    const bucket = s[b + S_HASH] & (this.d.buckets - 1)
    let prev = -1
    let j = this.buckets[bucket]
    while (j >= 0 && j !== i) { prev = j; j = s[j * SLOT_FIELDS + S_NEXT] }
    if (j === i) {
      if (prev < 0) this.buckets[bucket] = s[b + S_NEXT]
      else s[prev * SLOT_FIELDS + S_NEXT] = s[b + S_NEXT]
    }
    s[b + S_KIND] = KIND_FREE
    s[b + S_NEXT] = h[H_FREE_SLOT]
    h[H_FREE_SLOT] = i
  }

  tombstone (k: ArrayLike<number>, reason: number): void {
    const { h, tb } = this
    const n = h[H_TOMB_NEXT]
    const b = n * TOMB_FIELDS
    for (let j = 0; j < 4; j++) tb[b + TB_HASH + j] = k[j]
    tb[b + TB_REASON] = reason
    h[H_TOMB_NEXT] = (n + 1) % this.d.tombs
    if (h[H_TOMB_COUNT] < this.d.tombs) h[H_TOMB_COUNT]++
  }

  /** The newest tombstone's reason for `k`, or 0. */
  tombReason (k: Int32Array): number {
    const { h, tb } = this
    const tombs = this.d.tombs
    for (let c = 0, n = h[H_TOMB_NEXT]; c < h[H_TOMB_COUNT]; c++) {
      n = (n - 1 + tombs) % tombs
      const b = n * TOMB_FIELDS
      if (tb[b] === k[0] && tb[b + 1] === k[1] && tb[b + 2] === k[2] && tb[b + 3] === k[3]) return tb[b + TB_REASON]
    }
    return 0
  }

  // ---- records (inside the lock) ----

  blobPins (at: number): number {
    const w = at >> 2
    let n = 0
    for (let r = 0; r < this.d.rows; r++) n += this.d32[w + RB_PINS + r]
    return n
  }

  /**
   * Removes the live record at `at` from the index and the figures and marks it DEAD; an
   * entry's blob references are dropped (blobs nobody needs go too). reason 0: no tombstone.
   */
  kill (at: number, reason: number): void {
    const { d32, h } = this
    const w = at >> 2
    const kind = d32[w + R_KIND]
    if (kind !== KIND_ENTRY && kind !== KIND_BLOB) return
    const hash = d32.subarray(w + R_HASH, w + R_HASH + 4)
    this.unindex(d32[w + R_SLOT])
    d32[w + R_KIND] = KIND_DEAD
    if (kind === KIND_ENTRY) {
      h[H_ENTRIES]--
      h[H_ENTRY_BYTES] -= d32[w + R_LEN]
      if (reason !== 0) this.tombstone(hash, reason)
      if (reason === REASON_CAP) bump(h, T_EVICT_CAP)
      else if (reason === REASON_TTL) bump(h, T_EVICT_TTL)
      const n = d32[w + RE_NBLOBS]
      for (let j = 0; j < n; j++) {
        const bi = this.find(KIND_BLOB, d32.subarray(w + RE_BLOBS + j * 4, w + RE_BLOBS + j * 4 + 4))
        if (bi >= 0) this.unref(bi)
      }
    } else {
      // Callers never kill a pinned blob.
      h[H_BLOBS]--
      h[H_BLOB_BYTES] -= d32[w + R_LEN]
    }
  }

  unref (bi: number): void {
    const b = bi * SLOT_FIELDS
    const s = this.s
    if (s[b + S_REFS] > 0) s[b + S_REFS]--
    if (s[b + S_REFS] === 0 && this.blobPins(s[b + S_AT]) === 0) this.kill(s[b + S_AT], 0)
  }

  /** Where a record of `size` bytes fits without evicting (one word always stays free), or -1. */
  place (size: number): number {
    const { h, d32 } = this
    const cap = this.d.capacity
    const head = h[H_HEAD]
    const tail = h[H_TAIL]
    if (head === tail) {
      // Empty: restart at 0.
      if (size + 4 > cap) return -1
      h[H_HEAD] = 0
      h[H_TAIL] = 0
      return 0
    }
    if (tail > head) {
      if (cap - tail >= size) return tail
      if (head > size) { // strictly: the gap [0, head) keeps a word free
        if (cap - tail >= 4) d32[tail >> 2] = WRAP
        return 0
      }
      return -1
    }
    return head - tail > size ? tail : -1
  }

  /** Commits a record written at `at` of `size` bytes: it becomes part of the ring. */
  commit (at: number, size: number): void {
    const h = this.h
    h[H_TAIL] = at + size
    h[H_RECORDS]++
    h[H_USED] += size
  }

  normalizeHead (): void {
    const { h, d32 } = this
    let head = h[H_HEAD]
    if (head !== h[H_TAIL] && (head + 4 > this.d.capacity || d32[head >> 2] === WRAP)) head = 0
    h[H_HEAD] = head
  }

  /** Advances HEAD past the DEAD record at the head. */
  dropHead (): void {
    const { h, d32 } = this
    this.normalizeHead()
    const size = d32[h[H_HEAD] >> 2]
    h[H_HEAD] += size
    h[H_RECORDS]--
    h[H_USED] -= size
    if (h[H_RECORDS] === 0) { h[H_HEAD] = 0; h[H_TAIL] = 0 } else this.normalizeHead()
  }

  /**
   * One eviction step at the head. Returns 'freed' when a record left the ring, 'moved' when
   * a needed blob went to the tail, 'stuck' when nothing can be done (empty, or a needed blob
   * with no room to move).
   */
  evictStep (): 'freed' | 'moved' | 'stuck' {
    const { h, d32, d8 } = this
    if (h[H_RECORDS] === 0) return 'stuck'
    this.normalizeHead()
    const at = h[H_HEAD]
    const w = at >> 2
    const kind = d32[w + R_KIND]
    if (kind === KIND_ENTRY) this.kill(at, REASON_CAP)
    else if (kind === KIND_BLOB) {
      const slot = d32[w + R_SLOT]
      if (this.s[slot * SLOT_FIELDS + S_REFS] === 0 && this.blobPins(at) === 0) this.kill(at, 0)
      else {
        const size = d32[w + R_SIZE]
        let to = this.place(size)
        if (to >= 0) {
          d8.copyWithin(to, at, at + size)
          this.commit(to, size)
        } else {
          to = this.hole(at, size)
          // Evicting behind it may have dropped the blob's last reference: then it is gone.
          if (d32[w + R_KIND] === KIND_DEAD) { this.dropHead(); return 'freed' }
          if (to < 0) return 'stuck'
          this.fillHole(to, at, size)
        }
        this.s[slot * SLOT_FIELDS + S_AT] = to
        d32[w + R_KIND] = KIND_DEAD
        this.dropHead()
        bump(h, T_MOVED)
        return 'moved'
      }
    }
    this.dropHead()
    return 'freed'
  }

  /**
   * The ring is too full to move the needed blob at the head (`at`, `size` bytes) to the
   * tail: evict the records right behind it (oldest first, stepping over other needed blobs)
   * until they leave one DEAD run it fits in. Returns that run's offset, or -1 when the walk
   * meets the tail first (only needed blobs, or runs too short between them).
   */
  hole (at: number, size: number): number {
    const { h, d32 } = this
    const cap = this.d.capacity
    const ends = (y: number): boolean => y === h[H_TAIL] || y + 4 > cap || d32[y >> 2] === WRAP
    const needed = (y: number): boolean => d32[(y >> 2) + R_KIND] === KIND_BLOB &&
      (this.s[d32[(y >> 2) + R_SLOT] * SLOT_FIELDS + S_REFS] > 0 || this.blobPins(y) > 0)
    let x = at + d32[at >> 2]
    for (;;) {
      if (x === h[H_TAIL]) return -1
      if (ends(x)) { x = 0; continue } // the wrap: runs never cross it, the search does
      if (needed(x)) { x += d32[x >> 2]; continue }
      this.kill(x, REASON_CAP)
      // Grow the DEAD run at x over what follows until the blob fits in it.
      for (;;) {
        const d = d32[x >> 2]
        if (d === size || d >= size + 8) return x
        const y = x + d
        if (ends(y) || needed(y)) break
        this.kill(y, REASON_CAP)
        d32[x >> 2] = d + d32[y >> 2] // both DEAD: one record now
        h[H_RECORDS]--
      }
      x += d32[x >> 2]
    }
  }

  /**
   * Copies the blob record at `from` into the DEAD run at `to` (after it in the ring, so no
   * overlap). Death-safe order: the filler after it first, then the body, then SIZE (the run
   * parses as two DEAD records), and KIND last (the copy is live).
   */
  fillHole (to: number, from: number, size: number): void {
    const { h, d32, d8 } = this
    const w = to >> 2
    const d = d32[w]
    if (d > size) {
      d32[w + (size >> 2)] = d - size
      d32[w + (size >> 2) + R_KIND] = KIND_DEAD
      h[H_RECORDS]++
    }
    d8.copyWithin(to + 8, from + 8, from + size)
    d32[w + R_SIZE] = size
    d32[w + R_KIND] = KIND_BLOB
  }

  /** Evicts until `fits()` holds; false when only needed blobs remain. */
  evictUntil (fits: () => boolean): boolean {
    let stuck = 0
    while (!fits()) {
      const r = this.evictStep()
      if (r === 'stuck') return false
      if (r === 'freed') stuck = 0
      else if (++stuck > this.h[H_RECORDS]) return false
    }
    return true
  }

  /** Room for a record of `size` bytes and a free slot, evicting oldest first; -1 = no room. */
  room (size: number): number {
    let at = -1
    const ok = this.evictUntil(() => this.h[H_FREE_SLOT] >= 0 && (at = this.place(size)) >= 0)
    return ok ? at : -1
  }

  /** Removes expired entries (tombstoned 'ttl') and drops dead records at the head. */
  expire (now: number): void {
    const { h, d32 } = this
    const ttl = readPair(h, H_TTL)
    let at = h[H_HEAD]
    for (let left = h[H_RECORDS]; left > 0; left--) {
      if (at + 4 > this.d.capacity || d32[at >> 2] === WRAP) at = 0
      const w = at >> 2
      const kind = d32[w + R_KIND]
      if (kind === KIND_ENTRY) {
        if (readPair(d32, w + R_TIME) + ttl > now) break
        this.kill(at, REASON_TTL)
      }
      at += d32[w + R_SIZE]
    }
    this.dropDeadHeads()
  }

  dropDeadHeads (): void {
    const { h, d32 } = this
    while (h[H_RECORDS] > 0) {
      this.normalizeHead()
      if (d32[(h[H_HEAD] >> 2) + R_KIND] !== KIND_DEAD) break
      this.dropHead()
    }
  }
}

export class ConversationStore {
  readonly entryCap: number
  readonly blobCap: number
  /** Payloads above this many bytes belong in blobs (the caller splits them out). */
  readonly blobThreshold: number
  private readonly c: StoreCore
  private readonly row: number
  /** Injected clock (tests); Date.now by default. */
  private readonly now: () => number

  constructor (sab: SharedArrayBuffer, row: number, now: () => number = Date.now) {
    this.c = new StoreCore(sab, row)
    this.row = row
    this.now = now
    this.entryCap = this.c.h[H_ENTRY_CAP]
    this.blobCap = this.c.h[H_BLOB_CAP]
    this.blobThreshold = this.c.h[H_BLOB_THRESHOLD]
  }

  snapshot (): StoreSnapshot { return this.c.snapshot() }

  /**
   * Stores one turn. `blobs` lists every blob the payload references, by the caller's hash;
   * `bytes` may be left out for a blob this key already stored (one pinned by a chain() the
   * caller holds is guaranteed to be there).
   */
  put (p: { keyName: string, id: string, parentId: string | null, payload: Uint8Array, blobs?: ReadonlyArray<{ hash: string, bytes?: Uint8Array }> }): PutResult {
    const blobs = p.blobs ?? []
    const k = key16(p.keyName, p.id, false)
    const parent = p.parentId === null ? null : key16(p.keyName, p.parentId, false)
    const keys = blobs.map((b) => {
      if (typeof b.hash !== 'string' || b.hash.length === 0 || b.hash.length > MAX_HASH_CHARS) throw new RangeError('blob hash must be a string of 1..256 characters')
      return key16(p.keyName, b.hash, true)
    })
    const hashBytes = blobs.map((b) => Buffer.from(b.hash, 'utf8'))
    const c = this.c
    const { h } = c
    const tooLarge = p.payload.byteLength > this.entryCap || blobs.some((b) => b.bytes !== undefined && b.bytes.byteLength > this.blobCap)
    c.lock()
    try {
      if (tooLarge) {
        c.tombstone(k, REASON_NOT_CONTINUABLE)
        bump(h, T_REFUSED_LARGE)
        return { ok: false, reason: 'entry_too_large' }
      }
      c.expire(this.now())
      // Take a reference on every blob first, so no eviction below removes one this entry names.
      const taken: number[] = []
      const release = (): void => { for (const bi of taken) c.unref(bi) }
      const refuse = (reason: 'no_room' | 'blob_missing'): PutResult => {
        release()
        c.tombstone(k, REASON_NOT_CONTINUABLE)
        bump(h, T_REFUSED_ROOM)
        return { ok: false, reason }
      }
      const seen = new Set<number>()
      for (let j = 0; j < blobs.length; j++) {
        let bi = c.find(KIND_BLOB, keys[j])
        if (bi >= 0) {
          if (seen.has(bi)) continue
        } else {
          const bytes = blobs[j].bytes
          if (bytes === undefined) return refuse('blob_missing')
          const hb = hashBytes[j]
          const size = (R_BASE + 1 + c.d.rows) * 4 + ((hb.length + 3) & ~3) + ((bytes.byteLength + 3) & ~3)
          if (!c.evictUntil(() => h[H_BLOB_BYTES] + bytes.byteLength <= h[H_BLOB_TOTAL_CAP])) return refuse('no_room')
          const at = c.room(size)
          if (at < 0) return refuse('no_room')
          const w = at >> 2
          c.d32.fill(0, w, w + R_BASE + 1 + c.d.rows)
          c.d32[w + R_SIZE] = size
          c.d32[w + R_KIND] = KIND_BLOB
          writePair(c.d32, w + R_TIME, this.now())
          c.d32[w + R_LEN] = bytes.byteLength
          c.d32.set(keys[j], w + R_HASH)
          c.d32[w + RB_HLEN] = hb.length
          const hAt = at + (R_BASE + 1 + c.d.rows) * 4
          c.d8.set(hb, hAt)
          c.d8.set(bytes, hAt + ((hb.length + 3) & ~3))
          c.commit(at, size)
          bi = c.index(KIND_BLOB, keys[j], at)
          c.d32[w + R_SLOT] = bi
          h[H_BLOBS]++
          h[H_BLOB_BYTES] += bytes.byteLength
        }
        seen.add(bi)
        c.s[bi * SLOT_FIELDS + S_REFS]++
        taken.push(bi)
      }
      // The same id stored again (a retried turn) replaces the old entry, after the blob
      // references above so the blobs both name survive.
      const old = c.find(KIND_ENTRY, k)
      if (old >= 0) c.kill(c.s[old * SLOT_FIELDS + S_AT], 0)
      const refs = taken.map((bi) => c.s.subarray(bi * SLOT_FIELDS + S_HASH, bi * SLOT_FIELDS + S_HASH + 4).slice())
      const size = (RE_BLOBS + refs.length * 4) * 4 + ((p.payload.byteLength + 3) & ~3)
      const at = c.room(size)
      if (at < 0) return refuse('no_room')
      const w = at >> 2
      c.d32[w + R_SIZE] = size
      c.d32[w + R_KIND] = KIND_ENTRY
      writePair(c.d32, w + R_TIME, this.now())
      c.d32[w + R_LEN] = p.payload.byteLength
      c.d32.set(k, w + R_HASH)
      if (parent) c.d32.set(parent, w + RE_PARENT)
      else c.d32.fill(0, w + RE_PARENT, w + RE_PARENT + 4)
      c.d32[w + RE_HAS_PARENT] = parent ? 1 : 0
      c.d32[w + RE_NBLOBS] = refs.length
      for (let j = 0; j < refs.length; j++) c.d32.set(refs[j], w + RE_BLOBS + j * 4)
      c.d8.set(p.payload, at + (RE_BLOBS + refs.length * 4) * 4)
      c.commit(at, size)
      const slot = c.index(KIND_ENTRY, k, at)
      c.d32[w + R_SLOT] = slot
      h[H_ENTRIES]++
      h[H_ENTRY_BYTES] += p.payload.byteLength
      bump(h, T_PUTS)
      return { ok: true }
    } finally {
      c.unlock()
    }
  }

  /** The whole chain ending at `id`, root first, with its blobs pinned until release(). */
  chain (p: { keyName: string, id: string }): ChainResult {
    const c = this.c
    const { d32 } = c
    let k = key16(p.keyName, p.id, false)
    c.lock()
    try {
      c.expire(this.now())
      const ats: number[] = []
      for (;;) {
        const i = c.find(KIND_ENTRY, k)
        if (i < 0) {
          const reason = c.tombReason(k)
          if (ats.length === 0 && reason === 0) return { ok: false, code: 'continuation_not_found', id: p.id }
          return { ok: false, code: 'continuation_expired', id: p.id, reason: REASONS[reason] || 'evicted' }
        }
        const at = c.s[i * SLOT_FIELDS + S_AT]
        ats.push(at)
        // A chain longer than the live entries can only be a cycle (an id stored twice).
        if (ats.length > c.h[H_ENTRIES]) return { ok: false, code: 'continuation_expired', id: p.id, reason: 'cycle' }
        const w = at >> 2
        if (d32[w + RE_HAS_PARENT] === 0) break
        k = d32.slice(w + RE_PARENT, w + RE_PARENT + 4)
      }
      const payloads: Uint8Array[] = []
      const pinned: number[] = []
      const hashes: string[] = []
      const seen = new Set<number>()
      for (let n = ats.length - 1; n >= 0; n--) {
        const at = ats[n]
        const w = at >> 2
        const nb = d32[w + RE_NBLOBS]
        const off = at + (RE_BLOBS + nb * 4) * 4
        payloads.push(Buffer.from(c.d8.subarray(off, off + d32[w + R_LEN])))
        for (let j = 0; j < nb; j++) {
          const bi = c.find(KIND_BLOB, d32.subarray(w + RE_BLOBS + j * 4, w + RE_BLOBS + j * 4 + 4))
          if (bi < 0 || seen.has(bi)) continue // a live entry's blobs are live (S3)
          seen.add(bi)
          const bat = c.s[bi * SLOT_FIELDS + S_AT]
          this.pinLocked(bat)
          pinned.push(bi)
          const hlen = d32[(bat >> 2) + RB_HLEN]
          const hAt = bat + (R_BASE + 1 + c.d.rows) * 4
          hashes.push(Buffer.from(c.d8.subarray(hAt, hAt + hlen)).toString('utf8'))
        }
      }
      const keys = pinned.map((bi) => c.s.slice(bi * SLOT_FIELDS + S_HASH, bi * SLOT_FIELDS + S_HASH + 4))
      let released = false
      const release = (): void => {
        if (released) return
        released = true
        c.lock()
        try {
          for (const key of keys) {
            const bi = c.find(KIND_BLOB, key)
            if (bi >= 0) this.unpinLocked(bi)
          }
        } finally { c.unlock() }
      }
      return { ok: true, payloads, blobs: hashes, release }
    } finally {
      c.unlock()
    }
  }

  /** Whether this key's entry `id` is stored (its ancestors may not be: chain() says). */
  has (keyName: string, id: string): boolean {
    const c = this.c
    const k = key16(keyName, id, false)
    c.lock()
    try {
      c.expire(this.now())
      return c.find(KIND_ENTRY, k) >= 0
    } finally { c.unlock() }
  }

  /** A copy of one of this key's blobs, or null when it is not stored. */
  blob (keyName: string, hash: string): Uint8Array | null {
    const c = this.c
    const k = key16(keyName, hash, true)
    c.lock()
    try {
      const bi = c.find(KIND_BLOB, k)
      if (bi < 0) return null
      const at = c.s[bi * SLOT_FIELDS + S_AT]
      const w = at >> 2
      const hAt = at + (R_BASE + 1 + c.d.rows) * 4 + ((c.d32[w + RB_HLEN] + 3) & ~3)
      return Buffer.from(c.d8.subarray(hAt, hAt + c.d32[w + R_LEN]))
    } finally { c.unlock() }
  }

  private pinLocked (at: number): void {
    const { d32, h } = this.c
    const w = at >> 2
    if (this.c.blobPins(at) === 0) h[H_PINNED_BYTES] += d32[w + R_LEN]
    d32[w + RB_PINS + this.row]++
    h[H_PINS]++
  }

  private unpinLocked (bi: number): void {
    const c = this.c
    const { d32, h } = c
    const at = c.s[bi * SLOT_FIELDS + S_AT]
    const w = at >> 2
    if (d32[w + RB_PINS + this.row] === 0) return // reclaimed already (this row was declared dead)
    d32[w + RB_PINS + this.row]--
    h[H_PINS]--
    if (c.blobPins(at) === 0) {
      h[H_PINNED_BYTES] -= d32[w + R_LEN]
      if (c.s[bi * SLOT_FIELDS + S_REFS] === 0) c.kill(at, 0)
    }
  }
}

/**
 * Primary only: repairs the store after a thread's death and returns its pins. Never parks.
 */
export class StoreRepair {
  private readonly c: StoreCore

  constructor (sab: SharedArrayBuffer, primaryRow: number) {
    this.c = new StoreCore(sab, primaryRow)
  }

  snapshot (): StoreSnapshot { return this.c.snapshot() }

  /**
   * Reclaims `row`'s pins once. If the lock is held by a dead thread (`isDeadToken(row + 1)`)
   * it is stolen and every derived cell rebuilt from the records first. Returns the pins
   * reclaimed, or 'busy' when a live thread holds the lock (retry on a later turn).
   */
  reclaimRow (row: number, isDeadToken: (token: number) => boolean): { pins: number, rebuilt: boolean } | 'busy' {
    const c = this.c
    const { h } = c
    const got = c.tl.tryLockOrSteal(isDeadToken)
    if (got === null) return 'busy'
    const rebuilt = got === 'stolen'
    try {
      if (rebuilt) { this.rebuild(); bump(h, T_REPAIRS) }
      let pins = 0
      const { d32 } = c
      let at = h[H_HEAD]
      for (let left = h[H_RECORDS]; left > 0; left--) {
        if (at + 4 > c.d.capacity || d32[at >> 2] === WRAP) at = 0
        const w = at >> 2
        const size = d32[w + R_SIZE]
        if (d32[w + R_KIND] === KIND_BLOB && d32[w + RB_PINS + row] > 0) {
          const n = d32[w + RB_PINS + row]
          d32[w + RB_PINS + row] = 0
          h[H_PINS] -= n
          pins += n
          if (c.blobPins(at) === 0) {
            h[H_PINNED_BYTES] -= d32[w + R_LEN]
            if (c.s[d32[w + R_SLOT] * SLOT_FIELDS + S_REFS] === 0) c.kill(at, 0)
          }
        }
        at += size
      }
      c.dropDeadHeads()
      if (pins > 0) bump(h, T_PINS_RECLAIMED, pins)
      return { pins, rebuilt }
    } finally {
      c.unlock()
    }
  }

  /** Rebuilds the index, references and figures from the records between HEAD and TAIL. */
  private rebuild (): void {
    const c = this.c
    const { h, d32, s } = c
    const cap = c.d.capacity
    c.buckets.fill(-1)
    for (let i = 0; i < c.d.slots; i++) { s[i * SLOT_FIELDS + S_KIND] = KIND_FREE; s[i * SLOT_FIELDS + S_NEXT] = i + 1 < c.d.slots ? i + 1 : -1 }
    h[H_FREE_SLOT] = 0
    let records = 0
    let used = 0
    let entries = 0
    let entryBytes = 0
    let blobs = 0
    let blobBytes = 0
    let pins = 0
    let pinnedBytes = 0
    const live: number[] = []
    const tail = h[H_TAIL]
    let at = h[H_HEAD]
    while (at !== tail) {
      if (at + 4 > cap || d32[at >> 2] === WRAP) { at = 0; if (at === tail) break }
      const w = at >> 2
      const size = d32[w + R_SIZE]
      const kind = d32[w + R_KIND]
      if (size <= 0 || size % 4 !== 0 || at + size > cap || kind < KIND_ENTRY || kind > KIND_DEAD) { h[H_TAIL] = at; break }
      records++
      used += size
      if (kind !== KIND_DEAD) {
        const hash = d32.subarray(w + R_HASH, w + R_HASH + 4)
        const dup = c.find(kind, hash)
        // An interrupted move leaves two copies: the later one (the move's target) wins.
        if (dup >= 0) { d32[(s[dup * SLOT_FIELDS + S_AT] >> 2) + R_KIND] = KIND_DEAD; c.unindex(dup) }
        if (h[H_FREE_SLOT] < 0) { d32[w + R_KIND] = KIND_DEAD } else {
          d32[w + R_SLOT] = c.index(kind, hash, at)
          live.push(at)
        }
      }
      at += size
    }
    h[H_RECORDS] = records
    if (records === 0) { h[H_HEAD] = 0; h[H_TAIL] = 0 }
    // Figures and references from the surviving records.
    const alive = live.filter((a) => d32[(a >> 2) + R_KIND] !== KIND_DEAD)
    for (const a of alive) {
      const w = a >> 2
      if (d32[w + R_KIND] === KIND_BLOB) {
        blobs++
        blobBytes += d32[w + R_LEN]
        const n = c.blobPins(a)
        pins += n
        if (n > 0) pinnedBytes += d32[w + R_LEN]
      }
    }
    const broken: number[] = []
    for (const a of alive) {
      const w = a >> 2
      if (d32[w + R_KIND] !== KIND_ENTRY) continue
      entries++
      entryBytes += d32[w + R_LEN]
      for (let j = 0; j < d32[w + RE_NBLOBS]; j++) {
        const bi = c.find(KIND_BLOB, d32.subarray(w + RE_BLOBS + j * 4, w + RE_BLOBS + j * 4 + 4))
        if (bi >= 0) s[bi * SLOT_FIELDS + S_REFS]++
        else broken.push(a)
      }
    }
    h[H_USED] = used
    h[H_ENTRIES] = entries
    h[H_ENTRY_BYTES] = entryBytes
    h[H_BLOBS] = blobs
    h[H_BLOB_BYTES] = blobBytes
    h[H_PINS] = pins
    h[H_PINNED_BYTES] = pinnedBytes
    // An entry whose blob is gone cannot be expanded whole: it goes, tombstoned.
    for (const a of new Set(broken)) c.kill(a, REASON_CAP)
    // Blobs nobody references or pins go (S3).
    for (const a of alive) {
      const w = a >> 2
      if (d32[w + R_KIND] === KIND_BLOB && s[d32[w + R_SLOT] * SLOT_FIELDS + S_REFS] === 0 && c.blobPins(a) === 0) c.kill(a, 0)
    }
    c.dropDeadHeads()
  }
}


/**
 * Test support, on a quiescent store: recomputes every derived cell from the records and the
 * index and returns what disagrees (S1-S4, and the ring's bounds). An empty list is healthy.
 */
export function checkStore (sab: SharedArrayBuffer): string[] {
  const c = new StoreCore(sab, 0)
  const { h, d32, s } = c
  const out: string[] = []
  const cap = c.d.capacity
  let at = h[H_HEAD]
  let records = 0
  let used = 0
  let entries = 0
  let entryBytes = 0
  let blobs = 0
  let blobBytes = 0
  let pins = 0
  let pinnedBytes = 0
  const refs = new Map<number, number>()
  const liveSlots = new Set<number>()
  const entryAts: number[] = []
  while (at !== h[H_TAIL]) {
    if (at + 4 > cap || d32[at >> 2] === WRAP) { at = 0; continue }
    const w = at >> 2
    const size = d32[w + R_SIZE]
    if (size <= 0 || at + size > cap) { out.push(`bad record size ${size} at ${at}`); break }
    if (++records > c.d.slots * 4 + 8) { out.push('ring walk does not end'); break }
    used += size
    const kind = d32[w + R_KIND]
    if (kind === KIND_ENTRY || kind === KIND_BLOB) {
      const slot = d32[w + R_SLOT]
      if (s[slot * SLOT_FIELDS + S_AT] !== at || s[slot * SLOT_FIELDS + S_KIND] !== kind) out.push(`record at ${at} not indexed by its slot ${slot}`)
      if (c.find(kind, d32.subarray(w + R_HASH, w + R_HASH + 4)) !== slot) out.push(`record at ${at} not found by its hash`)
      liveSlots.add(slot)
      if (kind === KIND_ENTRY) { entries++; entryBytes += d32[w + R_LEN]; entryAts.push(at) } else {
        blobs++
        blobBytes += d32[w + R_LEN]
        const n = c.blobPins(at)
        pins += n
        if (n > 0) pinnedBytes += d32[w + R_LEN]
        refs.set(slot, 0)
      }
    } else if (kind !== KIND_DEAD) out.push(`bad kind ${kind} at ${at}`)
    at += size
  }
  for (const a of entryAts) {
    const w = a >> 2
    for (let j = 0; j < d32[w + RE_NBLOBS]; j++) {
      const bi = c.find(KIND_BLOB, d32.subarray(w + RE_BLOBS + j * 4, w + RE_BLOBS + j * 4 + 4))
      if (bi < 0) out.push(`entry at ${a} names a missing blob`)
      else refs.set(bi, (refs.get(bi) ?? 0) + 1)
    }
  }
  for (const [bi, n] of refs) {
    if (s[bi * SLOT_FIELDS + S_REFS] !== n) out.push(`blob slot ${bi} refs ${s[bi * SLOT_FIELDS + S_REFS]}, truth ${n}`)
    if (n === 0 && c.blobPins(s[bi * SLOT_FIELDS + S_AT]) === 0) out.push(`blob slot ${bi} neither referenced nor pinned`)
  }
  let usedSlots = 0
  for (let i = 0; i < c.d.slots; i++) if (s[i * SLOT_FIELDS + S_KIND] !== KIND_FREE) { usedSlots++; if (!liveSlots.has(i)) out.push(`slot ${i} points at no live record`) }
  let free = 0
  for (let i = h[H_FREE_SLOT]; i >= 0 && free <= c.d.slots; i = s[i * SLOT_FIELDS + S_NEXT]) free++
  if (free + usedSlots !== c.d.slots) out.push(`free list ${free} + used ${usedSlots} != ${c.d.slots}`)
  const want: Array<[string, number, number]> = [
    ['records', h[H_RECORDS], records], ['used', h[H_USED], used], ['entries', h[H_ENTRIES], entries],
    ['entryBytes', h[H_ENTRY_BYTES], entryBytes], ['blobs', h[H_BLOBS], blobs], ['blobBytes', h[H_BLOB_BYTES], blobBytes],
    ['pins', h[H_PINS], pins], ['pinnedBytes', h[H_PINNED_BYTES], pinnedBytes],
  ]
  for (const [name, have, truth] of want) if (have !== truth) out.push(`${name} ${have}, truth ${truth}`)
  if (used > cap) out.push(`used ${used} > capacity ${cap}`)
  if (blobBytes > h[H_BLOB_TOTAL_CAP]) out.push(`blob bytes ${blobBytes} > cap ${h[H_BLOB_TOTAL_CAP]}`)
  if (h[H_LOCK] !== 0) out.push(`lock held by ${h[H_LOCK]}`)
  return out
}
