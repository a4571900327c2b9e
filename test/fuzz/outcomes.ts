// What every fuzzed exchange must end as, and the gateway-level checks after each case.
//
// A refusal: `{ code, error, ...details }` with a catalogued code and that code's HTTP status
// (a provider_error may carry the provider's own 4xx/5xx instead), JSON content type, never
// internal_error. A JSON-RPC failure: HTTP 200, `error.data.errorKind` catalogued. After each
// case the ledger is idle and no worker has exited.

import { catalogue, isErrorCode } from '../../src/errors.ts'
import { waitIdle, type Gateway } from '../helpers/gateway.ts'
import { findSluice } from './tails.ts'
import type { FailureRecord } from '../../src/sse/sign.ts'
import { verifyRecord } from '../../src/sse/sign.ts'

export interface HttpOutcome {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: Buffer
}

/** Throws unless `o` is a refusal in the catalogue's shape; returns its code. */
export function checkRefusal (o: HttpOutcome, what: string): string {
  const text = o.body.toString('utf8')
  let j: Record<string, unknown>
  try {
    j = JSON.parse(text) as Record<string, unknown>
  } catch {
    throw new Error(`${what}: status ${o.status} with a body that is not JSON: ${JSON.stringify(text.slice(0, 200))}`)
  }
  const code = j.code
  if (!isErrorCode(code)) throw new Error(`${what}: uncatalogued code ${JSON.stringify(code)} in ${text.slice(0, 200)}`)
  if (code === 'internal_error') throw new Error(`${what}: internal_error: ${text.slice(0, 300)}`)
  if (typeof j.error !== 'string' || j.error.length === 0) throw new Error(`${what}: refusal without an error message: ${text.slice(0, 200)}`)
  const ct = o.headers['content-type']
  if (typeof ct !== 'string' || !ct.startsWith('application/json')) throw new Error(`${what}: refusal with content-type ${String(ct)}`)
  const want = catalogue[code].status
  const passedThrough = code === 'provider_error' && o.status >= 400 && o.status <= 599
  if (o.status !== want && !passedThrough) throw new Error(`${what}: ${code} answered with ${o.status}, the catalogue says ${want}`)
  return code
}

/** A JSON-RPC answer: a result, or an error whose data.errorKind is catalogued. */
export function checkRpc (o: HttpOutcome, what: string): string {
  if (o.status !== 200) return checkRefusal(o, what)
  let j: Record<string, unknown>
  try {
    j = JSON.parse(o.body.toString('utf8')) as Record<string, unknown>
  } catch {
    throw new Error(`${what}: JSON-RPC answer that is not JSON`)
  }
  if (j.jsonrpc !== '2.0') throw new Error(`${what}: not a JSON-RPC answer: ${o.body.toString().slice(0, 200)}`)
  if ('result' in j) return 'ok'
  const e = j.error as { code?: unknown; data?: { errorKind?: unknown } } | undefined
  const kind = e?.data?.errorKind
  if (typeof e?.code !== 'number' || !isErrorCode(kind) || kind === 'internal_error') throw new Error(`${what}: JSON-RPC error without a catalogued errorKind: ${o.body.toString().slice(0, 300)}`)
  return kind
}

/** A signed failure tail's record, checked: signature, catalogued code, this exchange. */
export function checkTailRecord (json: unknown, key: string, exchangeId: string | undefined, what: string): FailureRecord {
  const s = findSluice(json)
  if (s === null) throw new Error(`${what}: no sluice record`)
  if (!verifyRecord(s.record, s.signature, Buffer.from(key))) throw new Error(`${what}: the tail's signature does not verify`)
  if (!isErrorCode(s.record.code) || s.record.code === 'internal_error') throw new Error(`${what}: tail code ${s.record.code}`)
  if (exchangeId !== undefined && s.record.exchangeId !== exchangeId) throw new Error(`${what}: tail for exchange ${s.record.exchangeId}, not ${exchangeId}`)
  return s.record
}

/** After a case: the ledger is idle, and no worker exited since the gateway started. */
export async function checkGatewayAfterCase (gw: Gateway, what: string): Promise<void> {
  const bad = await waitIdle(gw)
  if (Object.keys(bad).length > 0) throw new Error(`${what}: the ledger is not idle: ${JSON.stringify(bad)}`)
  const exited = gw.logs.find((l) => l.includes('"worker exited"'))
  if (exited !== undefined) throw new Error(`${what}: a worker exited: ${exited.slice(0, 400)}`)
  if (gw.proc.exitCode !== null || gw.proc.signalCode !== null) throw new Error(`${what}: the gateway process is gone`)
}

/** Worker restarts counted by /metrics (the property's closing check). */
export async function workerRestarts (gw: Gateway): Promise<number> {
  let n = 0
  for (const [k, v] of await gw.metrics()) if (k.startsWith('sluice_worker_restarts_total')) n += v
  return n
}

/** Lines the gateway logged at error level or above (pino: 50 error, 60 fatal). */
export function errorLogs (gw: Gateway): string[] {
  return gw.logs.filter((l) => /"level":(5\d|6\d)\b/.test(l))
}
