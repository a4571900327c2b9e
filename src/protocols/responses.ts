// OpenAI Responses streams: named events, each with a `sequence_number`.
//
// Frames that matter (classify() says inspect; see named.ts for how):
//   response.created                  the response id, model and created_at (for a failure tail)
//   response.completed / .incomplete  the terminal, with the final usage
//   response.failed                   the terminal of a failed response: its `response.error`
//   error                             an in-stream error (`{code, message}`, or nested `error`)
// Every other event (deltas, output items, in_progress, ...) is pass. The `sequence_number`
// of pass frames is read from fixed byte offsets when laid out the usual way
// (`{"type":"<name>","sequence_number":N`), so a failure tail can continue the numbering.

import type { FailureRecord } from '../sse/sign.ts'
import { shape, shapeAt } from '../sse/fields.ts'
import {
  asBuffer, errorFacts, isRecord, leadingType, num, readUint, str, typeName, usageReaders,
} from './bytes.ts'
import { tailMessage } from './tail.ts'
import { namedClassifier, namedPayload } from './named.ts'
import type { FrameFacts, ProtocolInspector, TailContext, Usage } from './types.ts'

export const INSPECT_EVENTS = ['response.created', 'response.completed', 'response.failed', 'response.incomplete', 'error'] as const

export const { classify, classifyAt } = namedClassifier(INSPECT_EVENTS)

const QUOTE = 34
const TYPE_HEAD_LEN = '{"type":"'.length
const SEQ_LEN = '","sequence_number":'.length

export function peekSequenceNumber (frame: Uint8Array): number {
  const f = asBuffer(frame)
  return peekSequenceNumberAt(f, 0, f.length)
}

/** peekSequenceNumber() of the frame f[start, end) (reusing shapeAt's offsets when they are its). */
export function peekSequenceNumberAt (f: Buffer, start: number, end: number): number {
  if ((shape.frame !== f || shape.start !== start || shape.end !== end) && !shapeAt(f, start, end)) return -1
  const p = shape.payloadStart
  let q: number
  if (shape.nameStart !== -1) {
    q = p + TYPE_HEAD_LEN + (shape.nameEnd - shape.nameStart)
    if (f[q] !== QUOTE) return -1
  } else {
    if (!leadingType(f, p, end)) return -1
    q = typeName.end
  }
  // `","sequence_number":` after the name: its distinguishing bytes only (cheap; a misread
  // could only shift the tail's sequence_number, never a classification).
  if (q + SEQ_LEN >= end || f[q + 1] !== 44 || f[q + 2] !== QUOTE || f[q + 3] !== 115 || f[q + 11] !== 95 || f[q + 18] !== QUOTE || f[q + 19] !== 58) return -1
  return readUint(f, q + SEQ_LEN, end)
}

function usageOf (u: unknown): Usage | undefined {
  if (!isRecord(u)) return undefined
  const out: Usage = {}
  const i = num(u.input_tokens)
  const o = num(u.output_tokens)
  const t = num(u.total_tokens)
  if (i !== undefined) out.inputTokens = i
  if (o !== undefined) out.outputTokens = o
  if (t !== undefined) out.totalTokens = t
  return i === undefined && o === undefined && t === undefined ? undefined : out
}

function readResponse (r: unknown, facts: FrameFacts): Record<string, unknown> | null {
  if (!isRecord(r)) return null
  const id = str(r.id)
  if (id !== undefined) facts.responseId = id
  const model = str(r.model)
  if (model !== undefined) facts.model = model
  const created = num(r.created_at)
  if (created !== undefined) facts.createdAt = created
  return r
}

export function inspect (frame: Uint8Array): FrameFacts {
  const payload = namedPayload(frame)
  if (payload === null) return {}
  const { obj, name } = payload
  const facts: FrameFacts = {}
  if (name !== undefined) facts.event = name
  const seq = num(obj.sequence_number)
  if (seq !== undefined) facts.sequenceNumber = seq
  switch (name) {
    case 'response.created':
    case 'response.in_progress':
    case 'response.queued':
      readResponse(obj.response, facts)
      break
    case 'response.completed':
    case 'response.incomplete':
    case 'response.failed': {
      facts.terminal = name === 'response.completed' ? 'completed' : name === 'response.incomplete' ? 'incomplete' : 'failed'
      const r = readResponse(obj.response, facts)
      const usage = usageOf(r?.usage)
      if (usage !== undefined) facts.usage = usage
      if (name === 'response.failed') {
        facts.error = { ...errorFacts(r?.error, 'response.failed'), type: 'response.failed' }
      }
      break
    }
    case 'error':
      facts.error = errorFacts(isRecord(obj.error) ? obj.error : obj, 'error')
      break
  }
  return facts
}

/**
 * The signed failure as the client's own Responses event:
 *   - when the client has seen response.created (ctx.responseId): `response.failed` for that
 *     response (its id, created_at and model), status "failed",
 *     `error: {code, message, sluice: {record, signature}}`, at the next sequence_number.
 *     The openai SDK accepts it as the response's end: `finalResponse()` resolves with
 *     status "failed" and that error; event iteration yields it; Codex reports the failure.
 *   - before any response.created: an `error` event (`{type:"error", code, message, param,
 *     sluice}`), because the SDK rejects a lifecycle event that is not preceded by
 *     response.created with a message of its own; on `error` it throws APIError(message).
 */
export function failureTail (record: FailureRecord, signature: string, ctx: TailContext = {}): Buffer {
  const message = tailMessage(record) + (ctx.messageSuffix ?? '')
  const sluice = { record, signature }
  const seq = ctx.sequenceNumber ?? 0
  const code = ctx.errorCode ?? record.code
  let text: string
  if (ctx.responseId === undefined || ctx.responseId === null) {
    const event = { type: 'error', sequence_number: seq, code, message, param: null, sluice }
    text = 'event: error\ndata: ' + JSON.stringify(event) + '\n\n'
  } else {
    const response = {
      id: ctx.responseId,
      object: 'response',
      created_at: ctx.createdAt ?? Math.floor(Date.parse(record.at) / 1000),
      status: 'failed',
      background: false,
      error: { code, message, sluice },
      incomplete_details: null,
      model: ctx.model ?? record.model,
      output: ctx.output ?? [],
      parallel_tool_calls: true,
      tool_choice: 'auto',
      tools: [],
      usage: null,
      metadata: {},
    }
    const event = { type: 'response.failed', sequence_number: seq, response }
    text = 'event: response.failed\ndata: ' + JSON.stringify(event) + '\n\n'
  }
  return Buffer.from((ctx.closing ?? '') + text)
}

export const { usageFromJson, extractUsage } = usageReaders(usageOf)

export const responses: ProtocolInspector = {
  protocol: 'openai-responses',
  classify,
  classifyAt,
  inspect,
  failureTail,
  extractUsage,
  usageFromJson,
  peekSequenceNumber,
  peekSequenceNumberAt,
}
