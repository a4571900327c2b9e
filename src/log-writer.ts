// The log's way to fd 1: whole lines, never a stalled thread, never an unbounded queue.
//
// Every exchange writes one log line, so this is on the data path. Through sonic-boom's
// asynchronous mode every line is an fs.write on libuv's thread pool: a pool thread woken, the
// write(2), a completion posted back to the loop (measured in the HTTP worker: two more
// context switches per exchange, docs/benchmarks.md). Its synchronous mode is one write(2) and
// nothing else, but on a pipe nobody reads it blocks the thread, and with it every exchange of
// that worker. And in its asynchronous mode, lines that fd 1 does not take pile up in the heap
// without a bound. So:
//
// - fd 1 a pipe or FIFO (containers, `| tee`): the pipe is opened again through
//   /proc/self/fd/1 with O_NONBLOCK. That is a file description of our own, so the flag does
//   not change the one the parent and the other threads share. A line is one write(2) in the
//   calling thread; a full pipe answers EAGAIN at once. A write of at most PIPE_BUF bytes
//   (every line, src/log.ts) is written whole or not at all, so lines of several threads never
//   interleave.
// - fd 1 a regular file or a character device (a terminal, /dev/null): one write(2) per line
//   on fd 1 itself. A file does not wait for a reader; a terminal stopped with Ctrl-S would
//   hold the thread (interactive use only).
// - fd 1 a socket (systemd's StandardOutput=journal, the stdio a Node parent gives its child),
//   on Linux: one send(2) per line in the calling thread with MSG_DONTWAIT (and MSG_NOSIGNAL),
//   through the FFI library koffi. The flag is per call, so the file description the parent
//   and the other threads share stays as it is (a socket cannot be opened again like a pipe);
//   a full socket answers EAGAIN at once. Measured in a worker thread on the socket a Node
//   parent gives: ~5 µs of process CPU per line, against ~70-80 µs through sonic-boom's
//   asynchronous mode (a pool thread woken per line, docs/benchmarks.md). On a Unix stream
//   socket a line of at most LINE_MAX_BYTES goes into one buffer of the socket whole or not at
//   all (the kernel splits a send only at about half the send buffer, ~100 KiB), so lines of
//   several threads do not interleave there either.
// - anything else, a pipe that cannot be opened again, or a socket where koffi or glibc's
//   send cannot be loaded: sonic-boom's asynchronous mode, with `maxLength` (its queue is
//   bounded too).
//
// A line fd 1 does not take now waits in a queue of at most QUEUE_MAX_BYTES and is retried on
// a timer; lines beyond that are dropped and counted, and the first line written after a drop
// is a warning with how many were lost. The loop never waits for a reader. A file out of room
// (ENOSPC, EFBIG over RLIMIT_FSIZE, EDQUOT) is waited out the same way, so that the lines
// resume when room comes back; only a descriptor that refuses for good (EPIPE, EBADF, ...)
// makes the held lines go. A write that only part of a line went into (a file running out of
// room mid-line) keeps the rest as bytes, so a line cut inside a UTF-8 character ends exactly
// as it began, and nothing is written before it.

import { closeSync, constants, fstatSync, openSync, writeSync } from 'node:fs'
import { constants as osConstants } from 'node:os'
import pino from 'pino'
import { glibc } from './libc.ts'

/** Bytes of lines held while fd 1 does not take them; lines beyond are dropped (and counted). */
export const QUEUE_MAX_BYTES = 1024 * 1024

/** The first retry of a held line comes after this long; later ones back off to RETRY_MAX_MS. */
const RETRY_MIN_MS = 5
const RETRY_MAX_MS = 200

/** How lines reach fd 1 (see the top of the file). */
export type WriterMode = 'pipe' | 'direct' | 'socket' | 'fallback'

export interface LineWriterOptions {
  /** The descriptor written (1: stdout). */
  fd?: number
  /** The largest single write (src/log.ts LINE_MAX_BYTES); every line is at most this long. */
  maxWrite: number
  /** How many bytes of lines are held before lines are dropped. */
  queueMaxBytes?: number
  /** A socket is written with send(2) where it can be (default true); false: sonic-boom (tests). */
  socketSend?: boolean
}

type Attempt = 'written' | 'again' | 'failed'
/** A line, or the rest of one that was partly written (its bytes: it may begin mid-character). */
type Held = string | Buffer

