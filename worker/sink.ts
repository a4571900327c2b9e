// Where an exchange's response goes when no HTTP response carries it: non-blocking mode
// (results as session events) and JSON-RPC (results wrapped in a JSON-RPC response).
//
// A CollectingSink stands in for the ServerResponse that runExchange and the relay write to,
// so those run exactly the same code in every mode (one exchange path, one release owner).
// It implements what they use: writeHead / headersSent / statusCode, and a Writable's write,
// 'drain', end, 'close', destroyed, writableFinished. A streaming body is cut into SSE frames
// (the same framer as the relay) and handed to `onFrame` one by one; any other body is
// collected, up to `cap` bytes, every byte reserved through the exchange's ExchangeScope
// (worker/scope.ts) until `dispose()`, which the exchange's delivery calls before the scope
// is released. Past the cap (or the budget) it keeps counting but drops the bytes, and
// `overflow` says why: the caller reports an honest error instead of a truncated result.

import { Writable } from 'node:stream'
import { SluiceError, type ErrorCode } from '../src/errors.ts'
import { frameText } from '../src/sse/fields.ts'
import { SseFramer } from '../src/sse/framer.ts'

export type Overflow = 'none' | 'cap' | 'budget'

export interface SinkOptions {
  /** Largest body kept. */
  cap: number
  /** The exchange's scope: the collected bytes are its reservation. */
  bytes: { tryReserve (n: number): boolean; unreserve (n: number): void }
  frameBytes: number
  /** Each SSE frame of a streaming body: its `event:` name (null when none) and its data. */
  onFrame?: (event: string | null, data: string) => void
}

export class CollectingSink extends Writable {
  statusCode = 0
  headersSent = false
  contentType = ''
  overflow: Overflow = 'none'
  /** Bytes written to the sink (kept or not). */
  bytes = 0
  private parts: Buffer[] = []
  private kept = 0
  private reserved = 0
  private framer: SseFramer | null = null
  private readonly opts: SinkOptions

  constructor (opts: SinkOptions) {
    super({ highWaterMark: 64 * 1024 })
    this.opts = opts
  }

  writeHead (status: number, headers: Record<string, unknown> = {}): this {
    this.statusCode = status
    this.headersSent = true
    const ct = headers['content-type'] ?? headers['Content-Type']
    this.contentType = typeof ct === 'string' ? ct : ''
    const onFrame = this.opts.onFrame
    if (onFrame && this.isEventStream) {
      this.framer = new SseFramer({
        onFrame: (frame) => { const f = frameText(frame); if (f) onFrame(f.event, f.data) },
        onOversize: () => {},
      }, { maxFrameBytes: this.opts.frameBytes })
    }
    return this
  }

  get isEventStream (): boolean { return this.contentType.startsWith('text/event-stream') }

  /** The collected body (null when nothing was kept). */
  get body (): Buffer | null {
    return this.kept === 0 ? null : Buffer.concat(this.parts, this.kept)
  }

  /** Returns the bytes reserved for the collected body. Idempotent. */
  dispose (): void {
    this.parts = []
    this.kept = 0
    if (this.reserved > 0) { this.opts.bytes.unreserve(this.reserved); this.reserved = 0 }
  }

  override _write (chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.bytes += chunk.length
    if (this.framer) {
      try { this.framer.push(chunk) } catch (err) { cb(err as Error); return }
      cb()
      return
    }
    if (this.overflow !== 'none') { cb(); return }
    if (this.kept + chunk.length > this.opts.cap) { this.drop('cap'); cb(); return }
    if (!this.opts.bytes.tryReserve(chunk.length)) { this.drop('budget'); cb(); return }
    this.reserved += chunk.length
    this.parts.push(chunk)
    this.kept += chunk.length
    cb()
  }

  override _final (cb: (err?: Error | null) => void): void {
    try { this.framer?.end() } catch {}
    cb()
  }

  private drop (why: Overflow): void {
    this.overflow = why
    this.dispose()
  }
}

/** What an exchange written into a sink came to, once it settled. */
export type SinkResult =
  | { ok: true; status: number; raw: string | null }
  | { ok: false; error: SluiceError }

/**
 * Reads a settled exchange's result out of its sink, without parsing the provider's answer:
 *   - success: the provider's JSON answer as text (already checked to be a JSON object by the
 *     relay, in the parser pool: it is embedded as it is, never parsed in this heap), or null
 *     for a stream, whose frames went out one by one;
 *   - a refusal written before any byte: our `{ code, error, ...details }` (small, our own
 *     JSON), kept whole, with the status it was sent with;
 *   - any other ending: the exchange's own code with `details`;
 *   - a body past the sink's cap or the storage budget: output_too_large or
 *     storage_budget_exhausted, never a truncated result.
 */
export function sinkResult (sink: CollectingSink, rec: { code: ErrorCode | 'ok' }, details: Record<string, string | number | boolean | null> = {}): SinkResult {
  const raw = sink.body
  if (rec.code !== 'ok' || sink.statusCode >= 400) {
    if (raw && !sink.isEventStream) {
      try {
        const parsed = JSON.parse(raw.toString('utf8')) as Record<string, unknown>
        if (typeof parsed.code === 'string') {
          const { code, error, ...rest } = parsed
          return { ok: false, error: SluiceError.from({ code, details: rest, message: typeof error === 'string' ? error : undefined }).withStatus(sink.statusCode) }
        }
      } catch {}
    }
    return { ok: false, error: new SluiceError(rec.code === 'ok' ? 'provider_error' : rec.code, details) }
  }
  if (sink.overflow !== 'none') return { ok: false, error: new SluiceError(sink.overflow === 'cap' ? 'output_too_large' : 'storage_budget_exhausted', { ...details, bytes: sink.bytes }) }
  if (sink.isEventStream || !raw) return { ok: true, status: sink.statusCode, raw: null }
  return { ok: true, status: sink.statusCode, raw: raw.toString('utf8') }
}

/**
 * `value` (an object) as JSON text with one more member, `key`, whose value is the JSON text
 * `raw` (null when none): a checked answer is embedded without being parsed and serialised
 * again.
 */
export function withRawMember (value: Record<string, unknown>, key: string, raw: string | null): string {
  const text = JSON.stringify(value)
  return text.slice(0, -1) + (text.length > 2 ? ',' : '') + JSON.stringify(key) + ':' + (raw ?? 'null') + '}'
}
