// A small parser for text/event-stream (the WHATWG "server-sent events" interpretation), for
// the session event stream. It takes decoded text in chunks of any size and returns the events
// each chunk completes.
//
// Lines end with LF, CR or CRLF, and a CRLF may be split across chunks (a chunk ending in CR
// remembers to drop a leading LF from the next one). A blank line dispatches the event built so
// far; lines starting with ':' are comments (the gateway's heartbeats); `field: value` has one
// optional space after the colon removed; a line without a colon is a field with an empty
// value. Fields: `data` (several lines join with "\n"), `event` (the type; 'message' when
// absent), `id` (persists across events, as the spec's last event ID does; ignored when it
// contains NUL), `retry` and unknown fields are ignored. An event with no data line is not
// dispatched. Text after the last blank line when the stream ends is an incomplete event and is
// dropped (end()). A byte-order mark is the decoder's business (TextDecoder strips it).
//
// One unfinished line is held at most `maxLineChars` long; a longer one throws (a server that
// never ends its line must not grow the client's memory without bound).

export interface SseEvent {
  /** The last event ID in effect when this event was dispatched (null: none seen yet). */
  id: string | null
  event: string
  data: string
}

export const DEFAULT_MAX_LINE_CHARS = 16 * 1024 * 1024

export class SseParser {
  #rest = ''
  #dropLF = false
  #data: string[] = []
  #event = ''
  #id: string | null = null
  readonly #maxLineChars: number

  constructor (maxLineChars = DEFAULT_MAX_LINE_CHARS) {
    this.#maxLineChars = maxLineChars
  }

  /** The last event ID seen so far (what a reconnect sends as `Last-Event-ID`). */
  get lastEventId (): string | null { return this.#id }

  push (chunk: string): SseEvent[] {
    const out: SseEvent[] = []
    if (this.#dropLF && chunk.length > 0) {
      if (chunk.charCodeAt(0) === 10) chunk = chunk.slice(1)
      this.#dropLF = false
    }
    const text = this.#rest + chunk
    let start = 0
    const eol = /[\r\n]/g
    for (let m = eol.exec(text); m !== null; m = eol.exec(text)) {
      const at = m.index
      this.#line(text.slice(start, at), out)
      start = at + 1
      if (text.charCodeAt(at) === 13) {
        if (start === text.length) this.#dropLF = true
        else if (text.charCodeAt(start) === 10) start++
        eol.lastIndex = start
      }
    }
    this.#rest = text.slice(start)
    if (this.#rest.length > this.#maxLineChars) throw new RangeError(`event stream line longer than ${this.#maxLineChars} characters`)
    return out
  }

  /** The stream ended: an unterminated event is dropped (as the spec says). */
  end (): void {
    this.#rest = ''
    this.#data = []
    this.#event = ''
  }

  #line (line: string, out: SseEvent[]): void {
    if (line.length === 0) {
      if (this.#data.length > 0) out.push({ id: this.#id, event: this.#event || 'message', data: this.#data.join('\n') })
      this.#data = []
      this.#event = ''
      return
    }
    if (line.charCodeAt(0) === 58) return // ':' comment
    const colon = line.indexOf(':')
    const field = colon === -1 ? line : line.slice(0, colon)
    let value = colon === -1 ? '' : line.slice(colon + 1)
    if (value.charCodeAt(0) === 32) value = value.slice(1)
    if (field === 'data') this.#data.push(value)
    else if (field === 'event') this.#event = value
    else if (field === 'id' && !value.includes('\0')) this.#id = value
  }
}
