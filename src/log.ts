// Logging: pino, JSON lines, credentials redacted wherever they could appear.
//
// Two layers, because either alone leaves holes:
//
// - `scrubSecrets` runs on every logged object and every child binding before it is
//   serialised: a property whose name is a credential (SECRET_KEYS, in any case — outgoing
//   header objects often say `Authorization`) is replaced at any depth of plain objects,
//   arrays and errors. Copy on write: the caller's object (often a live headers object) is
//   never modified, and an object without a credential is passed on as it is.
// - `REDACT_PATHS`, pino's own redaction, runs on the serialised value of each key, so it also
//   covers what a serializer produced. Its paths are exact (case and depth).
//
// Neither looks inside string values: a credential must never be put into a message or into a
// field of another name. No code path logs a raw request, a raw header object or the config.
//
// ## One whole line per write
//
// The primary and every HTTP worker write to the same fd 1, each with its own LineWriter
// (src/log-writer.ts: one non-blocking write(2) per line in the thread itself on a pipe or a
// file, sonic-boom's asynchronous mode on a socket; a bounded queue either way). No thread
// relays another's lines. Lines stay whole because each write(2) is atomic:
//
// - every string field longer than FIELD_MAX_CHARS is cut to its first FIELD_MAX_CHARS
//   characters and `…[truncated N chars]` (N = the characters cut), at any depth, in the same
//   copy-on-write walk as the secrets (a 1.86 MB model name is logged as 1 KiB of it);
// - every line, newline included, is at most LINE_MAX_BYTES = PIPE_BUF (4096) bytes: one whose
//   fields are all short but that is still longer is re-cut with tighter caps, and marked
//   `lineTruncated: <bytes it had>` (`capLine`);
// - a LineWriter writes one line per write(2); on a socket, sonic-boom's `maxWrite` is
//   LINE_MAX_BYTES: it joins whole lines into one write only up to that many bytes (its
//   default, 16 KiB, let two threads' writes interleave on a pipe, and an unbounded line was
//   split over several partial writes).
//
// A write to a pipe of at most PIPE_BUF bytes is written whole or not at all (EAGAIN: the
// line is held and retried whole); to a file or a terminal a write is not interleaved with
// another.

import pino, { type Logger } from 'pino'
import { LineWriter } from './log-writer.ts'

export const CENSOR = '[redacted]'

/** Header names that carry a credential: the gateway's key, a provider's key, a cookie. */
export const SECRET_HEADERS = [
  'authorization',
  'proxy-authorization',
  'x-api-key', // the gateway key (Anthropic clients) and the Anthropic provider key
  'api-key', // Azure OpenAI
  'x-goog-api-key', // Gemini
  'cookie',
  'set-cookie',
] as const

/** Property names (lower case) replaced at any depth by scrubSecrets. */
export const SECRET_KEYS: ReadonlySet<string> = new Set<string>([
  ...SECRET_HEADERS,
  // Raw header lists alternate names and values: the whole list goes.
  'rawheaders',
  'apikey', // a resolved provider's key (src/routing.ts ResolvedProvider.apiKey)
  'api_key',
  'signingkey', // the failure-signing key (src/control.ts WorkerBoot.signingKey)
  'signing_key',
  'password',
  'secret',
  'client_secret',
  'access_token',
  'refresh_token',
])

const headerPaths = (prefix: string): string[] => SECRET_HEADERS.map((h) => `${prefix}["${h}"]`)

/**
 * pino's redaction paths, exact and without a leading wildcard: those make pino run the
 * redactor over every key of every line (measured on the exchange line: ~3 µs as it is, ~4 µs
 * with these paths and scrubSecrets, ~40 µs with `*.headers[...]` for the seven headers), and
 * scrubSecrets already covers every depth. Top-level credential fields,
 * the usual header objects, a provider's and the signing key, and the key hashes of a config
 * that should never have been logged.
 */
export const REDACT_PATHS = [
  ...SECRET_HEADERS.map((h) => `["${h}"]`),
  ...['headers', 'req.headers', 'res.headers', 'err.headers', 'clientHeaders'].flatMap(headerPaths),
  'rawHeaders',
  'req.rawHeaders',
  'apiKey',
  'provider.apiKey',
  'signingKey',
  // A key as presented by a client (never logged by name; the exchange line has `keyName`).
  'key',
  'keys[*].sha256',
  'config.keys[*].sha256',
]

/** A logged string longer than this many characters keeps this many and a truncation marker. */
export const FIELD_MAX_CHARS = 1024

/** No line (newline included) is longer: PIPE_BUF, so one write of it to a pipe is atomic. */
export const LINE_MAX_BYTES = 4096

/** Beyond this depth a logged value is cut (it could not be checked). */
const MAX_DEPTH = 8

/**
 * `value` with every property named in SECRET_KEYS replaced by CENSOR, at any depth; the same
 * reference when there was nothing to replace. Typed arrays, Maps, Sets and objects with
 * `toJSON` are left alone (they serialise without their own enumerable properties).
 */
