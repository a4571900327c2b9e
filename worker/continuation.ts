// Conversation state on a translated Responses route (issue 13, DESIGN.md "Conversation
// state"): a Responses client on a Chat Completions or Messages provider sends
// `previous_response_id` instead of its history, and the gateway expands the chain itself from
// the store all workers share (src/state/store.ts). Same-protocol Responses routes never come
// here: the provider keeps its own state and gets `previous_response_id` untouched.
//
// One exchange, in order:
//   1. begin()    after the first parse (which reported previous_response_id and store):
//                 store.chain() — refused honestly (continuation_not_found / _expired, 400,
//                 the id named) before anything is sent upstream. The chain's payloads and
//                 blobs are copied out of the store, every byte reserved in the exchange's
//                 scope, and its pins are held until the scope's release (onRelease).
//   2. task()     the second pool call (src/json/prepare.ts) gets the history (transferred)
//                 and puts it in front of the request's own input before the translation;
//                 with `store` it also hands back this turn's own input items (big strings
//                 split out as blobs, src/state/items.ts) — held, reserved, until step 3.
//   3. commit()   the provider's answer is complete (a stream's terminal, a JSON answer
//                 read whole): BEFORE the client can see its end, the turn is put, parent-
//                 linked, holding only what it added: its input items and its output items.
//                 So the client's next request, on any worker, finds it at once (no delay
//                 after which a chained id starts working). A put the store refuses (an entry
//                 over the per-entry cap, no room left that is not pinned) does not touch the
//                 response: the store tombstones the id as not continuable, the refusal is
//                 counted in sluice_continuation_evictions_total and named in the log line.
//   `store: false` keeps nothing (step 2 returns no items, step 3 puts nothing).
//
// The store off (limits.continuationBytes 0): there is no object; the request translator
// refuses previous_response_id by name (src/translate/request/responses.ts).

import { randomBytes } from 'node:crypto'
import { SluiceError } from '../src/errors.ts'
import type { ContinuationTask, PrepareOk, StateInfo } from '../src/json/prepare.ts'
import { entryPayload, joinPayloads, type BlobBytes } from '../src/state/items.ts'
import type { ConversationStore } from '../src/state/store.ts'
import type { ExchangeScope } from './scope.ts'

/** What a Responses request without previous_response_id or `store: false` means (prepare reports only the rest). */
export const DEFAULT_STATE: StateInfo = Object.freeze({ previousResponseId: null, store: true })

/** What the exchange's log line says about conversation state. */
export interface ContinuationRecord {
  previousResponseId: string | null
  /** Turns in the expanded chain (0: none named). */
  turns: number
  /** 'stored', 'not_stored' (store: false), a put refusal (entry_too_large, no_room, blob_missing; internal_error: a bug), or 'none' (no complete answer). */
  stored: string
}

export class Continuation {
  readonly record: ContinuationRecord
  private readonly store: ConversationStore
  private readonly scope: ExchangeScope
  private readonly keyName: string
  private readonly keep: boolean
  private history: Uint8Array | null = null
  private blobs: BlobBytes[] = []
  /** Bytes of history + blobs reserved until the pool call returns. */
  private inFlight = 0
  private turn: PrepareOk['turn'] | null = null
  private turnBytes = 0

  private constructor (store: ConversationStore, scope: ExchangeScope, keyName: string, state: StateInfo) {
    this.store = store
    this.scope = scope
    this.keyName = keyName
    this.keep = state.store
    this.record = { previousResponseId: state.previousResponseId, turns: 0, stored: state.store ? 'none' : 'not_stored' }
  }

