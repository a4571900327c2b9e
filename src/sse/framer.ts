// SSE framing over raw bytes: finds where each event ("frame") ends, without decoding it.
//
// The relay forwards every provider chunk to the client itself, unchanged; the framer only
// observes those same chunks. It never alters, delays or holds back a byte destined for the
// client. What it reports:
//
//   onFrame(frame, at)   a complete frame: its lines, without the blank line that ended it.
//                        A frame that lies within one pushed chunk is a `subarray` view of that
//                        chunk (no copy). Only a frame that spans chunks is copied (once, when
//                        it completes); the copy is a fresh Buffer the callee may keep.
//                        `at` is the offset of the frame's first byte in the chunk being
//                        pushed, negative when the frame began in an earlier chunk. A relay
//                        that pushes a chunk before writing it may use it to stop a malformed
//                        frame from reaching the client (write chunk[0, at), then the tail).
//   onOversize(bytes, at) a frame grew past `maxFrameBytes`. Reported once per frame, with the
//                        frame's byte count when it was detected, in order with the frames
//                        around it (a frame completed earlier in the same chunk is reported
//                        first). `at` is where it began, as for onFrame. Its bytes are not
//                        kept; the framer skips to the blank line that ends it and
//                        resynchronises: the next frame is reported normally.
//   onFrameAt(buf, start, end, at)
//                        the same frame as offsets instead of a view, for a handler that has
//                        it in place of onFrame: the frame is buf[start, end), where
//                        buf is the chunk being pushed, or for a frame that spans chunks a
//                        fresh copy (start 0) the callee may keep. Valid only until push()
//                        returns for the chunk (the chunk is the caller's). It exists for the
//                        relay's per-frame path: a `subarray` view is an allocation (~100 bytes
//                        of young generation per frame, measured: most of what the relay
//                        allocated at throughput), offsets are not.
//   end()                returns the bytes of a trailing unterminated frame (a stream cut
//                        mid-frame), or null when the stream ended on a frame boundary.
//
// Boundaries (the SSE line grammar): a line ends with LF, CR or CRLF; a frame ends at an empty
// line. So "\n\n", "\r\r", "\r\n\r\n" and mixes such as "\n\r\n" all end a frame, and any of
// them may be split across chunks (a CR at the end of one chunk and the LF that completes its
// CRLF at the start of the next is one terminator). Empty frames (extra blank lines) are
// skipped.
//
// Size rule: a frame is oversize when more than `maxFrameBytes` bytes have been seen from its
// first byte through the byte that completes its blank line (for a CRLF blank line that is
// the CR: the framer reports the frame as soon as it sees the CR, not one byte later). With
// LF line ends, "data: x\n\n" is 9 bytes. So the framer never holds more than
// `maxFrameBytes` bytes of one frame, and `bufferedBytes` never exceeds that (its buffer is
// allocated at most that large, and released as soon as the frame completes).
//
// Cost: one native memchr (`Buffer#indexOf(LF)`) per line and a few byte reads per frame; a
// chunk that contains a CR anywhere is scanned byte by byte in JS instead (rare: real
// providers end lines with LF). The callbacks run synchronously inside push(); they must not
// call push() or end() on the same framer. A callback that throws ends the framer: push()
// rethrows that error, and every later push() or end() throws it again (the rest of that
// chunk was never framed, so nothing after it could be trusted).

const LF = 10
const CR = 13

export const DEFAULT_MAX_FRAME_BYTES = 1024 * 1024

interface OversizeHandler {
  /**
   * A frame passed the cap; `bytes` is its size when that was detected. Once per frame. `at`:
   * where it begins in the chunk being pushed (negative: it began in an earlier chunk).
   */
  onOversize?(bytes: number, at: number): void
}

/** Frames as views. */
export interface FrameViewHandler extends OversizeHandler {
  /**
   * A complete, non-empty frame, without its terminating blank line. `at`: where it begins in
   * the chunk being pushed (negative: that many bytes of it came in earlier chunks).
   */
  onFrame(frame: Buffer, at: number): void
  onFrameAt?: undefined
}

/** Frames as offsets (the relay's per-frame path: no view made per frame). */
export interface FrameOffsetHandler extends OversizeHandler {
  /**
   * The same frame as onFrame's, as buf[start, end) (buf: the pushed chunk, or a fresh copy for
   * a frame that spanned chunks).
   */
  onFrameAt(buf: Buffer, start: number, end: number, at: number): void
  onFrame?: undefined
}

