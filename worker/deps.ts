// What the exchange path of one HTTP worker is built from, and the record each exchange
// leaves behind (its log line and trace attributes). Types and two small helpers only, so
// every module of worker/ can import it without pulling in the exchange itself.

import type { IncomingMessage } from 'node:http'
import type { Config } from '../src/config/schema.ts'
import type { ErrorCode } from '../src/errors.ts'
import type { EventRing } from '../src/events/ring.ts'
import type { ParserPool } from '../src/json/pool.ts'
import type { Ledger } from '../src/ledger/ledger.ts'
import type { Route } from '../src/protocols/routes.ts'
import type { Router } from '../src/routing.ts'
import type { Signer } from '../src/sse/sign.ts'
import type { ConversationStore } from '../src/state/store.ts'
import type { Tracing } from '../src/telemetry/tracing.ts'
import type { Admission } from './admission.ts'
import type { ContinuationRecord } from './continuation.ts'
import type { Authenticator } from './auth.ts'
import type { Background } from './background.ts'
import type { Exemplars } from './exemplars.ts'
import type { TurnPins } from './turns.ts'
import type { Upstreams } from './upstream.ts'

/** How the result reaches the caller: the HTTP response, session events, a JSON-RPC result. */
export type Mode = 'blocking' | 'events' | 'rpc'

export interface ExchangeDeps {
  config: Config
  ledger: Ledger
  admission: Admission
  auth: Authenticator
  router: Router
  upstreams: Upstreams
  parser: ParserPool
  turns: TurnPins
  /** The session event ring (non-blocking mode). */
  ring: EventRing
  /** The conversation-state store shared by all workers (src/state/store.ts); null when off. */
  continuations: ConversationStore | null
  /** Run traces, when the OTEL_* variables configure an exporter. */
  tracing: Tracing | null
  /** Exchanges in flight and open event streams: what a drain waits for. */
  background: Background
  signer: Signer
  log: (fields: Record<string, unknown>) => void
  /** The last finished exchange's objects, kept so an idle full GC leaves the JIT's maps (worker/exemplars.ts). */
  exemplars: Exemplars
}

/** The per-exchange record: one log line at the end, attributes for traces. */
export interface ExchangeRecord {
  exchangeId: string | null
  runId: string | null
  route: Route | null
  keyName: string | null
  sessionId: string | null
  mode: Mode
  /** Waited behind an earlier exchange of the same session. */
  laneQueued: boolean
  laneMs: number
  model: string | null
  provider: string | null
  stream: boolean
  code: ErrorCode | 'ok'
  status: number
  queued: boolean
  queueMs: number
  ttfbMs: number | null
  totalMs: number
  bytesIn: number
  bytesOut: number
  frames: number
  usage: Record<string, number> | null
  partial: boolean
  evidence: boolean
  /** The trace id, when this exchange is traced. */
  traceId: string | null
  /** Start -> the actual release of every permit, lane slot and byte (null: nothing was held). */
  releaseMs: number | null
  /** `<client protocol>-><provider protocol>` when the exchange was translated, else null. */
  translated: string | null
  /** Hosted tools left out of a translated provider request (null when none). */
  droppedTools: string[] | null
  /** Conversation state on a translated Responses route (worker/continuation.ts); null otherwise. */
  continuation: ContinuationRecord | null
}

export function newRecord (fields: Pick<ExchangeRecord, 'exchangeId' | 'runId' | 'route' | 'mode'> & Partial<ExchangeRecord>): ExchangeRecord {
  return {
    keyName: null,
    sessionId: null,
    laneQueued: false,
    laneMs: 0,
    model: null,
    provider: null,
    stream: false,
    code: 'ok',
    status: 0,
    queued: false,
    queueMs: 0,
    ttfbMs: null,
    totalMs: 0,
    bytesIn: 0,
    bytesOut: 0,
    frames: 0,
    usage: null,
    partial: false,
    evidence: false,
    traceId: null,
    releaseMs: null,
    translated: null,
    droppedTools: null,
    continuation: null,
    ...fields,
  }
}

/** The run identity: `x-sluice-run-id`, else the trace id of a W3C `traceparent`. */
export function runIdentity (req: IncomingMessage): string | null {
  const run = req.headers['x-sluice-run-id']
  if (typeof run === 'string' && run.length > 0 && run.length <= 256) return run
  const tp = req.headers.traceparent
  if (typeof tp === 'string') {
    const m = /^[\da-f]{2}-([\da-f]{32})-[\da-f]{16}-[\da-f]{2}$/.exec(tp.trim())
    if (m) return m[1]
  }
  return null
}
