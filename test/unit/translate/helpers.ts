// Shared by the stream translation tests: provider frames from SSE text, a checker of the
// canonical event invariants (canonical.ts), the translator run over frames, and a fetch that
// serves translated bytes to the official SDKs.

import { readFileSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { CountingBudget, type CanonicalEvent, type CanonicalRequest, type EventSink, type Protocol, type ToolDef } from '../../../src/translate/canonical.ts'
import { createStreamTranslator, type StreamTranslator, type TranslatorOptions } from '../../../src/translate/stream/index.ts'
import { parseSseText } from '../../helpers/sse.ts'

export const FIXTURES = new URL('../../../../shared/fixtures/clients/', import.meta.url)

export interface Frame { event: string | null; data: unknown }

export function framesOf (text: string): Frame[] {
  return parseSseText(text).map(f => ({ event: f.event, data: f.data.trim() === '[DONE]' ? '[DONE]' : JSON.parse(f.data) }))
}

export function fixtureFrames (name: string): Frame[] {
  return framesOf(readFileSync(new URL(name, FIXTURES), 'utf8'))
}

/** Renders frames as provider SSE text (for pushFrame and the sim-like servers). */
export function sseOf (frames: Frame[]): string {
  return frames.map(f => (f.event !== null ? `event: ${f.event}\n` : '') + 'data: ' + (f.data === '[DONE]' ? '[DONE]' : JSON.stringify(f.data)) + '\n\n').join('')
}

/** Records canonical events and throws on the first broken invariant. */
export class EventSequenceChecker implements EventSink {
  events: CanonicalEvent[] = []
  open = -1
  next = 0
  ended = false

  event (e: CanonicalEvent): void {
    if (this.ended) throw new Error(`event after the last one: ${e.type}`)
    if (this.events.length === 0 && e.type !== 'start' && e.type !== 'error') throw new Error(`first event is ${e.type}`)
    if (e.type === 'start' && this.events.length > 0) throw new Error('start twice')
    this.events.push(e)
    switch (e.type) {
      case 'item_start':
        if (this.open !== -1) throw new Error(`item ${e.index} starts while ${this.open} is open`)
        if (e.index !== this.next) throw new Error(`item index ${e.index}, expected ${this.next}`)
        this.open = e.index
        this.next++
        break
      case 'delta': case 'summary_delta':
        if (e.index !== this.open) throw new Error(`delta for ${e.index} while ${this.open} is open`)
        break
      case 'item_end':
        if (e.index !== this.open) throw new Error(`item_end ${e.index} while ${this.open} is open`)
        if (e.item.kind === 'tool_call' && e.item.call.kind !== 'custom') JSON.parse(e.item.call.arguments)
        this.open = -1
        break
      case 'finish':
        if (this.open !== -1) throw new Error('finish with an open item')
        this.ended = true
        break
      case 'error':
        this.ended = true
        break
    }
  }

  get last (): CanonicalEvent | undefined { return this.events[this.events.length - 1] }
  ofType<T extends CanonicalEvent['type']> (t: T): Array<Extract<CanonicalEvent, { type: T }>> {
    return this.events.filter(e => e.type === t) as Array<Extract<CanonicalEvent, { type: T }>>
  }
}

export function request (client: Protocol, tools: ToolDef[] = [], extra: Partial<CanonicalRequest> = {}): CanonicalRequest {
  return { client, model: 'test-model', stream: true, system: [], messages: [], tools, droppedTools: [], ...extra }
}

export function fn (name: string, extra: Partial<ToolDef> = {}): ToolDef {
  return { kind: 'function', name, wireName: name, parameters: { type: 'object' }, ...extra }
}

export interface Run {
  bytes: Buffer
  text: string
  t: StreamTranslator
  budget: CountingBudget
}

/** Pushes frames (as bytes, through pushFrame, the way the worker will) and EOF unless `eof` false. */
export function run (o: Omit<TranslatorOptions, 'budget' | 'issuer'> & { issuer?: string; budget?: CountingBudget }, frames: Frame[], eof = true): Run {
  const budget = o.budget ?? new CountingBudget()
  const t = createStreamTranslator({ issuer: 'test:provider', ...o, budget })
  const out: Buffer[] = []
  for (const f of frames) out.push(...t.pushFrame(Buffer.from(sseOf([f]).slice(0, -2))))
  if (eof) out.push(...t.end())
  const bytes = Buffer.concat(out)
  return { bytes, text: bytes.toString('utf8'), t, budget }
}

/** A fetch answering every request with these bytes as an SSE body. */
export function serve (chunks: Buffer[], contentType = 'text/event-stream'): typeof fetch {
  return async () => {
    const body = new ReadableStream<Uint8Array>({
      start (controller) {
        for (const c of chunks) controller.enqueue(new Uint8Array(c))
        controller.close()
      },
    })
    return new Response(body, { status: 200, headers: { 'content-type': contentType } })
  }
}

/** A loopback HTTP server answering every request with these bytes (for the AI SDK). */
export async function serveHttp (chunks: () => Buffer[], contentType = 'text/event-stream'): Promise<{ url: string; close: () => Promise<void>; requests: number }> {
  const state = { requests: 0 }
  const server: Server = createServer((req, res) => {
    state.requests++
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': contentType })
      for (const c of chunks()) res.write(c)
      res.end()
    })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    get requests () { return state.requests },
    close: () => new Promise<void>(resolve => server.close(() => resolve())),
  }
}

export async function settle<T> (p: Promise<T>): Promise<{ value?: T; error?: any }> {
  const timeout = new Promise<never>((_, reject) => setTimeout(() => reject(new Error('hung')), 5000).unref())
  try {
    return { value: await Promise.race([p, timeout]) }
  } catch (error) {
    return { error }
  }
}

