// Upstream transport: one undici Pool per provider (keep-alive, connect / first-byte /
// idle-between-chunks timeouts), header policy both ways, and the mapping of transport
// failures to catalogue codes.

import type { Dispatcher } from 'undici'
import { Pool } from '../src/net/pool.ts'
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http'
import type { Config, Protocol } from '../src/config/schema.ts'
import { MAX_RETRY_AFTER_SECONDS, retryAfterSeconds } from '../src/protocols/provider-error.ts'
import { presentedKey } from './auth.ts'
import { abortCause, SluiceError } from '../src/errors.ts'
import type { ResolvedProvider } from '../src/routing.ts'

/** Never forwarded in either direction (RFC 9110 7.6.1 hop-by-hop, plus framing we redo). */
const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization',
  'te', 'trailer', 'transfer-encoding', 'upgrade', 'host', 'content-length',
])
/** Client -> provider: the gateway's own credentials and controls stop here, whatever is allowed. */
const REQUEST_DROP = new Set(['authorization', 'x-api-key', 'accept-encoding', 'cookie', 'expect', 'x-sluice-run-id'])
/**
 * Client -> provider: only these headers are forwarded (an allowlist: a gateway key sent in a
 * header nobody expected, `api-key` or `x-goog-api-key`, must never reach a provider), plus
 * `upstream.forwardHeaders`. A header whose value contains the caller's gateway key is dropped
 * even when allowed. The gateway sets content-type, content-length, accept-encoding and the
 * provider's own key itself. README.md "Pointing clients at sluice" lists them.
 */
const FORWARD_COMMON = ['accept', 'user-agent', 'traceparent', 'tracestate', 'x-request-id', 'x-client-request-id', 'idempotency-key']
const FORWARD_OPENAI = new Set([...FORWARD_COMMON, 'openai-organization', 'openai-project', 'openai-beta'])
export const FORWARD: Readonly<Record<Protocol, ReadonlySet<string>>> = {
  'openai-chat': FORWARD_OPENAI,
  'openai-responses': FORWARD_OPENAI,
  anthropic: new Set([...FORWARD_COMMON, 'anthropic-version', 'anthropic-beta']),
}
/** Provider -> client. */
const RESPONSE_DROP = new Set(['set-cookie', 'content-encoding', 'alt-svc', 'strict-transport-security'])

export interface UpstreamRequest {
  provider: ResolvedProvider
  path: string
  clientHeaders: IncomingHttpHeaders
  body: Uint8Array
  signal: AbortSignal
}

export interface UpstreamHooks {
  /**
   * A request found no free connection in its pool and queued inside undici for one. With
   * upstream.connections >= limits.maxActiveExchanges (enforced by the config) an admitted
   * exchange never should; when one does, it is counted and logged, never silent.
   */
  onConnectionWait? (origin: string, stats: { queued: number; running: number; connected: number; connections: number }): void
}

export class Upstreams {
  private readonly pools = new Map<string, Pool>()
  private readonly cfg: Config['upstream']
  private readonly extra: ReadonlySet<string>
  private readonly hooks: UpstreamHooks

  constructor (cfg: Config['upstream'], hooks: UpstreamHooks = {}) {
    this.cfg = cfg
    this.extra = new Set(cfg.forwardHeaders)
    this.hooks = hooks
  }

  private pool (origin: string): Pool {
    let p = this.pools.get(origin)
    if (!p) {
      p = new Pool(origin, {
        connections: this.cfg.connections,
        connectTimeout: this.cfg.connectTimeoutMs,
        keepAliveTimeout: this.cfg.keepAliveTimeoutMs,
        pipelining: 1,
      })
      this.pools.set(origin, p)
    }
    return p
  }

