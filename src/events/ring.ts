// The session event ring: one byte-bounded ring in its own SharedArrayBuffer, written by the
// worker that runs a non-blocking exchange and read by whichever worker serves the session's
// `GET /v1/sessions/:id/events` (with reusePort the two are often different threads, and
// workers never talk to each other). The primary creates it and appends only through
// `tryAppend` (the end events of a dead worker's exchanges), which never parks.
//
// ## Layout (layout.ts)
//
//   Int32 header: RH_MAGIC, RH_LOCK (a TokenLock: word, parked count), RH_CAPACITY, RH_HEAD,
//                 RH_TAIL, RH_RECORDS, RH_PEAK_RECORDS, RH_NEXT_SEQ (lo, hi), RH_NOTIFY,
//                 RH_OLDEST_SEQ (lo, hi), RH_TOTALS (lo, hi): appended, evicted, refused,
//                 woken (readers woken), scanned (records read); then RH_SESSION_NOTIFY:
//                 SESSION_SLOTS change counters, one per session-hash slot
//   data region:  RH_CAPACITY bytes of records, 4-byte aligned:
//                 { REC_SIZE (whole record, padded), REC_PAYLOAD (bytes), REC_SEQ (lo, hi),
//                   REC_SESSION_A, REC_SESSION_B, payload... }
//   A record never wraps: when it does not fit before the end, a WRAP marker (REC_SIZE
//   0xffffffff) is left at the tail (or fewer than 4 bytes remain) and it goes at offset 0.
//
// Sequence numbers (the SSE `id:`) are global, start at 1, and never repeat; each record
// carries the 64-bit session key (lanes.ts Lanes.key) of the session it belongs to, so one
// ring serves every session and a reader filters its own. Readers see only their own
// gateway key's sessions (the key name is in the hash).
//
// ## Invariants (inside the lock; a writer that dies mid-append can break V1: see Death)
//
//   V1  The RH_RECORDS retained records lie in [RH_HEAD, RH_TAIL) (or [RH_HEAD, end) and
//       [0, RH_TAIL) when wrapped), each starting where the previous one ends (or at 0 after
//       a WRAP marker or fewer than 4 bytes), with seqs RH_OLDEST_SEQ ... RH_NEXT_SEQ - 1.
//   V2  RH_RECORDS = 0 implies RH_HEAD = RH_TAIL = 0 and RH_OLDEST_SEQ = RH_NEXT_SEQ.
//   V3  Memory is fixed: appending evicts the oldest records until the new one fits, and a
//       payload above `maxPayload` (a quarter of the ring) is refused by append().
//
// ## Policy: bounds, eviction and what readers cost
//
// A reader whose cursor fell behind the oldest retained record learns it (a `gap`), never
// silently: the SSE stream then carries `replay_gap`.
//
// - Waking: an append bumps and notifies its session's slot of RH_SESSION_NOTIFY (slot =
//   `sessionSlot(key)`, the top bits of the mixed key) besides RH_NOTIFY (any append). A
//   reader sleeps on its own slot (`sessionToken` / `sessionChanged`): an append to session A
//   wakes A's readers and those of the sessions that share A's slot (1,000 readers on other
//   sessions: about 1000 / 4096 of one reader per append), never the others. The notify
//   counts add up in RT_WOKEN, the records reads examine in RT_SCANNED (both on /metrics).
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
// - Fairness: none between writers and readers beyond the lock (token-lock.ts: it barges);
//   readers copy out at most `maxBytes` per call, so the lock is never held for long.
//
// ## Cancel safety
//
// append() and read() are synchronous: nothing to cancel. The waits (`changed`,
// `sessionChanged`) hold nothing: an abort or a timeout just resolves them, and the caller
// reads again.
//
// ## Memory ordering
//
// Every operation is one short critical section under RH_LOCK (a TokenLock, token = row + 1;
// workers lock it, the primary only tries it: `tryAppend`). Inside, cells are plain Int32
// accesses ordered by the lock; (lo, hi) pairs follow pair64.ts. Every append bumps and
// notifies, before it unlocks, its session's slot of RH_SESSION_NOTIFY (what event streams
// sleep on, with Atomics.waitAsync) and RH_NOTIFY (any append: `changed()`), with Atomics.
// `snapshot()` and `nextSeq` read without the lock and may mix two moments (metrics only).
//
// ## Death
//
// An append writes the payload first and commits by advancing RH_TAIL / RH_RECORDS /
// RH_NEXT_SEQ last, so a writer that dies mid-copy leaves nothing visible. A thread that dies
// holding RH_LOCK is repaired by the primary (`repairRing`, called with the ledger's reclaim):
// the lock is freed (token-lock.ts releaseDead), nothing else is rebuilt. Eviction moves
// RH_OLDEST_SEQ before RH_HEAD; a reader that finds a record whose seq is not the one
// expected treats it as a gap and resynchronises at the head.