/** One of the two ways to be told of frames, and optionally of oversize ones. */
export type FramerHandler = FrameViewHandler | FrameOffsetHandler

export interface SseFramerOptions {
  /** The frame cap (config `limits.sseFrameBytes`). Default 1 MiB. */
  maxFrameBytes?: number
}

/** CR state carried to the next byte: was the last byte a CR, and did it end a frame? */
const CR_NONE = 0
const CR_LINE = 1
const CR_BOUNDARY = 2

export class SseFramer {
  readonly maxFrameBytes: number
  readonly #handler: FramerHandler

  /** The current frame's bytes from earlier chunks (a copy), or null. */
  #buf: Buffer | null = null
  /** Bytes of the current frame seen in earlier chunks (held in #buf unless discarding). */
  #held = 0
  /** Frame-relative end of the last complete line (0: no complete line yet). */
  #contentEnd = 0
  /** The last byte seen was a line terminator (or nothing was seen yet). */
  #atLineStart = true
  #cr = CR_NONE
  /** Inside an oversize frame: skipping to its end. */
  #discarding = false

  #failed: { error: unknown } | null = null

  #frames = 0
  #oversize = 0
  #bytesSeen = 0
  #discardedBytes = 0

  constructor (handler: FramerHandler, opts: SseFramerOptions = {}) {
    const max = opts.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES
    if (!Number.isSafeInteger(max) || max < 1) throw new RangeError('maxFrameBytes must be a positive integer')
    this.maxFrameBytes = max
    this.#handler = handler
  }

