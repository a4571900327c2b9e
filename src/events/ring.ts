// The session event ring: one byte-bounded ring in its own SharedArrayBuffer, written by the
// worker that runs a non-blocking exchange and read by whichever worker serves the session's
// `GET /v1/sessions/:id/events` (with reusePort the two are often different threads, and
// workers never talk to each other). The primary creates it and never touches its bytes.
//
// ## Layout
//
//   Int32 header: RG_MAGIC RG_LOCK RG_CAPACITY RG_HEAD RG_TAIL RG_RECORDS
//                 RG_NEXT_SEQ (lo, hi)  RG_OLDEST_SEQ (lo, hi)  RG_NOTIFY  totals (lo, hi)...
//                 RG_WOKEN (lo, hi: readers woken)  RG_SCANNED (lo, hi: records read)
//                 RG_SESSION_NOTIFY: SESSION_SLOTS change counters, one per session-hash slot
//   data region:  RG_CAPACITY bytes of records, 4-byte aligned:
//                 { u32 size (whole record, padded), u32 payload bytes, i32 seq lo, i32 seq hi,
//                   i32 session A, i32 session B, payload... }
//   A record never wraps: when it does not fit before the end, a WRAP marker (size
//   0xffffffff) is left at the tail (or fewer than 4 bytes remain) and it goes at offset 0.
//
// Sequence numbers (the SSE `id:`) are global, start at 1, and never repeat; each record
// carries the 64-bit session key (lanes.ts Lanes.key) of the session it belongs to, so one
// ring serves every session and a reader filters its own. Readers see only their own
// gateway key's sessions (the key name is in the hash).
//
// ## Readers: what an idle reader and a resuming reader cost
//
// - Waking: an append bumps and notifies its session's slot of RG_SESSION_NOTIFY (slot =
//   `sessionSlot(key)`, the top bits of the mixed key) besides RG_NOTIFY (any append). A
//   reader sleeps on its own slot (`sessionToken` / `sessionChanged`): an append to session A
//   wakes A's readers and those of the sessions that share A's slot (1,000 readers on other
//   sessions: about 1000 / 4096 of one reader per append), never the others.
// - Resuming: a read returns, with its cursor (a seq), `at`: the offset where the record after
//   the cursor starts or will be written. Passed back, it lets the next read start there
//   instead of walking from the head, so a read examines only records newer than its cursor.
//   `at` is a hint, validated by seq under the lock (`locateLocked`): the record after the
//   cursor was written where the tail was (`at`) or, after a wrap or into an emptied ring, at
//   offset 0. Offset 0 is checked first: inside the retained bytes it is always a record's
//   start (records never wrap), whereas `at` may by then lie inside a newer record. When
//   neither holds the expected seq (a gap, a reader that never read, a torn state), the read
//   walks from the head as before. A reader with `at` = -1 (the first read after
//   Last-Event-ID) walks once.
//
// ## Bounds and eviction
//
// Appending evicts the oldest records until the new one fits: memory is fixed at
// RG_CAPACITY whatever the event rate. A reader whose cursor fell behind the oldest retained
// record learns it (a `gap`), never silently: the SSE stream then carries `replay_gap`. A
// payload larger than `maxPayload` (a quarter of the ring) is refused by append().
//
// ## Concurrency
//
// Every operation is one short critical section under RG_LOCK (CAS, token = row + 1, spin
// then Atomics.wait slices; workers only — the primary never locks it). Readers copy out at
// most `maxBytes` per call, so the lock is never held for long. Every append bumps and
// notifies, before it unlocks, its session's slot of RG_SESSION_NOTIFY (what event streams
// sleep on, with Atomics.waitAsync) and RG_NOTIFY (any append: `changed()`); the notify
// counts add up in RG_WOKEN, the records reads examine in RG_SCANNED (both on /metrics).
//
// ## Death
//
// An append writes the payload first and commits by advancing RG_TAIL / RG_RECORDS /
// RG_NEXT_SEQ last, so a writer that dies mid-copy leaves nothing visible. A thread that dies
// holding RG_LOCK is repaired by the primary (`repairRing`, called with the ledger's reclaim):
// the lock is cleared. Eviction moves RG_OLDEST_SEQ before RG_HEAD; a reader that finds a
// record whose seq is not the one expected treats it as a gap and resynchronises at the head.

