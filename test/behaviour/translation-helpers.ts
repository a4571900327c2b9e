// What the translation behaviour tests share: the six pairs (client route x provider protocol)
// on one rig, the official SDKs pointed at the gateway (their stream helpers and non-stream
// calls), each client's answer read into one shape, and the request shapes of each client.

import OpenAI from 'openai'
import Anthropic from '@anthropic-ai/sdk'
import { request } from 'undici'
import type { SimBodyEvent } from '../../src/sim/index.ts'
import { KEY, type Rig } from '../helpers/exchange.ts'

export type Route = 'chat' | 'responses' | 'messages'
export type Protocol = 'openai-chat' | 'openai-responses' | 'anthropic'
export type Obj = Record<string, any>

export const ROUTE_PROTOCOL: Record<Route, Protocol> = { chat: 'openai-chat', responses: 'openai-responses', messages: 'anthropic' }
export const ROUTE_PATH: Record<Route, string> = { chat: '/v1/chat/completions', responses: '/v1/responses', messages: '/v1/messages' }
/** A model on each provider of the default rig (test/helpers/exchange.ts). */
export const MODEL: Record<Protocol, string> = { 'openai-chat': 'gpt-4o-mini', 'openai-responses': 'gpt-5.5', anthropic: 'claude-opus-5-5' }
export const ROUTES: Route[] = ['chat', 'responses', 'messages']
export const PROTOCOLS: Protocol[] = ['openai-chat', 'openai-responses', 'anthropic']

export interface Pair { route: Route; client: Protocol; provider: Protocol; model: string; name: string }
export const PAIRS: Pair[] = ROUTES.flatMap(route => PROTOCOLS.filter(p => p !== ROUTE_PROTOCOL[route]).map(provider => ({
  route, client: ROUTE_PROTOCOL[route], provider, model: MODEL[provider], name: `${ROUTE_PROTOCOL[route]}->${provider}`,
})))

export const WEATHER = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }

/** A function tool in the client's shape. */
export function fnTool (route: Route, name: string, parameters: Obj = WEATHER): Obj {
  if (route === 'chat') return { type: 'function', function: { name, description: `the ${name} tool`, parameters } }
  if (route === 'responses') return { type: 'function', name, description: `the ${name} tool`, parameters, strict: false }
  return { name, description: `the ${name} tool`, input_schema: parameters }
}

/** A first-turn request body in the client's protocol. */
export function firstTurn (pair: Pair, text: string, extra: Obj = {}): Obj {
  if (pair.route === 'chat') return { model: pair.model, messages: [{ role: 'user', content: text }], ...extra }
  if (pair.route === 'responses') return { model: pair.model, input: [{ role: 'user', content: [{ type: 'input_text', text }] }], ...extra }
  return { model: pair.model, max_tokens: 1024, messages: [{ role: 'user', content: text }], ...extra }
}

/** One client answer, whatever its protocol. */
export interface Answer {
  text: string
  calls: Array<{ id: string; name: string; args: string; type?: string; namespace?: string }>
  stop: string
  usage: Obj
  /** The protocol's own answer object (final completion / response / message). */
  raw: Obj
  /** Every stream event the SDK's helper yielded (empty when not streaming). */
  events: Obj[]
}

export function sdks (rig: Rig): { openai: OpenAI; anthropic: Anthropic } {
  return {
    openai: new OpenAI({ baseURL: rig.url + '/v1', apiKey: KEY, maxRetries: 0, timeout: 30000 }),
    anthropic: new Anthropic({ baseURL: rig.url, apiKey: KEY, maxRetries: 0, timeout: 30000 }),
  }
}

