// The retry policy of worker/upstream.ts: which failures are transient, how long to wait
// before the next attempt. Pure functions, plus one abortable sleep.
//
// A retry happens only inside Upstreams.send(), which resolves at a provider's response
// headers and is awaited before the exchange writes any byte to its client: by
// construction no retry can follow a downstream byte (`sluice_retries_after_commit_total`
// counts the impossible case, guarded once more by `committed()` before each retry).

import type { Config } from '../src/config/schema.ts'
import { abortCause } from '../src/errors.ts'
import { RETRY_CONNECT, RETRY_RESET, RETRY_STATUS, RETRY_TIMEOUT } from '../src/ledger/layout.ts'

/** A transport failure before the response headers -> its retry reason (RETRY_*), or null when not transient. */
export function transientReason (err: unknown): number | null {
  const code = (err as { code?: unknown } | null)?.code
  switch (code) {
    case 'UND_ERR_CONNECT_TIMEOUT':
    case 'ECONNREFUSED':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
    case 'EAI_AGAIN':
      return RETRY_CONNECT
    case 'ECONNRESET':
    case 'EPIPE':
    case 'UND_ERR_SOCKET':
    case 'UND_ERR_CLOSED':
      return RETRY_RESET
    case 'UND_ERR_HEADERS_TIMEOUT':
      return RETRY_TIMEOUT
    default:
      return null
  }
}

/** 502 / 503 / 504: the provider (or its front) failed before answering; worth another attempt. */
export function transientStatus (status: number): number | null {
  return status === 502 || status === 503 || status === 504 ? RETRY_STATUS : null
}

/** Full jitter: uniform in [0, min(maxMs, baseMs x 2^retry)] (retry = 0 before the first retry). */
export function retryDelayMs (retry: number, cfg: Config['upstream']['retry'], random: () => number = Math.random): number {
  const cap = Math.min(cfg.maxMs, cfg.baseMs * 2 ** retry)
  return Math.floor(random() * (cap + 1))
}

/** Waits `ms`, or rejects with the abort's cause as soon as `signal` aborts. */
export function sleep (ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(abortCause(signal))
  if (ms <= 0) return Promise.resolve()
  return new Promise((resolve, reject) => {
    const onAbort = (): void => { clearTimeout(timer); reject(abortCause(signal)) }
    const timer = setTimeout(() => { signal.removeEventListener('abort', onAbort); resolve() }, ms)
    signal.addEventListener('abort', onAbort, { once: true })
  })
}
