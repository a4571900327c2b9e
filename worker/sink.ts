// Where an exchange's response goes when no HTTP response carries it: non-blocking mode
// (results as session events) and JSON-RPC (results wrapped in a JSON-RPC response).
//
// A CollectingSink stands in for the ServerResponse that runExchange and the relay write to,
// so those run exactly the same code in every mode (one exchange path, one release owner).
// It implements what they use: writeHead / headersSent / statusCode, and a Writable's write,
// 'drain', end, 'close', destroyed, writableFinished. A streaming body is cut into SSE frames
// (the same framer as the relay) and handed to `onFrame` one by one; any other body is
// collected, up to `cap` bytes, every byte reserved against the aggregate storage budget
// until `dispose()`. Past the cap (or the budget) it keeps counting but drops the bytes, and
// `overflow` says why: the caller reports an honest error instead of a truncated result.

import { Writable } from 'node:stream'
import { SluiceError, type ErrorCode } from '../src/errors.ts'
import type { ByteBudget } from '../src/ledger/budget.ts'
import { SseFramer } from '../src/sse/framer.ts'

export type Overflow = 'none' | 'cap' | 'budget'

export interface SinkOptions {
  /** Largest body kept. */
  cap: number
  storage: ByteBudget
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
        onFrame: (frame) => { const f = readFrame(frame); if (f) onFrame(f.event, f.data) },
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
    if (this.reserved > 0) { this.opts.storage.release(this.reserved); this.reserved = 0 }
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
    if (!this.opts.storage.tryReserve(chunk.length)) { this.drop('budget'); cb(); return }
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
  | { ok: true; status: number; body: unknown }
  | { ok: false; error: SluiceError }

/**
 * Reads a settled exchange's result out of its sink:
 *   - success: the provider's JSON (parsed under the parse permit, only to embed it; its text
 *     when it is not JSON; null for a stream, whose frames went out one by one);
 *   - a refusal written before any byte: our `{ code, error, ...details }`, kept whole, with
 *     the status it was sent with;
 *   - any other ending: the exchange's own code with `details`;
 *   - a body past the sink's cap or the storage budget: output_too_large or
 *     storage_budget_exhausted, never a truncated result.
 */
export async function sinkResult (
  sink: CollectingSink,
  rec: { code: ErrorCode | 'ok' },
  parse: { acquire (opts: { signal?: AbortSignal }): Promise<void>; release (): void },
  details: Record<string, string | number | boolean | null> = {},
  signal?: AbortSignal,
): Promise<SinkResult> {
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
  if (sink.isEventStream || !raw) return { ok: true, status: sink.statusCode, body: null }
  await parse.acquire({ signal })
  try {
    return { ok: true, status: sink.statusCode, body: JSON.parse(raw.toString('utf8')) }
  } catch {
    return { ok: true, status: sink.statusCode, body: raw.toString('utf8') }
  } finally {
    parse.release()
  }
}

/** The `event:` and joined `data:` lines of one SSE frame (null for a comment-only frame). */
export function readFrame (frame: Buffer): { event: string | null; data: string } | null {
  let event: string | null = null
  const data: string[] = []
  for (const line of frame.toString('utf8').split(/\r\n|\r|\n/)) {
    if (line === '' || line.startsWith(':')) continue
    const colon = line.indexOf(':')
    const field = colon === -1 ? line : line.slice(0, colon)
    let value = colon === -1 ? '' : line.slice(colon + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    if (field === 'event') event = value
    else if (field === 'data') data.push(value)
  }
  if (event === null && data.length === 0) return null
  return { event, data: data.join('\n') }
}
