// What the simulated model "says" for one request, independent of the wire protocol.
//
// A Script is built once per request from the body, its SHA-256 seed and the directive; the
// protocol renderers (chat.ts, responses.ts, messages.ts) turn it into frames or a JSON body.
// Text pieces are JSON-safe ASCII by construction (lower-case words, spaces, 'x' padding), so
// renderers splice them into precomputed frame templates without escaping per event.

import { isObject, type SimDirective, type SimProtocol } from './directive.ts'
import { mix, Rng, type Seed } from './rng.ts'
import { DEFAULT_SCENARIO, isEarlyStop, type SimScenario, type SimTruncation } from './scenario.ts'

/** Fixed `created` timestamp (2026-01-01T00:00:00Z): output must not depend on the clock. */
export const SIM_CREATED = 1767225600

const WORDS = [
  'river', 'stone', 'maple', 'harbor', 'lantern', 'meadow', 'copper', 'signal',
  'orbit', 'canvas', 'timber', 'glacier', 'window', 'garden', 'pepper', 'violet',
  'anchor', 'bridge', 'candle', 'desert', 'ember', 'falcon', 'granite', 'hollow',
  'island', 'jasmine', 'kettle', 'ledger', 'marble', 'nectar', 'oyster', 'pillar',
  'quartz', 'ribbon', 'saddle', 'thistle', 'umber', 'valley', 'willow', 'yarrow',
  'zephyr', 'basil', 'cobalt', 'dune', 'fjord', 'grove', 'heron', 'indigo',
  'juniper', 'kelp', 'lagoon', 'mesa', 'nimbus', 'olive', 'prairie', 'quill',
  'reef', 'sierra', 'tundra', 'upland', 'vortex', 'wharf', 'cedar', 'summit',
] as const
const CAPITALISED = WORDS.map(w => w[0].toUpperCase() + w.slice(1))
const SPACED = WORDS.map(w => ' ' + w)

/**
 * What kind of call the provider makes: an ordinary function call (every protocol), or, on
 * Responses, a `custom_tool_call` (freeform input) or a `tool_search_call`, or a hosted web
 * search (Responses `web_search_call`, Anthropic `server_tool_use` + `web_search_tool_result`).
 */
export type ToolKind = 'function' | 'custom' | 'tool_search' | 'web_search'

export interface ToolCall {
  readonly name: string
  readonly kind: ToolKind
  /** Responses: the `namespace` of a function offered inside a namespace tool; else null. */
  readonly namespace: string | null
  /**
   * The arguments JSON (custom tools: the input text) as the provider sends it: what a client
   * must end up with, or, for the call cut by `truncate=`, the prefix that was sent.
   */
  readonly args: string
  /** False for the call cut by `truncate=` (its args are a prefix). */
  readonly complete: boolean
  /** Argument deltas, already JSON-escaped for splicing inside a JSON string. */
  readonly chunks: readonly string[]
  /** Random part shared by the call ids: `call_<key>` (OpenAI), `toolu_<key>` (Anthropic). */
  readonly key: string
  /** Responses item id (`fc_...`, `ctc_...` custom, `tsc_...` tool search). */
  readonly itemId: string
}

/** The text deltas, rendered by index so a long stream keeps no per-delta state. */
export class TextPlan {
  #count: number
  readonly #seed: number
  readonly #pool: readonly string[] | null
  #oversizeAt = -1
  #oversize = ''
  #full: string | null = null

  constructor(count: number, seed: number, pool: readonly string[] | null) {
    this.#count = count
    this.#seed = seed
    this.#pool = pool
  }

  get count(): number {
    return this.#count
  }

  get oversizeAt(): number {
    return this.#oversizeAt
  }

