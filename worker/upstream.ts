// Upstream transport: one undici Pool per provider (keep-alive, connect / first-byte /
// idle-between-chunks timeouts), header policy both ways, and the mapping of transport
// failures to catalogue codes.

import { Pool, type Dispatcher } from 'undici'
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http'
import type { Config } from '../src/config/schema.ts'
import { abortCause, SluiceError } from '../src/errors.ts'
import type { ResolvedProvider } from '../src/routing.ts'

/** Never forwarded in either direction (RFC 9110 7.6.1 hop-by-hop, plus framing we redo). */
const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization',
  'te', 'trailer', 'transfer-encoding', 'upgrade', 'host', 'content-length',
])
/** Client -> provider: the gateway's own credentials and controls stop here. */
const REQUEST_DROP = new Set(['authorization', 'x-api-key', 'accept-encoding', 'cookie', 'expect', 'x-sluice-run-id'])
/** Provider -> client. */
const RESPONSE_DROP = new Set(['set-cookie', 'content-encoding', 'alt-svc', 'strict-transport-security'])

export interface UpstreamRequest {
  provider: ResolvedProvider
  path: string
  clientHeaders: IncomingHttpHeaders
  body: Uint8Array
  signal: AbortSignal
}

export class Upstreams {
  private readonly pools = new Map<string, Pool>()
  private readonly cfg: Config['upstream']

  constructor (cfg: Config['upstream']) {
    this.cfg = cfg
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
    try {
      return await this.pool(url.origin).request({
        method: 'POST',
        path: url.pathname + url.search,
        headers: requestHeaders(r.clientHeaders, r.provider, r.body.byteLength),
        body: r.body,
        signal: r.signal,
        headersTimeout: this.cfg.firstByteTimeoutMs,
        bodyTimeout: this.cfg.idleTimeoutMs,
      })
    } catch (err) {
      throw transportError(err, r.signal)
    }
  }

  async close (): Promise<void> {
    await Promise.all([...this.pools.values()].map((p) => p.close()))
  }
}

export function requestHeaders (client: IncomingHttpHeaders, provider: ResolvedProvider, length: number): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(client)) {
    if (v === undefined || HOP_BY_HOP.has(k) || REQUEST_DROP.has(k)) continue
    out[k] = Array.isArray(v) ? v.join(', ') : v
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
