// What the simulated model "says" for one request, independent of the wire protocol.
//
// A Script is built once per request from the body, its SHA-256 seed and the directive; the
// protocol renderers (chat.ts, responses.ts, messages.ts) turn it into frames or a JSON body.
// Text pieces are JSON-safe ASCII by construction (lower-case words, spaces, 'x' padding), so
// renderers splice them into precomputed frame templates without escaping per event.

import { isObject, type SimDirective, type SimProtocol } from './directive.ts'
import { mix, Rng, type Seed } from './rng.ts'

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

export interface ToolCall {
  readonly name: string
  /** The complete arguments JSON (what a client must end up with). */
  readonly args: string
  /** Argument deltas, already JSON-escaped for splicing inside a JSON string. */
  readonly chunks: readonly string[]
  /** Random part shared by the call ids: `call_<key>` (OpenAI), `toolu_<key>` (Anthropic). */
  readonly key: string
  /** Responses item id (`fc_...`). */
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
}

export function buildScript(
  protocol: SimProtocol,
  request: Record<string, unknown>,
  bodyBytes: number,
  seed: Seed,
  directive: SimDirective,
): Script {
  const rng = new Rng(seed)
  // Draw order is part of the output contract: ids first, then tools, then the text pool.
  const id = rng.id()
  const messageItemId = 'msg_' + rng.id()
  const reasoningItemId = 'rs_' + rng.id()
  const model = typeof request.model === 'string' && request.model !== '' ? request.model : 'sim-model'

  const declared = declaredTools(protocol, request)
  const tools: ToolCall[] = []
  for (let k = 0; k < directive.tools; k++) {
    const key = rng.id()
    const itemId = 'fc_' + rng.id()
    const spec = declared.length > 0 ? declared[k % declared.length] : SYNTHETIC_TOOL
    const args = JSON.stringify(valueFor(spec.schema, rng, 0) ?? {})
    tools.push({ name: spec.name, args, chunks: splitArgs(args), key, itemId })
  }

  const wantsText = directive.tokens > 0 || directive.tools === 0 || directive.fault === 'oversize-frame'
  let text: TextPlan | null = null
  if (wantsText) {
    const pool = directive.bytes === null ? null : bytePool(rng, directive.bytes)
    text = new TextPlan(directive.tokens, rng.next(), pool)
  }

  const thinkingCount = directive.thinking ?? defaultThinking(protocol, request)
  const thinking = protocol === 'openai-chat' || thinkingCount === 0 ? null : new TextPlan(thinkingCount, rng.next(), null)
  // Deterministic stand-in for a provider signature: base64 of part of the body's hash.
  const signature = 'Sim' + Buffer.from(seed.hex.slice(16, 64), 'hex').toString('base64')

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
    inputTokens: Math.max(1, Math.ceil(bodyBytes / 4)),
    stream: request.stream === true,
  }
}

/** Output tokens as the providers would report them: about four characters a token. */
export function outputTokens(script: Script): number {
  let chars = script.text === null ? 0 : script.text.length()
  if (script.thinking !== null) chars += script.thinking.length()
  for (const tool of script.tools) chars += tool.args.length
  return Math.max(1, Math.ceil(chars / 4))
}

/** Anthropic requests with `thinking: {type: "enabled"}` get a short thinking block. */
function defaultThinking(protocol: SimProtocol, request: Record<string, unknown>): number {
  return protocol === 'anthropic' && isObject(request.thinking) && request.thinking.type === 'enabled' ? 2 : 0
}

interface ToolSpec {
  readonly name: string
  readonly schema: unknown
}

const SYNTHETIC_TOOL: ToolSpec = {
  name: 'get_weather',
  schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}

/** Function tools the request declares, in order (server and custom-grammar tools skipped). */
export function declaredTools(protocol: SimProtocol, request: Record<string, unknown>): ToolSpec[] {
  const out: ToolSpec[] = []
  if (!Array.isArray(request.tools)) return out
  for (const tool of request.tools as unknown[]) {
    if (!isObject(tool)) continue
    if (protocol === 'openai-chat') {
      const fn = tool.function
      if (tool.type === 'function' && isObject(fn) && typeof fn.name === 'string') out.push({ name: fn.name, schema: fn.parameters })
    } else if (protocol === 'openai-responses') {
      if (tool.type === 'function' && typeof tool.name === 'string') out.push({ name: tool.name, schema: tool.parameters })
    } else if ((tool.type === undefined || tool.type === 'custom') && typeof tool.name === 'string') {
      out.push({ name: tool.name, schema: tool.input_schema })
    }
  }
  return out
}

/**
 * A small value that satisfies the common shapes of a JSON schema: required properties of
 * objects (or the first property when none is required), the first enum/const value, the
 * first branch of anyOf/oneOf, words for strings. Not a validator, just plausible input.
 */
function valueFor(schema: unknown, rng: Rng, depth: number): unknown {
  if (!isObject(schema) || depth > 4) return null
  if ('const' in schema) return schema.const
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0]
  for (const key of ['anyOf', 'oneOf', 'allOf'] as const) {
    const branches = schema[key]
    if (Array.isArray(branches) && branches.length > 0) return valueFor(branches[0], rng, depth + 1)
  }
  let type = schema.type
  if (Array.isArray(type)) type = type.find(t => t !== 'null') ?? 'null'
  if (type === undefined && isObject(schema.properties)) type = 'object'
  switch (type) {
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
