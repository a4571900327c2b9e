// What this gateway offers: served as JSON by the admin plane (`GET /capabilities`), the data
// plane (`GET /v1/capabilities`, with a gateway key) and JSON-RPC (`capabilities`). Every
// limit is listed, null where disabled (DESIGN.md "Interfaces"); `features` names what a
// client may rely on, so an SDK can check before it uses a transport.

import type { Config } from './config/schema.ts'
import { pendingCap } from './config/limits.ts'

export const FEATURES = [
  'session-lanes',            // x-session-id (session-id, x-claude-code-session-id): one active per session, FIFO, pending cap
  'non-blocking-exchanges',   // POST /v1/sessions/:id/exchanges -> 202 { exchangeId }
  'session-events',           // GET /v1/sessions/:id/events (SSE), Last-Event-ID replay from a byte-bounded ring
  'exchange-cancel',          // POST /v1/sessions/:id/exchanges/:eid/cancel, JSON-RPC session/cancel
  'json-rpc',                 // POST /rpc: capabilities, session/prompt, session/cancel
  'signed-failure-tails',     // failures after the first byte end in a signed error event
  'turn-pins',                // x-sluice-run-id: maxTurnsPerRun per key
] as const

export function capabilities (config: Config, version: string): Record<string, unknown> {
  const l = config.limits
  return {
    name: 'sluice',
    version,
    // Which instance of a fleet answered (ops/README.md "Several instances").
    instanceId: config.instanceId,
    limits: {
      maxActiveExchanges: l.maxActiveExchanges,
      maxQueuedExchanges: l.maxQueuedExchanges,
      queueWaitMs: l.queueWaitMs,
      parsePermits: l.parsePermits,
      parseWaitMs: l.parseWaitMs,
      maxEnvelopeParses: l.maxEnvelopeParses,
      maxPendingPromptsPerSession: pendingCap(l),
      maxActivePerSession: l.maxActivePerSession,
      sessionEntries: l.sessionEntries,
      sessionEventBytes: l.sessionEventBytes,
      sseFrameBytes: l.sseFrameBytes,
      maxOutputItems: l.maxOutputItems,
      maxOutputBytes: l.maxOutputBytes,
      maxBodyBytes: l.maxBodyBytes,
      bodyIdleMs: l.bodyIdleMs,
      bodyReadMs: l.bodyReadMs,
      maxJsonDepth: l.maxJsonDepth,
      maxJsonNodes: l.maxJsonNodes,
      storageBytes: l.storageBytes,
      workerHeapMb: l.workerHeapMb,
      workers: config.workers,
      healthGuardMs: l.healthGuardMs,
    },
    features: FEATURES,
    protocols: [...new Set(config.providers.map((p) => p.protocol))],
    models: config.providers.flatMap((p) => [...p.models, ...Object.keys(p.aliases)]),
  }
}

