// Anthropic Messages streams: named events.
//
// Frames that matter (classify() says inspect; see named.ts for how):
//   message_start   the message id, model and input usage
//   message_delta   stop_reason and the (cumulative) output usage
//   message_stop    the terminal
//   error           an in-stream error: `{"type":"error","error":{"type","message"}}`
// Everything else (content_block_*, ping, unknown events) is pass.
//
// Usage: `inputTokens` counts every input token the provider processed: input_tokens plus
// cache_creation_input_tokens plus cache_read_input_tokens (Anthropic reports them apart;
// OpenAI's prompt_tokens already include cached tokens).

import type { FailureRecord } from '../sse/sign.ts'
import {
  errorFacts, isRecord, num, str, usageReaders,
} from './bytes.ts'
import { namedClassifier, namedPayload } from './named.ts'
import { tailMessage } from './tail.ts'
import type { FrameFacts, ProtocolInspector, TailContext, Usage } from './types.ts'

export const INSPECT_EVENTS = ['message_start', 'message_delta', 'message_stop', 'error'] as const

export const { classify, classifyAt } = namedClassifier(INSPECT_EVENTS)

function usageOf (u: unknown): Usage | undefined {
  if (!isRecord(u)) return undefined
  const out: Usage = {}
  const base = num(u.input_tokens)
  const created = num(u.cache_creation_input_tokens)
  const read = num(u.cache_read_input_tokens)
  const o = num(u.output_tokens)
  if (base !== undefined || created !== undefined || read !== undefined) out.inputTokens = (base ?? 0) + (created ?? 0) + (read ?? 0)
  if (o !== undefined) out.outputTokens = o
  return out.inputTokens === undefined && o === undefined ? undefined : out
}

export function inspect (frame: Uint8Array): FrameFacts {
  const payload = namedPayload(frame)
  if (payload === null) return {}
  const { obj, name } = payload
  const facts: FrameFacts = {}
  if (name !== undefined) facts.event = name
  switch (name) {
    case 'message_start': {
      const m = obj.message
      if (isRecord(m)) {
        const id = str(m.id)
        if (id !== undefined) facts.responseId = id
        const model = str(m.model)
        if (model !== undefined) facts.model = model
        const usage = usageOf(m.usage)
        if (usage !== undefined) facts.usage = usage
      }
      break
    }
    case 'message_delta': {
      const d = obj.delta
      if (isRecord(d) && typeof d.stop_reason === 'string') facts.stopReason = d.stop_reason
      const usage = usageOf(obj.usage)
      if (usage !== undefined) facts.usage = usage
      break
    }
    case 'message_stop':
      facts.terminal = 'completed'
      break
    case 'error':
      facts.error = errorFacts(obj.error, 'error')
      break
  }
  return facts
}

/** The signed failure as Messages' own `event: error`, error type `api_error` (or ctx.errorType). */
export function failureTail (record: FailureRecord, signature: string, ctx: TailContext = {}): Buffer {
  const body = { type: 'error', error: { type: ctx.errorType ?? 'api_error', message: tailMessage(record) + (ctx.messageSuffix ?? ''), sluice: { record, signature } } }
  return Buffer.from((ctx.closing ?? '') + 'event: error\ndata: ' + JSON.stringify(body) + '\n\n')
}

export const { usageFromJson, extractUsage } = usageReaders(usageOf)

export const messages: ProtocolInspector = {
  protocol: 'anthropic',
  classify,
  classifyAt,
  inspect,
  failureTail,
  extractUsage,
  usageFromJson,
}