import { addLocked, read as readPair, readLocked, writeLocked } from '../ledger/pair64.ts'
import { releaseDead, TokenLock } from '../ledger/token-lock.ts'
import {
  HEADER_BYTES, HEADER_FIELDS, REC_HEADER_BYTES, REC_PAYLOAD, REC_SEQ, REC_SESSION_A, REC_SESSION_B, REC_SIZE,
  RH_CAPACITY, RH_HEAD, RH_LOCK, RH_MAGIC, RH_NEXT_SEQ, RH_NOTIFY, RH_OLDEST_SEQ, RH_PEAK_RECORDS, RH_RECORDS,
  RH_SESSION_NOTIFY, RH_TAIL, RH_TOTALS, RING_MAGIC, RT_APPENDED, RT_EVICTED, RT_REFUSED, RT_SCANNED, RT_WOKEN,
  SESSION_SLOTS, WRAP,
} from './layout.ts'

export { SESSION_SLOTS }

const SLOT_SHIFT = 32 - Math.log2(SESSION_SLOTS)

/** The change-counter slot of a session key (its two hash words mixed, the top bits). */
export function sessionSlot (session: readonly [number, number]): number {
  return Math.imul(session[0] ^ Math.imul(session[1], 0x85ebca6b), 0xc2b2ae35) >>> SLOT_SHIFT
}

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
  h[RH_CAPACITY] = capacity
  // Before the buffer is shared: plain writes, published by the magic's store.
  writeLocked(h, RH_NEXT_SEQ, 1)
  writeLocked(h, RH_OLDEST_SEQ, 1)
  Atomics.store(h, RH_MAGIC, RING_MAGIC)
  return sab
}

/** Primary: frees the ring's lock if the dead thread of `row` (token row + 1) holds it. */
export function repairRing (sab: SharedArrayBuffer, row: number): boolean {
  return releaseDead(new Int32Array(sab, 0, HEADER_FIELDS), RH_LOCK, row + 1)
}

export class EventRing {
  readonly capacity: number
  /** Largest payload append() accepts. */
  readonly maxPayload: number
  private readonly h: Int32Array
  private readonly d32: Int32Array
  private readonly d8: Uint8Array
  private readonly mutex: TokenLock

  constructor (sab: SharedArrayBuffer, row: number) {
    this.h = new Int32Array(sab, 0, HEADER_FIELDS)
    if (Atomics.load(this.h, RH_MAGIC) !== RING_MAGIC) throw new Error('not a sluice event ring')
    this.capacity = this.h[RH_CAPACITY]
    this.d32 = new Int32Array(sab, HEADER_BYTES, this.capacity / 4)
    this.d8 = new Uint8Array(sab, HEADER_BYTES, this.capacity)
    this.maxPayload = Math.floor(this.capacity / 4) - REC_HEADER_BYTES
    this.mutex = new TokenLock(this.h, RH_LOCK, row + 1, 'event ring')
  }

  /** Appends one event for a session; returns its sequence number, or 0 when too large. */
  append (session: readonly [number, number], payload: Uint8Array): number {
    this.mutex.lock()
    return this.appendLocked(session, payload)
  }

  /**
   * append() for the primary, which must never park: -1 when another thread holds the lock
   * after a short spin (retry on a later turn), else what append() returns.
   */
  tryAppend (session: readonly [number, number], payload: Uint8Array): number {
    return this.mutex.tryLock() ? this.appendLocked(session, payload) : -1
  }

