// Stream well-formedness checks, written from what the official SDKs and real clients demand
// (see PLATFORM.md "Real clients"). They return a list of problems (empty = well-formed), so
// a test can print all of them at once. Usable on the sim's output and on anything the
// gateway relays or translates.

import type { SimProtocol } from './directive.ts'
import { parseSse, type SseFrame } from './probe.ts'

type Json = Record<string, unknown>

function parse(frame: SseFrame, i: number, problems: string[]): Json | null {
  try {
    const v: unknown = JSON.parse(frame.data)
    if (typeof v === 'object' && v !== null && !Array.isArray(v)) return v as Json
    problems.push(`frame ${i}: data is not a JSON object`)
  } catch {
    problems.push(`frame ${i}: data is not JSON`)
  }
  return null
}

export function streamProblems(protocol: SimProtocol, body: string | Buffer): string[] {
  const frames = parseSse(body)
  if (frames.length === 0) return ['no frames']
  if (protocol === 'openai-chat') return chatProblems(frames)
  if (protocol === 'openai-responses') return responsesProblems(frames)
  return messagesProblems(frames)
}

function chatProblems(frames: SseFrame[]): string[] {
  const problems: string[] = []
  if (frames[frames.length - 1].data !== '[DONE]') problems.push('last frame is not data: [DONE]')
  const ids = new Set<unknown>()
  const heads = new Set<number>()
  let finishes = 0
  let sawRole = false
  frames.slice(0, -1).forEach((f, i) => {
    if (f.event !== null) problems.push(`frame ${i}: chat frames carry no event: line`)
    const c = parse(f, i, problems)
    if (c === null) return
    if (c.object !== 'chat.completion.chunk') problems.push(`frame ${i}: object is ${String(c.object)}`)
    ids.add(c.id)
    const choices = Array.isArray(c.choices) ? (c.choices as Json[]) : []
    if (choices.length === 0) {
      if (finishes === 0) problems.push(`frame ${i}: usage chunk before the finish chunk`)
      return
    }
    const choice = choices[0]
    const delta = (choice.delta ?? {}) as Json
    if (i === 0 && delta.role !== 'assistant') problems.push('frame 0: no role on the first delta')
    if (delta.role !== undefined) sawRole = true
    if (choice.finish_reason !== null && choice.finish_reason !== undefined) finishes++
    for (const tc of (delta.tool_calls ?? []) as Json[]) {
      const index = tc.index as number
      if (!Number.isInteger(index)) problems.push(`frame ${i}: tool call without index`)
      if (tc.id !== undefined) {
        if (tc.type !== 'function') problems.push(`frame ${i}: tool call head without type "function"`)
        heads.add(index)
      } else if (!heads.has(index)) problems.push(`frame ${i}: arguments for tool ${index} before its head`)
    }
  })
  if (!sawRole) problems.push('no role')
  if (finishes !== 1) problems.push(`${finishes} chunks with a finish_reason (want 1)`)
  if (ids.size > 1) problems.push('chunk ids differ')
  return problems
}

function responsesProblems(frames: SseFrame[]): string[] {
  const problems: string[] = []
  const added = new Map<number, string>()
  const done = new Set<number>()
  let lastType = ''
  frames.forEach((f, i) => {
    const e = parse(f, i, problems)
    if (e === null) return
    lastType = String(e.type)
    if (f.event !== e.type) problems.push(`frame ${i}: event: ${String(f.event)} but type ${String(e.type)}`)
    if (e.sequence_number !== i) problems.push(`frame ${i}: sequence_number ${String(e.sequence_number)}`)
    if (i === 0 && e.type !== 'response.created') problems.push('first event is not response.created')
    if (typeof e.output_index !== 'number') return
    const oi = e.output_index
    if (e.type === 'response.output_item.added') {
      if (oi !== added.size) problems.push(`frame ${i}: output_index ${oi} added, want ${added.size}`)
      added.set(oi, String((e.item as Json).id))
    } else if (!added.has(oi)) problems.push(`frame ${i}: ${String(e.type)} before output_item.added for ${oi}`)
    else if (done.has(oi)) problems.push(`frame ${i}: ${String(e.type)} after output_item.done for ${oi}`)
    else if (e.item_id !== undefined && e.item_id !== added.get(oi)) problems.push(`frame ${i}: item_id does not match output ${oi}`)
    if (e.type === 'response.output_item.done') done.add(oi)
  })
  if (lastType !== 'response.completed') problems.push('last event is not response.completed')
  if (done.size !== added.size) problems.push(`${added.size} items added, ${done.size} done`)
  const last = parse(frames[frames.length - 1], frames.length - 1, [])
  const output = last?.response && (last.response as Json).output
  if (Array.isArray(output) && output.length !== added.size) problems.push(`response.completed has ${output.length} items, stream had ${added.size}`)
  return problems
}

function messagesProblems(frames: SseFrame[]): string[] {
  const problems: string[] = []
  const open = new Set<number>()
  const closed = new Set<number>()
  let starts = 0
  let deltas = 0
  frames.forEach((f, i) => {
    const e = parse(f, i, problems)
    if (e === null) return
    if (f.event !== e.type) problems.push(`frame ${i}: event: ${String(f.event)} but type ${String(e.type)}`)
    if (e.type === 'message_start') {
      starts++
      if (i !== 0) problems.push(`frame ${i}: message_start is not first`)
    }
    const index = e.index as number
    if (e.type === 'content_block_start') {
      if (open.has(index)) problems.push(`frame ${i}: block ${index} started twice`)
      open.add(index)
    } else if (e.type === 'content_block_delta') {
      if (!open.has(index) || closed.has(index)) problems.push(`frame ${i}: delta outside block ${index}`)
    } else if (e.type === 'content_block_stop') {
      if (!open.has(index) || closed.has(index)) problems.push(`frame ${i}: stop outside block ${index}`)
      closed.add(index)
    } else if (e.type === 'message_delta') {
      deltas++
      const usage = e.usage as Json | undefined
      if (typeof usage?.output_tokens !== 'number') problems.push(`frame ${i}: message_delta without usage.output_tokens`)
    }
  })
  if (starts !== 1) problems.push(`${starts} message_start events (want 1)`)
  if (deltas !== 1) problems.push(`${deltas} message_delta events (want 1)`)
  if (open.size !== closed.size) problems.push('a content block was never stopped')
  if (frames[frames.length - 1].event !== 'message_stop') problems.push('last event is not message_stop')
  return problems
}
