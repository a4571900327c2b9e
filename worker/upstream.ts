// Upstream transport: one undici Pool per provider (keep-alive, connect / first-byte /
// idle-between-chunks timeouts), header policy both ways, and the mapping of transport
// failures to catalogue codes.
//
// `send()` is also where a provider's accounts, its circuit breaker and the retry policy
// meet (DESIGN.md "Providers"), in this order per attempt:
//
//   breaker admit (open: provider_unavailable at once; due: this exchange is the one probe)
//   -> account selection (src/ledger/providers.ts: affinity, else least loaded; the claim
//      counts in the ledger at once; every account cooling down: provider_rate_limited with
//      the soonest retry)
//   -> request (the body replayed from the bytes this exchange holds, within its reservation)
//   -> response headers < 400: returned; the claim is released when the body closes
//   -> a transient failure (connect, reset, first-byte timeout, 502/503/504, or a 429 that
//      cooled this account down) is retried at most upstream.retry.attempts times, on
//      another account where one is eligible, after a full-jitter delay, within
//      upstream.retry.totalMs; anything else, or the last failure, is thrown.
//
// send() resolves before the exchange writes any byte downstream (worker/exchange.ts awaits
// it before any writeHead), so no retry can follow a first downstream byte.

import { EventEmitter } from 'node:events'
import { Pool } from '../src/net/pool.ts'
import { dispatchAnswer, type UpstreamAnswer } from '../src/net/answer.ts'
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http'
import type { Config, Protocol } from '../src/config/schema.ts'
import { MAX_RETRY_AFTER_SECONDS, retryAfterSeconds } from '../src/protocols/provider-error.ts'
import { presentedKey } from './auth.ts'
import { abortCause, SluiceError } from '../src/errors.ts'
import { RETRY_RATE_LIMITED } from '../src/ledger/layout.ts'
import type { BreakerTransition, ProviderState } from '../src/ledger/providers.ts'
import { Router, type ResolvedAccount, type ResolvedProvider } from '../src/routing.ts'
import { retryDelayMs, sleep, transientReason, transientStatus } from './retry.ts'

/** A 429 without a readable Retry-After cools its account down this long. */
const DEFAULT_COOLDOWN_SECONDS = 10

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

/**
 * The exchange's abort as undici hears it: an EventEmitter signal (undici's documented
 * alternative to an AbortSignal), fired by the exchange when its own AbortController aborts
 * (worker/exchange.ts). Given the AbortSignal itself, undici (8.x) registers through
 * node:events' addAbortListener: argument validation, a lazy require, an EventTarget listener
 * and a disposable object for every request, measured at ~30 µs of a ~300 µs way in at 32
 * staggered streams (cache-cold between exchanges); an EventEmitter listener is a property
 * store. It never has an `aborted` property (undici would take it for an AbortSignal again): a
 * request started after the abort is refused before dispatch (Upstreams.attempt), and a
 * listener added after it is called at once.
 */
export class UpstreamAbort extends EventEmitter {
  /** The exchange signal's reason, once fired (undici's listener reads `signal.reason`). */
  reason: unknown = undefined
  #fired = false

