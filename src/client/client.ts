// The client: connection settings, the per-session pending limit, and one SluiceSession per
// session id (so a session has exactly one count, however many times it is looked up).
//
// The limit (`maxPendingPromptsPerSession`) mirrors the gateway's `/capabilities`
// `limits.maxPendingPromptsPerSession`: a positive integer, or null for no cap. 0 and Infinity
// also mean no cap (as in the gateway's config); negative, fractional and NaN values throw
// RangeError here, at construction, not on the first prompt. Default 5, the gateway's
// default. SluiceClient.connect() reads the limit from the gateway instead.
//
// Sessions are kept for the client's lifetime (a small record per id): dropping an idle one
// and handing out a fresh object later would let two objects count the same session.

import { SluiceResponseError } from './errors.ts'
import { readObject, refusal } from './http.ts'
import { SluiceSession, type SessionConfig } from './session.ts'

export const DEFAULT_MAX_PENDING_PROMPTS_PER_SESSION = 5
export const DEFAULT_EVENT_STREAM_RETRIES = 3

export interface SluiceClientOptions {
  /** The gateway's root, e.g. `http://127.0.0.1:8080` (routes are under `/v1`). */
  baseURL: string
  /** The gateway key, sent as `Authorization: Bearer` unless a request names its own. */
  apiKey?: string
  /** Pending prompts per session the SDK lets through; null (or 0, or Infinity) = no local cap. Default 5. */
  maxPendingPromptsPerSession?: number | null
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch
  /** submit(): reconnects in a row to the session event stream before giving up. Default 3. */
  eventStreamRetries?: number
}

export type ConnectOptions = Omit<SluiceClientOptions, 'maxPendingPromptsPerSession'>

export interface Capabilities {
  name: string
  version: string
  limits: { maxPendingPromptsPerSession: number | null, [limit: string]: unknown }
  features: string[]
  [field: string]: unknown
}

/** The limit as the client holds it: a positive integer, or null for no cap. */
export function normaliseLimit (value: unknown): number | null {
  if (value === undefined) return DEFAULT_MAX_PENDING_PROMPTS_PER_SESSION
  if (value === null) return null
  if (typeof value !== 'number') throw new TypeError(`maxPendingPromptsPerSession must be a number or null, not ${typeof value}`)
  if (Number.isNaN(value) || value < 0) throw new RangeError(`maxPendingPromptsPerSession must be a non-negative integer, Infinity or null, not ${value}`)
  if (value === 0 || value === Infinity) return null
  if (!Number.isInteger(value)) throw new RangeError(`maxPendingPromptsPerSession must be an integer, not ${value}`)
  return value
}

function baseOf (baseURL: unknown): string {
  if (typeof baseURL !== 'string') throw new TypeError('baseURL must be a string')
  const u = new URL(baseURL)
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new TypeError(`baseURL must be http(s), not ${u.protocol}`)
  return baseURL.replace(/\/+$/, '')
}

function fetchOf (f: typeof fetch | undefined): SessionConfig['fetch'] {
  const impl = f ?? globalThis.fetch
  if (typeof impl !== 'function') throw new TypeError('no fetch: pass options.fetch')
  // Called as a plain function: some fetch implementations refuse any other `this`.
  return (input, init) => impl(input, init)
}

/** The gateway's rule (1 to 256 printable characters), and no edge whitespace: a header value is trimmed. */
export const MAX_SESSION_ID = 256

function checkSessionId (id: unknown): asserts id is string {
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_SESSION_ID) throw new TypeError(`a session id is a string of 1 to ${MAX_SESSION_ID} characters`)
  if (/[\u0000-\u001f\u007f]/.test(id) || id.trim() !== id) throw new TypeError(`session id ${JSON.stringify(id)} has control characters or edge whitespace`)
}

export class SluiceClient {
  readonly baseURL: string
  /** Pending prompts per session the SDK lets through (null: no local cap). */
  readonly limit: number | null
  #cfg: SessionConfig
  #sessions = new Map<string, SluiceSession>()

  constructor (opts: SluiceClientOptions) {
    this.baseURL = baseOf(opts.baseURL)
    this.limit = normaliseLimit(opts.maxPendingPromptsPerSession)
    const retries = opts.eventStreamRetries ?? DEFAULT_EVENT_STREAM_RETRIES
    if (!Number.isInteger(retries) || retries < 0) throw new RangeError(`eventStreamRetries must be a non-negative integer, not ${retries}`)
    this.#cfg = { baseURL: this.baseURL, apiKey: opts.apiKey, limit: this.limit, fetch: fetchOf(opts.fetch), eventStreamRetries: retries }
  }

  /** A client whose limit is the gateway's own (`GET /v1/capabilities`). */
  static async connect (opts: ConnectOptions): Promise<SluiceClient> {
    const caps = await SluiceClient.readCapabilities(opts)
    return new SluiceClient({ ...opts, maxPendingPromptsPerSession: caps.limits.maxPendingPromptsPerSession })
  }

  /** `GET {baseURL}/v1/capabilities` (the gateway key is required). */
  static async readCapabilities (opts: ConnectOptions): Promise<Capabilities> {
    const base = baseOf(opts.baseURL)
    const headers: Record<string, string> = { accept: 'application/json' }
    if (opts.apiKey !== undefined) headers.authorization = `Bearer ${opts.apiKey}`
    const res = await fetchOf(opts.fetch)(base + '/v1/capabilities', { headers })
    if (!res.ok) throw await refusal(res)
    const caps = await readObject(res, 'capabilities')
    const limits = caps.limits as Record<string, unknown> | undefined
    if (limits === null || typeof limits !== 'object' || !('maxPendingPromptsPerSession' in limits)) {
      throw new SluiceResponseError(res.status, 'capabilities: the answer has no limits.maxPendingPromptsPerSession')
    }
    return caps as unknown as Capabilities
  }

  /** The session with this id: the same object every time. */
  session (id: string): SluiceSession {
    let s = this.#sessions.get(id)
    if (s === undefined) {
      checkSessionId(id)
      s = new SluiceSession(id, this.#cfg)
      this.#sessions.set(id, s)
    }
    return s
  }

  /** The SDK's pending count for a session (0 for one never used). */
  pending (id: string): number {
    return this.#sessions.get(id)?.pending ?? 0
  }
}
