// Prometheus text exposition of the ledger snapshot and the supervisor's state.
// Every figure is read, never recomputed: the ledger is the one source of truth.

import type { Config } from '../src/config/schema.ts'
import type { LedgerSnapshot } from '../src/ledger/ledger.ts'
import type { ErrorCode } from '../src/errors.ts'
import type { Supervisor } from './supervisor.ts'
import type { RingSnapshot } from '../src/events/ring.ts'
import type { StoreSnapshot } from '../src/state/store.ts'
import type { ProvidersSnapshot } from '../src/ledger/providers.ts'
import { providerSlots } from '../src/routing.ts'
import { HIST_BOUNDS_MS, HIST_FIRST_BYTE, HIST_QUEUE_WAIT, HIST_TOTAL, RETRY_REASON_NAMES, RG_EVENT_STREAMS, RG_INSPECTOR_BYTES, RG_PENDING_BYTES, RG_STREAMS, RG_TOOL_ARGUMENT_BYTES, RG_TRANSLATE_ITEM_BYTES, RG_TRANSLATE_OUTPUT_BYTES, RG_TRANSLATIONS, RG_UPSTREAM_WAITS } from '../src/ledger/layout.ts'

export interface PrimaryCounters {
  refusals: () => Map<ErrorCode, number>
  /** The session event ring, when there is one. */
  events?: () => RingSnapshot
  /** The conversation-state store, when there is one. */
  continuations?: () => StoreSnapshot
  /** Row gauges summed over workers (RG_* order), and one histogram (HIST_*). */
  gauges?: () => number[]
  histogram?: (hist: number) => { buckets: number[]; sumMs: number; count: number }
  /** Provider accounts, circuit breakers and retries (src/ledger/providers.ts). */
  providers?: () => ProvidersSnapshot
  /** Idle malloc trims (src/malloc-trim.ts): how many ran, and the RSS they gave back. */
  trims?: () => { trims: number, releasedBytes: number }
}

const BREAKER_VALUE = { closed: 0, open: 1, 'half-open': 2 } as const

const HISTOGRAMS: Array<[hist: number, name: string, help: string]> = [
  [HIST_QUEUE_WAIT, 'sluice_queue_wait_seconds', 'Time an admitted exchange waited for its session turn and its exchange permit.'],
  [HIST_FIRST_BYTE, 'sluice_first_byte_seconds', 'Provider request to response headers (provider wait).'],
  [HIST_TOTAL, 'sluice_exchange_seconds', 'Admitted exchange, start to the actual release of everything it held.'],
]

type Sample = [labels: Record<string, string | number> | null, value: number]

class Writer {
  out = ''
  /** A Prometheus histogram from per-bucket (not cumulative) counts over HIST_BOUNDS_MS. */
  histogram (name: string, help: string, h: { buckets: number[]; sumMs: number; count: number }): void {
    this.out += `# HELP ${name} ${help}\n# TYPE ${name} histogram\n`
    let cum = 0
    for (let b = 0; b < h.buckets.length; b++) {
      cum += h.buckets[b]
      const le = b < HIST_BOUNDS_MS.length ? String(HIST_BOUNDS_MS[b] / 1000) : '+Inf'
      this.out += `${name}_bucket{le="${le}"} ${cum}\n`
    }
    this.out += `${name}_sum ${h.sumMs / 1000}\n${name}_count ${h.count}\n`
  }

  metric (name: string, type: 'gauge' | 'counter', help: string, samples: Sample[] | number): void {
    this.out += `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`
    if (typeof samples === 'number') { this.out += `${name} ${samples}\n`; return }
    for (const [labels, value] of samples) {
      if (!labels) { this.out += `${name} ${value}\n`; continue }
      const l = Object.entries(labels).map(([k, v]) => `${k}="${String(v).replace(/["\\\n]/g, '_')}"`).join(',')
      this.out += `${name}{${l}} ${value}\n`
    }
  }
}