  /**
   * Step 1. Null when the store is off (the translator then refuses a previous_response_id
   * by name). Throws the chain's refusal.
   */
  static begin (store: ConversationStore | null, scope: ExchangeScope, keyName: string, state: StateInfo): Continuation | null {
    if (store === null) return null
    const c = new Continuation(store, scope, keyName, state)
    const id = state.previousResponseId
    if (id === null) return c
    const chain = store.chain({ keyName, id })
    if (!chain.ok) {
      const details: Record<string, string> = { field: 'previous_response_id', id: chain.id }
      if (chain.reason !== undefined) details.reason = chain.reason
      throw new SluiceError(chain.code, details)
    }
    // Pins until everything the exchange holds is released (after the put of step 3).
    scope.onRelease(chain.release)
    c.record.turns = chain.payloads.length
    const blobs: BlobBytes[] = []
    for (const hash of chain.blobs) {
      const bytes = store.blob(keyName, hash)
      // Pinned by the chain above, so there (S3); never a history with a hole in it.
      if (bytes === null) throw new SluiceError('continuation_expired', { field: 'previous_response_id', id, reason: 'blob missing' })
      blobs.push({ hash, bytes })
    }
    const history = joinPayloads(chain.payloads)
    const n = history.byteLength + blobs.reduce((a, b) => a + b.bytes.byteLength, 0)
    scope.reserve(n) // storage_budget_exhausted when the history does not fit now
    c.inFlight = n
    c.history = history
    c.blobs = blobs
    return c
  }

  /** Step 2: the second pool call's `continuation` (the history is given up to it). */
  task (): ContinuationTask {
    const t: ContinuationTask = {}
    if (this.history !== null) {
      t.history = this.history
      t.blobs = this.blobs
      this.history = null
      this.blobs = []
    }
    if (this.keep) t.keep = { blobThreshold: this.store.blobThreshold }
    return t
  }

  /** After the second pool call settled (either way): its inputs are gone, its turn is held. */
  prepared (result: PrepareOk | null): void {
    if (this.inFlight > 0) { this.scope.unreserve(this.inFlight); this.inFlight = 0 }
    const turn = result?.turn
    if (!this.keep || turn === undefined) return
    const n = turn.input.byteLength + turn.blobs.reduce((a, b) => a + b.bytes.byteLength, 0)
    this.scope.reserve(n)
    this.turn = turn
    this.turnBytes = n
  }

  /**
   * What the response objects echo (previous_response_id, store) and whether to keep the
   * output. A kept turn's id gets a random suffix of the gateway's (`resp_<provider id>_<12
   * hex>`): the id is the store's key, and a provider that repeats its ids (some local
   * servers do) must not make one conversation overwrite another's turn.
   */
  get state (): { previousResponseId: string | null, store: boolean, keep: boolean, idSuffix?: string } {
    const keep = this.keep && this.turn !== null
    const s: { previousResponseId: string | null, store: boolean, keep: boolean, idSuffix?: string } = { previousResponseId: this.record.previousResponseId, store: this.keep, keep }
    if (keep) s.idSuffix = '_' + randomBytes(6).toString('hex')
    return s
  }

  /**
   * Step 3: the answer is complete; `id` is the response id the client sees, `output` its
   * output items (a JSON array text). Once; before the client can see the end.
   */
  commit (id: string, output: Uint8Array): void {
    const turn = this.turn
    if (turn === null || turn === undefined) return
    this.turn = null
    try {
      const r = this.store.put({
        keyName: this.keyName,
        id,
        parentId: this.record.previousResponseId,
        payload: entryPayload(turn.input, output),
        blobs: turn.blobs,
      })
      this.record.stored = r.ok ? 'stored' : r.reason
    } catch {
      // Never the response's failure: the client gets its answer; the id is just not kept.
      this.record.stored = 'internal_error'
    } finally {
      this.dropTurn()
    }
  }

  /** The held turn's bytes go back (commit done, or no complete answer). Idempotent. */
  dropTurn (): void {
    this.turn = null
    if (this.turnBytes > 0 && !this.scope.isReleased) this.scope.unreserve(this.turnBytes)
    this.turnBytes = 0
  }
}
