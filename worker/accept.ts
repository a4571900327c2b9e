// Acceptance: the one front door of every exchange, in every mode (blocking routes,
// non-blocking mode, JSON-RPC). It runs synchronously, before anything is answered, and in
// one order:
//
//   auth -> session id -> drain -> heap -> turn -> lane
//
// Why this order (DESIGN.md "The exchange lifecycle", steps 1-2, and seed 002):
// - auth first: nothing about a caller who is not one is looked at or counted;
// - the session id next, because a malformed one is the caller's error whatever the state of
//   the gateway;
// - drain and heap before anything is counted: a gateway that is stopping or short of heap
//   refuses without touching the caller's run or session (a retry meets a clean slate);
// - the turn pin before the lane: both are pre-body facts of step 1, and a run at its limit
//   must never occupy a session slot it can never use;
// - the lane last: it is the acceptance check itself ("count and enqueue, or refuse"), and
//   after it nothing can refuse the exchange before it is handed on, so a counted entry is
//   always either run or released by its scope. An already-aborted request is never counted.
//
// What is taken goes into the exchange's ExchangeScope (worker/scope.ts), the one owner of its
// release; on a refusal everything taken so far goes back before the caller can see it.
// The exchange permit is not taken here: it is the first step of the exchange itself
// (worker/exchange.ts), after the lane turn, with the body still unread.

import { randomUUID } from 'node:crypto'
import type { IncomingMessage } from 'node:http'
import type { KeyConfig } from '../src/config/schema.ts'
import { abortCause, SluiceError } from '../src/errors.ts'
import type { ExchangeDeps, Mode } from './deps.ts'
import { runIdentity } from './deps.ts'
import { enterLane, lanesEnabled, type LaneTicket } from './lane-ticket.ts'
import { ExchangeScope } from './scope.ts'

/** An exchange that passed acceptance: who, which session, and the scope that owns its holds. */
export interface Accepted {
  readonly exchangeId: string
  readonly mode: Mode
  readonly key: KeyConfig
  readonly runId: string | null
  readonly sessionId: string | null
  /** The lane entry's ticket (null without a session): the exchange waits for its turn. */
  readonly lane: LaneTicket | null
  readonly scope: ExchangeScope
}

export interface AcceptOptions {
  mode: Mode
  /** The session id: read after authentication (a thunk: blocking routes parse the headers,
   *  throwing invalid_request), or a value the route validated (non-blocking mode's path,
   *  JSON-RPC params). */
  sessionId: string | null | (() => string | null)
  /** The exchange id to use (blocking routes name it in a door refusal); else a new one. */
  exchangeId?: string
  /** Filled in as acceptance learns them, for the log line of a refusal. */
  known?: { keyName?: string | null; sessionId?: string | null }
  /** The key, when the route authenticated already (JSON-RPC reads its envelope first). */
  key?: KeyConfig
  /** A scope that already holds bytes for this request (an envelope read before acceptance). */
  scope?: ExchangeScope
  /** The caller's hang-up: an already-aborted request is never counted in its lane. */
  signal?: AbortSignal
}

/**
 * Accepts one exchange or throws its refusal (a SluiceError). On a refusal nothing is left
 * taken, except what `opts.scope` held before the call (the caller still owns that scope).
 */
export function accept (deps: ExchangeDeps, req: IncomingMessage, opts: AcceptOptions): Accepted {
  const key = opts.key ?? deps.auth.authenticate(req.headers, req.socket)
  if (opts.known) opts.known.keyName = key.name
  const sessionId = typeof opts.sessionId === 'function' ? opts.sessionId() : opts.sessionId
  if (opts.known) opts.known.sessionId = sessionId
  if (deps.ledger.draining) throw new SluiceError('shutting_down')
  deps.admission.checkHeap()
  const scope = opts.scope ?? new ExchangeScope(deps.ledger)
  const runId = runIdentity(req)
  const exchangeId = opts.exchangeId ?? randomUUID()
  const turn = deps.turns.take(key, runId)
  let lane: LaneTicket | null = null
  if (sessionId !== null && lanesEnabled(deps.ledger)) {
    try {
      if (opts.signal?.aborted) throw abortCause(opts.signal)
      lane = enterLane(deps.ledger, key.name, sessionId, exchangeId, opts.mode === 'events')
    } catch (err) {
      turn.giveBack()
      throw err
    }
  }
  scope.tookTurn(turn)
  if (lane) scope.tookLane(lane)
  return { exchangeId, mode: opts.mode, key, runId, sessionId, lane, scope }
}