import { bump, readTotal } from '../ledger/gate.ts'

const RG_MAGIC = 0
const RG_LOCK = 1
const RG_CAPACITY = 2
const RG_HEAD = 3
const RG_TAIL = 4
const RG_RECORDS = 5
const RG_NEXT_SEQ = 6       // (lo, hi)
const RG_OLDEST_SEQ = 8     // (lo, hi)
const RG_NOTIFY = 10
const RG_APPENDED = 11      // (lo, hi) totals
const RG_EVICTED = 13
const RG_REFUSED = 15
const RG_PEAK_RECORDS = 17
const RG_WOKEN = 18         // (lo, hi) readers woken by appends (Atomics.notify's counts)
const RG_SCANNED = 20       // (lo, hi) records examined by reads
const RG_SESSION_NOTIFY = 22
/** Per-session change counters (a power of two): an append wakes the readers of its slot only. */
export const SESSION_SLOTS = 4096
const HEADER_FIELDS = RG_SESSION_NOTIFY + SESSION_SLOTS
const HEADER_BYTES = HEADER_FIELDS * 4

const SLOT_SHIFT = 32 - Math.log2(SESSION_SLOTS)

/** The change-counter slot of a session key (its two hash words mixed, the top bits). */
export function sessionSlot (session: readonly [number, number]): number {
  return Math.imul(session[0] ^ Math.imul(session[1], 0x85ebca6b), 0xc2b2ae35) >>> SLOT_SHIFT
}

const MAGIC = 0x51c1e7e1
const WRAP = -1             // size word of a wrap marker (0xffffffff)
const REC_HEADER = 24
const SPINS = 100

export interface RingEvent { seq: number; payload: Buffer }

export interface RingRead {
  events: RingEvent[]
  /** Sequence number of the last record examined (resume after it). */
  cursor: number
  /** True when records after the requested cursor were evicted before this read. */
  gap: boolean
  /** The oldest sequence number still retained (for the gap report). */
  oldest: number
  /** True when the read stopped at maxBytes with more records to examine. */
  more: boolean
  /** Offset of the record after `cursor` (written or to be): pass it back with the cursor; -1 unknown. */
  at: number
}

export interface RingSnapshot {
  capacity: number; records: number; bytes: number; nextSeq: number; oldestSeq: number; appended: number; evicted: number; refused: number
  /** Waiting readers woken by appends, in total. */
  woken: number
  /** Records examined by reads, in total (the work of reading). */
  scanned: number
}

export function createRingBuffer (capacity: number): SharedArrayBuffer {
  if (!Number.isInteger(capacity) || capacity < 4096 || capacity % 4 !== 0) throw new RangeError('ring capacity must be a multiple of 4, at least 4096 bytes')
  const sab = new SharedArrayBuffer(HEADER_BYTES + capacity)
  const h = new Int32Array(sab, 0, HEADER_FIELDS)
  h[RG_CAPACITY] = capacity
  h[RG_NEXT_SEQ] = 1
  h[RG_OLDEST_SEQ] = 1
  Atomics.store(h, RG_MAGIC, MAGIC)
  return sab
}

/** Primary: clears RG_LOCK if a dead thread (token = row + 1) holds it. */
export function repairRing (sab: SharedArrayBuffer, row: number): boolean {
  const h = new Int32Array(sab, 0, HEADER_FIELDS)
  const held = Atomics.compareExchange(h, RG_LOCK, row + 1, 0) === row + 1
  if (held) Atomics.notify(h, RG_LOCK)
  return held
}

export class EventRing {
  readonly capacity: number
  /** Largest payload append() accepts. */
  readonly maxPayload: number
  private readonly h: Int32Array
  private readonly d32: Int32Array
  private readonly d8: Uint8Array
  private readonly token: number