  /** Sends the request; resolves at the response headers (first byte), or throws a SluiceError. */
  async send (r: UpstreamRequest): Promise<Dispatcher.ResponseData> {
    const url = new URL(r.provider.baseUrl + r.path)
    const pool = this.pool(url.origin)
    // undici dispatches synchronously inside request(): a request it could not hand to a
    // connection is in the pool's queue when request() returns.
    const queuedBefore = pool.stats.queued
    try {
      const pending = pool.request({
        method: 'POST',
        path: url.pathname + url.search,
        headers: requestHeaders(r.clientHeaders, r.provider, r.body.byteLength, this.extra),
        body: r.body,
        signal: r.signal,
        headersTimeout: this.cfg.firstByteTimeoutMs,
        bodyTimeout: this.cfg.idleTimeoutMs,
      })
      const s = pool.stats
      if (s.queued > queuedBefore) this.hooks.onConnectionWait?.(url.origin, { queued: s.queued, running: s.running, connected: s.connected, connections: this.cfg.connections })
      return await pending
    } catch (err) {
      throw transportError(err, r.signal)
    }
  }

  async close (): Promise<void> {
    await Promise.all([...this.pools.values()].map((p) => p.close()))
  }
}

export function requestHeaders (client: IncomingHttpHeaders, provider: ResolvedProvider, length: number, extra: ReadonlySet<string> = new Set()): Record<string, string> {
  const out: Record<string, string> = {}
  const allowed = FORWARD[provider.config.protocol]
  const gatewayKey = presentedKey(client)
  for (const [k, v] of Object.entries(client)) {
    if (v === undefined || HOP_BY_HOP.has(k) || REQUEST_DROP.has(k) || !(allowed.has(k) || extra.has(k))) continue
    const value = Array.isArray(v) ? v.join(', ') : v
    if (gatewayKey !== null && value.includes(gatewayKey)) continue
    out[k] = value
  }
  out['content-type'] = 'application/json'
  out['content-length'] = String(length)
  // Identity, so the bytes the gateway frames are the bytes it forwards.
  out['accept-encoding'] = 'identity'
  if (provider.config.protocol === 'anthropic') {
    out['anthropic-version'] ??= '2023-06-01'
    if (provider.apiKey) out['x-api-key'] = provider.apiKey
  } else if (provider.apiKey) {
    out.authorization = `Bearer ${provider.apiKey}`
  }
  return out
}

export function responseHeaders (upstream: IncomingHttpHeaders, keepLength: boolean): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {}
  for (const [k, v] of Object.entries(upstream)) {
    if (v === undefined || RESPONSE_DROP.has(k)) continue
    if (HOP_BY_HOP.has(k) && !(keepLength && k === 'content-length')) continue
    if (k === 'retry-after') {
      // Clamped like a refusal's (MAX_RETRY_AFTER_SECONDS); an unreadable one is dropped.
      const secs = retryAfterSeconds(Array.isArray(v) ? v[0] : String(v))
      if (secs !== null) out[k] = String(Math.min(secs, MAX_RETRY_AFTER_SECONDS))
      continue
    }
    out[k] = v
  }
  return out
}

/** undici / socket failures -> catalogue. A caller abort is client_closed, never the provider. */
export function transportError (err: unknown, signal?: AbortSignal): SluiceError {
  if (err instanceof SluiceError) return err
  if (signal?.aborted) return abortCause(signal)
  const e = err as { code?: string; message?: string }
  const detail = { cause: e.code ?? 'unknown' }
  switch (e.code) {
    case 'UND_ERR_CONNECT_TIMEOUT':
      return new SluiceError('provider_timeout', { ...detail, phase: 'connect' }, 'the provider did not accept the connection in time')
    case 'UND_ERR_HEADERS_TIMEOUT':
      return new SluiceError('provider_timeout', { ...detail, phase: 'first-byte' }, 'the provider did not send its first byte in time')
    case 'UND_ERR_BODY_TIMEOUT':
      return new SluiceError('provider_timeout', { ...detail, phase: 'idle' }, 'the provider stream went idle for longer than the idle timeout')
    case 'UND_ERR_ABORTED':
      return signal ? abortCause(signal) : new SluiceError('client_closed')
    default:
      return new SluiceError('provider_unavailable', detail, `the provider connection failed (${e.code ?? e.message ?? 'unknown'})`)
  }
}