export function scrubSecrets<T> (value: T): T {
  return scrub(value, 0, Infinity) as T
}

/** scrubSecrets, and every string longer than FIELD_MAX_CHARS cut with its marker: what is logged. */
export function forLog<T> (value: T): T {
  return scrub(value, 0, FIELD_MAX_CHARS) as T
}

/** `s` cut to `max` characters (never inside a surrogate pair) and the truncation marker. */
export function truncate (s: string, max: number): string {
  if (s.length <= max) return s
  let n = max
  const c = s.charCodeAt(n - 1)
  if (c >= 0xd800 && c <= 0xdbff) n--
  return `${s.slice(0, n)}…[truncated ${s.length - n} chars]`
}

function scrub (value: unknown, depth: number, chars: number): unknown {
  if (typeof value === 'string') return value.length > chars ? truncate(value, chars) : value
  if (value === null || typeof value !== 'object') return value
  if (ArrayBuffer.isView(value) || value instanceof Map || value instanceof Set || typeof (value as { toJSON?: unknown }).toJSON === 'function') return value
  if (depth >= MAX_DEPTH) return '[too deep]'
  if (Array.isArray(value)) {
    let out: unknown[] | null = null
    for (let i = 0; i < value.length; i++) {
      const v = scrub(value[i], depth + 1, chars)
      if (v !== value[i]) (out ??= value.slice())[i] = v
    }
    return out ?? value
  }
  const obj = value as Record<string, unknown>
  let out: Record<string, unknown> | null = null
  for (const k in obj) {
    if (!Object.hasOwn(obj, k)) continue
    const v = obj[k]
    const next = isSecretKey(k) ? CENSOR : scrub(v, depth + 1, chars)
    if (next !== v) out ??= copyOf(obj)
    if (out) out[k] = next
  }
  return out ?? value
}

/** Property name -> whether it names a credential; bounded, names are few in practice. */
const secretKeyCache = new Map<string, boolean>()

function isSecretKey (k: string): boolean {
  let secret = secretKeyCache.get(k)
  if (secret === undefined) {
    secret = SECRET_KEYS.has(k.toLowerCase())
    if (secretKeyCache.size < 4096) secretKeyCache.set(k, secret)
  }
  return secret
}

/** A plain copy; an error keeps its type, message and stack (not enumerable, so copied by name). */
function copyOf (obj: Record<string, unknown>): Record<string, unknown> {
  if (obj instanceof Error) return Object.assign({ type: obj.name, message: obj.message, stack: obj.stack }, obj)
  return { ...obj }
}

/** The merging object of a log call: scrubbed and cut, except `err`, which its serializer scrubs. */
function scrubLogObject (obj: Record<string, unknown>): Record<string, unknown> {
  if (!('err' in obj)) return forLog(obj)
  const { err, ...rest } = obj
  const scrubbed = forLog(rest)
  return scrubbed === rest ? obj : { ...scrubbed, err }
}

/** Tighter string caps tried, in turn, on a line still over LINE_MAX_BYTES. */
const LINE_RECUTS = [256, 64, 16]

/**
 * A serialised line (newline included) of at most LINE_MAX_BYTES: the line itself when it
 * fits (nearly always: field caps come first), else the same fields with tighter string caps
 * and `lineTruncated` (its original bytes), else as many of its fields, in order, as fit.
 */
export function capLine (line: string): string {
  // A UTF-16 unit is at most 3 UTF-8 bytes: most lines need no byte count at all.
  if (line.length * 3 <= LINE_MAX_BYTES) return line
  const bytes = Buffer.byteLength(line)
  if (bytes <= LINE_MAX_BYTES) return line
  let obj: Record<string, unknown>
  try { obj = JSON.parse(line) as Record<string, unknown> } catch { obj = { msg: 'unserialisable log line' } }
  for (const chars of LINE_RECUTS) {
    const out = `${JSON.stringify({ ...(scrub(obj, 0, chars) as Record<string, unknown>), lineTruncated: bytes })}\n`
    if (Buffer.byteLength(out) <= LINE_MAX_BYTES) return out
  }
  // Too many fields for any cap: the first ones (pino writes level, time, pid, msg... first).
  const small = scrub(obj, 0, LINE_RECUTS[LINE_RECUTS.length - 1]) as Record<string, unknown>
  const tail = `"lineTruncated":${bytes}}\n`
  let out = '{'
  let used = Buffer.byteLength(tail) + 1
  for (const k of Object.keys(small)) {
    const field = `${JSON.stringify(k)}:${JSON.stringify(small[k]) ?? 'null'},`
    const n = Buffer.byteLength(field)
    if (used + n > LINE_MAX_BYTES) continue
    out += field
    used += n
  }
  return out + tail
}