  constructor (sab: SharedArrayBuffer, row: number) {
    this.h = new Int32Array(sab, 0, HEADER_FIELDS)
    if (Atomics.load(this.h, RG_MAGIC) !== MAGIC) throw new Error('not a sluice event ring')
    this.capacity = this.h[RG_CAPACITY]
    this.d32 = new Int32Array(sab, HEADER_BYTES, this.capacity / 4)
    this.d8 = new Uint8Array(sab, HEADER_BYTES, this.capacity)
    this.maxPayload = Math.floor(this.capacity / 4) - REC_HEADER
    this.token = row + 1
  }

  /** Appends one event for a session; returns its sequence number, or 0 when too large. */
  append (session: readonly [number, number], payload: Uint8Array): number {
    this.lock()
    return this.appendLocked(session, payload)
  }

  /**
   * append() for the primary, which must never park: -1 when another thread holds the lock
   * after a short spin (retry on a later turn), else what append() returns.
   */
  tryAppend (session: readonly [number, number], payload: Uint8Array): number {
    for (let spins = 0; spins < SPINS; spins++) {
      if (Atomics.compareExchange(this.h, RG_LOCK, 0, this.token) === 0) return this.appendLocked(session, payload)
    }
    return -1
  }

  private appendLocked (session: readonly [number, number], payload: Uint8Array): number {
    const { h, d32 } = this
    if (payload.byteLength > this.maxPayload) {
      bump(h, RG_REFUSED)
      this.unlock()
      return 0
    }
    const size = REC_HEADER + ((payload.byteLength + 3) & ~3)
    let at: number
    for (;;) {
      at = this.placeLocked(size)
      if (at >= 0) break
      this.evictLocked()
    }
    const seq = readPair(h, RG_NEXT_SEQ)
    const w = at >> 2
    this.d8.set(payload, at + REC_HEADER)
    d32[w + 1] = payload.byteLength
    d32[w + 2] = seq % 0x100000000 | 0
    d32[w + 3] = Math.floor(seq / 0x100000000)
    d32[w + 4] = session[0]
    d32[w + 5] = session[1]
    d32[w] = size
    // Commit: the record becomes visible to readers.
    if (h[RG_RECORDS] === 0) h[RG_HEAD] = at
    h[RG_TAIL] = at + size
    h[RG_RECORDS]++
    if (h[RG_RECORDS] > h[RG_PEAK_RECORDS]) h[RG_PEAK_RECORDS] = h[RG_RECORDS]
    writePair(h, RG_NEXT_SEQ, seq + 1)
    bump(h, RG_APPENDED)
    // Notified inside the lock so that the count of woken readers is exact. The session's own
    // slot wakes its readers; RG_NOTIFY wakes whoever waits for any append.
    const slot = RG_SESSION_NOTIFY + sessionSlot(session)
    Atomics.add(h, slot, 1)
    Atomics.add(h, RG_NOTIFY, 1)
    bump(h, RG_WOKEN, Atomics.notify(h, slot) + Atomics.notify(h, RG_NOTIFY))
    this.unlock()
    return seq
  }

