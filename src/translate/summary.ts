// The few facts of a translated request that the answer side needs, small enough to cross a
// thread boundary with every exchange (parser pool -> HTTP worker -> parser pool again for a
// non-streaming answer): the tool table that restores names, the dropped hosted tools, the
// client's stream flags and the scalars a Responses answer echoes. Never the messages.

import type { CanonicalRequest, Protocol, ToolKind } from './canonical.ts'

/** One client tool as the provider sees it (hosted tools have no wire name and are not listed). */
export interface ToolEntry { wireName: string; kind: ToolKind; name: string; namespace?: string }

export interface RequestSummary {
  /** The client's protocol. */
  client: Protocol
  /** The model the client named (before any alias). */
  model: string
  /** The client asked for a stream. */
  clientStream: boolean
  /** Chat clients: `stream_options.include_usage` (false for other clients). */
  includeUsage: boolean
  tools: ToolEntry[]
  /** Hosted tools left out of the provider request (header, log, trace). */
  droppedTools: string[]
  maxOutputTokens?: number
  parallelToolCalls?: boolean
  temperature?: number
  topP?: number
  reasoning?: { effort?: string; summary?: string }
}

/** The summary of a decoded request; `body` is the client's parsed body (for its stream_options). */
export function summarise (request: CanonicalRequest, body: unknown): RequestSummary {
  const s: RequestSummary = {
    client: request.client,
    model: request.model,
    clientStream: request.stream,
    includeUsage: request.client === 'openai-chat' && includeUsageOf(body),
    tools: [],
    droppedTools: [...request.droppedTools],
  }
  for (const t of request.tools) {
    if (t.kind === 'hosted') continue
    const e: ToolEntry = { wireName: t.wireName, kind: t.kind, name: t.name }
    if (t.namespace !== undefined) e.namespace = t.namespace
    s.tools.push(e)
  }
  if (request.maxOutputTokens !== undefined) s.maxOutputTokens = request.maxOutputTokens
  if (request.parallelToolCalls !== undefined) s.parallelToolCalls = request.parallelToolCalls
  if (request.temperature !== undefined) s.temperature = request.temperature
  if (request.topP !== undefined) s.topP = request.topP
  if (request.reasoning !== undefined) {
    const r: { effort?: string; summary?: string } = {}
    if (request.reasoning.effort !== undefined) r.effort = request.reasoning.effort
    if (request.reasoning.summary !== undefined) r.summary = request.reasoning.summary
    s.reasoning = r
  }
  return s
}

/**
 * A CanonicalRequest standing for the summary (no messages, no system): what the stream side's
 * translators take (`request` for names and the fields a Responses answer echoes).
 */
export function requestOf (s: RequestSummary): CanonicalRequest {
  const r: CanonicalRequest = {
    client: s.client,
    model: s.model,
    stream: s.clientStream,
    system: [],
    messages: [],
    tools: s.tools.map(t => ({ ...t })),
    droppedTools: [...s.droppedTools],
  }
  if (s.maxOutputTokens !== undefined) r.maxOutputTokens = s.maxOutputTokens
  if (s.parallelToolCalls !== undefined) r.parallelToolCalls = s.parallelToolCalls
  if (s.temperature !== undefined) r.temperature = s.temperature
  if (s.topP !== undefined) r.topP = s.topP
  if (s.reasoning !== undefined) r.reasoning = { ...s.reasoning, enabled: true }
  return r
}

function includeUsageOf (body: unknown): boolean {
  if (body === null || typeof body !== 'object') return false
  const so = (body as Record<string, unknown>).stream_options
  return so !== null && typeof so === 'object' && (so as Record<string, unknown>).include_usage === true
}
