// The signed failure record: what the gateway attests when it ends a stream with a failure.
//
// The signature is HMAC-SHA256 (hex) over a canonical serialisation of the record:
//
//   "sluice-failure-record/v1\n" + canonicalJson(record)
//
// canonicalJson is JSON with object keys in ascending code-unit order at every depth, no
// whitespace, keys whose value is `undefined` left out, and only finite numbers (anything
// else throws). A verifier that receives the record as JSON (the `sluice.record` field of a
// failure tail) reproduces the same bytes with the same rule, whatever key order it arrived
// in. The prefix keeps a signature from being valid for any other use of the same key.

import { createHmac, timingSafeEqual } from 'node:crypto'
import { catalogue, type ErrorCode, type Side } from '../errors.ts'

export interface TokenUsage {
  inputTokens?: number
  outputTokens?: number
  totalTokens?: number
}

export interface FailureRecord {
  code: ErrorCode
  side: Side
  /** Human message: the catalogue message, possibly with a specific reason. No content. */
  message: string
  exchangeId: string
  /** The run identity (x-sluice-run-id / traceparent), null when the request had none. */
  runId: string | null
  /** The provider's configured name. */
  provider: string
  model: string
  /** ISO 8601 time of the failure. */
  at: string
  /** Frames and bytes delivered to the client before the tail. */
  framesRelayed: number
  bytesRelayed: number
  /** Usage from the frames the gateway admitted, null when none was read. */
  usage: TokenUsage | null
  /** True when the usage is not final (the stream failed before its terminal). */
  partial: boolean
}

const DOMAIN = 'sluice-failure-record/v1\n'

/** Builds a record, taking `side` from the catalogue and `at` from the clock unless given. */
export function buildFailureRecord (fields: Omit<FailureRecord, 'side' | 'at' | 'message'> & { message?: string; at?: string | Date }): FailureRecord {
  const at = fields.at instanceof Date ? fields.at.toISOString() : fields.at ?? new Date().toISOString()
  return {
    code: fields.code,
    side: catalogue[fields.code].side,
    message: fields.message ?? catalogue[fields.code].message,
    exchangeId: fields.exchangeId,
    runId: fields.runId,
    provider: fields.provider,
    model: fields.model,
    at,
    framesRelayed: fields.framesRelayed,
    bytesRelayed: fields.bytesRelayed,
    usage: fields.usage,
    partial: fields.partial,
  }
}

/** JSON with sorted keys at every depth and no whitespace (see the file header). */
export function canonicalJson (value: unknown): string {
  if (value === null) return 'null'
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value)
    case 'boolean':
      return value ? 'true' : 'false'
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError('canonicalJson: numbers must be finite')
      return JSON.stringify(value)
    case 'object': {
      if (Array.isArray(value)) return '[' + value.map(v => canonicalJson(v === undefined ? null : v)).join(',') + ']'
      const obj = value as Record<string, unknown>
      const keys = Object.keys(obj).filter(k => obj[k] !== undefined).sort()
      return '{' + keys.map(k => JSON.stringify(k) + ':' + canonicalJson(obj[k])).join(',') + '}'
    }
    default:
      throw new TypeError(`canonicalJson: cannot serialise a ${typeof value}`)
  }
}

function mac (record: FailureRecord, key: Buffer): Buffer {
  return createHmac('sha256', key).update(DOMAIN).update(canonicalJson(record)).digest()
}

/** HMAC-SHA256 over the canonical record, lowercase hex (64 characters). */
export function signRecord (record: FailureRecord, key: Buffer): string {
  if (key.length === 0) throw new RangeError('signRecord: empty key')
  return mac(record, key).toString('hex')
}

/** Timing-safe check of a signature from signRecord. False for any malformed input. */
export function verifyRecord (record: FailureRecord, signature: string, key: Buffer): boolean {
  if (typeof signature !== 'string' || !/^[0-9a-f]{64}$/.test(signature) || key.length === 0) return false
  let expected: Buffer
  try {
    expected = mac(record, key)
  } catch {
    return false
  }
  return timingSafeEqual(expected, Buffer.from(signature, 'hex'))
}

/** Signs failure records with one key (the worker's copy of the signing key). */
export class Signer {
  private readonly key: Buffer
  constructor (key: Buffer) {
    if (key.length === 0) throw new RangeError('empty signing key')
    this.key = key
  }

  sign (record: FailureRecord): string { return signRecord(record, this.key) }
}
