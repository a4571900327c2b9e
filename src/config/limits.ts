// Reading limits, shared by the primary and the HTTP workers. Kept free of the schema library
// (zod) so the workers do not load it: ~9 MB of RSS per worker thread when they did.

import type { Config } from './schema.ts'

/** The cap as a number, or null when disabled (0, null, "Infinity"): /capabilities' shape. */
export function pendingCap (limits: Config['limits']): number | null {
  const v = limits.maxPendingPromptsPerSession
  return v === null || v === 0 || v === 'Infinity' ? null : v
}

export interface ContinuationLimits {
  /** The store's whole SharedArrayBuffer, reserved out of storageBytes. */
  bytes: number
  entryBytes: number
  blobBytes: number
  blobTotalBytes: number
  blobThreshold: number
  ttlMs: number
}

const MiB = 1024 * 1024
/** Below this the store is off: its index and tombstones would crowd out the data. */
export const MIN_CONTINUATION_BYTES = MiB

/**
 * The conversation store's effective limits, or null when it is off. The store's buffer is
 * carved out of the aggregate storage budget (the ledger gets storageBytes minus it), so
 * the two together never exceed storageBytes. The per-entry and per-blob caps are clamped to
 * an eighth of the buffer (at most a quarter of its data region: one entry can never evict
 * everything). Throws, naming the key, when an explicit size exceeds storageBytes.
 */
export function continuationLimits (limits: Config['limits']): ContinuationLimits | null {
  const explicit = limits.continuationBytes
  if (explicit !== null && explicit > limits.storageBytes) {
    throw new Error(`limits.continuationBytes: ${explicit} exceeds limits.storageBytes (${limits.storageBytes}), which it is carved out of`)
  }
  const raw = explicit ?? Math.min(64 * MiB, Math.floor(limits.storageBytes / 4))
  const bytes = raw & ~3
  if (bytes < MIN_CONTINUATION_BYTES) return null
  const eighth = Math.floor(bytes / 8)
  return {
    bytes,
    entryBytes: Math.min(limits.continuationEntryBytes, eighth),
    blobBytes: Math.min(limits.continuationBlobBytes, eighth),
    blobTotalBytes: limits.continuationBlobTotalBytes ?? Math.floor(bytes / 2),
    blobThreshold: limits.continuationBlobThreshold,
    ttlMs: limits.continuationTtlMs,
  }
}

/**
 * Heap per byte of JSON allowed for a body parsed in the HTTP worker. Measured on Node 24
 * (the graph JSON.parse keeps, after GC): at most ~22x, for 64 KiB of `{},{},...`; numbers
 * and strings 3-5x, objects with distinct keys ~7x. 64x leaves room for the transient peak
 * and for a translation's second graph and output text.
 */
export const IN_WORKER_PARSE_AMPLIFICATION = 64
const IN_WORKER_PARSE_DEFAULT = 64 * 1024

/**
 * The in-worker parse threshold (limits.inWorkerParseBytes): bodies below it are parsed in
 * the HTTP worker. It must not be able to endanger that worker's heap, so its worst-case
 * graph (x IN_WORKER_PARSE_AMPLIFICATION) must fit in the headroom the heap admission check
 * keeps free (workerHeapMb x (1 - workerHeapAdmitFraction)): null takes 64 KiB, or that
 * bound when it is lower; an explicit value above it throws. With the defaults (128 MiB, 0.85)
 * the bound is ~300 KiB. (The JSON caps bound it too: a body of n bytes holds at most ~n/2
 * values, so 64 KiB can never build more than ~32 K values, far below maxJsonNodes.)
 */
export function inWorkerParseBytes (limits: Config['limits']): number {
  const headroom = Math.floor(limits.workerHeapMb * MiB * (1 - limits.workerHeapAdmitFraction))
  const bound = Math.floor(headroom / IN_WORKER_PARSE_AMPLIFICATION)
  const v = limits.inWorkerParseBytes
  if (v === null) return Math.min(IN_WORKER_PARSE_DEFAULT, bound)
  if (v > bound) {
    throw new Error(`${v} is too large for the HTTP worker's heap: its worst case (${IN_WORKER_PARSE_AMPLIFICATION}x) must fit in the ${headroom} bytes workerHeapMb keeps free above workerHeapAdmitFraction, so at most ${bound}`)
  }
  return v
}
