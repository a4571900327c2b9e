// Stream translation: provider frames in, client bytes out (README.md in the folder above).
//
//   const t = createStreamTranslator({ from: 'openai-chat', to: 'openai-responses', request, budget, issuer })
//   for each provider frame:  write(t.pushFrame(frame))       (or t.push(eventName, parsedData))
//   at the provider's EOF:    write(t.end())
//   if (t.failure)            write(t.failureTail(record, sign(record)))   // the signed failure
//   after an abort:           t.dispose()
//
// Every byte the translation keeps is charged to `budget` and back at zero once the stream
// finished, failed (after failureTail) or was disposed.

import type { FailureRecord } from '../../sse/sign.ts'
import { payloadOf } from '../../protocols/bytes.ts'
import type { CanonicalRequest, EventSink, Protocol, TranslationBudget, Usage } from '../canonical.ts'
import type { ErrorEvent } from './client-errors.ts'
import { Collector } from './collect.ts'
import { ChatDecoder, chatFromJson } from './decode-chat.ts'
import { MessagesDecoder, messagesFromJson } from './decode-messages.ts'
import { ResponsesDecoder, responsesFromJson } from './decode-responses.ts'
import { toolLookup, type DecoderOptions, type ToolLookup, type TranslateLimits } from './emit.ts'
import { ChatEncoder } from './encode-chat.ts'
import { MessagesEncoder } from './encode-messages.ts'
import { ResponsesEncoder } from './encode-responses.ts'
import type { EncoderOptions, StreamEncoder } from './encoder.ts'

export type { ErrorEvent } from './client-errors.ts'
export { errorDetails } from './client-errors.ts'
export type { StreamEncoder } from './encoder.ts'
export type { ToolLookup, TranslateLimits } from './emit.ts'
export { DEFAULT_LIMITS, toolLookup } from './emit.ts'
export { ChatDecoder, chatFromJson } from './decode-chat.ts'
export { MessagesDecoder, messagesFromJson } from './decode-messages.ts'
export { ResponsesDecoder, responsesFromJson } from './decode-responses.ts'
export { ChatEncoder } from './encode-chat.ts'
export { MessagesEncoder } from './encode-messages.ts'
export { ResponsesEncoder } from './encode-responses.ts'
export { Collector } from './collect.ts'

export interface TranslatorOptions {
  /** The provider's protocol (what the frames are). */
  from: Protocol
  /** The client's protocol (what the bytes must be). */
  to: Protocol
  request: CanonicalRequest
  budget: TranslationBudget
  /** `<protocol>:<provider name>` (envelope.ts issuerOf): who issued the reasoning blobs. */
  issuer: string
  limits?: TranslateLimits
  /** Wire name -> the client's tool; default: from request.tools (names.ts builds the wire names). */
  lookup?: ToolLookup
  /** Chat clients: stream_options.include_usage (default: request.includeUsage). */
  includeUsage?: boolean
  /** Responses clients with the conversation store: see EncoderOptions.state. */
  state?: EncoderOptions['state']
}

export interface StreamTranslator {
  /** One provider frame: its event name (null for Chat) and parsed data (Chat: `'[DONE]'`). */
  push (eventName: string | null, data: unknown): Buffer[]
  /** One provider frame as bytes (as SseFramer reports it): read, parsed, pushed. */
  pushFrame (frame: Uint8Array): Buffer[]
  /** Like pushFrame, but the client bytes stay queued until take(): one buffer for many frames. */
  feedFrame (frame: Uint8Array): void
  /** The client bytes queued since the last take. */
  take (): Buffer[]
  /** The provider's stream ended. */
  end (): Buffer[]
  /** The stream's failure (its client bytes are failureTail's), null while none. */
  readonly failure: ErrorEvent | null
  /** True once the client's terminal was written. */
  readonly finished: boolean
  readonly usage: Usage | null
  failureTail (record: FailureRecord, signature: string): Buffer
  dispose (): void
  /** Responses clients with `state.keep`, once finished: the id and output the store keeps (once). */
  takeKept (): { id: string, output: string } | null
}

interface Decoder { frame (event: string | null, data: unknown): void; end (): void; readonly e: { ended: boolean; dispose (): void; fail (code: string, message: string): void; usage: Usage | null } }

function decoder (from: Protocol, o: DecoderOptions): Decoder {
  switch (from) {
    case 'openai-chat': return new ChatDecoder(o)
    case 'openai-responses': return new ResponsesDecoder(o)
    case 'anthropic': return new MessagesDecoder(o)
  }
}