/** The request through the client's official SDK: its stream helper, or its non-stream call. */
export async function viaSdk (rig: Rig, route: Route, body: Obj, stream: boolean): Promise<Answer> {
  const { openai, anthropic } = sdks(rig)
  const events: Obj[] = []
  if (route === 'chat') {
    let c: Obj
    if (stream) {
      const s = openai.chat.completions.stream({ ...body, stream: true, stream_options: { include_usage: true } } as any)
      for await (const e of s) events.push(e as Obj)
      c = await s.finalChatCompletion()
    } else {
      c = await openai.chat.completions.create(body as any) as Obj
    }
    const m = c.choices[0]?.message ?? {}
    return {
      text: m.content ?? '',
      calls: (m.tool_calls ?? []).map((x: Obj) => ({ id: x.id, name: x.function?.name ?? x.custom?.name, args: x.function?.arguments ?? x.custom?.input, type: x.type })),
      stop: c.choices[0]?.finish_reason,
      usage: c.usage ?? {},
      raw: c,
      events,
    }
  }
  if (route === 'responses') {
    let r: Obj
    if (stream) {
      const s = openai.responses.stream(body as any)
      for await (const e of s) events.push(e as Obj)
      r = await s.finalResponse()
    } else {
      r = await openai.responses.create(body as any) as Obj
    }
    const items = (r.output ?? []) as Obj[]
    return {
      text: items.filter(i => i.type === 'message').flatMap(i => i.content).filter((c: Obj) => c.type === 'output_text').map((c: Obj) => c.text).join(''),
      calls: items.filter(i => /_call$/.test(i.type)).map(i => ({ id: i.call_id, name: i.name, args: i.type === 'custom_tool_call' ? i.input : typeof i.arguments === 'string' ? i.arguments : JSON.stringify(i.arguments), type: i.type, namespace: i.namespace })),
      stop: r.status === 'incomplete' ? `incomplete:${r.incomplete_details?.reason}` : r.status,
      usage: r.usage ?? {},
      raw: r,
      events,
    }
  }
  let m: Obj
  if (stream) {
    const s = anthropic.messages.stream(body as any)
    for await (const e of s) events.push(e as Obj)
    m = await s.finalMessage()
  } else {
    m = await anthropic.messages.create(body as any) as Obj
  }
  const blocks = (m.content ?? []) as Obj[]
  return {
    text: blocks.filter(b => b.type === 'text').map(b => b.text).join(''),
    calls: blocks.filter(b => b.type === 'tool_use').map(b => ({ id: b.id, name: b.name, args: JSON.stringify(b.input), type: 'tool_use' })),
    stop: m.stop_reason,
    usage: m.usage ?? {},
    raw: m,
    events,
  }
}

export interface Raw { status: number; headers: Record<string, string | string[] | undefined>; text: string; json: Obj | null }

/** A plain request through the gateway (exact status, headers and bytes). */
export async function post (rig: Rig, path: string, body: Obj, headers: Record<string, string> = {}): Promise<Raw> {
  const res = await request(rig.url + path, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, 'anthropic-version': '2023-06-01', ...headers }, body: JSON.stringify(body) })
  const text = await res.body.text()
  let json: Obj | null = null
  try { json = JSON.parse(text) } catch {}
  return { status: res.statusCode, headers: res.headers, text, json }
}

/** The SSE events of a stream's text: [{ event, data }], data parsed where it is JSON. */
export function sseEvents (text: string): Array<{ event: string | null; data: any }> {
  const out: Array<{ event: string | null; data: any }> = []
  for (const block of text.split(/\n\n/)) {
    if (block.trim() === '') continue
    let event: string | null = null
    const data: string[] = []
    for (const line of block.split('\n')) {
      if (line.startsWith('event:')) event = line.slice(6).trim()
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''))
    }
    const d = data.join('\n')
    let parsed: any = d
    try { parsed = JSON.parse(d) } catch {}
    out.push({ event, data: parsed })
  }
  return out
}

/** The model requests the sim received since `from`. */
export function modelBodies (rig: Rig, from: number): SimBodyEvent[] {
  return rig.bodies.slice(from).filter(b => b.endpoint === 'chat.completions' || b.endpoint === 'responses' || b.endpoint === 'messages')
}

/** The last model request the sim received since `from`, parsed. */
export function lastBody (rig: Rig, from: number): Obj {
  const b = modelBodies(rig, from)
  if (b.length === 0) throw new Error('the sim received no model request')
  return b[b.length - 1].json as Obj
}

/** The sim's own answer to exactly these bytes (the sim is deterministic in the body). */
export async function direct (rig: Rig, b: SimBodyEvent): Promise<string> {
  const res = await request(rig.sim.url + b.path, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer sk-provider-secret-abcdef', 'x-api-key': 'sk-provider-secret-abcdef', 'anthropic-version': '2023-06-01' }, body: Buffer.from(b.bytes) })
  return res.body.text()
}

/** The exchange log line for an exchange id. */
export function exchangeLine (rig: Rig, exchangeId: string): Obj | undefined {
  for (const l of rig.gw.logs) {
    if (!l.includes(exchangeId)) continue
    try {
      const j = JSON.parse(l)
      if (j.msg === 'exchange' && j.exchangeId === exchangeId) return j
    } catch {}
  }
  return undefined
}
