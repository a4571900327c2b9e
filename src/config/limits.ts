// Reading limits, shared by the primary and the HTTP workers. Kept free of the schema library
// (zod) so the workers do not load it: ~9 MB of RSS per worker thread when they did.

import type { Config } from './schema.ts'

/** The cap as a number, or null when disabled (0, null, "Infinity"): /capabilities' shape. */
export function pendingCap (limits: Config['limits']): number | null {
  const v = limits.maxPendingPromptsPerSession
  return v === null || v === 0 || v === 'Infinity' ? null : v
}
