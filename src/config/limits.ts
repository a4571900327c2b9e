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
