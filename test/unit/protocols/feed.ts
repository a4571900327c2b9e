// Test helper: runs provider bytes through the framer, the classifier and a tracker, the way
// the relay does (inspect only what the tracker asks for).
import { SseFramer } from '../../../src/sse/framer.ts'
import { inspectorFor, StreamTracker, type FrameClass, type FrameFacts, type Protocol, type StreamVerdict } from '../../../src/protocols/index.ts'

export interface Fed {
  classes: FrameClass[]
  frames: string[]
  facts: FrameFacts[]
  oversize: number[]
  tracker: StreamTracker
  framer: SseFramer
  verdict: StreamVerdict
  /** The tracker's tail context taken before end(). */
  closing: string
}

export interface FeedOptions {
  /** Chunk size; 0 = one chunk; 'random' = seeded random sizes 1..4096. */
  chunk?: number | 'random'
  maxFrameBytes?: number
  seed?: number
}

export function chunksOf (bytes: Buffer, chunk: number | 'random' = 0, seed = 7): Buffer[] {
  if (chunk === 0) return [bytes]
  const out: Buffer[] = []
  let s = seed
  for (let i = 0; i < bytes.length;) {
    let n: number
    if (chunk === 'random') {
      s = (s * 1103515245 + 12345) >>> 0
      n = 1 + ((s >>> 8) % 4096)
    } else n = chunk
    out.push(bytes.subarray(i, i + n))
    i += n
  }
  return out
}

export function feed (protocol: Protocol, bytes: Buffer, opts: FeedOptions = {}): Fed {
  const inspector = inspectorFor(protocol)
  const tracker = new StreamTracker(protocol)
  const classes: FrameClass[] = []
  const frames: string[] = []
  const facts: FrameFacts[] = []
  const oversize: number[] = []
  const framer = new SseFramer({
    onFrame: frame => {
      const cls = inspector.classify(frame)
      classes.push(cls)
      frames.push(frame.toString())
      if (tracker.frame(frame, cls)) {
        let f: FrameFacts | undefined
        try {
          f = inspector.inspect(frame)
        } catch (err) {
          tracker.inspectFailed(err)
        }
        if (f !== undefined) {
          facts.push(f)
          tracker.apply(f)
        }
      }
    },
    onOversize: n => {
      oversize.push(n)
      tracker.oversize(n)
    },
  }, opts.maxFrameBytes === undefined ? {} : { maxFrameBytes: opts.maxFrameBytes })
  for (const c of chunksOf(bytes, opts.chunk ?? 0, opts.seed)) framer.push(c)
  const closing = framer.closingBytes()
  const trailing = framer.end()
  const verdict = tracker.end({ trailingBytes: trailing?.length ?? 0 })
  return { classes, frames, facts, oversize, tracker, framer, verdict, closing }
}

export const PATH: Record<Protocol, string> = {
  'openai-chat': '/v1/chat/completions',
  'openai-responses': '/v1/responses',
  anthropic: '/v1/messages',
}

const TOOL_SCHEMA = { type: 'object', properties: { path: { type: 'string' }, limit: { type: 'integer' } }, required: ['path'] }

/** A streaming request body for the sim, with tools (and usage for Chat). */
export function simBody (protocol: Protocol, text: string, stream = true): Record<string, unknown> {
  if (protocol === 'openai-chat') {
    return {
      model: 'gpt-4o-mini',
      stream,
      ...(stream ? { stream_options: { include_usage: true } } : {}),
      messages: [{ role: 'user', content: text }],
      tools: [{ type: 'function', function: { name: 'read_file', parameters: TOOL_SCHEMA } }],
    }
  }
  if (protocol === 'openai-responses') {
    return { model: 'gpt-5.5', stream, input: text, include: ['reasoning.encrypted_content'], tools: [{ type: 'function', name: 'read_file', parameters: TOOL_SCHEMA }] }
  }
  return { model: 'claude-opus-5-5', max_tokens: 200, stream, messages: [{ role: 'user', content: text }], tools: [{ name: 'read_file', input_schema: TOOL_SCHEMA }] }
}