  private appendLocked (session: readonly [number, number], payload: Uint8Array): number {
    const { h, d32 } = this
    if (payload.byteLength > this.maxPayload) {
      addLocked(h, RH_TOTALS + RT_REFUSED)
      this.mutex.unlock()
      return 0
    }
    const size = REC_HEADER_BYTES + ((payload.byteLength + 3) & ~3)
    let at: number
    for (;;) {
      at = this.placeLocked(size)
      if (at >= 0) break
      this.evictLocked()
    }
    const seq = readLocked(h, RH_NEXT_SEQ)
    const w = at >> 2
    this.d8.set(payload, at + REC_HEADER_BYTES)
    d32[w + REC_PAYLOAD] = payload.byteLength
    writeLocked(d32, w + REC_SEQ, seq)
    d32[w + REC_SESSION_A] = session[0]
    d32[w + REC_SESSION_B] = session[1]
    d32[w + REC_SIZE] = size
    // Commit: the record becomes visible to readers.
    if (h[RH_RECORDS] === 0) h[RH_HEAD] = at
    h[RH_TAIL] = at + size
    h[RH_RECORDS]++
    if (h[RH_RECORDS] > h[RH_PEAK_RECORDS]) h[RH_PEAK_RECORDS] = h[RH_RECORDS]
    addLocked(h, RH_NEXT_SEQ)
    addLocked(h, RH_TOTALS + RT_APPENDED)
    // Notified inside the lock so that the count of woken readers is exact. The session's own
    // slot wakes its readers; RH_NOTIFY wakes whoever waits for any append.
    const slot = RH_SESSION_NOTIFY + sessionSlot(session)
    Atomics.add(h, slot, 1)
    Atomics.add(h, RH_NOTIFY, 1)
    addLocked(h, RH_TOTALS + RT_WOKEN, Atomics.notify(h, slot) + Atomics.notify(h, RH_NOTIFY))
    this.mutex.unlock()
    return seq
  }

  /**
   * Events of `session` with seq > `after`, copied out, at most about `maxBytes` of payload.
   * `after` = 0 reads from the oldest retained record. `at`: the previous read's `at` for this
   * `after` (its cursor), so that only records after it are examined; -1 walks from the head.
   */
  read (session: readonly [number, number], after: number, maxBytes = 256 * 1024, at = -1): RingRead {
    const { h, d32 } = this
    this.mutex.lock()
    const oldest = readLocked(h, RH_OLDEST_SEQ)
    const next = readLocked(h, RH_NEXT_SEQ)
    const events: RingEvent[] = []
    let gap = after + 1 < oldest
    let cursor = Math.max(after, oldest - 1)
    if (cursor >= next - 1 || h[RH_RECORDS] === 0) {
      // Nothing to examine: the next record goes at the tail (at 0 into an empty ring).
      const tail = h[RH_RECORDS] === 0 ? 0 : h[RH_TAIL]
      this.mutex.unlock()
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
      at = h[RH_HEAD]
      expect = oldest
      left = h[RH_RECORDS]
    }
    let bytes = 0
    let more = false
    let scanned = 0
    while (left > 0) {
      if (at + 4 > this.capacity || d32[(at >> 2) + REC_SIZE] === WRAP) { at = 0; continue }
      scanned++
      const w = at >> 2
      const size = d32[w + REC_SIZE]
      const seq = readLocked(d32, w + REC_SEQ)
      if (seq !== expect) { gap = true; at = -1; break } // a torn eviction: resynchronise from what is readable
      expect++
      if (seq > cursor) {
        if (bytes >= maxBytes) { more = true; break }
        if (d32[w + REC_SESSION_A] === session[0] && d32[w + REC_SESSION_B] === session[1]) {
          const n = d32[w + REC_PAYLOAD]
          events.push({ seq, payload: Buffer.from(this.d8.subarray(at + REC_HEADER_BYTES, at + REC_HEADER_BYTES + n)) })
          bytes += n
        }
        cursor = seq
      }
      at += size
      left--
    }
    addLocked(h, RH_TOTALS + RT_SCANNED, scanned)
    this.mutex.unlock()
    // `at` is now where the record after `cursor` starts (more) or will be written (the tail).
    return { events, cursor, gap, oldest, more, at }
  }

