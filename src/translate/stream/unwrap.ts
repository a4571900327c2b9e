// Incremental unwrapping of a custom tool's input from the function arguments a provider
// streams for it. A custom/freeform tool (Codex's apply_patch) is exposed to providers that
// only have function tools as a function with one `input: string` parameter; the provider
// then streams `{"input":"*** Begin Patch\n..."}` in fragments cut anywhere (inside an escape,
// inside a surrogate pair). A Responses client expects the raw input as
// `custom_tool_call_input.delta`s, live: this decodes the JSON string as the fragments come.
//
// Only the layout every provider produces is followed: `{`, `"input"`, `:`, then the string
// (whitespace allowed between). Anything else (another key first, a non-string value) stops
// the live output (`live` false, nothing emitted so far): the caller parses the whole
// arguments at the end and emits the input in one piece. The caller always validates the
// whole arguments with JSON.parse at the end; this only produces the deltas early.

const PRE = ['{', '"input"', ':', '"'] as const
const ESCAPES: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' }

export class InputUnwrapper {
  /** False once the layout is not the expected one (before or after anything was emitted). */
  live = true
  /** True once the closing quote of the input string was read. */
  closed = false
  /** True once any decoded text was returned; `length` counts its UTF-16 units. */
  emitted = false
  length = 0
  #step = 0 // index in PRE
  #lit = 0 // chars of PRE[#step] matched so far
  #esc = '' // a pending escape, at most 6 characters: '\\', '\\u', '\\u12', ...
  #high = '' // a held high surrogate (its low half has not come yet)

  /** The decoded input text this fragment completes ('' when none). */
  feed (s: string): string {
    if (!this.live || this.closed) return ''
    let i = 0
    const n = s.length
    while (this.#step < PRE.length && i < n) {
      const c = s[i]
      const want = PRE[this.#step]
      if (this.#lit === 0 && (c === ' ' || c === '\n' || c === '\r' || c === '\t')) { i++; continue }
      if (c !== want[this.#lit]) { this.live = false; return '' }
      i++
      if (++this.#lit === want.length) { this.#step++; this.#lit = 0 }
    }
    if (this.#step < PRE.length || i >= n) return ''
    return this.#string(s, i)
  }

  #string (s: string, from: number): string {
    const parts: string[] = []
    if (this.#high !== '') { parts.push(this.#high); this.#high = '' }
    let i = from
    const n = s.length
    while (i < n) {
      if (this.#esc !== '') {
        const c = s[i++]
        if (this.#esc === '\\') {
          if (c === 'u') { this.#esc = '\\u'; continue }
          const e = ESCAPES[c]
          if (e === undefined) { this.live = false; return this.#out(parts) }
          parts.push(e)
          this.#esc = ''
          continue
        }
        this.#esc += c
        if (this.#esc.length === 6) {
          const hex = this.#esc.slice(2)
          this.#esc = ''
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) { this.live = false; return this.#out(parts) }
          parts.push(String.fromCharCode(parseInt(hex, 16)))
        }
        continue
      }
      // Plain run up to the next quote or backslash.
      let j = i
      while (j < n) {
        const c = s.charCodeAt(j)
        if (c === 34 || c === 92) break
        j++
      }
      if (j > i) parts.push(s.slice(i, j))
      if (j >= n) break
      if (s.charCodeAt(j) === 34) {
        this.closed = true
        return this.#out(parts, true)
      }
      this.#esc = '\\'
      i = j + 1
    }
    return this.#out(parts)
  }

  #out (parts: string[], last = false): string {
    let text = parts.length === 1 ? parts[0] : parts.join('')
    // Never end a delta on a lone high surrogate: its pair comes with the next fragment.
    if (!last && text.length > 0) {
      const c = text.charCodeAt(text.length - 1)
      if (c >= 0xd800 && c <= 0xdbff) {
        this.#high = text.slice(-1)
        text = text.slice(0, -1)
      }
    }
    if (text.length > 0) {
      this.emitted = true
      this.length += text.length
    }
    return text
  }
}