  /** Bytes of provider data the framer holds right now (for the byte budget). */
  get bufferedBytes (): number { return this.#buf === null ? 0 : this.#buf.length }
  /** Frames reported through onFrame. */
  get frames (): number { return this.#frames }
  /** Frames reported through onOversize. */
  get oversizeFrames (): number { return this.#oversize }
  /** Every byte pushed. */
  get bytesSeen (): number { return this.#bytesSeen }
  /** Bytes of oversize frames that were skipped. */
  get discardedBytes (): number { return this.#discardedBytes }
  /** True while the stream is inside a frame (some of its bytes seen, its end not yet). */
  get midFrame (): boolean { return this.#held > 0 || this.#discarding }
  /**
   * Bytes of the unterminated frame the stream is inside (0 at a frame boundary, and 0 while
   * skipping an oversize frame). They are the last bytes pushed: a relay that holds them back
   * until the frame ends keeps its client at a frame boundary.
   */
  get partialFrameBytes (): number { return this.#discarding ? 0 : this.#held }

  /**
   * What a client that received exactly the pushed bytes needs to see next so that the
   * partial frame ends and a following frame starts cleanly: "" at a frame boundary, "\n"
   * when the last line is complete, "\n\n" inside a line (or after a lone CR, whose LF would
   * otherwise pair with it). Write it before a failure tail.
   */
  closingBytes (): string {
    if (!this.midFrame) return ''
    if (this.#cr === CR_LINE) return '\n\n'
    return this.#atLineStart ? '\n' : '\n\n'
  }

  push (chunk: Uint8Array): void {
    if (this.#failed !== null) throw this.#failed.error
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
    const n = buf.length
    if (n === 0) return
    this.#bytesSeen += n
    let i = 0
    /** Where the current frame's bytes begin in this chunk (0 when it began earlier). */
    let start = 0

    if (this.#cr !== CR_NONE) {
      // The previous chunk ended with a CR: an LF here completes that CRLF.
      const was = this.#cr
      this.#cr = CR_NONE
      if (buf[0] === LF) {
        i = 1
        if (was === CR_BOUNDARY) start = 1 // the LF belongs to the blank line of the last frame
        // CR_LINE: it belongs to the current frame (a line terminator inside it)
      }
    }

    const hasCR = buf.indexOf(CR, i) !== -1
    while (i < n) {
      let j: number
      if (!hasCR) {
        j = buf.indexOf(LF, i)
        if (j === -1) break
      } else {
        j = i
        while (j < n) {
          const c = buf[j]
          if (c === LF || c === CR) break
          j++
        }
        if (j === n) break
      }
      if (j > i) this.#atLineStart = false
      let c = buf[j]
      if (!this.#atLineStart) {
        // The end of a non-empty line.
        this.#contentEnd = this.#held + (j - start)
        this.#atLineStart = true
        if (c === CR) {
          if (j + 1 === n) {
            this.#cr = CR_LINE
            i = n
            break
          }
          if (buf[j + 1] === LF) j++
        }
        // Fast path: the next byte ends an empty line (the usual "\n\n").
        j++
        if (j === n) {
          i = n
          break
        }
        c = buf[j]
        if (c !== LF && c !== CR) {
          i = j
          continue
        }
      }
      // An empty line at j: the frame ends here.
      this.#boundary(buf, start, j)
      start = j + 1
      if (c === CR) {
        if (j + 1 === n) this.#cr = CR_BOUNDARY
        else if (buf[j + 1] === LF) start = j + 2
      }
      i = start
    }
    if (i < n) this.#atLineStart = false

    const rest = n - start
    if (rest > 0) this.#carry(buf, start, rest)
  }

  /**
   * The stream ended. Returns the bytes of an unterminated trailing frame (a copy), or null
   * when the stream ended on a frame boundary (or inside an oversize frame, already reported).
   * The framer is reset and could take a new stream.
   */
  end (): Buffer | null {
    if (this.#failed !== null) throw this.#failed.error
    let trailing: Buffer | null = null
    if (!this.#discarding && this.#held > 0 && this.#buf !== null) trailing = this.#buf.subarray(0, this.#held)
    this.#reset()
    this.#atLineStart = true
    this.#cr = CR_NONE
    return trailing
  }

  /** The blank line that ends the current frame is at `buf[j]`; the frame began at `start`. */
  #boundary (buf: Buffer, start: number, j: number): void {
    if (this.#discarding) {
      this.#discardedBytes += j - start + 1
      this.#reset()
      return
    }
    const contentEnd = this.#contentEnd
    if (contentEnd === 0) { // an empty frame (a stray blank line)
      this.#reset()
      return
    }
    const size = this.#held + (j - start) + 1
    if (size > this.maxFrameBytes) {
      const at = start - this.#held
      this.#oversize++
      this.#discardedBytes += size
      this.#reset()
      this.#report(null, 0, size, at)
      return
    }
    const at = start - this.#held
    let from = buf
    let s = start
    if (this.#held !== 0) {
      const more = contentEnd - this.#held
      if (more > 0) this.#append(buf, 0, more)
      from = this.#buf as Buffer
      s = 0
    }
    this.#reset()
    this.#frames++
    this.#report(from, s, s + contentEnd, at)
  }

  /** Keeps the unterminated rest of a chunk (or skips it inside an oversize frame). */
  #carry (buf: Buffer, start: number, rest: number): void {
    if (this.#discarding) {
      this.#held += rest
      this.#discardedBytes += rest
      return
    }
    const size = this.#held + rest
    if (size > this.maxFrameBytes) {
      const at = start - this.#held
      this.#oversize++
      this.#discardedBytes += size
      this.#buf = null
      this.#held = size
      this.#discarding = true
      this.#report(null, 0, size, at)
      return
    }
    this.#append(buf, start, rest)
  }

  /**
   * Tells the handler of the frame buf[start, end) (as offsets or as a view, as it asked), or,
   * when buf is null, of an oversize frame of `end` bytes. A throw ends the framer.
   */
  #report (buf: Buffer | null, start: number, end: number, at: number): void {
    const h = this.#handler
    try {
      if (buf === null) h.onOversize?.(end, at)
      else if (h.onFrameAt !== undefined) h.onFrameAt(buf, start, end, at)
      else h.onFrame(buf.subarray(start, end), at)
    } catch (error) {
      this.#failed = { error }
      throw error
    }
  }

  #append (src: Buffer, from: number, length: number): void {
    const need = this.#held + length
    let dst = this.#buf
    if (dst === null || dst.length < need) {
      const grown = Math.min(this.maxFrameBytes, Math.max(need, dst === null ? 256 : dst.length * 2))
      const next = Buffer.allocUnsafe(grown)
      if (dst !== null && this.#held > 0) dst.copy(next, 0, 0, this.#held)
      dst = next
      this.#buf = dst
    }
    src.copy(dst, this.#held, from, from + length)
    this.#held = need
  }

  #reset (): void {
    this.#buf = null
    this.#held = 0
    this.#contentEnd = 0
    this.#discarding = false
  }
}
