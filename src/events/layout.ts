// The session event ring's SharedArrayBuffer layout (ring.ts): every offset is a named
// constant here, and no other file indexes the ring with a bare number.
//
//   [ Int32 header: HEADER_FIELDS cells | data: the capacity in bytes, records, 4-byte aligned ]
//
// Header cells are RH_* ("ring header"); (lo, hi) pairs follow pair64.ts. Record words are
// REC_*, counted from the record's first word; REC_HEADER_FIELDS words precede the payload.
//
// RH_LOCK and RH_NOTIFY keep the cells they had (1 and 10): test/unit/events/ring.test.ts
// plays a dead lock holder and an append from a bare thread at those indices.

import { TOKEN_LOCK_FIELDS } from '../ledger/token-lock.ts'

export const RING_MAGIC = 0x51c1e7e1

// ---- Int32 header ----
export const RH_MAGIC = 0
/** The ring's TokenLock (token = row + 1): TOKEN_LOCK_FIELDS cells, the parked count second. */
export const RH_LOCK = 1
export const RH_CAPACITY = RH_LOCK + TOKEN_LOCK_FIELDS // data bytes
export const RH_HEAD = RH_CAPACITY + 1          // offset of the oldest retained record
export const RH_TAIL = RH_HEAD + 1              // offset after the newest record
export const RH_RECORDS = RH_TAIL + 1           // records retained
export const RH_PEAK_RECORDS = RH_RECORDS + 1   // the most ever retained at once
export const RH_NEXT_SEQ = RH_PEAK_RECORDS + 1  // (lo, hi) the next record's seq (from 1)
export const RH_NOTIFY = RH_NEXT_SEQ + 2        // change counter: bumped and notified by every append
export const RH_OLDEST_SEQ = RH_NOTIFY + 1      // (lo, hi) the oldest retained record's seq
export const RH_TOTALS = RH_OLDEST_SEQ + 2      // RING_TOTAL_FIELDS cells of (lo, hi) totals follow
export const RT_APPENDED = 0                    // records appended
export const RT_EVICTED = 2                     // records evicted to make room
export const RT_REFUSED = 4                     // appends refused: payload above maxPayload
export const RT_WOKEN = 6                       // readers woken by appends (Atomics.notify's counts)
export const RT_SCANNED = 8                     // records examined by reads
export const RING_TOTAL_FIELDS = 10
/** SESSION_SLOTS change counters, one per session-hash slot (ring.ts sessionSlot). */
export const RH_SESSION_NOTIFY = RH_TOTALS + RING_TOTAL_FIELDS
/** Per-session change counters (a power of two): an append wakes the readers of its slot only. */
export const SESSION_SLOTS = 4096
export const HEADER_FIELDS = RH_SESSION_NOTIFY + SESSION_SLOTS
export const HEADER_BYTES = HEADER_FIELDS * 4

// ---- Int32 record, from its first word ----
export const REC_SIZE = 0           // the whole record in bytes, padded to 4; WRAP: a wrap marker
export const REC_PAYLOAD = 1        // payload bytes
export const REC_SEQ = 2            // (lo, hi) its sequence number
export const REC_SESSION_A = 4      // (A, B): the 64-bit session key (lanes.ts Lanes.key)
export const REC_SESSION_B = 5
export const REC_HEADER_FIELDS = 6
export const REC_HEADER_BYTES = REC_HEADER_FIELDS * 4

/** REC_SIZE of a wrap marker (0xffffffff): the next record is at offset 0. */
export const WRAP = -1