  /**
   * Events of `session` with seq > `after`, copied out, at most about `maxBytes` of payload.
   * `after` = 0 reads from the oldest retained record. `at`: the previous read's `at` for this
   * `after` (its cursor), so that only records after it are examined; -1 walks from the head.
   */
  read (session: readonly [number, number], after: number, maxBytes = 256 * 1024, at = -1): RingRead {
    const { h, d32 } = this
    this.lock()
    const oldest = readPair(h, RG_OLDEST_SEQ)
    const next = readPair(h, RG_NEXT_SEQ)
    const events: RingEvent[] = []
    let gap = after + 1 < oldest
    let cursor = Math.max(after, oldest - 1)
    if (cursor >= next - 1 || h[RG_RECORDS] === 0) {
      // Nothing to examine: the next record goes at the tail (at 0 into an empty ring).
      const tail = h[RG_RECORDS] === 0 ? 0 : h[RG_TAIL]
      this.unlock()
      return { events, cursor: Math.min(Math.max(after, cursor), next - 1), gap, oldest, more: false, at: tail }
    }
    // Start at the record after the cursor when `at` is validated, else walk from the head.
    let left: number
    let expect: number
    const found = gap ? -1 : this.locateLocked(cursor + 1, at)
    if (found >= 0) {
      at = found
      expect = cursor + 1
      left = next - expect
    } else {
      at = h[RG_HEAD]
      expect = oldest
      left = h[RG_RECORDS]
    }
    let bytes = 0
    let more = false
    let scanned = 0
    while (left > 0) {
      if (at + 4 > this.capacity || d32[at >> 2] === WRAP) { at = 0; continue }
      scanned++
      const w = at >> 2
      const size = d32[w]
      const seq = (d32[w + 2] >>> 0) + d32[w + 3] * 0x100000000
      if (seq !== expect) { gap = true; at = -1; break } // a torn eviction: resynchronise from what is readable
      expect++
      if (seq > cursor) {
        if (bytes >= maxBytes) { more = true; break }
        if (d32[w + 4] === session[0] && d32[w + 5] === session[1]) {
          const n = d32[w + 1]
          events.push({ seq, payload: Buffer.from(this.d8.subarray(at + REC_HEADER, at + REC_HEADER + n)) })
          bytes += n
        }
        cursor = seq
      }
      at += size
      left--
    }
    bump(h, RG_SCANNED, scanned)
    this.unlock()
    // `at` is now where the record after `cursor` starts (more) or will be written (the tail).
    return { events, cursor, gap, oldest, more, at }
  }

  /** The change counter of `session`'s slot (lock-free): pass it to sessionChanged. */
  sessionToken (session: readonly [number, number]): number {
    return Atomics.load(this.h, RG_SESSION_NOTIFY + sessionSlot(session))
  }

  /**
   * Resolves when an append to `session` (or to a session sharing its slot) happened since
   * `token` (from `sessionToken`), after `ms`, or when `signal` aborts. Appends to other
   * sessions do not wake it.
   */
  sessionChanged (session: readonly [number, number], token: number, ms: number, signal?: AbortSignal): Promise<void> {
    return this.waitOn(RG_SESSION_NOTIFY + sessionSlot(session), token, ms, signal)
  }

  /** The next sequence number to be written (lock-free read). */
  get nextSeq (): number { return readPairAtomic(this.h, RG_NEXT_SEQ) }

  /**
   * Resolves when an append happened since `token` (from `changeToken`), after `ms`, or when
   * `signal` aborts.
   */
  changed (token: number, ms: number, signal?: AbortSignal): Promise<void> {
    return this.waitOn(RG_NOTIFY, token, ms, signal)
  }