  /** Inserts one extra delta of `length` bytes at `index` (the oversize-frame fault). */
  insertOversize(index: number, length: number): void {
    if (this.#oversizeAt >= 0) throw new Error('oversize piece already inserted')
    this.#oversizeAt = Math.max(0, Math.min(index, this.#count))
    this.#oversize = 'x'.repeat(Math.max(0, length))
    this.#count++
    this.#full = null
  }

  piece(j: number): string {
    if (this.#oversizeAt >= 0) {
      if (j === this.#oversizeAt) return this.#oversize
      if (j > this.#oversizeAt) j--
    }
    const h = mix(this.#seed, j)
    if (this.#pool !== null) return this.#pool[h % this.#pool.length]
    return j === 0 ? CAPITALISED[h % WORDS.length] : SPACED[h % WORDS.length]
  }

  /** Total characters, without building the text (usage on long streams). */
  length(): number {
    if (this.#full !== null) return this.#full.length
    let n = 0
    for (let j = 0; j < this.#count; j++) n += this.piece(j).length
    return n
  }

  full(): string {
    if (this.#full === null) {
      const parts = new Array<string>(this.#count)
      for (let j = 0; j < this.#count; j++) parts[j] = this.piece(j)
      this.#full = parts.join('')
    }
    return this.#full
  }
}

export interface Script {
  readonly protocol: SimProtocol
  readonly seed: Seed
  readonly directive: SimDirective
  readonly request: Record<string, unknown>
  readonly model: string
  /** `model` as a JSON string literal. */
  readonly modelJson: string
  readonly created: number
  /** Random part of the response id: `chatcmpl-<id>`, `resp_<id>`, `msg_<id>`. */
  readonly id: string
  /** Responses message item id. */
  readonly messageItemId: string
  /** Null when the answer is tool calls only. */
  readonly text: TextPlan | null
  /** Reasoning deltas (Anthropic thinking, Responses reasoning summary); null when none. */
  readonly thinking: TextPlan | null
  /** Anthropic thinking signature / Responses encrypted_content (base64, JSON-safe). */
  readonly signature: string
  /** Responses reasoning item id. */
  readonly reasoningItemId: string
  readonly tools: readonly ToolCall[]
  readonly inputTokens: number
  /** Whether the request asked to stream. */
  readonly stream: boolean
  /** The scenario keys of the directive (scenario.ts). */
  readonly scenario: SimScenario
  /**
   * The truncation that applies: with calls the last call is cut, else the text (half its
   * deltas); null when none (truncate=args without any call or text cannot apply).
   */
  readonly truncate: SimTruncation | null
  /** Anthropic redacted_thinking `data` blobs (base64), in order. */
  readonly redacted: readonly string[]
  /** Cached input tokens for usage (clamped to inputTokens); null = not reported. */
  readonly cachedTokens: number | null
  /** Reasoning tokens for usage; null = not reported. */
  readonly reasoningTokens: number | null
}

export function buildScript(
  protocol: SimProtocol,
  request: Record<string, unknown>,
  bodyBytes: number,
  seed: Seed,
  directive: SimDirective,
  scenario: SimScenario = DEFAULT_SCENARIO,
): Script {
  const rng = new Rng(seed)
  // Draw order is part of the output contract: ids first, then tools, then the text pool.
  const id = rng.id()
  const messageItemId = 'msg_' + rng.id()
  const reasoningItemId = 'rs_' + rng.id()
  const model = typeof request.model === 'string' && request.model !== '' ? request.model : 'sim-model'

  // Without `call=` the calls cycle through the declared function tools (the original rule);
  // with it they name tools of any kind the request offers.
  const named = scenario.calls
  let count = directive.tools
  if (count === 0) count = named.length > 0 ? named.length : scenario.truncate === 'args' ? 1 : 0
  const declared = named.length > 0 ? offeredTools(protocol, request) : declaredTools(protocol, request)
  const tools: ToolCall[] = []
  for (let k = 0; k < count; k++) {
    const key = rng.id()
    const spec = named.length > 0 ? resolveCall(declared, named[k % named.length]) : declared.length > 0 ? declared[k % declared.length] : SYNTHETIC_TOOL
    const itemId = ITEM_PREFIX[spec.kind] + rng.id()
    let args: string
    if (scenario.args !== null) args = scenario.args
    else if (named.length > 0) args = callArgs(spec, rng)
    else args = JSON.stringify(valueFor(spec.schema, rng, 0) ?? {})
    tools.push({ name: spec.name, kind: spec.kind, namespace: spec.namespace, args, complete: true, chunks: splitArgs(args), key, itemId })
  }

  const cutCall = scenario.truncate !== null && tools.length > 0
  const cutText = !cutCall && (isEarlyStop(scenario.truncate) || scenario.truncate === 'eof')
  if (cutCall) {
    const last = tools[tools.length - 1]
    const args = prefixOf(last.args)
    tools[tools.length - 1] = { ...last, args, complete: false, chunks: splitArgs(args) }
  }

  const wantsText = directive.tokens > 0 || count === 0 || directive.fault === 'oversize-frame'
  let text: TextPlan | null = null
  if (wantsText) {
    const pool = directive.bytes === null ? null : bytePool(rng, directive.bytes)
    const deltas = cutText ? Math.ceil(directive.tokens / 2) : directive.tokens
    text = new TextPlan(deltas, rng.next(), pool)
  }

  const thinkingCount = directive.thinking ?? defaultThinking(protocol, request, scenario)
  const noThinking = protocol === 'openai-chat' && !scenario.reasoningContent
  const thinking = noThinking || thinkingCount === 0 ? null : new TextPlan(thinkingCount, rng.next(), null)
  // Deterministic stand-in for a provider signature: base64 of part of the body's hash.
  const signature = 'Sim' + Buffer.from(seed.hex.slice(16, 64), 'hex').toString('base64')
  const redacted: string[] = []
  if (protocol === 'anthropic') {
    for (let k = 0; k < scenario.redacted; k++) redacted.push('SimRedacted' + Buffer.from(`${seed.hex}:${k}`).toString('base64'))
  }
  const inputTokens = Math.max(1, Math.ceil(bodyBytes / 4))

  return {
    protocol,
    seed,
    directive,
    request,
    model,
    modelJson: JSON.stringify(model),
    created: SIM_CREATED,
    id,
    messageItemId,
    text,
    thinking,
    signature,
    reasoningItemId,
    tools,
    inputTokens,
    stream: request.stream === true,
    scenario,
    truncate: cutCall || (cutText && text !== null) ? scenario.truncate : null,
    redacted,
    cachedTokens: scenario.cached === null ? null : Math.min(scenario.cached, inputTokens),
    reasoningTokens: scenario.reasoningTokens,
  }
}

/** Output tokens as the providers would report them: about four characters a token. */
export function outputTokens(script: Script): number {
  let chars = script.text === null ? 0 : script.text.length()
  if (script.thinking !== null) chars += script.thinking.length()
  for (const tool of script.tools) chars += tool.args.length
  return Math.max(1, Math.ceil(chars / 4)) + (script.reasoningTokens ?? 0)
}

/**
 * Anthropic requests with `thinking: {type: "enabled"}` get a short thinking block; so does a
 * Chat request with `reasoning_content` (its reasoning deltas).
 */
function defaultThinking(protocol: SimProtocol, request: Record<string, unknown>, scenario: SimScenario): number {
  if (protocol === 'openai-chat') return scenario.reasoningContent ? 2 : 0
  return protocol === 'anthropic' && isObject(request.thinking) && request.thinking.type === 'enabled' ? 2 : 0
}

interface ToolSpec {
  readonly name: string
  readonly schema: unknown
  readonly kind: ToolKind
  readonly namespace: string | null
}

const ITEM_PREFIX: Readonly<Record<ToolKind, string>> = { function: 'fc_', custom: 'ctc_', tool_search: 'tsc_', web_search: 'ws_' }

const SYNTHETIC_TOOL: ToolSpec = {
  name: 'get_weather',
  schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  kind: 'function',
  namespace: null,
}

/** Function tools the request declares, in order (server and custom-grammar tools skipped). */
export function declaredTools(protocol: SimProtocol, request: Record<string, unknown>): ToolSpec[] {
  const out: ToolSpec[] = []
  if (!Array.isArray(request.tools)) return out
  for (const tool of request.tools as unknown[]) {
    if (!isObject(tool)) continue
    if (protocol === 'openai-chat') {
      const fn = tool.function
      if (tool.type === 'function' && isObject(fn) && typeof fn.name === 'string') out.push(functionSpec(fn.name, fn.parameters))
    } else if (protocol === 'openai-responses') {
      if (tool.type === 'function' && typeof tool.name === 'string') out.push(functionSpec(tool.name, tool.parameters))
    } else if ((tool.type === undefined || tool.type === 'custom') && typeof tool.name === 'string') {
      out.push(functionSpec(tool.name, tool.input_schema))
    }
  }
  return out
}

function functionSpec(name: string, schema: unknown, namespace: string | null = null): ToolSpec {
  return { name, schema, kind: 'function', namespace }
}

/**
 * Every tool a `call=` may name: the declared function tools and, on Responses, the functions
 * inside `namespace` tools (called with their namespace), `custom` tools, `tool_search` and the
 * hosted `web_search`; on Anthropic, the `web_search_*` server tool.
 */
export function offeredTools(protocol: SimProtocol, request: Record<string, unknown>): ToolSpec[] {
  if (protocol === 'openai-chat') return declaredTools(protocol, request)
  if (protocol === 'anthropic') {
    const out = declaredTools(protocol, request)
    for (const tool of Array.isArray(request.tools) ? (request.tools as unknown[]) : []) {
      if (isObject(tool) && typeof tool.type === 'string' && tool.type.startsWith('web_search_')) {
        out.push({ name: typeof tool.name === 'string' ? tool.name : 'web_search', schema: WEB_SEARCH_SCHEMA, kind: 'web_search', namespace: null })
      }
    }
    return out
  }
  const out: ToolSpec[] = []
  if (!Array.isArray(request.tools)) return out
  for (const tool of request.tools as unknown[]) {
    if (!isObject(tool)) continue
    if (tool.type === 'function' && typeof tool.name === 'string') out.push(functionSpec(tool.name, tool.parameters))
    else if (tool.type === 'web_search' || tool.type === 'web_search_preview') out.push({ name: 'web_search', schema: WEB_SEARCH_SCHEMA, kind: 'web_search', namespace: null })
    else if (tool.type === 'custom' && typeof tool.name === 'string') out.push({ name: tool.name, schema: null, kind: 'custom', namespace: null })
    else if (tool.type === 'tool_search') out.push({ name: 'tool_search', schema: tool.parameters ?? TOOL_SEARCH_SCHEMA, kind: 'tool_search', namespace: null })
    else if (tool.type === 'namespace' && typeof tool.name === 'string' && Array.isArray(tool.tools)) {
      for (const inner of tool.tools as unknown[]) {
        if (isObject(inner) && inner.type === 'function' && typeof inner.name === 'string') out.push(functionSpec(inner.name, inner.parameters, tool.name))
      }
    }
  }
  return out
}

const TOOL_SEARCH_SCHEMA = { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] }
const WEB_SEARCH_SCHEMA = TOOL_SEARCH_SCHEMA

/**
 * The offered tool a `call=NAME` means, so one directive works on the client's protocol and
 * on a translated request: the exact name; `NS.NAME` for a function in namespace NS (or a
 * flattened name that starts with NS and ends with NAME); else a name that ends with NAME
 * after a `_`, `-` or `.` (e.g. `mcp__ns__NAME`). A name the request does not offer is still
 * called, as a function with no schema (arguments `{}`): a model may call an unknown tool.
 */
function resolveCall(offered: readonly ToolSpec[], wanted: string): ToolSpec {
  const exact = offered.find(t => t.name === wanted && t.namespace === null) ?? offered.find(t => t.name === wanted)
  if (exact !== undefined) return exact
  const dot = wanted.indexOf('.')
  if (dot > 0) {
    const ns = wanted.slice(0, dot)
    const name = wanted.slice(dot + 1)
    const hit = offered.find(t => t.namespace === ns && t.name === name) ??
      offered.find(t => t.namespace === null && t.name.length > ns.length + name.length && t.name.startsWith(ns) && t.name.endsWith(name))
    if (hit !== undefined) return hit
  }
  const suffix = offered.find(t => t.name.length > wanted.length && t.name.endsWith(wanted) && '_-.'.includes(t.name[t.name.length - wanted.length - 1]))
  return suffix ?? { name: wanted, schema: null, kind: 'function', namespace: null }
}

/** A minimal patch Codex's apply_patch accepts: it adds one file. */
export const SIM_PATCH = '*** Begin Patch\n*** Add File: sim.txt\n+hello\n*** End Patch\n'
/** The shell command `call=` puts in a command-like argument. */
export const SIM_COMMAND = 'echo sim'

/** Arguments for a named call: fit to the schema, with runnable values for well-known fields. */
function callArgs(spec: ToolSpec, rng: Rng): string {
  const patchy = /(^|[_.-])apply_patch$/.test(spec.name)
  if (spec.kind === 'custom') return patchy ? SIM_PATCH : 'sim input'
  if (spec.schema === null || spec.schema === undefined) return '{}'
  const value = usefulValue(spec.schema, rng, 0, '', patchy)
  return JSON.stringify(isObject(value) ? value : {})
}

// What both value makers below read first from a schema, in this order: a fixed value (`const`,
// else the first `enum` entry), else the first branch of anyOf / oneOf / allOf to descend into,
// else its type (the first non-null one of a type list; 'object' when it has only properties).
function hasFixedValue(schema: Record<string, unknown>): boolean {
  return 'const' in schema || (Array.isArray(schema.enum) && schema.enum.length > 0)
}

function fixedValue(schema: Record<string, unknown>): unknown {
  return 'const' in schema ? schema.const : (schema.enum as unknown[])[0]
}

function firstBranch(schema: Record<string, unknown>): unknown {
  for (const key of ['anyOf', 'oneOf', 'allOf'] as const) {
    const branches = schema[key]
    if (Array.isArray(branches) && branches.length > 0) return branches[0]
  }
  return undefined
}

function schemaType(schema: Record<string, unknown>): unknown {
  let type = schema.type
  if (Array.isArray(type)) type = type.find(t => t !== 'null') ?? 'null'
  if (type === undefined && isObject(schema.properties)) type = 'object'
  return type
}

function usefulValue(schema: unknown, rng: Rng, depth: number, prop: string, patchy: boolean): unknown {
  if (!isObject(schema) || depth > 4) return null
  if (hasFixedValue(schema)) return fixedValue(schema)
  const branch = firstBranch(schema)
  if (branch !== undefined) return usefulValue(branch, rng, depth + 1, prop, patchy)
  switch (schemaType(schema)) {
    case 'object': {
      const props = isObject(schema.properties) ? schema.properties : {}
      const required = Array.isArray(schema.required) ? schema.required.filter((n): n is string => typeof n === 'string' && n in props) : []
      const obj: Record<string, unknown> = {}
      // Only the required properties: optional ones (workdir, timeout, ...) are better left out.
      for (const name of required) obj[name] = usefulValue(props[name], rng, depth + 1, name, patchy)
      return obj
    }
    case 'array':
      if (/^(cmd|command|argv)$/.test(prop) && isObject(schema.items) && schema.items.type === 'string') return ['bash', '-lc', SIM_COMMAND]
      return []
    case 'string':
      return stringFor(prop, patchy, rng)
    case 'integer':
    case 'number':
      return 1 + rng.below(100)
    case 'boolean':
      return false
    default:
      return null
  }
}

function stringFor(prop: string, patchy: boolean, rng: Rng): string {
  const p = prop.toLowerCase()
  if (p === 'cmd' || p === 'command' || p === 'script' || p === 'shell_command') return SIM_COMMAND
  if (p === 'input' || p === 'patch') return patchy ? SIM_PATCH : 'sim input'
  if (p === 'path' || p === 'file_path' || p === 'filepath' || p === 'filename' || p === 'file') return 'sim.txt'
  if (p === 'query' || p === 'q' || p === 'pattern' || p === 'search') return 'sim'
  return 'sim ' + WORDS[rng.below(WORDS.length)]
}

/** About the first half of `args` (at least one character), never ending inside a surrogate pair. */
function prefixOf(args: string): string {
  if (args.length === 0) return args
  let end = Math.max(1, Math.floor(args.length / 2))
  if (end < args.length && isLowSurrogate(args.charCodeAt(end))) end++
  return args.slice(0, end)
}

/**
 * A small value that satisfies the common shapes of a JSON schema: required properties of
 * objects (or the first property when none is required), the first enum/const value, the
 * first branch of anyOf/oneOf, words for strings. Not a validator, just plausible input.
 */
function valueFor(schema: unknown, rng: Rng, depth: number): unknown {
  if (!isObject(schema) || depth > 4) return null
  if (hasFixedValue(schema)) return fixedValue(schema)
  const branch = firstBranch(schema)
  if (branch !== undefined) return valueFor(branch, rng, depth + 1)
  switch (schemaType(schema)) {
    case 'object': {
      const props = isObject(schema.properties) ? schema.properties : {}
      const names = Object.keys(props)
      const required = Array.isArray(schema.required) ? schema.required.filter((n): n is string => typeof n === 'string' && n in props) : []
      const chosen = required.length > 0 ? required : names.slice(0, 1)
      const obj: Record<string, unknown> = {}
      for (const name of chosen) obj[name] = valueFor(props[name], rng, depth + 1)
      return obj
    }
    case 'array':
      return []
    case 'string':
      return WORDS[rng.below(WORDS.length)]
    case 'integer':
    case 'number':
      return 1 + rng.below(100)
    case 'boolean':
      return rng.below(2) === 1
    default:
      return null
  }
}

const ARG_CHUNK = 12

/** Splits the arguments into deltas of ~12 characters, never inside a surrogate pair. */
function splitArgs(args: string): string[] {
  const out: string[] = []
  let i = 0
  while (i < args.length) {
    let end = Math.min(args.length, i + ARG_CHUNK)
    if (end < args.length && isLowSurrogate(args.charCodeAt(end))) end++
    out.push(JSON.stringify(args.slice(i, end)).slice(1, -1))
    i = end
  }
  return out
}

function isLowSurrogate(c: number): boolean {
  return c >= 0xdc00 && c <= 0xdfff
}

/** Eight distinct pieces of exactly `bytes` ASCII characters (words and spaces). */
function bytePool(rng: Rng, bytes: number): string[] {
  const pool: string[] = []
  for (let p = 0; p < 8; p++) {
    let s = ''
    while (s.length < bytes) s += WORDS[rng.below(WORDS.length)] + ' '
    pool.push(s.slice(0, bytes))
  }
  return pool
}