/** Errors after which fd 1 may take lines again later: they are held and retried, not dropped. */
const TRANSIENT = new Set(['EAGAIN', 'EWOULDBLOCK', 'EINTR', 'ENOSPC', 'EFBIG', 'EDQUOT', 'ENOBUFS', 'ENOMEM'])

/** A pino destination: write(line) never blocks, never throws, and holds a bounded queue. */
export class LineWriter {
  readonly mode: WriterMode
  private readonly fd: number
  private readonly ownFd: boolean
  private readonly queueMax: number
  private readonly sonic: ReturnType<typeof pino.destination> | null = null
  /** The socket's send(2) (mode 'socket'), else null: writeSync. */
  private readonly send: Sender | null = null
  private readonly queue: Held[] = []
  private queued = 0
  private dropped = 0
  private retryMs = RETRY_MIN_MS
  private timer: NodeJS.Timeout | null = null
  private closed = false

  constructor (opts: LineWriterOptions) {
    const fd = opts.fd ?? 1
    this.queueMax = opts.queueMaxBytes ?? QUEUE_MAX_BYTES
    const kind = kindOf(fd)
    const own = kind === 'fifo' ? reopenNonBlocking(fd) : null
    const send = kind === 'socket' && opts.socketSend !== false ? socketSender() : null
    if (own !== null) {
      this.mode = 'pipe'
      this.fd = own
      this.ownFd = true
    } else if (kind === 'file') {
      this.mode = 'direct'
      this.fd = fd
      this.ownFd = false
    } else if (send !== null) {
      this.mode = 'socket'
      this.send = send
      this.fd = fd
      this.ownFd = false
    } else {
      this.mode = 'fallback'
      this.fd = fd
      this.ownFd = false
      this.sonic = pino.destination({ dest: fd, sync: false, maxWrite: opts.maxWrite, maxLength: this.queueMax })
      this.sonic.on('drop', () => { this.dropped++ })
    }
  }

  /** Bytes of lines waiting for fd 1. */
  get queuedBytes (): number {
    return this.sonic === null ? this.queued : (this.sonic as unknown as { _len: number })._len
  }

  /** Lines dropped and not yet reported by a warning line. */
  get droppedLines (): number { return this.dropped }

  write (line: string): boolean {
    if (this.closed) return false
    if (this.sonic !== null) {
      if (this.dropped > 0) this.sonicNotice()
      this.sonic.write(line)
      return true
    }
    // Lines are held already: this one waits behind them (the head is tried once more now).
    if (this.queue.length > 0 || this.dropped > 0) {
      this.hold(line)
      this.drain()
      return true
    }
    const r = this.attempt(line)
    if (r === 'again') {
      this.hold(line)
      this.retry()
    } else if (typeof r === 'object') {
      this.queue.push(r.rest) // the rest of a line begun: held whatever the cap
      this.queued += r.rest.length
      this.retry()
    }
    return true // written, or failed: fd 1 refuses for good (EPIPE)
  }

  /** Writes what is held as far as fd 1 takes it now; then `cb`. */
  flush (cb?: (err?: Error) => void): void {
    if (this.sonic !== null) { if (this.dropped > 0) this.sonicNotice(); this.sonic.flush(cb); return }
    this.drain()
    cb?.()
  }

  /** The same, without a callback: nothing here waits for a reader. */
  flushSync (): void {
    if (this.sonic !== null) {
      if (this.dropped > 0) this.sonicNotice()
      try { this.sonic.flushSync() } catch {} // EAGAIN: what is left stays held
      return
    }
    this.drain()
  }

  end (): void {
    if (this.closed) return
    this.flushSync()
    this.closed = true
    if (this.timer !== null) { clearTimeout(this.timer); this.timer = null }
    if (this.sonic !== null) this.sonic.end()
    if (this.ownFd) { try { closeSync(this.fd) } catch {} }
  }

  /** One write(2) of the line (send(2) on a socket): what became of it, or the bytes that were not written. */
  private attempt (line: Held): Attempt | { rest: Buffer } {
    // A count of bytes: a string's length is its byte count only when it is ASCII.
    const bytes = typeof line === 'string' ? Buffer.byteLength(line) : line.length
    let n: number
    if (this.send !== null) {
      n = this.send(this.fd, line, bytes)
      if (n < 0) return TRANSIENT.has(ERRNO_NAMES.get(-n) ?? '') ? 'again' : 'failed'
    } else {
      try {
        n = typeof line === 'string' ? writeSync(this.fd, line) : writeSync(this.fd, line)
      } catch (err) {
        return TRANSIENT.has((err as NodeJS.ErrnoException).code ?? '') ? 'again' : 'failed'
      }
    }
    if (n === bytes) return 'written'
    // Partial: a file out of room, or a socket whose buffer filled mid-line; a pipe takes a
    // line whole or not at all.
    return { rest: (typeof line === 'string' ? Buffer.from(line) : line).subarray(n) }
  }

