// One exchange's entry in its session's lane (the ledger's session lanes, src/ledger/lanes.ts:
// one active per session, FIFO behind it, the pending cap), released exactly once. The
// exchange's ExchangeScope owns the ticket; this file turns the ledger's results into
// catalogue refusals.

import { SluiceError } from '../src/errors.ts'
import { Lanes } from '../src/ledger/lanes.ts'
import type { Ledger } from '../src/ledger/ledger.ts'
import { ENTRY_EVENTS } from '../src/ledger/layout.ts'

export class LaneTicket {
  readonly sessionId: string
  readonly entry: number
  /** True when the exchange could run at once (nobody of its session ahead of it). */
  readonly ranAtOnce: boolean
  private readonly lanes: Lanes
  private released = false
  private stopWatch: (() => void) | null = null

  constructor (lanes: Lanes, sessionId: string, entry: number, active: boolean) {
    this.lanes = lanes
    this.sessionId = sessionId
    this.entry = entry
    this.ranAtOnce = active
  }

  /**
   * Waits for this exchange's turn in its session. On abort the entry is already gone
   * (withdrawn by the ledger) and the ticket counts as released.
   */
  async wait (signal: AbortSignal): Promise<void> {
    try {
      await this.lanes.waitActive(this.entry, signal)
    } catch (err) {
      this.released = true
      this.stopWatch?.()
      throw err
    }
  }

  /** Calls `onCancel` once if a cancel request (from any worker) names this exchange. */
  watchCancel (onCancel: () => void): void {
    if (this.released || this.stopWatch) return
    this.stopWatch = this.lanes.watchCancel(this.entry, onCancel)
  }

  /** Idempotent: the lane slot may be returned early (before the caller sees the end). */
  release (): void {
    if (this.released) return
    this.released = true
    this.stopWatch?.()
    this.lanes.release(this.entry)
  }
}

/** Lanes are on unless the ledger was built without entries. */
export function lanesEnabled (ledger: Ledger): boolean { return ledger.lanes.size > 0 }

/**
 * The synchronous acceptance check (seed 002): refuse when the session is at its pending cap
 * (prompt_queue_full) or the lane table is full (capacity_exhausted); otherwise the exchange
 * is counted, ACTIVE or QUEUED. The caller checks its abort signal first.
 */
export function enterLane (ledger: Ledger, keyName: string, sessionId: string, exchangeId: string, events: boolean): LaneTicket {
  const lanes = ledger.lanes
  const x = Lanes.exchangeKey(exchangeId)
  if (x === null) throw new Error(`exchange id ${exchangeId} is not a UUID`)
  const r = lanes.enter(Lanes.key(keyName, sessionId), x, events ? ENTRY_EVENTS : 0)
  if (r.ok) return new LaneTicket(lanes, sessionId, r.entry, r.active)
  if (r.reason === 'full') throw new SluiceError('prompt_queue_full', { sessionId, limit: r.limit, pendingCount: r.pendingCount })
  throw new SluiceError('capacity_exhausted', { gate: 'session', limit: r.limit },
    'local session capacity is full: every session-lane entry is in use')
}

/** Flags the session's pending exchanges (or one of them) for cancellation, from any worker. */
export function cancelInLane (ledger: Ledger, keyName: string, sessionId: string, exchangeId: string | null): number {
  if (exchangeId === null) return ledger.lanes.requestCancel(Lanes.key(keyName, sessionId), null)
  const x = Lanes.exchangeKey(exchangeId)
  return x === null ? 0 : ledger.lanes.requestCancel(Lanes.key(keyName, sessionId), x)
}
