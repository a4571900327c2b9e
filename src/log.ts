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

import pino, { type Logger } from 'pino'

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

/** Beyond this depth a logged value is cut (it could not be checked). */
const MAX_DEPTH = 8

/**
 * `value` with every property named in SECRET_KEYS replaced by CENSOR, at any depth; the same
 * reference when there was nothing to replace. Typed arrays, Maps, Sets and objects with
 * `toJSON` are left alone (they serialise without their own enumerable properties).
 */
export function scrubSecrets<T> (value: T): T {
  return scrub(value, 0) as T
}

function scrub (value: unknown, depth: number): unknown {
  if (value === null || typeof value !== 'object') return value
  if (ArrayBuffer.isView(value) || value instanceof Map || value instanceof Set || typeof (value as { toJSON?: unknown }).toJSON === 'function') return value
  if (depth >= MAX_DEPTH) return '[too deep]'
  if (Array.isArray(value)) {
    let out: unknown[] | null = null
    for (let i = 0; i < value.length; i++) {
      const v = scrub(value[i], depth + 1)
      if (v !== value[i]) (out ??= value.slice())[i] = v
    }
    return out ?? value
  }
  const obj = value as Record<string, unknown>
  let out: Record<string, unknown> | null = null
  for (const k in obj) {
    if (!Object.hasOwn(obj, k)) continue
    const v = obj[k]
    const next = isSecretKey(k) ? CENSOR : scrub(v, depth + 1)
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

/** The merging object of a log call: scrubbed, except `err`, which its serializer scrubs. */
function scrubLogObject (obj: Record<string, unknown>): Record<string, unknown> {
  if (!('err' in obj)) return scrubSecrets(obj)
  const { err, ...rest } = obj
  const scrubbed = scrubSecrets(rest)
  return scrubbed === rest ? obj : { ...scrubbed, err }
}

/**
 * A logger for a worker thread. It writes to fd 1 itself, asynchronously: a worker's
 * `process.stdout` would relay every line through the main thread over a MessagePort (one
 * message per exchange log line, on the primary's event loop), and a synchronous write would
 * stall the relay on a slow stdout.
 */
export function createThreadLogger (level: string, instanceId?: string): Logger {
  return createLogger(level, pino.destination({ dest: 1, sync: false }), instanceId)
}

/** `instanceId` (the config's) goes on every line, so one session can be followed across a fleet. */
export function createLogger (level: string, destination?: pino.DestinationStream, instanceId?: string): Logger {
  const opts: pino.LoggerOptions = {
    level,
    base: { pid: process.pid, service: 'sluice', ...(instanceId === undefined ? {} : { instanceId }) },
    redact: { paths: REDACT_PATHS, censor: CENSOR },
    formatters: {
      log: scrubLogObject,
      bindings: (bindings) => scrubSecrets(bindings), // the root's `base`
    },
    // After pino's error serializer (type, message, stack, causes, own properties), not before:
    // a scrubbed copy of an error would no longer be one.
    serializers: { err: (err: unknown) => scrubSecrets(pino.stdSerializers.err(err as Error)) },
    timestamp: pino.stdTimeFunctions.isoTime,
  }
  const logger = destination ? pino(opts, destination) : pino(opts)
  // pino applies formatters.bindings to the root's own bindings only: a child's bindings are
  // scrubbed here (children inherit this method through their prototype).
  type Child = (this: unknown, bindings: pino.Bindings, options?: unknown) => unknown
  const child = logger.child as unknown as Child
  const scrubbingChild: Child = function (bindings, options) { return child.call(this, scrubSecrets(bindings), options) }
  logger.child = scrubbingChild as unknown as Logger['child']
  return logger
}
