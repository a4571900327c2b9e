// The translated relay: a provider's stream in one protocol, the client's stream in another
// (DESIGN.md "Protocol translation"; src/translate/). Same-protocol routes never come here:
// they keep the thin byte-exact relay (relay.ts).
//
// Per upstream chunk: the SSE framer (1 MiB frame cap) finds the whole frames; they are
// translated together under the parse permit (one short hold per chunk, in this worker: each
// frame is parsed and decoded into canonical events, which the client's encoder renders at
// once); the client bytes go out with real backpressure (the upstream is read only as fast as
// the client drains). Every byte the translation keeps between frames (pending tool
// arguments, the open item, the items a terminal must list) is charged through the exchange's
// scope (ScopeBudget: storage budget + the translation gauges) and returned as soon as the
// item is emitted, or at the end. The first failure — a provider error event, a malformed or
// truncated call, a frame that is not JSON, an oversize frame, a missing terminal, the
// transport, the budget — ends the client's stream with its protocol's own failure event
// carrying the signed failure record; a truncated call is never reported as complete.

import type { UpstreamAnswer } from '../src/net/answer.ts'
import type { ServerResponse } from 'node:http'
import { abortCause, isErrorCode, SluiceError } from '../src/errors.ts'
import { RG_TRANSLATE_ITEM_BYTES, RG_TRANSLATE_OUTPUT_BYTES, RG_TOOL_ARGUMENT_BYTES } from '../src/ledger/layout.ts'
import type { Ledger } from '../src/ledger/ledger.ts'
import type { Protocol, TranslationBudget, Usage } from '../src/translate/canonical.ts'
import type { StreamTranslator } from '../src/translate/stream/index.ts'
import { SseFramer } from '../src/sse/framer.ts'
import type { ExchangeDeps, ExchangeRecord } from './deps.ts'
import { ClientDrain, endResponse, holdForEnd, type Outcome } from './relay.ts'
import { failureRecord } from './reply.ts'
import type { ExchangeScope } from './scope.ts'
import { transportError } from './upstream.ts'
import { pumpChunks, STOP, type ChunkStep } from '../src/net/chunks.ts'
import { writeBody } from '../src/net/body-write.ts'

/** No client bytes (shared, never written to). */
const NOTHING: Buffer[] = []

const GAUGE = { tool_arguments: RG_TOOL_ARGUMENT_BYTES, item: RG_TRANSLATE_ITEM_BYTES, output: RG_TRANSLATE_OUTPUT_BYTES } as const

/** The reservation grows and shrinks in blocks: one ledger operation per block, not per delta. */
const BLOCK = 16 * 1024

type What = 'tool_arguments' | 'item' | 'output'

/**
 * The translation's retained bytes, held by the exchange's scope (so they are released with
 * it, whatever happens) and shown per kind in this worker's gauges (synced per upstream chunk). A charge that
 * does not fit throws storage_budget_exhausted.
 */
export class ScopeBudget implements TranslationBudget {
  private readonly scope: ExchangeScope
  private readonly ledger: Ledger
  private readonly held = { tool_arguments: 0, item: 0, output: 0 }
  /** What the gauges show now (synced once per upstream chunk, and at the end). */
  private readonly shown = { tool_arguments: 0, item: 0, output: 0 }
  private total = 0
  /** Reserved in the scope for translation: whole blocks, always >= total. */
  private reserved = 0

  constructor (scope: ExchangeScope, ledger: Ledger) {
    this.scope = scope
    this.ledger = ledger
  }

  charge (bytes: number, what: What): void {
    if (bytes <= 0) return
    const need = this.total + bytes
    if (need > this.reserved) {
      // Every kept byte is reserved before it is kept; a block at a time (throws when the
      // storage budget has no room for it).
      const add = Math.ceil((need - this.reserved) / BLOCK) * BLOCK
      this.scope.reserve(add)
      this.reserved += add
    }
    this.total = need
    this.held[what] += bytes
  }