/** fd 1, whole lines of at most LINE_MAX_BYTES per write (see the top and src/log-writer.ts). */
function stdoutDestination (): pino.DestinationStream {
  if (stdoutWriter === null) {
    const w = new LineWriter({ fd: 1, maxWrite: LINE_MAX_BYTES })
    // What is held when the thread ends normally gets one last non-blocking try. (On a socket,
    // sonic-boom's own: pino flushes it at the main thread's exit; a flush there can block.)
    if (w.mode !== 'fallback') process.once('exit', () => w.end())
    stdoutWriter = w
  }
  return stdoutWriter
}

/** This thread's one writer to fd 1, shared by its loggers. */
let stdoutWriter: LineWriter | null = null

/**
 * A logger for a worker thread. It writes to fd 1 itself, never blocking (src/log-writer.ts):
 * a worker's `process.stdout` would relay every line through the main thread over a
 * MessagePort (one message per exchange log line, on the primary's event loop), and a
 * blocking write would stall the relay on a slow stdout.
 */
export function createThreadLogger (level: string, instanceId?: string): Logger {
  return createLogger(level, stdoutDestination(), instanceId)
}

/**
 * The exchange line (one per exchange, info level) written without pino's generic path: the
 * record is a flat object of known fields, so one JSON.stringify of what forLog makes of it
 * replaces pino's per-key serialisation and its redactor (~50 us of each exchange's self time
 * in a profile of sequential exchanges on a 1-vCPU host), and the line is still pino's own: its level and time prefix, the
 * logger's bindings, the fields in order, `msg`, capLine, the logger's destination. The record
 * carries no field a REDACT_PATHS entry names but `provider`, a string there (the path is
 * `provider.apiKey`); forLog still scrubs any credential-named key and cuts every string.
 * test/unit/log.test.ts holds it byte for byte to `logger.info(rec, msg)`.
 */
export function lineWriter (logger: Logger, msg: string): (rec: object) => void {
  const s = pino.symbols as unknown as Record<string, symbol>
  const inner = logger as unknown as Record<symbol, unknown>
  const stream = inner[s.streamSym] as pino.DestinationStream
  const time = inner[s.timeSym] as () => string
  const levelPrefix = (inner[s.lsCacheSym] as Record<number, string>)[30]
  const end = inner[s.endSym] as string
  const tail = `,"msg":${JSON.stringify(msg)}${end}`
  return (rec) => {
    if (!logger.isLevelEnabled('info')) return
    const body = JSON.stringify(forLog(rec))
    const fields = body.length > 2 ? `,${body.slice(1, -1)}` : ''
    stream.write(capLine(levelPrefix + time() + (inner[s.chindingsSym] as string) + fields + tail))
  }
}

/**
 * The ISO 8601 UTC form of `ms` (what `new Date(ms).toISOString()` gives, for the years 0-9999):
 * the part up to the second is formatted once per second and kept, the milliseconds appended.
 * Every exchange writes a log line, and a cold `toISOString` measured ~7.6 µs of its ~73 µs
 * record in the HTTP worker at 96 streams.
 */
let isoSecond = Number.NaN
let isoPrefix = ''
export function isoAt (ms: number): string {
  const second = Math.floor(ms / 1000)
  if (second !== isoSecond) {
    isoPrefix = new Date(second * 1000).toISOString().slice(0, 20) // 'YYYY-MM-DDTHH:MM:SS.'
    isoSecond = second
  }
  const m = ms - second * 1000
  return isoPrefix + (m < 10 ? '00' : m < 100 ? '0' : '') + m + 'Z'
}

/** pino's `timestamp` option: the line's `"time"` field, as pino.stdTimeFunctions.isoTime writes it. */
export const isoTime = (): string => `,"time":"${isoAt(Date.now())}"`

/** `instanceId` (the config's) goes on every line, so one session can be followed across a fleet. */
export function createLogger (level: string, destination?: pino.DestinationStream, instanceId?: string): Logger {
  const opts: pino.LoggerOptions = {
    level,
    base: { pid: process.pid, service: 'sluice', ...(instanceId === undefined ? {} : { instanceId }) },
    redact: { paths: REDACT_PATHS, censor: CENSOR },
    formatters: {
      log: scrubLogObject,
      bindings: (bindings) => forLog(bindings), // the root's `base`
    },
    // After pino's error serializer (type, message, stack, causes, own properties), not before:
    // a scrubbed copy of an error would no longer be one.
    serializers: { err: (err: unknown) => forLog(pino.stdSerializers.err(err as Error)) },
    // The message string and anything else a formatter did not see: the whole line is capped.
    hooks: { streamWrite: capLine },
    timestamp: isoTime,
  }
  const logger = pino(opts, destination ?? stdoutDestination())
  // pino applies formatters.bindings to the root's own bindings only: a child's bindings are
  // scrubbed here (children inherit this method through their prototype).
  type Child = (this: unknown, bindings: pino.Bindings, options?: unknown) => unknown
  const child = logger.child as unknown as Child
  const scrubbingChild: Child = function (bindings, options) { return child.call(this, forLog(bindings), options) }
  logger.child = scrubbingChild as unknown as Logger['child']
  return logger
}