export function renderMetrics (s: LedgerSnapshot, sup: Supervisor, counters: PrimaryCounters, config: Config): string {
  const w = new Writer()
  w.metric('sluice_exchanges_active', 'gauge', 'Exchange permits in use.', s.exchange.active)
  w.metric('sluice_exchanges_queued', 'gauge', 'Exchanges waiting in the FIFO queue (body unread).', s.exchange.queued)
  w.metric('sluice_exchanges_max', 'gauge', 'Exchange permits configured.', s.exchange.max)
  w.metric('sluice_exchanges_queue_max', 'gauge', 'Exchange queue capacity configured.', s.exchange.queueMax)
  w.metric('sluice_parse_permits_in_use', 'gauge', 'Parse permits in use.', s.parse.active)
  w.metric('sluice_parse_permits_queued', 'gauge', 'Waiters for the parse permit.', s.parse.queued)
  w.metric('sluice_parse_permits_max', 'gauge', 'Parse permits configured.', s.parse.max)
  w.metric('sluice_parse_envelopes_in_use', 'gauge', 'Envelope parses (no exchange permit) waiting for or holding the parse permit.', s.envelopes.inUse)
  w.metric('sluice_parse_envelopes_max', 'gauge', 'Envelope parses allowed at once (limits.maxEnvelopeParses).', s.envelopes.max)
  w.metric('sluice_parse_envelopes_refused_total', 'counter', 'Envelopes refused at once because the envelope-parse allowance was full.', s.envelopes.refused)
  w.metric('sluice_storage_bytes_reserved', 'gauge', 'Bytes reserved against the aggregate storage budget.', s.storage.reserved)
  w.metric('sluice_storage_bytes_limit', 'gauge', 'The aggregate storage budget.', s.storage.limit)
  w.metric('sluice_storage_bytes_peak', 'gauge', 'Highest reservation seen since start.', s.storage.peak)
  w.metric('sluice_admissions_total', 'counter', 'Exchange permits granted.', s.exchange.admitted)
  w.metric('sluice_releases_total', 'counter', 'Exchange permits returned by their holder.', s.exchange.released)
  w.metric('sluice_permits_admitted_total', 'counter', 'Permits granted, by gate.', [[{ gate: 'exchange' }, s.exchange.admitted], [{ gate: 'parse' }, s.parse.admitted]])
  w.metric('sluice_permits_released_total', 'counter', 'Permits returned by their holder, by gate.', [[{ gate: 'exchange' }, s.exchange.released], [{ gate: 'parse' }, s.parse.released]])
  w.metric('sluice_permits_reclaimed_total', 'counter', 'Permits reclaimed from dead workers, by gate.', [[{ gate: 'exchange' }, s.exchange.reclaimed], [{ gate: 'parse' }, s.parse.reclaimed]])
  w.metric('sluice_permit_waits_total', 'counter', 'Acquires that had to queue, by gate.', [[{ gate: 'exchange' }, s.exchange.queuedTotal], [{ gate: 'parse' }, s.parse.queuedTotal]])
  w.metric('sluice_permit_wait_outcomes_total', 'counter', 'Queued acquires that ended without a permit, by gate and outcome.', [
    [{ gate: 'exchange', outcome: 'queue_full' }, s.exchange.refusedFull],
    [{ gate: 'exchange', outcome: 'timeout' }, s.exchange.timeouts],
    [{ gate: 'exchange', outcome: 'cancel' }, s.exchange.cancels],
    [{ gate: 'exchange', outcome: 'cancel_after_grant' }, s.exchange.cancelsAfterGrant],
    [{ gate: 'parse', outcome: 'queue_full' }, s.parse.refusedFull],
    [{ gate: 'parse', outcome: 'timeout' }, s.parse.timeouts],
    [{ gate: 'parse', outcome: 'cancel' }, s.parse.cancels],
    [{ gate: 'parse', outcome: 'cancel_after_grant' }, s.parse.cancelsAfterGrant],
  ])
  const ln = s.lanes
  w.metric('sluice_session_pending', 'gauge', 'Exchanges pending in session lanes (active + queued), all sessions.', ln.pending)
  w.metric('sluice_session_active', 'gauge', 'Session-lane entries running (at most maxActivePerSession per session).', ln.active)
  w.metric('sluice_session_queued', 'gauge', 'Session-lane entries waiting behind their session\'s active exchange.', ln.queued)
  w.metric('sluice_sessions', 'gauge', 'Sessions with at least one pending exchange.', ln.sessions)
  w.metric('sluice_session_pending_max', 'gauge', 'The largest pending count of any one session now.', ln.maxSessionPending)
  w.metric('sluice_session_pending_limit', 'gauge', 'maxPendingPromptsPerSession (0 = no cap).', ln.pendingMax ?? 0)
  w.metric('sluice_session_entries_limit', 'gauge', 'Session-lane entries shared by all workers (limits.sessionEntries).', ln.entries)
  w.metric('sluice_session_lane_total', 'counter', 'Session-lane events by outcome.', [
    [{ outcome: 'entered' }, ln.entered],
    [{ outcome: 'queued' }, ln.queuedTotal],
    [{ outcome: 'refused_full' }, ln.refusedFull],
    [{ outcome: 'refused_entries' }, ln.refusedEntries],
    [{ outcome: 'released' }, ln.released],
    [{ outcome: 'cancel' }, ln.cancels],
    [{ outcome: 'cancel_after_promote' }, ln.cancelsAfterPromote],
    [{ outcome: 'reclaimed' }, ln.reclaimed],
    [{ outcome: 'cancel_request' }, ln.cancelRequests],
  ])
  const ring = counters.events?.()
  if (ring) {
    w.metric('sluice_session_events_bytes', 'gauge', 'Bytes held by the session event ring (fixed capacity below).', ring.bytes)
    w.metric('sluice_session_events_capacity_bytes', 'gauge', 'The session event ring\'s capacity (limits.sessionEventBytes).', ring.capacity)
    w.metric('sluice_session_events_records', 'gauge', 'Events retained for replay.', ring.records)
    w.metric('sluice_session_events_total', 'counter', 'Session events by outcome.', [
      [{ outcome: 'appended' }, ring.appended], [{ outcome: 'evicted' }, ring.evicted], [{ outcome: 'refused' }, ring.refused],
    ])
    w.metric('sluice_session_event_reader_wakeups_total', 'counter', 'Waiting event readers woken by appends.', ring.woken)
    w.metric('sluice_session_event_records_scanned_total', 'counter', 'Ring records examined by event reads (the work of reading).', ring.scanned)
  }
  const g = counters.gauges?.()
  if (g) {
    w.metric('sluice_stream_readers', 'gauge', 'Provider streams being relayed (active stream readers).', g[RG_STREAMS])
    w.metric('sluice_stream_pending_bytes', 'gauge', 'Stream bytes held back (an unfinished frame) or queued to clients.', g[RG_PENDING_BYTES])
    w.metric('sluice_stream_inspector_bytes', 'gauge', 'Bytes held by the SSE framers (inspector bytes).', g[RG_INSPECTOR_BYTES])
    w.metric('sluice_session_event_streams', 'gauge', 'Open session event streams (GET /v1/sessions/:id/events).', g[RG_EVENT_STREAMS])
    w.metric('sluice_upstream_connection_waits_total', 'counter', 'Provider requests that queued in a connection pool for a free connection (upstream.connections).', g[RG_UPSTREAM_WAITS])
    // Protocol translation's retained bytes (same-protocol routes relay tool arguments as bytes
    // and buffer none of them): charged before they are kept, returned as each item is emitted.
    w.metric('sluice_tool_argument_bytes', 'gauge', 'Tool-call argument bytes buffered by protocol translation (pending calls, per call and per turn).', g[RG_TOOL_ARGUMENT_BYTES])
    w.metric('sluice_translation_item_bytes', 'gauge', 'Bytes of the open item (text, reasoning) protocol translation holds for its done events.', g[RG_TRANSLATE_ITEM_BYTES])
    w.metric('sluice_translation_output_bytes', 'gauge', 'Reconstructed output items protocol translation holds for a terminal event or a JSON answer.', g[RG_TRANSLATE_OUTPUT_BYTES])
    w.metric('sluice_translations_active', 'gauge', 'Translated exchanges in flight.', g[RG_TRANSLATIONS])
  }
  // The conversation-state store (src/state/store.ts): all 0 when it is off.
  const st = counters.continuations?.()
  w.metric('sluice_continuation_bytes', 'gauge', 'Conversation-state bytes retained: entry payloads plus blobs (the store\'s buffer is the hard cap).', st ? st.entryBytes + st.blobBytes : 0)
  w.metric('sluice_continuation_capacity_bytes', 'gauge', 'The conversation store\'s buffer, carved out of limits.storageBytes (0: off).', st ? st.bufferBytes : 0)
  w.metric('sluice_continuation_used_bytes', 'gauge', 'Bytes of the store\'s data region in use, record headers and not-yet-reclaimed records included.', st ? st.used : 0)
  w.metric('sluice_continuation_entries', 'gauge', 'Conversation turns stored.', st ? st.entries : 0)
  w.metric('sluice_continuation_tombstones', 'gauge', 'Evicted, expired and refused response ids remembered (bounded).', st ? st.tombstones : 0)
  w.metric('sluice_continuation_blob_bytes', 'gauge', 'Content-addressed blob bytes stored.', st ? st.blobBytes : 0)
  w.metric('sluice_continuation_blob_bytes_pinned', 'gauge', 'Blob bytes pinned by exchanges in flight (0 when idle).', st ? st.blobBytesPinned : 0)
  w.metric('sluice_continuation_pins', 'gauge', 'Blob pins held by exchanges in flight (0 when idle).', st ? st.pins : 0)
  w.metric('sluice_continuation_evictions_total', 'counter', 'Entries removed or refused, by reason.', [
    [{ reason: 'cap' }, st ? st.evictedCap : 0], [{ reason: 'ttl' }, st ? st.evictedTtl : 0], [{ reason: 'entry_too_large' }, st ? st.refusedTooLarge : 0],
    [{ reason: 'no_room' }, st ? st.refusedNoRoom : 0],
  ])
  w.metric('sluice_continuation_repairs_total', 'counter', 'Store locks stolen from a worker that died holding it (store rebuilt).', st ? st.repairs : 0)
  w.metric('sluice_continuation_pins_reclaimed_total', 'counter', 'Blob pins returned from dead workers.', st ? st.pinsReclaimed : 0)
  if (counters.histogram) {
    for (const [hist, name, help] of HISTOGRAMS) w.histogram(name, help, counters.histogram(hist))
  }
  const tr = counters.trims?.()
  w.metric('sluice_malloc_trims_total', 'counter', 'Idle malloc_trim calls: after a thread\'s idle collection or a parser thread\'s retirement, free malloc pages go back to the kernel.', tr?.trims ?? 0)
  w.metric('sluice_malloc_trim_released_bytes_total', 'counter', 'Resident memory the idle malloc trims gave back (RSS before minus after).', tr?.releasedBytes ?? 0)
  // Providers: accounts (labelled as src/routing.ts providerSlots indexes them), breakers, retries.
  const pv = counters.providers?.()
  const slots = providerSlots(config.providers)
  const acc = (f: (a: ProvidersSnapshot['accounts'][number]) => number): Sample[] =>
    (pv?.accounts ?? []).map((a, i) => [{ provider: slots.accounts[i]?.provider ?? '?', account: slots.accounts[i]?.name ?? String(i) }, f(a)])
  const brk = (f: (b: ProvidersSnapshot['breakers'][number]) => number): Sample[] =>
    (pv?.breakers ?? []).map((b, i) => [{ provider: slots.breakers[i]?.provider ?? '?', model: slots.breakers[i]?.model ?? String(i) }, f(b)])
  w.metric('sluice_provider_in_flight', 'gauge', 'Exchanges in flight to providers, all accounts and workers (0 when idle).', (pv?.accounts ?? []).reduce((n, a) => n + a.inflight, 0))
  w.metric('sluice_provider_account_in_flight', 'gauge', 'Exchanges in flight on each provider account, all workers.', acc((a) => a.inflight))
  w.metric('sluice_provider_account_cooldown_seconds', 'gauge', 'Seconds left of an account\'s cooldown after a 429 (0: eligible).', acc((a) => a.coolingDownMs / 1000))
  w.metric('sluice_provider_account_failure_rate', 'gauge', 'Recent transient failure rate of each account (EWMA, 0..1).', acc((a) => a.failureRate))
  w.metric('sluice_provider_account_first_byte_seconds', 'gauge', 'First-byte latency of each account (EWMA).', acc((a) => a.firstByteMs / 1000))
  w.metric('sluice_provider_account_selections_total', 'counter', 'Exchanges (attempts) sent through each account.', acc((a) => a.selected))
  w.metric('sluice_circuit_state', 'gauge', 'Circuit breaker per provider + model pattern: 0 closed, 1 open, 2 half-open.', brk((b) => BREAKER_VALUE[b.state]))
  w.metric('sluice_circuit_transitions_total', 'counter', 'Circuit breaker state changes per provider + model pattern.', brk((b) => b.transitions))
  w.metric('sluice_retries_total', 'counter', 'Upstream attempts retried before the first downstream byte, by reason.', RETRY_REASON_NAMES.map((reason, i) => [{ reason }, pv?.retries[i] ?? 0]))
  w.metric('sluice_retries_after_commit_total', 'counter', 'Retries after a first downstream byte: structurally impossible, always 0.', pv?.retriesAfterCommit ?? 0)
  const refusals: Sample[] = [...counters.refusals()].map(([code, n]) => [{ code }, n])
  w.metric('sluice_refusals_total', 'counter', 'Refusals and failures sent to callers, by catalogue code.', refusals)
  w.metric('sluice_storage_refusals_total', 'counter', 'Byte reservations refused.', s.storage.refused)
  w.metric('sluice_storage_bytes_reclaimed_total', 'counter', 'Bytes reclaimed from dead workers.', s.storage.reclaimed)
  const live = s.rows.filter((r) => r.row > 0 && r.row <= config.workers)
  w.metric('sluice_worker_heap_bytes', 'gauge', 'JS heap used by each HTTP worker (last report).', live.map((r) => [{ worker: r.row }, r.heapUsed]))
  w.metric('sluice_worker_heap_limit_bytes', 'gauge', 'JS heap limit of each HTTP worker.', live.map((r) => [{ worker: r.row }, r.heapLimit]))
  w.metric('sluice_worker_external_bytes', 'gauge', 'Buffer and ArrayBuffer bytes outside the JS heap, by worker.', live.map((r) => [{ worker: r.row }, r.external]))
  w.metric('sluice_worker_exchanges_held', 'gauge', 'Exchange permits held, by worker.', live.map((r) => [{ worker: r.row }, r.exchangeHeld]))
  w.metric('sluice_worker_bytes_held', 'gauge', 'Storage bytes held, by worker.', live.map((r) => [{ worker: r.row }, r.bytes]))
  w.metric('sluice_worker_up', 'gauge', '1 when the worker is listening.', sup.workers.map((x) => [{ worker: x.row }, x.listening ? 1 : 0]))
  w.metric('sluice_worker_restarts_total', 'counter', 'Worker restarts.', sup.workers.map((x) => [{ worker: x.row }, x.restarts]))
  w.metric('sluice_worker_reclaims_total', 'counter', 'Dead worker rows reclaimed.', s.rowReclaims)
  w.metric('sluice_ledger_repairs_total', 'counter', 'Ledger locks stolen from a worker that died holding it.', s.repairs)
  w.metric('sluice_draining', 'gauge', '1 while draining for shutdown.', s.draining ? 1 : 0)
  const mem = process.memoryUsage()
  w.metric('sluice_process_resident_bytes', 'gauge', 'Resident set size of the whole process.', mem.rss)
  w.metric('sluice_primary_heap_bytes', 'gauge', 'JS heap used by the primary thread.', mem.heapUsed)
  return w.out
}