  release (bytes: number, what: What): void {
    if (bytes <= 0) return
    if (bytes > this.held[what]) throw new Error(`translation budget: release ${bytes} > held ${this.held[what]} (${what})`)
    this.held[what] -= bytes
    this.total -= bytes
    // Give back what is more than one spare block beyond the blocks in use.
    const keep = (Math.ceil(this.total / BLOCK) + 1) * BLOCK
    if (this.reserved > keep) {
      const back = this.reserved - keep
      this.reserved = keep
      if (!this.scope.isReleased) this.scope.unreserve(back)
    }
  }

  /** The translation gauges catch up with what is held (per upstream chunk: cheap per delta). */
  sync (): void {
    for (const what of ['tool_arguments', 'item', 'output'] as const) {
      const d = this.held[what] - this.shown[what]
      if (d !== 0) { this.ledger.gauge(GAUGE[what], d); this.shown[what] = this.held[what] }
    }
  }

  /** Whatever is still held goes back, the spare blocks and the gauges too. */
  drop (): void {
    for (const what of ['tool_arguments', 'item', 'output'] as const) {
      const n = this.held[what]
      if (n > 0) this.release(n, what)
    }
    if (this.reserved > 0) {
      if (!this.scope.isReleased) this.scope.unreserve(this.reserved)
      this.reserved = 0
    }
    this.sync()
  }

  get heldBytes (): number { return this.total }
}

export interface TranslatedContext {
  deps: ExchangeDeps
  rec: ExchangeRecord
  up: UpstreamAnswer
  res: ServerResponse
  scope: ExchangeScope
  signal: AbortSignal
  translator: StreamTranslator
  budget: ScopeBudget
  /** The headers the client gets (its protocol's content type, the exchange id, the pair). */
  headers: Record<string, string>
  /**
   * Called once, when the client's terminal event has been rendered and before it is
   * written: the conversation store keeps the turn (worker/continuation.ts) before the
   * client can see the end, so its next request finds it on any worker.
   */
  onFinished?: () => void
}