  get fired (): boolean { return this.#fired }

  /** Tells every request listening that the exchange aborted (once; later calls do nothing). */
  fire (reason: unknown): void {
    if (this.#fired) return
    this.#fired = true
    this.reason = reason
    this.emit('abort')
  }

  override once (event: string | symbol, listener: (...args: unknown[]) => void): this {
    if (event === 'abort' && this.#fired) { listener(); return this }
    return super.once(event, listener)
  }
}

export interface UpstreamRequest {
  provider: ResolvedProvider
  path: string
  clientHeaders: IncomingHttpHeaders
  /** The exchange's prepared body: replayed as is by every attempt (never re-read from the client). */
  body: Uint8Array
  signal: AbortSignal
  /** The same abort, as undici is given it (fired with `signal`); without it undici gets `signal`. */
  abort?: UpstreamAbort
  /** The model, for its circuit breaker (provider x model pattern). */
  model?: string
  /** The session's affinity key (scoped hash), or null without a session id. */
  session?: readonly [number, number] | null
  /**
   * Reads and maps an error answer (status >= 400) before any byte reached the client;
   * destroys its body. Without it, a generic provider code is used.
   */
  refusal?: (up: UpstreamAnswer) => Promise<SluiceError>
  /** True once any byte went downstream (the response's headers sent): then never a retry. */
  committed?: () => boolean
  /** A trace event on the exchange's provider span. */
  event?: (name: string, attrs: Record<string, string | number | boolean>) => void
}

export interface UpstreamOptions {
  /** The ledger's provider block: accounts, breakers, retry counters (absent: one attempt, first account). */
  providers?: ProviderState | null
  /** One JSON line per breaker state change. */
  log?: (fields: Record<string, unknown>, msg: string) => void
}

export interface UpstreamHooks {
  /**
   * A request found no free connection in its pool and queued inside undici for one. With
   * upstream.connections >= limits.maxActiveExchanges (enforced by the config) an admitted
   * exchange never should; when one does, it is counted and logged, never silent.
   */
  onConnectionWait? (origin: string, stats: { queued: number; running: number; connected: number; connections: number }): void
}

/** Where a request goes: the pool's origin and the request path, as `new URL(baseUrl + path)` reads them. */
interface Target { origin: string; path: string }
const targets = new Map<string, Target>()
/**
 * targetOf(baseUrl, path): parsed once per provider and route, not once per exchange (a WHATWG
 * URL parse was ~7 µs of each exchange's CPU in a profile). At most 256 kept (providers x routes).
 */
export function targetOf (baseUrl: string, path: string): Target {
  const key = baseUrl + path
  let t = targets.get(key)
  if (t === undefined) {
    const url = new URL(key)
    t = { origin: url.origin, path: url.pathname + url.search }
    if (targets.size >= 256) targets.clear()
    targets.set(key, t)
  }
  return t
}

export class Upstreams {
  private readonly pools = new Map<string, PoolEntry>()
  private readonly cfg: Config['upstream']
  private readonly extra: ReadonlySet<string>
  private readonly state: ProviderState | null
  private readonly log: (fields: Record<string, unknown>, msg: string) => void
  private readonly hooks: UpstreamHooks

  constructor (cfg: Config['upstream'], opts: UpstreamOptions & UpstreamHooks = {}) {
    this.cfg = cfg
    this.extra = new Set(cfg.forwardHeaders)
    this.state = opts.providers ?? null
    this.log = opts.log ?? (() => {})
    this.hooks = opts
  }

  private pool (origin: string): PoolEntry {
    let p = this.pools.get(origin)
    if (!p) {
      p = {
        pool: new Pool(origin, {
          connections: this.cfg.connections,
          connectTimeout: this.cfg.connectTimeoutMs,
          keepAliveTimeout: this.cfg.keepAliveTimeoutMs,
          pipelining: 1,
        }),
        inFlight: 0,
      }
      this.pools.set(origin, p)
    }
    return p
  }

  /**
   * Sends the request; resolves at the response headers (first byte) with a status < 400,
   * or throws a SluiceError (a provider's error answer mapped by `r.refusal`). Retries
   * transient failures as the file header says; every account claim it takes is released
   * exactly once (a failed attempt's at once, the answer's when its body closes).
   */
  async send (r: UpstreamRequest): Promise<UpstreamAnswer> {
    const state = this.state
    if (state === null || state.accounts === 0) return this.attempt(r, r.provider.accounts[0])
    const url = targetOf(r.provider.baseUrl, r.path)
    const retry = this.cfg.retry
    const breaker = r.model === undefined ? null : Router.breakerOf(r.provider, r.model)
    const multi = r.provider.accounts.length > 1
    const tried = new Set<number>()
    const startedAt = Date.now()
    let last: SluiceError | null = null
    let retryReason = -1
    let retryDelay = 0
    for (let n = 0; ; n++) {
      // 1. The breaker of this provider + model.
      let probe = false
      if (breaker !== null) {
        const adm = state.admit(breaker.index, this.cfg.breaker.openMs)
        if (adm.transition) this.transition(r, breaker.model, adm.transition, 'probe due')
        if (!adm.ok) {
          if (last !== null) throw last // a retry stopped by a breaker that has just opened
          r.event?.('refused by an open circuit breaker', { 'sluice.provider': r.provider.config.name, 'sluice.model': breaker.model, 'sluice.breaker_state': adm.state, 'sluice.retry_after_seconds': adm.retryAfterSeconds })
          throw new SluiceError('provider_unavailable', {
            provider: r.provider.config.name, model: breaker.model, reason: 'circuit_open', breaker: adm.state, retryAfterSeconds: adm.retryAfterSeconds,
          }, 'the provider failed repeatedly for this model: its circuit breaker is open')
        }
        probe = adm.probe
      }
      // 2. An account; the claim is counted in the ledger at once.
      let verdict: 'success' | 'failure' | 'none' = 'none'
      let claimed: number | null = null
      try {
        const sel = state.select(r.provider.accounts, { session: r.session ?? null, exclude: tried, allowExcluded: retry.sameAccount })
        if (!sel.ok) {
          if (last !== null && sel.reason === 'cooling' && last.code === 'provider_rate_limited') {
            throw new SluiceError('provider_rate_limited', { ...last.details, retryAfterSeconds: sel.retryAfterSeconds, reason: 'every account cooling down' }, last.message)
          }
          if (last !== null) throw last
          throw sel.reason === 'cooling'
            ? new SluiceError('provider_rate_limited', { provider: r.provider.config.name, reason: 'every account cooling down', accounts: r.provider.accounts.length, retryAfterSeconds: sel.retryAfterSeconds })
            : new SluiceError('provider_rate_limited', { provider: r.provider.config.name, reason: 'every account at its maxConcurrent', accounts: r.provider.accounts.length, retryAfterSeconds: 1 })
        }
        claimed = sel.account
        tried.add(sel.account)
        if (n > 0) {
          // The retry really happens now (the guard is structural: see the file header).
          if (r.committed?.() === true) { state.countRetryAfterCommit(); throw last ?? new SluiceError('internal_error') }
          state.countRetry(retryReason)
          r.event?.('retrying before the first byte', { 'sluice.attempt': n + 1, 'sluice.code': last?.code ?? '', 'sluice.delay_ms': retryDelay, 'sluice.account': sel.account })
        }
        const account = r.provider.accounts.find((a) => a.index === sel.account) ?? r.provider.accounts[0]
        const t0 = performance.now()
        let up: UpstreamAnswer | null = null
        let failure: { err: SluiceError; reason: number } | null = null
        try {
          up = await this.attempt(r, account, url)
        } catch (err) {
          const se = transportError(err, r.signal)
          if (r.signal.aborted) throw se // the caller's, never the provider's
          const cause = (err as { cause?: unknown }).cause
          const reason = transientReason(err) ?? transientReason(cause)
          verdict = 'failure'
          state.observe(account.index, true, null)
          if (reason === null) throw se
          failure = { err: se, reason }
        }
        if (up !== null) {
          const ms = performance.now() - t0
          const status = up.statusCode
          if (status < 400) {
            verdict = 'success'
            state.observe(account.index, false, ms)
            const a = claimed
            claimed = null // the answer's body owns the claim now
            up.body.once('close', () => state.release(a))
            if (n > 0) r.event?.('answered after a retry', { 'sluice.account': account.name, 'sluice.attempt': n + 1 })
            return up
          }
          const ra = up.headers['retry-after']
          const err = r.refusal ? await r.refusal(up) : new SluiceError(status === 429 ? 'provider_rate_limited' : status >= 500 ? 'provider_unavailable' : 'provider_error', { providerStatus: status })
          if (!up.body.destroyed) up.body.destroy()
          if (r.signal.aborted) throw abortCause(r.signal)
          const st = transientStatus(status)
          if (status === 429) {
            // The provider is up (the breaker hears a success); this account cools down.
            verdict = 'success'
            state.observe(account.index, false, ms)
            // A lone account is not cooled: the provider's own 429 (and Retry-After) is the
            // answer, and the next exchange asks the provider again.
            if (!multi) throw err
            const secs = retryAfterSeconds(Array.isArray(ra) ? ra[0] : ra) ?? DEFAULT_COOLDOWN_SECONDS
            state.coolDown(account.index, secs)
            r.event?.('account cooling down', { 'sluice.account': account.name, 'sluice.retry_after_seconds': secs })
            failure = { err, reason: RETRY_RATE_LIMITED }
          } else if (st !== null) {
            verdict = 'failure'
            state.observe(account.index, true, ms)
            failure = { err, reason: st }
          } else {
            // The provider answered (a refusal of this request): not a failure of the provider.
            verdict = status < 500 ? 'success' : 'none'
            state.observe(account.index, false, ms)
            throw err
          }
        }
        // 3. A transient failure: another attempt, if the policy allows one.
        const f = failure as { err: SluiceError; reason: number }
        last = f.err
        if (n >= retry.attempts || r.committed?.() === true) throw f.err
        // No other account left to try (and not the same one): no retry, no wait.
        if (!retry.sameAccount && r.provider.accounts.every((a) => tried.has(a.index))) throw f.err
        const delay = retryDelayMs(n, retry)
        if (Date.now() - startedAt + delay > retry.totalMs) throw f.err
        state.release(claimed)
        claimed = null
        this.settleBreaker(r, breaker, probe, verdict)
        probe = false
        verdict = 'none'
        retryReason = f.reason
        retryDelay = delay
        await sleep(delay, r.signal)
      } finally {
        if (claimed !== null) state.release(claimed)
        if (probe || verdict !== 'none') this.settleBreaker(r, breaker, probe, verdict)
      }
    }
  }

  /** Records an attempt's verdict on the breaker; a probe with no verdict is given back. */
  private settleBreaker (r: UpstreamRequest, breaker: { index: number; model: string } | null, probe: boolean, verdict: 'success' | 'failure' | 'none'): void {
    const state = this.state
    if (state === null || breaker === null) return
    const t = verdict === 'success'
      ? state.success(breaker.index, probe)
      : verdict === 'failure'
        ? state.failure(breaker.index, probe, this.cfg.breaker.failureThreshold, this.cfg.breaker.openMs)
        : probe ? state.abandonProbe(breaker.index) : null
    if (t !== null) this.transition(r, breaker.model, t, verdict === 'none' ? 'probe without a verdict' : verdict)
  }

  private transition (r: UpstreamRequest, model: string, t: BreakerTransition, cause: string): void {
    const fields = { event: 'circuit_breaker', provider: r.provider.config.name, model, from: t.from, to: t.to, cause }
    this.log(fields, 'circuit breaker')
    r.event?.('circuit breaker state change', { 'sluice.provider': r.provider.config.name, 'sluice.model': model, 'sluice.breaker_from': t.from, 'sluice.breaker_to': t.to })
  }

  /** One request on one account; resolves at the response headers, or throws the transport error (unmapped). */
  private async attempt (r: UpstreamRequest, account: ResolvedAccount, url = targetOf(r.provider.baseUrl, r.path)): Promise<UpstreamAnswer> {
    if (r.signal.aborted) throw abortCause(r.signal) // never dispatched after the exchange aborted
    const entry = this.pool(url.origin)
    const pool = entry.pool
    // undici dispatches synchronously inside request(): a request it could not hand to a
    // connection is in the pool's queue when request() returns. It can only be queued when
    // every connection is taken, so the pool's figures are read only when this pool's
    // requests in flight (a count that is never below its busy connections) have reached its
    // connections: pool.stats walks every connection for each of its figures (measured at 96
    // streams: ~40 µs of each exchange, read twice per request).
    const mayWait = entry.inFlight >= this.cfg.connections
    const queuedBefore = mayWait ? pool.stats.queued : 0
    entry.inFlight++
    const done = (): void => { entry.inFlight-- }
    const p = dispatchAnswer(pool, {
      method: 'POST',
      path: url.path,
      headers: requestHeaders(r.clientHeaders, r.provider, r.body.byteLength, this.extra, account.apiKey),
      body: r.body,
      headersTimeout: this.cfg.firstByteTimeoutMs,
      bodyTimeout: this.cfg.idleTimeoutMs,
    }, r.abort ?? r.signal)
    // In flight until its body closes (ended, or destroyed by the relay), or the request failed:
    // exactly one of these runs `done`, once.
    p.then((up) => { if (up.body.closed) done(); else up.body.once('close', done) }, done)
    if (mayWait) {
      const st = pool.stats
      if (st.queued > queuedBefore) this.hooks.onConnectionWait?.(url.origin, { queued: st.queued, running: st.running, connected: st.connected, connections: this.cfg.connections })
    }
    if (this.state !== null && this.state.accounts > 0) return p
    try {
      return await p
    } catch (err) {
      throw transportError(err, r.signal)
    }
  }

  /** This worker's requests in flight to `origin` (their bodies not closed yet). */
  inFlightTo (origin: string): number {
    return this.pools.get(origin)?.inFlight ?? 0
  }

  async close (): Promise<void> {
    await Promise.all([...this.pools.values()].map((p) => p.pool.close()))
  }
}

/** A provider origin's connection pool, and how many of its requests are in flight (see attempt). */
interface PoolEntry { readonly pool: Pool; inFlight: number }

export function requestHeaders (client: IncomingHttpHeaders, provider: ResolvedProvider, length: number, extra: ReadonlySet<string> = new Set(), apiKey: string | null = provider.apiKey): Record<string, string> {
  const out: Record<string, string> = {}
  const allowed = FORWARD[provider.config.protocol]
  const gatewayKey = presentedKey(client)
  for (const k in client) {
    const v = client[k]
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
    if (apiKey) out['x-api-key'] = apiKey
  } else if (apiKey) {
    out.authorization = `Bearer ${apiKey}`
  }
  return out
}

/**
 * The provider's response headers the client gets: hop-by-hop and dropped ones out, retry-after
 * clamped, and `x-sluice-exchange-id` last when an exchange id is given. (A for-in over the
 * headers, no Object.entries: its pairs were ~1 KB of garbage per exchange at 96 streams.)
 */
export function responseHeaders (upstream: IncomingHttpHeaders, keepLength: boolean, exchangeId?: string | null): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {}
  for (const k in upstream) {
    const v = upstream[k]
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
  if (exchangeId !== undefined) out['x-sluice-exchange-id'] = String(exchangeId)
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
