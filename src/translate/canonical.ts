// The canonical contract of protocol translation (DESIGN.md "Protocol translation").
//
// Every translated exchange goes through these types, one way each:
//
//   client request --(client adapter: decode)--> CanonicalRequest --(provider adapter: encode)--> provider request
//   provider stream --(provider adapter: StreamDecoder)--> CanonicalEvent* --(client adapter: StreamEncoder)--> client stream
//   provider JSON answer --(provider adapter)--> CanonicalEvent* --(client adapter: the same encoder, collecting)--> client JSON
//
// Invariants of a CanonicalEvent sequence (checked by `EventSequenceChecker` in tests):
// - `start` first and once; exactly one of `finish` / `error` last.
// - At most one open item: `item_start` ... `item_end` never overlap (sequential and
//   non-overlapping). A provider that interleaves (Chat's parallel tool deltas) is buffered by
//   its decoder and emitted call after call.
// - `index` of items is contiguous from 0 in emission order.
// - A tool call's `arguments` / `input` are complete when its `item_end` comes: a call that is
//   truncated or malformed is never ended; the decoder emits `error` instead.
//
// Nothing here does I/O or holds a budget: byte caps are enforced by `TranslationBudget`
// (passed into decoders), which the worker backs with the exchange's Holdings.

import { SluiceError } from '../errors.ts'

/** The three wire protocols (same names as the config's provider `protocol`). */
export type Protocol = 'openai-chat' | 'openai-responses' | 'anthropic'

// ─── Request ────────────────────────────────────────────────────────────────────────────

export type Role = 'system' | 'developer' | 'user' | 'assistant'

export type ImageSource =
  | { kind: 'url'; url: string }
  | { kind: 'base64'; mediaType: string; data: string }

export type Part =
  | { type: 'text'; text: string }
  | { type: 'image'; source: ImageSource; detail?: string }
  /**
   * Reasoning carried between turns. `opaque` is the provider-issued blob that must come back
   * byte-exact (Anthropic thinking signature / redacted_thinking data, OpenAI
   * encrypted_content) and `issuer` the protocol + provider that issued it; a blob from
   * another issuer is dropped by the encoder, never sent (see envelope.ts).
   */
  | { type: 'reasoning'; text: string; summary?: string[]; opaque?: Opaque; redacted?: boolean; id?: string }
  | { type: 'tool_call'; call: ToolCall }
  | { type: 'tool_result'; callId: string; kind: ToolKind; output: ToolOutput; isError?: boolean }

/** A provider-issued opaque reasoning blob and who issued it. */
export interface Opaque { issuer: string; data: string }

export type ToolOutput = string | Array<{ type: 'text'; text: string } | { type: 'image'; source: ImageSource }>

export interface Message { role: Role; parts: Part[] }

export type ToolKind = 'function' | 'custom' | 'tool_search' | 'hosted'

export interface ToolDef {
  kind: ToolKind
  /** The client's own name (for a namespaced tool, the name inside its namespace). */
  name: string
  /** The MCP/Codex namespace the tool belongs to, if any. */
  namespace?: string
  /**
   * The function name the provider sees: `name`, or for a namespaced tool a flattened name
   * matching ^[a-zA-Z0-9_-]{1,64}$ (unique in the request; a collision is refused 400).
   */
  wireName: string
  description?: string
  /** JSON Schema of the arguments (function); custom tools get { input: string } on the wire. */
  parameters?: Record<string, unknown>
  strict?: boolean
  /** custom tools: the client's grammar/format description, kept for same-kind providers. */
  format?: Record<string, unknown>
  /** hosted tools (web_search, ...): the client's whole definition. */
  hosted?: Record<string, unknown>
}

export type ToolChoice =
  | { type: 'auto' }
  | { type: 'none' }
  | { type: 'required' }
  | { type: 'tool'; wireName: string }

export interface ToolCall {
  kind: ToolKind
  /** The correlation id (Responses call_id, Chat tool_call id, Anthropic tool_use id). */
  callId: string
  /** Responses item id, when the client protocol has one. */
  itemId?: string
  name: string
  namespace?: string
  /** function / tool_search: a JSON text; custom: the raw input string. */
  arguments: string
}

export interface OutputFormat {
  type: 'text' | 'json_object' | 'json_schema'
  name?: string
  schema?: Record<string, unknown>
  strict?: boolean
}

