// Chat Completions provider -> canonical events.
//
// Text (`delta.content`, `delta.refusal`) and reasoning (`delta.reasoning_content` /
// `delta.reasoning`, as DeepSeek-, vLLM- and OpenRouter-style providers send it) stream live,
// one item at a time. Tool calls cannot: a provider interleaves the fragments of parallel
// calls by `index` (id and name on a call's first fragment, arguments after, in any order
// across calls), so each call's fragments are kept apart and the calls are emitted at the
// boundary (`finish_reason`) in index order, each complete: item_start, its arguments, item_end.
// A call whose arguments are not valid JSON, a `length` stop with calls pending, or an end
// without `finish_reason` + `[DONE]` is an `error`, never a completed call.

import { Emitter, Held, type DecoderOptions } from './emit.ts'
import { chatStop, chatUsage, isObj, providerFailure } from './common.ts'
import { ascii, startsWith } from '../../protocols/bytes.ts'

interface PendingCall { id: string; name: string; args: Held; order: number }

// The plain text delta read from its bytes (ChatDecoder.plainText). Between a chunk's head (id,
// object, created, model, ... : the same bytes in every chunk of a stream) and its end, a text
// delta from OpenAI, the sim and the captured SDK streams is exactly
//   "choices":[{"index":0,"delta":{"content":"<text>"}<TAIL>
// with one of TAILS (optionally before a trailing `"obfuscation"` string). Measured in
// translate.bench.ts, JSON.parse of the whole chunk (and its UTF-8 decoding) was ~40 % of the
// translated relay's CPU.
const CONTENT_AT = ascii('"choices":[{"index":0,"delta":{"content":"')
// (Longest first: each with `,"usage":null` before the same tail without it, its prefix.)
const TAILS = [
  '},"logprobs":null,"finish_reason":null}],"usage":null',
  '},"logprobs":null,"finish_reason":null}]',
  '},"finish_reason":null}],"usage":null',
  '},"finish_reason":null}]',
].map(ascii)
const OBFUSCATION = ascii(',"obfuscation":"')
const QUOTE = 34
const BACKSLASH = 92
const CLOSE_BRACE = 125
/** Keys of the chunk the decoder reads after its first frame: a head that has one is never learned. */
const READ_KEYS = ['choices', 'error', 'usage']

export class ChatDecoder {
  readonly e: Emitter
  #calls = new Map<number, PendingCall>()
  #stop: ReturnType<typeof chatStop> | null = null
  #refusal = false
  /**
   * The head of a chunk parsed whole (its bytes up to `"choices"`), once it is known to be a
   * complete JSON object prefix with none of READ_KEYS; charged to the budget ('item') while
   * kept, released when the stream ends or is disposed.
   */
  #head: Buffer | null = null
  /** A head was looked at (kept or not): a stream's head is judged once, not on every frame. */
  #headJudged = false
  #text = ''

  constructor (o: DecoderOptions) {
    this.e = new Emitter(o)
    const e = this.e
    const calls = this.#calls
    e.closeOpen = function closeOpen (): void {
      if (this.openKind === 'text') this.closeText()
      else if (this.openKind === 'reasoning') this.endItem({ kind: 'reasoning', text: this.text.take(), summary: [] })
    }
    const base = e.dispose.bind(e)
    e.dispose = () => {
      base()
      for (const c of calls.values()) c.args.drop()
      calls.clear()
      this.#forgetHead()
    }
  }

