// Reading what reached the provider: the tool calls an assistant turn carried and the tool
// results that answer them, in any of the three protocols' request shapes.

import type { SimBodyEvent } from '../../src/sim/index.ts'

type Obj = Record<string, unknown>
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v)
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : [])

/** The parsed request body of a sim body event ({} when it was not a JSON object). */
export function bodyOf (b: SimBodyEvent): Obj { return isObj(b.json) ? b.json : {} }

/** A model request (not count_tokens, not a model list). */
export function isModelCall (b: SimBodyEvent): boolean {
  return b.endpoint === 'chat.completions' || b.endpoint === 'responses' || b.endpoint === 'messages'
}

/** Ids of the tool calls in the request's history (assistant turns). */
export function toolCallIds (b: SimBodyEvent): string[] {
  const out: string[] = []
  if (b.protocol === 'openai-chat') {
    for (const m of arr(bodyOf(b).messages)) if (isObj(m) && m.role === 'assistant') for (const c of arr(m.tool_calls)) if (isObj(c)) out.push(String(c.id))
  } else if (b.protocol === 'openai-responses') {
    for (const i of arr(bodyOf(b).input)) if (isObj(i) && /_call$/.test(String(i.type))) out.push(String(i.call_id))
  } else {
    for (const m of arr(bodyOf(b).messages)) if (isObj(m) && m.role === 'assistant') for (const c of arr(m.content)) if (isObj(c) && c.type === 'tool_use') out.push(String(c.id))
  }
  return out
}

/** Ids the tool results in the request answer. */
export function toolResultIds (b: SimBodyEvent): string[] {
  const out: string[] = []
  if (b.protocol === 'openai-chat') {
    for (const m of arr(bodyOf(b).messages)) if (isObj(m) && m.role === 'tool') out.push(String(m.tool_call_id))
  } else if (b.protocol === 'openai-responses') {
    for (const i of arr(bodyOf(b).input)) if (isObj(i) && /_call_output$/.test(String(i.type))) out.push(String(i.call_id))
  } else {
    for (const m of arr(bodyOf(b).messages)) if (isObj(m) && m.role === 'user') for (const c of arr(m.content)) if (isObj(c) && c.type === 'tool_result') out.push(String(c.tool_use_id))
  }
  return out
}

/** Thinking / reasoning items the request's history carries back to the provider. */
export function reasoningReplays (b: SimBodyEvent): Obj[] {
  const out: Obj[] = []
  if (b.protocol === 'anthropic') {
    for (const m of arr(bodyOf(b).messages)) if (isObj(m) && m.role === 'assistant') for (const c of arr(m.content)) if (isObj(c) && (c.type === 'thinking' || c.type === 'redacted_thinking')) out.push(c)
  } else if (b.protocol === 'openai-responses') {
    for (const i of arr(bodyOf(b).input)) if (isObj(i) && i.type === 'reasoning') out.push(i)
  }
  return out
}