  private hold (line: string): void {
    const bytes = Buffer.byteLength(line)
    if (this.queued + bytes > this.queueMax) { this.dropped++; return }
    this.queue.push(line)
    this.queued += bytes
  }

  /** Held lines (then the drop warning) out in order, until fd 1 stops taking them. */
  private drain (): void {
    while (this.queue.length > 0 || this.dropped > 0) {
      const notice = this.queue.length === 0
      const line = notice ? dropNotice(this.dropped) : this.queue[0]
      const r = this.attempt(line)
      if (r === 'again') { this.retry(); return }
      if (typeof r === 'object') {
        // The rest of a line goes before anything else (never dropped: it ends a line begun).
        if (notice) { this.dropped = 0; this.queue.push(r.rest) } else this.queue[0] = r.rest
        this.queued += r.rest.length - (notice ? 0 : Buffer.byteLength(line))
        continue
      }
      if (notice) this.dropped = 0
      else {
        this.queue.shift()
        this.queued -= Buffer.byteLength(line)
      }
      // fd 1 refuses for good (EPIPE, EBADF): nothing held can be delivered.
      if (r === 'failed') { this.queue.length = 0; this.queued = 0; this.dropped = 0; return }
    }
    this.retryMs = RETRY_MIN_MS
  }

  private retry (): void {
    if (this.timer !== null || this.closed) return
    this.timer = setTimeout(() => {
      this.timer = null
      this.drain()
    }, this.retryMs)
    this.timer.unref()
    this.retryMs = Math.min(RETRY_MAX_MS, this.retryMs * 2)
  }

  /** The drop warning through sonic-boom; if it does not fit either, the count waits for the next line. */
  private sonicNotice (): void {
    const n = this.dropped
    this.dropped = 0
    this.sonic!.write(dropNotice(n))
    if (this.dropped > 0) this.dropped = n // the warning was dropped (its own 'drop' counted it)
  }
}

function dropNotice (n: number): string {
  return `${JSON.stringify({ level: 40, time: new Date().toISOString(), pid: process.pid, service: 'sluice', droppedLines: n, msg: 'log lines dropped: stdout was not read fast enough' })}\n`
}

type FdKind = 'fifo' | 'file' | 'socket' | 'other'

function kindOf (fd: number): FdKind {
  try {
    const st = fstatSync(fd)
    if (st.isFIFO()) return 'fifo'
    if (st.isFile() || st.isCharacterDevice()) return 'file'
    if (st.isSocket()) return 'socket'
  } catch {}
  return 'other'
}

/** One send(2) of `bytes` bytes of `data` (a string is sent as its UTF-8): the count sent, or -errno. */
type Sender = (fd: number, data: string | Buffer, bytes: number) => number

/** Linux's flags (bits/socket.h): do not wait for room; no SIGPIPE once the reader is gone (EPIPE). */
const MSG_DONTWAIT = 0x40
const MSG_NOSIGNAL = 0x4000

/** errno values -> names (EAGAIN, ...), for TRANSIENT. */
const ERRNO_NAMES = new Map(Object.entries(osConstants.errno).map(([name, n]) => [n, name]))

/** glibc's send(2) (src/libc.ts), or null where it cannot be bound. */
function socketSender (): Sender | null {
  const libc = glibc()
  if (libc === null) return null
  let send: (fd: number, data: string | Buffer, bytes: number, flags: number) => number
  try {
    send = libc.func('intptr_t send(int fd, const char *buf, size_t len, int flags)')
  } catch {
    return null
  }
  return (fd, data, bytes) => {
    const n = send(fd, data, bytes, MSG_DONTWAIT | MSG_NOSIGNAL)
    return n >= 0 ? n : -libc.errno()
  }
}

/** A non-blocking file description of our own for the pipe at `fd`, or null. */
function reopenNonBlocking (fd: number): number | null {
  try {
    return openSync(`/proc/self/fd/${fd}`, constants.O_WRONLY | constants.O_NONBLOCK)
  } catch {
    return null
  }
}