  /**
   * After a frame was parsed whole and pushed: keeps its head for plainText() when the frame
   * has the plain text delta's layout after it. Judged once per stream, on the first frame that
   * has that layout: a head refused then (a key the decoder reads, no room in the budget) is not
   * parsed again for every later frame.
   */
  learnHead (data: Buffer): void {
    const e = this.e
    if (this.#headJudged || e.ended || !e.started) return
    const i = data.indexOf(CONTENT_AT)
    if (i < 2 || data[i - 1] !== 0x2c) return // `,"choices"`: not the first key
    this.#headJudged = true
    let head: unknown
    try {
      // A complete object prefix at the root: closed after its last member it parses. (Inside
      // a JSON string CONTENT_AT cannot occur, its quotes are unescaped; nested in a member's
      // value, the prefix would not close.)
      head = JSON.parse(data.toString('utf8', 0, i - 1) + '}')
    } catch {
      return
    }
    if (!isObj(head) || READ_KEYS.some(k => Object.hasOwn(head, k))) return
    try {
      e.budget.charge(i, 'item')
    } catch {
      return // no room to keep it: every frame is parsed whole, as before
    }
    this.#head = Buffer.from(data.subarray(0, i))
  }

  #forgetHead (): void {
    if (this.#head === null) return
    this.e.budget.release(this.#head.length, 'item')
    this.#head = null
  }

  /**
   * A frame that is the learned head, then exactly the plain text delta's layout: its text
   * pushed as parsing it whole would (the same calls of #delta), without JSON.parse. False,
   * with nothing done, for any other frame: the caller parses it whole. Only after the first
   * frame (the stream has begun), before a finish_reason and before the end.
   */
  plainText (data: Buffer): boolean {
    const head = this.#head
    const e = this.e
    if (head === null || e.ended || this.#stop !== null) return false
    const n = data.length
    const h = head.length
    if (n < h + CONTENT_AT.length + 2 || data.compare(head, 0, h, 0, h) !== 0 || !startsWith(data, h, CONTENT_AT)) return false
    // The text's JSON string: to its closing quote. A control character makes it not JSON (the
    // whole parse fails: left to it); an escape is decoded by JSON.parse of the literal alone.
    const s = h + CONTENT_AT.length
    let j = s
    let escaped = false
    for (;;) {
      if (j >= n) return false
      const c = data[j]
      if (c === QUOTE) break
      if (c < 0x20) return false
      if (c === BACKSLASH) { escaped = true; j += 2 } else j++
    }
    let k = j + 1
    let tail = -1
    for (let t = 0; t < TAILS.length; t++) if (startsWith(data, k, TAILS[t])) { tail = t; break }
    if (tail === -1) return false
    k += TAILS[tail].length
    if (startsWith(data, k, OBFUSCATION)) {
      // A plain string (no escape, no control character), then the end of the object.
      k += OBFUSCATION.length
      for (;;) {
        if (k >= n) return false
        const c = data[k]
        if (c === QUOTE) break
        if (c < 0x20 || c === BACKSLASH) return false
        k++
      }
      k++
    }
    if (k !== n - 1 || data[k] !== CLOSE_BRACE) return false
    let text: string
    if (!escaped) text = data.toString('utf8', s, j)
    else {
      try {
        text = JSON.parse(data.toString('utf8', s - 1, j + 1)) as string
      } catch {
        return false
      }
    }
    if (text === '') return true
    this.#text = text
    e.guard(this.#pushText)
    return true
  }

  /** #delta of `{ content: this.#text }`. */
  readonly #pushText = (): void => {
    const text = this.#text
    this.#text = ''
    this.e.ensureText()
    this.e.delta(text, true)
  }

  /** One frame: its parsed data, or the string `[DONE]`. Chat frames have no event name. */
  frame (event: string | null, data: unknown): void {
    this.e.guard(() => this.#frame(event, data))
  }

  #frame (_event: string | null, data: unknown): void {
    const e = this.e
    if (e.ended) return
    if (data === '[DONE]') return this.#done()
    if (!isObj(data)) return e.fail('provider_protocol_error', 'a Chat stream frame is not a JSON object')
    if (data.error !== undefined && data.error !== null) return providerFailure(e, data.error, 'error')
    if (!e.started) e.begin(typeof data.id === 'string' ? data.id : '', typeof data.model === 'string' ? data.model : '', typeof data.created === 'number' ? data.created : undefined)
    const choices = data.choices
    if (Array.isArray(choices) && choices.length > 0 && this.#stop === null) {
      const c = choices.find(x => isObj(x) && (x.index === 0 || x.index === undefined)) ?? choices[0]
      if (isObj(c)) {
        const d = c.delta
        if (isObj(d)) this.#delta(d)
        if (e.ended) return
        if (typeof c.finish_reason === 'string' && c.finish_reason !== '') this.#boundary(c.finish_reason)
      }
    }
    if (e.ended) return
    const u = chatUsage(data.usage)
    if (u !== null) e.mergeUsage(u)
  }

  #delta (d: Record<string, unknown>): void {
    const e = this.e
    const reasoning = typeof d.reasoning_content === 'string' ? d.reasoning_content : typeof d.reasoning === 'string' ? d.reasoning : ''
    if (reasoning !== '') {
      if (e.openKind !== 'reasoning') { e.closeOpen(); e.startItem({ kind: 'reasoning' }) }
      e.delta(reasoning, true)
    }
    const content = typeof d.content === 'string' ? d.content : ''
    const refusal = typeof d.refusal === 'string' ? d.refusal : ''
    if (refusal !== '') this.#refusal = true
    if (content !== '' || refusal !== '') {
      e.ensureText()
      e.delta(content, true)
      e.delta(refusal, true)
    }
    const tcs = d.tool_calls
    if (Array.isArray(tcs)) {
      for (const tc of tcs) {
        if (!isObj(tc)) continue
        if (e.open !== -1) e.closeOpen()
        const idx = typeof tc.index === 'number' ? tc.index : this.#indexOf(tc)
        let p = this.#calls.get(idx)
        if (p === undefined) {
          if (this.#calls.size >= e.limits.maxOutputItems) {
            return e.fail('output_too_large', `the translated answer has more than limits.maxOutputItems (${e.limits.maxOutputItems}) items`, { details: { reason: 'items', limit: e.limits.maxOutputItems } })
          }
          p = { id: '', name: '', args: new Held(e.budget, 'tool_arguments'), order: this.#calls.size }
          this.#calls.set(idx, p)
        }
        if (typeof tc.id === 'string' && tc.id !== '' && p.id === '') p.id = tc.id
        const f = tc.function
        if (isObj(f)) {
          if (typeof f.name === 'string' && f.name !== '' && p.name === '') p.name = f.name
          // Some compatible providers send the arguments as an object instead of JSON text.
          const a = typeof f.arguments === 'string' ? f.arguments : isObj(f.arguments) ? JSON.stringify(f.arguments) : ''
          if (a !== '') {
            const n = Buffer.byteLength(a)
            e.count(n)
            p.args.add(a, n)
          }
        }
      }
    }
  }

  /**
   * A fragment without `index` (some compatible providers): a new call when it brings an id
   * not seen yet, else a continuation of the latest call.
   */
  #indexOf (tc: Record<string, unknown>): number {
    let last = -1
    for (const [i, p] of this.#calls) {
      if (typeof tc.id === 'string' && tc.id !== '' && p.id === tc.id) return i
      if (i > last) last = i
    }
    if (last === -1 || (typeof tc.id === 'string' && tc.id !== '')) return last + 1
    return last
  }

  /** finish_reason: the open item ends, the buffered calls go out one after another. */
  #boundary (reason: string): void {
    const e = this.e
    let stop = chatStop(reason)
    if (this.#refusal && stop === 'end') stop = 'refusal'
    e.closeOpen()
    if (this.#calls.size > 0) {
      if (stop === 'length') {
        return e.fail('provider_protocol_error', `the provider stopped for its length limit (finish_reason length) inside ${this.#calls.size} tool call(s): their arguments are incomplete`)
      }
      const ordered = [...this.#calls.entries()].sort((a, b) => a[0] - b[0])
      for (const [idx, p] of ordered) {
        if (p.name === '') return e.fail('provider_protocol_error', `tool call ${idx} has no function name`)
        const raw = p.args.take()
        if (!e.wholeCall(p.id !== '' ? p.id : `call_${idx}`, p.name, raw)) return
      }
      this.#calls.clear()
    }
    this.#stop = stop
  }

  #done (): void {
    const e = this.e
    if (this.#stop === null) {
      return e.fail('provider_protocol_error', this.#calls.size > 0
        ? 'the stream sent [DONE] inside a tool call (no finish_reason): its arguments are incomplete'
        : 'the stream sent [DONE] without a finish_reason')
    }
    e.finish(this.#stop)
  }

  /** The provider's stream ended (EOF). */
  end (): void {
    const e = this.e
    if (e.ended) return
    e.guard(() => this.#end())
  }

  #end (): void {
    const e = this.e
    if (this.#stop !== null) return e.fail('provider_protocol_error', 'the stream ended after its finish_reason without [DONE]')
    e.fail('provider_protocol_error', this.#calls.size > 0 || e.call !== null
      ? 'the stream ended inside a tool call without a terminal: its arguments are incomplete'
      : 'the stream ended without a terminal (no finish_reason, no [DONE])')
  }
}

/** A non-streaming Chat answer -> the same canonical events. */
export function chatFromJson (answer: unknown, o: DecoderOptions): void {
  const d = new ChatDecoder(o)
  const e = d.e
  if (!isObj(answer)) return e.fail('provider_protocol_error', 'the provider answer is not a JSON object')
  if (answer.error !== undefined && answer.error !== null) return providerFailure(e, answer.error, 'error')
  const choice = Array.isArray(answer.choices) ? answer.choices[0] : undefined
  if (!isObj(choice) || !isObj(choice.message)) return e.fail('provider_protocol_error', 'the provider answer has no choices[0].message')
  const m = choice.message
  // The answer as one chunk: a missing finish_reason stays missing, so [DONE] fails it as in a
  // stream (an answer without its terminal is never a completed call, nor a completed text).
  const content = Array.isArray(m.content) ? m.content.map(p => isObj(p) && typeof p.text === 'string' ? p.text : '').join('') : m.content
  const chunk: Record<string, unknown> = { id: answer.id, model: answer.model, created: answer.created, choices: [{ index: 0, delta: { reasoning_content: m.reasoning_content ?? m.reasoning, content, refusal: m.refusal, tool_calls: Array.isArray(m.tool_calls) ? m.tool_calls.map((t, i) => isObj(t) ? { ...t, index: i } : t) : undefined }, finish_reason: choice.finish_reason }], usage: answer.usage }
  d.frame(null, chunk)
  d.frame(null, '[DONE]')
}