  /** The change counter of `session`'s slot (lock-free): pass it to sessionChanged. */
  sessionToken (session: readonly [number, number]): number {
    return Atomics.load(this.h, RH_SESSION_NOTIFY + sessionSlot(session))
  }

  /**
   * Resolves when an append to `session` (or to a session sharing its slot) happened since
   * `token` (from `sessionToken`), after `ms`, or when `signal` aborts. Appends to other
   * sessions do not wake it.
   */
  sessionChanged (session: readonly [number, number], token: number, ms: number, signal?: AbortSignal): Promise<void> {
    return this.waitOn(RH_SESSION_NOTIFY + sessionSlot(session), token, ms, signal)
  }

  /** The next sequence number to be written (lock-free read). */
  get nextSeq (): number { return readPair(this.h, RH_NEXT_SEQ) }

  /**
   * Resolves when an append happened since `token` (from `changeToken`), after `ms`, or when
   * `signal` aborts.
   */
  changed (token: number, ms: number, signal?: AbortSignal): Promise<void> {
    return this.waitOn(RH_NOTIFY, token, ms, signal)
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

  get changeToken (): number { return Atomics.load(this.h, RH_NOTIFY) }

  snapshot (): RingSnapshot {
    const h = this.h
    const head = Atomics.load(h, RH_HEAD)
    const tail = Atomics.load(h, RH_TAIL)
    const records = Atomics.load(h, RH_RECORDS)
    return {
      capacity: this.capacity,
      records,
      bytes: records === 0 ? 0 : tail > head ? tail - head : this.capacity - head + tail,
      nextSeq: readPair(h, RH_NEXT_SEQ),
      oldestSeq: readPair(h, RH_OLDEST_SEQ),
      appended: readPair(h, RH_TOTALS + RT_APPENDED),
      evicted: readPair(h, RH_TOTALS + RT_EVICTED),
      refused: readPair(h, RH_TOTALS + RT_REFUSED),
      woken: readPair(h, RH_TOTALS + RT_WOKEN),
      scanned: readPair(h, RH_TOTALS + RT_SCANNED),
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
    if (hint + REC_HEADER_BYTES <= this.capacity && this.retainedLocked(hint) && this.d32[(hint >> 2) + REC_SIZE] !== WRAP && this.seqAtLocked(hint) === seq) return hint
    return -1
  }

  /** Whether `p` lies in the retained bytes: [head, tail), or [head, end) and [0, tail) when wrapped. */
  private retainedLocked (p: number): boolean {
    const h = this.h
    if (h[RH_RECORDS] === 0) return false
    const head = h[RH_HEAD]
    const tail = h[RH_TAIL]
    return tail > head ? p >= head && p < tail : p >= head || p < tail
  }

  private seqAtLocked (p: number): number {
    return readLocked(this.d32, (p >> 2) + REC_SEQ)
  }

  /** Where a record of `size` bytes fits without evicting, or -1. */
  private placeLocked (size: number): number {
    const { h, d32 } = this
    const cap = this.capacity
    if (h[RH_RECORDS] === 0) return 0
    const head = h[RH_HEAD]
    const tail = h[RH_TAIL]
    if (tail > head) {
      if (cap - tail >= size) return tail
      if (head >= size) {
        if (cap - tail >= 4) d32[(tail >> 2) + REC_SIZE] = WRAP
        return 0
      }
      return -1
    }
    // Wrapped (tail <= head): the free gap is [tail, head).
    return head - tail >= size ? tail : -1
  }

  private evictLocked (): void {
    const { h, d32 } = this
    let head = h[RH_HEAD]
    if (head + 4 > this.capacity || d32[(head >> 2) + REC_SIZE] === WRAP) head = 0
    const size = d32[(head >> 2) + REC_SIZE]
    addLocked(h, RH_OLDEST_SEQ)
    h[RH_RECORDS]--
    addLocked(h, RH_TOTALS + RT_EVICTED)
    if (h[RH_RECORDS] === 0) {
      h[RH_HEAD] = 0
      h[RH_TAIL] = 0
      return
    }
    head += size
    if (head + 4 > this.capacity || d32[(head >> 2) + REC_SIZE] === WRAP) head = 0
    h[RH_HEAD] = head
  }
}
