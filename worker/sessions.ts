// Session identity and the session lane of one exchange (DESIGN.md "Sessions").
//
// The id comes from the headers, before the body: the first present of `x-session-id`,
// `session-id` (Codex CLI) and `x-claude-code-session-id` (Claude Code); the non-blocking
// routes take it from the path and JSON-RPC from its params. Requests without one are not
// laned. The lane itself lives in the ledger (src/ledger/lanes.ts), so the count is shared
// by every HTTP worker; this file turns its results into catalogue refusals and owns the
// release-once of one exchange's entry.

import { SluiceError } from '../src/errors.ts'
import { Lanes } from '../src/ledger/lanes.ts'
import type { Ledger } from '../src/ledger/ledger.ts'
import { ENTRY_EVENTS } from '../src/ledger/layout.ts'

export const SESSION_HEADERS = ['x-session-id', 'session-id', 'x-claude-code-session-id'] as const

/** Longest session id accepted; a longer one is refused, never truncated (two ids must not merge). */
export const MAX_SESSION_ID = 256

/**
 * The session id of a request, null when it names none; throws invalid_request when
 * malformed or given twice. Takes `req.headersDistinct`: Node joins a repeated header into one
 * "a, b" string, which would silently make a third session.
 */
export function sessionIdOf (headers: Record<string, string[] | undefined>): string | null {
  for (const name of SESSION_HEADERS) {
    const v = headers[name]
    if (v === undefined) continue
    if (v.length !== 1) throw new SluiceError('invalid_request', { header: name, reason: 'given more than once' }, `the ${name} header is given more than once`)
    return checkSessionId(v[0], name)
  }
  return null
}

/** Validates a session id from any source (header, path, params). */
export function checkSessionId (id: unknown, where: string): string {
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_SESSION_ID || /[\u0000-\u001f\u007f]/.test(id)) {
    throw new SluiceError('invalid_request', { field: where, reason: `a session id is 1 to ${MAX_SESSION_ID} printable characters` }, `invalid session id in ${where}`)
  }
  return id
}

/** One exchange's entry in its session's lane, released exactly once. */
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

  release (): void {
    if (this.released) return
    this.released = true
    this.stopWatch?.()
    this.lanes.release(this.entry)
  }

  get isReleased (): boolean { return this.released }
}

export class SessionLanes {
  private readonly ledger: Ledger

  constructor (ledger: Ledger) { this.ledger = ledger }

  get enabled (): boolean { return this.ledger.lanes.size > 0 }

  /**
   * The synchronous acceptance check (seed 002): refuse when the session is at its pending
   * cap (prompt_queue_full) or the lane table is full (capacity_exhausted); otherwise the
   * exchange is counted, ACTIVE or QUEUED. The caller checks its abort signal first.
   */
  enter (keyName: string, sessionId: string, exchangeId: string, events = false): LaneTicket {
    const lanes = this.ledger.lanes
    const x = Lanes.exchangeKey(exchangeId)
    if (x === null) throw new Error(`exchange id ${exchangeId} is not a UUID`)
    const r = lanes.enter(Lanes.key(keyName, sessionId), x, events ? ENTRY_EVENTS : 0)
    if (r.ok) return new LaneTicket(lanes, sessionId, r.entry, r.active)
    if (r.reason === 'full') throw new SluiceError('prompt_queue_full', { sessionId, limit: r.limit, pendingCount: r.pendingCount })
    throw new SluiceError('capacity_exhausted', { gate: 'session', limit: r.limit },
      'local session capacity is full: every session-lane entry is in use')
  }

  /** Flags the session's pending exchanges (or one of them) for cancellation, from any worker. */
  cancel (keyName: string, sessionId: string, exchangeId: string | null): number {
    if (exchangeId === null) return this.ledger.lanes.requestCancel(Lanes.key(keyName, sessionId), null)
    const x = Lanes.exchangeKey(exchangeId)
    return x === null ? 0 : this.ledger.lanes.requestCancel(Lanes.key(keyName, sessionId), x)
  }

  pending (keyName: string, sessionId: string): number {
    return this.ledger.lanes.pendingOf(Lanes.key(keyName, sessionId))
  }
}