function encoder (to: Protocol, o: EncoderOptions): StreamEncoder {
  switch (to) {
    case 'openai-chat': return new ChatEncoder(o)
    case 'openai-responses': return new ResponsesEncoder(o)
    case 'anthropic': return new MessagesEncoder(o)
  }
}

function decoderOptions (o: TranslatorOptions, sink: EventSink): DecoderOptions {
  const d: DecoderOptions = { sink, budget: o.budget, issuer: o.issuer, lookup: o.lookup ?? toolLookup(o.request.tools) }
  if (o.limits !== undefined) d.limits = o.limits
  return d
}

export function createStreamTranslator (o: TranslatorOptions): StreamTranslator {
  const eo: EncoderOptions = { request: o.request, budget: o.budget }
  const includeUsage = o.includeUsage ?? o.request.includeUsage
  if (includeUsage !== undefined) eo.includeUsage = includeUsage
  if (o.state !== undefined) eo.state = o.state
  const enc = encoder(o.to, eo)
  const dec = decoder(o.from, decoderOptions(o, enc))
  /** A Chat provider's plain text deltas are read from their bytes (ChatDecoder.plainText). */
  const chat = dec instanceof ChatDecoder ? dec : null
  let tailed = false
  return {
    push (eventName, data) {
      dec.frame(eventName, data)
      return enc.take()
    },
    pushFrame (frame) {
      this.feedFrame(frame)
      return enc.take()
    },
    feedFrame (frame) {
      const { event, data } = payloadOf(Buffer.isBuffer(frame) ? frame : Buffer.from(frame.buffer, frame.byteOffset, frame.byteLength))
      if (data === null || data.length === 0) return
      if (chat !== null && event === null && chat.plainText(data)) return
      const text = data.toString('utf8')
      if (text.trim() === '[DONE]') { dec.frame(event, '[DONE]'); return }
      let v: unknown
      try {
        v = JSON.parse(text)
      } catch {
        dec.e.fail('provider_protocol_error', `a provider frame${event !== null ? ` (${event})` : ''} is not valid JSON`)
        return
      }
      dec.frame(event, v)
      if (chat !== null && event === null) chat.learnHead(data)
    },
    take () { return enc.take() },
    end () {
      dec.end()
      return enc.take()
    },
    get failure () { return enc.error },
    get finished () { return enc.finished },
    get usage () { return enc.usage ?? dec.e.usage },
    failureTail (record, signature) {
      if (tailed) throw new Error('translate: failureTail called twice')
      tailed = true
      return enc.failureTail(record, signature)
    },
    dispose () {
      dec.e.dispose()
      enc.dispose()
    },
    takeKept () {
      return enc.finished && enc.takeKept !== undefined ? enc.takeKept() : null
    },
  }
}

export type JsonTranslation = { ok: true; body: Record<string, unknown> } | { ok: false; error: ErrorEvent }

/**
 * A provider's non-streaming JSON answer -> the client's JSON answer, through the same decoders
 * and events as a stream (the parser pool's answer task, src/json/answer.ts, runs it). Never
 * throws: a refusal is `{ ok: false, error }` (its catalogue code, errorDetails(error)), and
 * `budget` is back at zero either way.
 */
export function translateJson (o: TranslatorOptions & { answer: unknown }): JsonTranslation {
  if (o.from === o.to) return { ok: false, error: { type: 'error', code: 'internal_error', message: 'a same-protocol answer is relayed byte-exact, never translated' } }
  const c = new Collector(o.budget)
  const d = decoderOptions(o, c)
  if (o.from === 'openai-chat') chatFromJson(o.answer, d)
  else if (o.from === 'openai-responses') responsesFromJson(o.answer, d)
  else messagesFromJson(o.answer, d)
  if (c.error !== null) return { ok: false, error: c.error }
  if (c.stop === null) {
    c.dispose()
    return { ok: false, error: { type: 'error', code: 'provider_protocol_error', message: 'the provider answer did not complete' } }
  }
  try {
    return { ok: true, body: c.render(o.to, o.request) }
  } catch (err) {
    c.dispose() // a defect: the client gets a truthful failure, the budget is back at idle
    return { ok: false, error: { type: 'error', code: 'internal_error', message: `answer translation failed: ${err instanceof Error ? err.message : String(err)}` } }
  }
}
