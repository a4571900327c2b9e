// Finding the signed failure tail at the end of a client's stream.
//
// Every tail is one frame, written at a frame boundary, that ends the stream: Chat
// `data: {"error":{...,"sluice":{record,signature}}}`; Responses and Messages
// `event: <name>` then such a data line. So the tail, when there is one, is the stream's last
// frame, and its data line's JSON carries `sluice.record` and `sluice.signature`.

import type { FailureRecord } from '../../src/sse/sign.ts'
import type { Protocol } from '../../src/protocols/index.ts'

/** The `{ record, signature }` object anywhere in a tail's JSON. */
export function findSluice (v: unknown): { record: FailureRecord; signature: string } | null {
  if (v === null || typeof v !== 'object') return null
  const o = v as Record<string, unknown>
  const s = o.sluice as { record?: FailureRecord; signature?: string } | undefined
  if (s && typeof s === 'object' && s.record && typeof s.signature === 'string') return { record: s.record, signature: s.signature }
  for (const k of Object.keys(o)) {
    const r = findSluice(o[k])
    if (r) return r
  }
  return null
}

export interface Split {
  /** Everything before the tail (the whole stream when there is none). */
  prefix: Buffer
  /** The tail frame's bytes, or null. */
  tail: Buffer | null
  /** The tail's data JSON. */
  json: unknown
}

/** Splits a client stream into what came before the tail and the tail itself. */
export function splitTail (out: Buffer, client: Protocol): Split {
  const none: Split = { prefix: out, tail: null, json: null }
  if (out.length < 2 || out[out.length - 1] !== 10 || out[out.length - 2] !== 10) return none
  const body = out.subarray(0, out.length - 2)
  // The provider's frames before the tail may end their lines with CR: look for either.
  const dataAt = lineStart(body, body.length)
  const line = body.subarray(dataAt).toString('utf8')
  if (!line.startsWith('data: {')) return none
  let json: unknown
  try {
    json = JSON.parse(line.slice(6))
  } catch {
    return none
  }
  if (findSluice(json) === null) return none
  let start = dataAt
  if (client !== 'openai-chat') {
    // Responses and Messages tails carry an event line first.
    if (dataAt === 0) return none
    const eventAt = lineStart(body, dataAt - 1)
    if (!body.subarray(eventAt, dataAt - 1).toString('latin1').startsWith('event: ')) return none
    start = eventAt
  }
  return { prefix: out.subarray(0, start), tail: out.subarray(start), json }
}

/** Where the line that ends at `end` starts (after the last LF or CR before it). */
function lineStart (b: Buffer, end: number): number {
  if (end <= 0) return 0 // (a negative offset would make lastIndexOf count from the end)
  return Math.max(b.lastIndexOf(10, end - 1), b.lastIndexOf(13, end - 1)) + 1
}