/** Cuts s into pieces of n characters. */
export function pieces (s: string, n: number): string[] {
  const out: string[] = []
  for (let i = 0; i < s.length; i += n) out.push(s.slice(i, i + n))
  return out.length === 0 ? [''] : out
}

export interface ScriptCall { id: string; name: string; args: string }

/**
 * A Chat provider stream: optional reasoning_content, text, then tool calls — interleaved
 * (fragment k of every call before fragment k+1 of any, id/name on each call's first) or one
 * after another — then finish_reason, a usage chunk and [DONE] (each part can be left out).
 */
export function chatFrames (o: { id?: string; reasoning?: string; text?: string; calls?: ScriptCall[]; interleave?: boolean; piece?: number; finish?: string | null; usage?: boolean; done?: boolean }): Frame[] {
  const id = o.id ?? 'chatcmpl-test1'
  const chunk = (delta: Record<string, unknown>, finish: string | null = null): Frame => ({ event: null, data: { id, object: 'chat.completion.chunk', created: 1796000000, model: 'gpt-x', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] } })
  const frames: Frame[] = [chunk({ role: 'assistant', content: '' })]
  const n = o.piece ?? 7
  if (o.reasoning !== undefined) for (const p of pieces(o.reasoning, n)) frames.push(chunk({ reasoning_content: p }))
  if (o.text !== undefined) for (const p of pieces(o.text, n)) frames.push(chunk({ content: p }))
  const calls = o.calls ?? []
  const split = calls.map(c => pieces(c.args, n))
  const first = (i: number, c: ScriptCall, args: string): Frame => chunk({ tool_calls: [{ index: i, id: c.id, type: 'function', function: { name: c.name, arguments: args } }] })
  const more = (i: number, args: string): Frame => chunk({ tool_calls: [{ index: i, function: { arguments: args } }] })
  if (o.interleave === true) {
    const longest = Math.max(0, ...split.map(s => s.length))
    for (let k = 0; k < longest; k++) {
      for (let i = 0; i < calls.length; i++) {
        if (k < split[i].length) frames.push(k === 0 ? first(i, calls[i], split[i][0]) : more(i, split[i][k]))
      }
    }
  } else {
    for (let i = 0; i < calls.length; i++) split[i].forEach((p, k) => frames.push(k === 0 ? first(i, calls[i], p) : more(i, p)))
  }
  const finish = o.finish === undefined ? (calls.length > 0 ? 'tool_calls' : 'stop') : o.finish
  if (finish !== null) frames.push(chunk({}, finish))
  if (o.usage !== false) frames.push({ event: null, data: { id, object: 'chat.completion.chunk', created: 1796000000, model: 'gpt-x', choices: [], usage: { prompt_tokens: 40, completion_tokens: 12, total_tokens: 52, prompt_tokens_details: { cached_tokens: 8 }, completion_tokens_details: { reasoning_tokens: 3 } } } })
  if (o.done !== false) frames.push({ event: null, data: '[DONE]' })
  return frames
}

/** An Anthropic provider stream: blocks in order, message_delta with `stop`, message_stop. */
export function messagesFrames (o: { thinking?: { text: string; signature: string }; redacted?: string; text?: string; calls?: ScriptCall[]; stop?: string; piece?: number; terminal?: boolean }): Frame[] {
  const ev = (event: string, data: Record<string, unknown>): Frame => ({ event, data: { type: event, ...data } })
  const n = o.piece ?? 9
  const frames: Frame[] = [ev('message_start', { message: { id: 'msg_test1', type: 'message', role: 'assistant', model: 'claude-x', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 30, cache_creation_input_tokens: 2, cache_read_input_tokens: 8, output_tokens: 1 } } })]
  let index = 0
  if (o.thinking !== undefined) {
    frames.push(ev('content_block_start', { index, content_block: { type: 'thinking', thinking: '', signature: '' } }))
    for (const p of pieces(o.thinking.text, n)) frames.push(ev('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: p } }))
    frames.push(ev('content_block_delta', { index, delta: { type: 'signature_delta', signature: o.thinking.signature } }))
    frames.push(ev('content_block_stop', { index }))
    index++
  }
  if (o.redacted !== undefined) {
    frames.push(ev('content_block_start', { index, content_block: { type: 'redacted_thinking', data: o.redacted } }))
    frames.push(ev('content_block_stop', { index }))
    index++
  }
  if (o.text !== undefined) {
    frames.push(ev('content_block_start', { index, content_block: { type: 'text', text: '' } }))
    for (const p of pieces(o.text, n)) frames.push(ev('content_block_delta', { index, delta: { type: 'text_delta', text: p } }))
    frames.push(ev('content_block_stop', { index }))
    index++
  }
  for (const c of o.calls ?? []) {
    frames.push(ev('content_block_start', { index, content_block: { type: 'tool_use', id: c.id, name: c.name, input: {} } }))
    for (const p of c.args === '' ? [] : pieces(c.args, n)) frames.push(ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: p } }))
    frames.push(ev('content_block_stop', { index }))
    index++
  }
  if (o.terminal !== false) {
    frames.push(ev('message_delta', { delta: { stop_reason: o.stop ?? ((o.calls ?? []).length > 0 ? 'tool_use' : 'end_turn'), stop_sequence: null }, usage: { output_tokens: 12 } }))
    frames.push(ev('message_stop', {}))
  }
  return frames
}

/** The JSON data of every frame of an SSE body (for reading what an encoder sent). */
export function parseSse (bytes: Buffer): any[] {
  return parseSseText(bytes.toString('utf8')).filter(f => f.data !== '[DONE]').map(f => JSON.parse(f.data))
}
