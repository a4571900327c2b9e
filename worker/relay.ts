// The relay: provider bytes to the client, exactly, at the client's pace.
//
// Streaming: each upstream chunk is pushed through the SSE framer (which only observes), its
// frames classified from bytes; the few that can carry a terminal, usage or an error are
// parsed under the parse permit; then the chunk is written to the client unchanged. The
// upstream is read only as fast as the client drains (`for await` + 'drain'), so a slow
// client holds at most one chunk plus the socket buffers. The first fatal (malformed or
// oversize frame, provider error event, transport failure, no terminal, budget) ends the
// stream with a signed failure tail in the client protocol's own error event, then a clean
// end. The client only ever receives whole frames: an unterminated frame at the end of a
// chunk is held back until it ends, and a malformed frame is cut off where it starts; so a
// tail always begins at a frame boundary.
//
// Non-streaming: the body is forwarded as it arrives, and kept (reserved, up to
// maxOutputBytes) only to read usage at the end.

import { once } from 'node:events'
import type { ServerResponse } from 'node:http'
import type { Dispatcher } from 'undici'
import { abortCause, SluiceError, type ErrorCode } from '../src/errors.ts'
import { StreamTracker, inspectorFor, type ProtocolInspector, type StreamFailure } from '../src/protocols/index.ts'
import { SseFramer } from '../src/sse/framer.ts'
import { buildFailureRecord, signRecord, type FailureRecord } from '../src/sse/sign.ts'
import type { ExchangeDeps, ExchangeRecord, Route } from './exchange.ts'
import { ROUTE_PROTOCOL } from './exchange.ts'
import type { Holdings } from './holdings.ts'
import { responseHeaders, transportError } from './upstream.ts'

export interface Outcome { code: ErrorCode | 'ok' }

export class Signer {
  private readonly key: Buffer
  constructor (key: Buffer) {
    if (key.length === 0) throw new RangeError('empty signing key')
    this.key = key
  }

  sign (record: FailureRecord): string { return signRecord(record, this.key) }
}

export function failureRecord (err: SluiceError, rec: ExchangeRecord, relayed = { frames: 0, bytes: 0 }, usage: FailureRecord['usage'] = null): FailureRecord {
  return buildFailureRecord({
    code: err.code,
    message: err.message,
    exchangeId: rec.exchangeId,
    runId: rec.runId,
    provider: rec.provider ?? '',
    model: rec.model ?? '',
    framesRelayed: relayed.frames,
    bytesRelayed: relayed.bytes,
    usage,
    partial: true,
  })
}

interface RelayContext {
  deps: ExchangeDeps
  rec: ExchangeRecord
  route: Route
  up: Dispatcher.ResponseData
  res: ServerResponse
  holdings: Holdings
  signal: AbortSignal
}

/**
 * Waits until the client drained. Rejects with client_closed when it went away, and with
 * client_stalled when it read nothing for `stallMs` (a stuck client must not hold its permit
 * forever).
 */
async function drained (res: ServerResponse, signal: AbortSignal, stallMs: number): Promise<void> {
  if (signal.aborted) throw abortCause(signal)
  const stall = AbortSignal.timeout(stallMs)
  await once(res, 'drain', { signal: AbortSignal.any([signal, stall]) }).catch(() => {
    throw signal.aborted ? abortCause(signal) : new SluiceError('client_stalled', { stallMs })
  })
}

/** Takes the parse permit for an inspection: the fast path almost always. */
async function takeParse (ctx: RelayContext): Promise<void> {
  if (!ctx.deps.ledger.parse.tryAcquire()) await ctx.deps.ledger.parse.acquire({ signal: ctx.signal })
  ctx.holdings.tookParse()
}