export interface CanonicalRequest {
  /** The client's protocol (for errors, defaults, envelopes). */
  client: Protocol
  model: string
  stream: boolean
  /** Chat clients: `stream_options.include_usage` (the usage chunk before [DONE]). */
  includeUsage?: boolean
  /** system / developer / instructions, in order. */
  system: Array<{ role: 'system' | 'developer'; text: string }>
  messages: Message[]
  tools: ToolDef[]
  toolChoice?: ToolChoice
  parallelToolCalls?: boolean
  maxOutputTokens?: number
  temperature?: number
  topP?: number
  stop?: string[]
  /** Reasoning effort / thinking budget as the client asked for it. */
  reasoning?: { effort?: string; budgetTokens?: number; summary?: string; enabled: boolean }
  output?: OutputFormat
  /** Hosted tools the provider has no equivalent for: left out, reported (header, log, trace). */
  droppedTools: string[]
  metadata?: Record<string, string>
  user?: string
}

// ─── Events ─────────────────────────────────────────────────────────────────────────────

export type StopReason = 'end' | 'length' | 'tool_calls' | 'content_filter' | 'refusal'

export interface Usage {
  inputTokens: number
  outputTokens: number
  cachedInputTokens?: number
  cacheCreationInputTokens?: number
  reasoningTokens?: number
}

export type ItemKind = 'text' | 'reasoning' | 'tool_call'

export type CanonicalEvent =
  /** The provider accepted the request. `id` is the provider's response/message id. */
  | { type: 'start'; id: string; model: string; created?: number }
  | { type: 'item_start'; index: number; item: ItemStart }
  /** text / reasoning text / tool-call argument (or custom input) bytes, in order. */
  | { type: 'delta'; index: number; text: string }
  /** Only for reasoning: a part of its summary (OpenAI) — kept apart from the thinking text. */
  | { type: 'summary_delta'; index: number; summaryIndex: number; text: string }
  | { type: 'item_end'; index: number; item: ItemDone }
  | { type: 'usage'; usage: Usage }
  | { type: 'finish'; stop: StopReason; usage?: Usage }
  /** A provider failure (in-band error event, truncation, malformed call). Last event. */
  | {
    type: 'error'; code: string; message: string; providerType?: string; retryAfterSeconds?: number
    /**
     * The provider's own error code, when it sent one (`context_length_exceeded`,
     * `insufficient_quota`, ...): client encoders map it onto the field their clients act on.
     */
    providerCode?: string
    /** What the refusal was about, for the catalogue error's details (a cap's `reason` and `limit`). */
    details?: Record<string, string | number | boolean | null>
  }

export type ItemStart =
  | { kind: 'text' }
  | { kind: 'reasoning'; id?: string }
  | { kind: 'tool_call'; toolKind: ToolKind; callId: string; name: string; namespace?: string }

export type ItemDone =
  | { kind: 'text'; text: string }
  | { kind: 'reasoning'; text: string; summary: string[]; opaque?: Opaque; redacted?: boolean; id?: string }
  | { kind: 'tool_call'; call: ToolCall }

/** Where decoded events go. Encoders implement it; tests collect. */
export interface EventSink { event (e: CanonicalEvent): void }

/**
 * Every byte translation keeps between frames is charged here before it is kept and
 * returned as soon as the item it belongs to is emitted. `charge` throws a SluiceError
 * (storage_budget_exhausted / output_too_large) when it does not fit.
 */
export interface TranslationBudget {
  charge (bytes: number, what: 'tool_arguments' | 'item' | 'output'): void
  release (bytes: number, what: 'tool_arguments' | 'item' | 'output'): void
}

/**
 * A budget that counts and caps but holds nothing shared: tests, benchmarks, and the parser
 * pool's answer task (a pool thread has no ledger; src/json/answer.ts caps it at maxOutputBytes).
 */
export class CountingBudget implements TranslationBudget {
  held = { tool_arguments: 0, item: 0, output: 0 }
  peak = 0
  readonly maxBytes: number
  constructor (maxBytes = Number.POSITIVE_INFINITY) { this.maxBytes = maxBytes }
  charge (bytes: number, what: 'tool_arguments' | 'item' | 'output'): void {
    const total = this.held.tool_arguments + this.held.item + this.held.output + bytes
    if (total > this.maxBytes) {
      throw new SluiceError('output_too_large', { reason: 'bytes', limit: this.maxBytes, needed: total }, `translation needs ${total} bytes, over its cap ${this.maxBytes}`)
    }
    this.held[what] += bytes
    if (total > this.peak) this.peak = total
  }

  release (bytes: number, what: 'tool_arguments' | 'item' | 'output'): void {
    if (bytes > this.held[what]) throw new Error(`translation budget: release ${bytes} > held ${this.held[what]} (${what})`)
    this.held[what] -= bytes
  }

  get idle (): boolean { return this.held.tool_arguments === 0 && this.held.item === 0 && this.held.output === 0 }
}