  private async waitOn (index: number, token: number, ms: number, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return
    const r = Atomics.waitAsync(this.h, index, token, ms)
    if (!r.async) return
    // A pending waitAsync does not keep a thread's event loop alive; this timer does.
    let timer: ReturnType<typeof setTimeout> | undefined
    let onAbort: (() => void) | undefined
    await Promise.race([r.value, new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms + 1)
      onAbort = () => resolve()
      signal?.addEventListener('abort', onAbort, { once: true })
    })])
    clearTimeout(timer)
    if (onAbort) signal?.removeEventListener('abort', onAbort)
  }

  get changeToken (): number { return Atomics.load(this.h, RG_NOTIFY) }

  snapshot (): RingSnapshot {
    const h = this.h
    const head = Atomics.load(h, RG_HEAD)
    const tail = Atomics.load(h, RG_TAIL)
    const records = Atomics.load(h, RG_RECORDS)
    return {
      capacity: this.capacity,
      records,
      bytes: records === 0 ? 0 : tail > head ? tail - head : this.capacity - head + tail,
      nextSeq: readPairAtomic(h, RG_NEXT_SEQ),
      oldestSeq: readPairAtomic(h, RG_OLDEST_SEQ),
      appended: readTotal(h, RG_APPENDED),
      evicted: readTotal(h, RG_EVICTED),
      refused: readTotal(h, RG_REFUSED),
      woken: readTotal(h, RG_WOKEN),
      scanned: readTotal(h, RG_SCANNED),
    }
  }

  // ---- internals (inside the lock) ----

  /**
   * Offset of record `seq` (retained: oldest <= seq < next) from `hint`, the tail when `seq - 1`
   * was appended; -1 when the hint does not hold (see "Readers" at the top).
   */
  private locateLocked (seq: number, hint: number): number {
    if (hint < 0 || (hint & 3) !== 0) return -1
    if (this.retainedLocked(0) && this.seqAtLocked(0) === seq) return 0
    if (hint + REC_HEADER <= this.capacity && this.retainedLocked(hint) && this.d32[hint >> 2] !== WRAP && this.seqAtLocked(hint) === seq) return hint
    return -1
  }

  /** Whether `p` lies in the retained bytes: [head, tail), or [head, end) and [0, tail) when wrapped. */
  private retainedLocked (p: number): boolean {
    const h = this.h
    if (h[RG_RECORDS] === 0) return false
    const head = h[RG_HEAD]
    const tail = h[RG_TAIL]
    return tail > head ? p >= head && p < tail : p >= head || p < tail
  }

  private seqAtLocked (p: number): number {
    const w = p >> 2
    return (this.d32[w + 2] >>> 0) + this.d32[w + 3] * 0x100000000
  }

  /** Where a record of `size` bytes fits without evicting, or -1. */
  private placeLocked (size: number): number {
    const { h, d32 } = this
    const cap = this.capacity
    if (h[RG_RECORDS] === 0) return 0
    const head = h[RG_HEAD]
    const tail = h[RG_TAIL]
    if (tail > head) {
      if (cap - tail >= size) return tail
      if (head >= size) {
        if (cap - tail >= 4) d32[tail >> 2] = WRAP
        return 0
      }
      return -1
    }
    // Wrapped (tail <= head): the free gap is [tail, head).
    return head - tail >= size ? tail : -1
  }

  private evictLocked (): void {
    const { h, d32 } = this
    let head = h[RG_HEAD]
    if (head + 4 > this.capacity || d32[head >> 2] === WRAP) head = 0
    const size = d32[head >> 2]
    writePair(h, RG_OLDEST_SEQ, readPair(h, RG_OLDEST_SEQ) + 1)
    h[RG_RECORDS]--
    bump(h, RG_EVICTED)
    if (h[RG_RECORDS] === 0) {
      h[RG_HEAD] = 0
      h[RG_TAIL] = 0
      return
    }
    head += size
    if (head + 4 > this.capacity || d32[head >> 2] === WRAP) head = 0
    h[RG_HEAD] = head
  }

  private lock (): void {
    const h = this.h
    let spins = 0
    for (;;) {
      if (Atomics.compareExchange(h, RG_LOCK, 0, this.token) === 0) return
      const holder = Atomics.load(h, RG_LOCK)
      if (holder === this.token) throw new Error('event ring lock re-entered')
      if (++spins < SPINS) continue
      Atomics.wait(h, RG_LOCK, holder, 1)
      spins = 0
    }
  }

  private unlock (): void {
    if (Atomics.compareExchange(this.h, RG_LOCK, this.token, 0) !== this.token) throw new Error('event ring lock released by a thread that does not hold it')
    Atomics.notify(this.h, RG_LOCK, 1)
  }
}

function readPair (h: Int32Array, at: number): number { return (h[at] >>> 0) + h[at + 1] * 0x100000000 }
function readPairAtomic (h: Int32Array, at: number): number { return readTotal(h, at) }
function writePair (h: Int32Array, at: number, v: number): void {
  h[at] = v % 0x100000000 | 0
  h[at + 1] = Math.floor(v / 0x100000000)
}