export async function relayStream (ctx: RelayContext): Promise<Outcome> {
  const { deps, rec, up, res, holdings, signal } = ctx
  const inspector: ProtocolInspector = inspectorFor(ROUTE_PROTOCOL[ctx.route])
  const tracker = new StreamTracker(inspector)
  // Frames found in the chunk being pushed: views into it, processed right after push().
  const frames: Buffer[] = []
  const starts: number[] = []
  const framer = new SseFramer({
    onFrame: (frame, at) => { frames.push(frame); starts.push(at) },
    onOversize: (bytes) => { tracker.oversize(bytes) },
  }, { maxFrameBytes: deps.config.limits.sseFrameBytes })

  res.writeHead(up.statusCode, { ...responseHeaders(up.headers, false), 'x-sluice-exchange-id': rec.exchangeId })
  let bytesOut = 0
  let framesOut = 0
  let failure: SluiceError | null = null
  // The unterminated frame at the end of what was pushed is held back until it ends: the
  // client only ever receives whole frames, so it stands at a frame boundary whenever a
  // failure tail follows. (Bytes are only delayed, never altered: an incomplete frame is of
  // no use to an SSE client anyway.)
  const pending: Buffer[] = []
  let pendingBytes = 0
  const stallMs = deps.config.limits.clientStallMs

  /** Writes the first n bytes of pending + chunk, keeps the rest pending; false = backpressure. */
  const flush = (chunk: Buffer | null, n: number): boolean => {
    if (chunk !== null) { pending.push(chunk); pendingBytes += chunk.length }
    let ok = true
    let left = n
    while (left > 0) {
      const head = pending[0]
      const out = head.length <= left ? head : head.subarray(0, left)
      if (out === head) pending.shift()
      else pending[0] = head.subarray(left)
      left -= out.length
      pendingBytes -= out.length
      bytesOut += out.length
      ok = res.write(out)
    }
    return ok
  }

  try {
    for await (const data of up.body) {
      const chunk = data as Buffer
      frames.length = 0
      starts.length = 0
      const oversizeBefore = framer.oversizeFrames
      framer.push(chunk)
      const before = pendingBytes
      // In pending + chunk coordinates: everything up to the partial frame may go out.
      let cut = before + chunk.length - framer.partialFrameBytes
      let admitted = 0
      try {
        holdings.setFloating(framer.bufferedBytes, before + chunk.length + res.writableLength)
      } catch (err) {
        // No room to hold this chunk: none of it goes out, the stream ends here.
        tracker.fail(SluiceError.from(err).code, 'the stream needed more bytes than the storage budget had')
        cut = 0
      }
      for (let i = 0; i < frames.length && cut > 0; i++) {
        const wasFailed = failureOf(tracker) !== null
        if (tracker.frame(frames[i], inspector.classify(frames[i]))) {
          await takeParse(ctx)
          try {
            tracker.apply(inspector.inspect(frames[i]))
          } catch (err) {
            tracker.inspectFailed(err)
          } finally {
            holdings.releaseParse()
          }
        }
        const now = failureOf(tracker)
        if (!wasFailed && now !== null) {
          // Keep a bad frame from the client: cut where it starts (it may have begun in
          // held-back bytes). The provider's own error event (in-band) goes out whole,
          // unless it quotes a configured provider key: then only the (scrubbed) tail does.
          if (!now.inBand || deps.router.scrubber.carriesSecret(frames[i])) cut = Math.max(0, before + starts[i])
          else admitted++
          break
        }
        if (now === null) admitted++
      }
      const failed = failureOf(tracker)
      if (framer.oversizeFrames > oversizeBefore && failed !== null && !failed.inBand) {
        // The oversize frame began in held-back bytes; what this chunk completed before it is
        // not told apart from it: nothing more goes out.
        cut = 0
        admitted = 0
      }
      framesOut += admitted
      // The caller is about to see the stream's terminal event: its session may go on now.
      if (tracker.closed && failed === null) holdings.releaseLane()
      const ok = flush(chunk, cut)
      if (failed !== null) break
      if (!ok) await drained(res, signal, stallMs)
    }
  } catch (err) {
    const se = signal.aborted ? abortCause(signal) : transportError(err, signal)
    if (se.code === 'client_stalled') {
      // Nobody is reading: no tail could be delivered. Cut the connection.
      if (!up.body.destroyed) up.body.destroy()
      holdings.setFloating(0, 0)
      res.destroy()
      deps.ledger.countRefusal(se.code)
      rec.bytesOut = bytesOut
      rec.frames = framesOut
      rec.usage = usageOf(tracker)
      rec.partial = true
      return { code: se.code }
    }
    if (se.code === 'client_closed') {
      rec.bytesOut = bytesOut
      rec.frames = framesOut
      rec.usage = usageOf(tracker)
      rec.partial = true
      return { code: 'client_closed' }
    }
    failure = se
  }
  if (!up.body.destroyed) up.body.destroy()
  // Whatever is still held back is an unfinished frame: it never reaches the client.
  pending.length = 0
  pendingBytes = 0

  let verdict
  if (tracker.failure === null && failure === null) {
    verdict = tracker.end({ trailingBytes: framer.end()?.length ?? 0 })
  } else {
    verdict = tracker.end(failure ? { error: { code: failure.code, message: failure.message } } : {})
  }
  holdings.setFloating(0, 0)
  rec.bytesOut = bytesOut
  rec.frames = framesOut
  rec.usage = usageOf(tracker)
  rec.partial = verdict.partial
  rec.evidence = verdict.ok

  if (verdict.ok) {
    await endResponse(res)
    return { code: 'ok' }
  }
  const f = verdict.failure!
  // The message may quote the provider's error type and code: scrubbed like any provider text.
  const err = failure ?? new SluiceError(f.code, {}, deps.router.scrubber.text(f.message) ?? '')
  deps.ledger.countRefusal(err.code)
  if (tracker.closed && f.frame !== -1 && !f.inBand) {
    // The client already has the stream's own terminal frame: a tail would not be read.
    await endResponse(res)
    return { code: err.code }
  }
  const record = failureRecord(err, rec, { frames: framesOut, bytes: bytesOut }, verdict.usage)
  const tail = inspector.failureTail(record, deps.signer.sign(record), tracker.tailContext())
  holdings.releaseLane()
  await endResponse(res, tail)
  return { code: err.code }
}

