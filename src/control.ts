// The primary <-> HTTP worker protocol, typed in one place.
//
// Coordination of permits and bytes never travels here: that is the ledger's job (Atomics
// on the shared buffer). These messages are lifecycle only: start-up, readiness, drain.

import type { Config } from './config/schema.ts'
import type { LedgerHandleInit } from './ledger/ledger.ts'

/** workerData of an HTTP worker. */
export interface WorkerBoot {
  readonly ledger: LedgerHandleInit
  /** The session event ring (src/events/ring.ts). */
  readonly events: SharedArrayBuffer
  /** The conversation-state store (src/state/store.ts); null when limits turn it off. */
  readonly continuations: SharedArrayBuffer | null
  readonly row: number
  readonly generation: number
  readonly config: Config
  /** Base URL of the embedded simulated provider, when running. */
  readonly simUrl: string | null
  /** The failure-signing key (base64), from the environment or generated at start. */
  readonly signingKey: string
  /** Test-only routes (/_test/*), from SLUICE_TEST_HOOKS=1 in the primary's environment. */
  readonly testHooks: boolean
}

export type PrimaryToWorker =
  | { readonly type: 'drain' }

export type WorkerToPrimary =
  | { readonly type: 'listening'; readonly port: number }
  | { readonly type: 'fatal'; readonly error: string }
  | { readonly type: 'drained' }
  /** This thread gave memory back (its idle collection ran, its parser thread retired): the primary trims malloc (src/malloc-trim.ts). */
  | { readonly type: 'released'; readonly why: 'idle-collection' | 'parser-retired' }