export async function relayTranslatedStream (ctx: TranslatedContext): Promise<Outcome> {
  const { deps, rec, up, res, scope, signal, translator, budget } = ctx
  // What the chunk being pushed completed, in stream order: frames, and an oversize frame as
  // null (judged in its place, after the frames before it, whatever the chunking).
  const frames: Array<Buffer | null> = []
  let oversize = 0
  const framer = new SseFramer({
    onFrame: (frame) => { frames.push(frame) },
    onOversize: (bytes) => { if (oversize === 0) oversize = bytes; frames.push(null) },
  }, { maxFrameBytes: deps.config.limits.sseFrameBytes })
  const drain = new ClientDrain(res, signal, deps.config.limits.clientStallMs)

  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', ...ctx.headers })
  let bytesOut = 0
  let framesIn = 0
  let failure: SluiceError | null = null
  let finishedSeen = false
  let heldForEnd = false
  const onFinished = (): void => {
    if (finishedSeen || !translator.finished || translator.failure !== null) return
    finishedSeen = true
    ctx.onFinished?.()
  }
  // One write per upstream chunk, not per frame: the socket write is the relay's main cost.
  const write = (out: Buffer[]): boolean => {
    if (out.length === 0) return true
    const b = out.length === 1 ? out[0] : Buffer.concat(out)
    bytesOut += b.length
    return writeBody(res, b)
  }
  // The chunk in hand: its frames' client bytes, and whether an oversize frame came.
  let out: Buffer[] = NOTHING
  let over = false
  /** Every frame of the chunk translated, their client bytes taken once (one buffer). */
  const translateFrames = (): void => {
    for (const f of frames) {
      if (f === null) { over = true; break }
      framesIn++
      translator.feedFrame(f)
      if (translator.failure !== null) break
    }
    out = translator.take()
  }
  const sendChunk = (): ChunkStep => {
    budget.sync()
    // An oversize frame after the client's terminal changes nothing it was told.
    if (over && !translator.finished && translator.failure === null) {
      failure = new SluiceError('provider_protocol_error', { frameBytes: oversize, limit: deps.config.limits.sseFrameBytes }, 'a provider frame is larger than the frame cap')
    }
    // The caller is about to see the stream's terminal event: its session may go on now.
    onFinished()
    if (translator.finished) {
      scope.releaseLane()
      // The client's terminal leaves with the response's end (relay.ts holdForEnd).
      if (!heldForEnd && translator.failure === null && failure === null) { heldForEnd = true; holdForEnd(res) }
    }
    const ok = write(out)
    out = NOTHING
    if (translator.failure !== null || failure !== null) return STOP
    if (!ok) return drain.wait()
  }
  const onChunk = (data: Buffer): ChunkStep => {
    frames.length = 0
    framer.push(data)
    scope.setFloating(framer.bufferedBytes, res.writableLength)
    over = false
    // The parse permit is usually free: then the chunk is handled without a promise.
    if (frames.length > 0 && !scope.tryUnderParse(translateFrames)) return scope.underParse(signal, translateFrames).then(sendChunk)
    return sendChunk()
  }
  try {
    try {
      await pumpChunks(up.body, onChunk)
      if (failure === null && translator.failure === null && !translator.finished) {
        // EOF: what the decoder still holds decides (a terminal never came -> its failure).
        const out = await scope.underParse(signal, () => translator.end())
        onFinished()
        if (translator.finished) scope.releaseLane()
        write(out)
      }
    } catch (err) {
      const se = err instanceof SluiceError && !signal.aborted ? err : signal.aborted ? abortCause(signal) : transportError(err, signal)
      if (se.code === 'client_closed' || se.code === 'client_stalled' || se.code === 'exchange_cancelled' && res.destroyed) {
        if (!up.body.destroyed) up.body.destroy()
        if (se.code === 'client_stalled') { deps.ledger.countRefusal(se.code); res.destroy() }
        rec.bytesOut = bytesOut
        rec.frames = framesIn
        rec.usage = usageRecord(translator.usage)
        rec.partial = true
        return { code: se.code }
      }
      failure = se
    }
    if (!up.body.destroyed) up.body.destroy()
    rec.bytesOut = bytesOut
    rec.frames = framesIn
    rec.usage = usageRecord(translator.usage)
    const tf = translator.failure
    if (failure === null && tf === null && translator.finished) {
      rec.partial = false
      rec.evidence = true
      scope.setFloating(0, 0)
      await endResponse(res)
      return { code: 'ok' }
    }
    const err = failure ?? new SluiceError(isErrorCode(tf?.code) ? tf.code : 'provider_error', providerDetails(tf), deps.router.scrubber.text(tf?.message ?? '') ?? '')
    deps.ledger.countRefusal(err.code)
    rec.partial = true
    rec.evidence = false
    const record = failureRecord(err, rec, { frames: framesIn, bytes: bytesOut }, rec.usage as Record<string, number> | null)
    const tail = translator.failureTail(record, deps.signer.sign(record))
    scope.releaseLane()
    scope.setFloating(0, 0)
    await endResponse(res, tail)
    bytesOut += tail.length
    rec.bytesOut = bytesOut
    return { code: err.code }
  } finally {
    drain.close()
    translator.dispose()
    budget.drop()
    if (!scope.isReleased) scope.setFloating(0, 0)
  }
}

function providerDetails (e: { providerType?: string; retryAfterSeconds?: number } | null): Record<string, string | number> {
  const d: Record<string, string | number> = {}
  if (e?.providerType !== undefined) d.providerType = e.providerType
  if (e?.retryAfterSeconds !== undefined) d.retryAfterSeconds = e.retryAfterSeconds
  return d
}

/** Canonical usage as the record's usage fields (the same names the same-protocol relay logs). */
export function usageRecord (u: Usage | null): Record<string, number> | null {
  if (u === null) return null
  const out: Record<string, number> = { inputTokens: u.inputTokens, outputTokens: u.outputTokens }
  if (u.cachedInputTokens !== undefined) out.cachedInputTokens = u.cachedInputTokens
  if (u.reasoningTokens !== undefined) out.reasoningTokens = u.reasoningTokens
  return out
}

/** The headers of a translated answer: never the provider's (they describe another protocol). */
export function translatedHeaders (rec: ExchangeRecord, from: Protocol, to: Protocol, dropped: readonly string[]): Record<string, string> {
  const h: Record<string, string> = { 'x-sluice-exchange-id': String(rec.exchangeId), 'x-sluice-translated': `${to}->${from}` }
  if (dropped.length > 0) h['x-sluice-dropped-tools'] = dropped.join(', ')
  return h
}