export async function relayBuffered (ctx: RelayContext): Promise<Outcome> {
  const { deps, rec, up, res, holdings, signal } = ctx
  const inspector = inspectorFor(ROUTE_PROTOCOL[ctx.route])
  const cap = deps.config.limits.maxOutputBytes
  res.writeHead(up.statusCode, { ...responseHeaders(up.headers, true), 'x-sluice-exchange-id': rec.exchangeId })
  const kept: Buffer[] = []
  let keptBytes = 0
  let keeping = true
  let bytesOut = 0
  // The last chunk is held back until the end is known: the caller must not hold the whole
  // body before the exchange's session slot is returned (see Holdings.releaseLane).
  let held: Buffer | null = null
  try {
    for await (const data of up.body) {
      const chunk = data as Buffer
      if (held !== null) {
        const out: Buffer = held
        held = null
        if (!keeping) holdings.setFloating(0, 0)
        bytesOut += out.length
        if (!res.write(out)) await drained(res, signal, deps.config.limits.clientStallMs)
      }
      if (keeping) {
        if (keptBytes + chunk.length <= cap && holdings.tryReserve(chunk.length)) {
          kept.push(chunk)
          keptBytes += chunk.length
        } else {
          // Too large to keep for usage: forward only.
          keeping = false
          kept.length = 0
          holdings.unreserve(keptBytes)
          keptBytes = 0
        }
      }
      held = chunk
      if (!keeping) holdings.setFloating(0, chunk.length)
    }
  } catch (err) {
    if (keptBytes > 0) holdings.unreserve(keptBytes)
    holdings.setFloating(0, 0)
    const se = signal.aborted ? abortCause(signal) : transportError(err, signal)
    rec.bytesOut = bytesOut
    rec.partial = true
    if (se.code !== 'client_closed') deps.ledger.countRefusal(se.code)
    // A JSON body cut short cannot carry an error event: end the connection so the client
    // sees a truncated body, never a complete-looking one.
    res.destroy()
    return { code: se.code }
  }
  rec.bytesOut = bytesOut
  let malformed = false
  if (keeping && keptBytes > 0) {
    await takeParse(ctx)
    try {
      const value = JSON.parse(Buffer.concat(kept, keptBytes).toString('utf8')) as unknown
      const usage = inspector.usageFromJson(value)
      rec.usage = usage ? { ...usage } as Record<string, number> : null
    } catch {
      rec.usage = null
      // A JSON answer that does not parse is the provider breaking its protocol.
      malformed = isJson(up.headers)
    } finally {
      holdings.releaseParse()
      kept.length = 0
      holdings.unreserve(keptBytes)
    }
  }
  if (malformed) {
    // Its last chunk is still held back: cut the connection so the caller sees a truncated
    // body, never a complete-looking one that is not JSON, and nothing counts as evidence.
    const err = new SluiceError('provider_protocol_error', {}, 'the provider answered with a body that is not valid JSON')
    deps.ledger.countRefusal(err.code)
    rec.partial = true
    rec.evidence = false
    holdings.setFloating(0, 0)
    res.destroy()
    return { code: err.code }
  }
  rec.partial = false
  rec.evidence = up.statusCode < 300
  holdings.releaseLane()
  if (held !== null) bytesOut += (held as Buffer).length
  rec.bytesOut = bytesOut
  await endResponse(res, held ?? undefined)
  holdings.setFloating(0, 0)
  return { code: 'ok' }
}

function isJson (headers: Dispatcher.ResponseData['headers']): boolean {
  const ct = headers['content-type']
  return typeof ct === 'string' && /^application\/(.+\+)?json\b/i.test(ct)
}

/** A fresh read of the tracker's first fatal (a call, so no stale type narrowing). */
function failureOf (tracker: StreamTracker): StreamFailure | null {
  return tracker.failure
}

function usageOf (tracker: StreamTracker): Record<string, number> | null {
  const u = tracker.usage
  return u ? { ...u } as Record<string, number> : null
}

/** Ends the response (optionally with a last chunk) and waits for it to be flushed or closed. */
async function endResponse (res: ServerResponse, last?: Buffer): Promise<void> {
  if (res.destroyed) return
  await new Promise<void>((resolve) => {
    res.once('close', resolve)
    res.end(last, () => resolve())
  })
}
