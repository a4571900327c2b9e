// Reading a request body with a byte cap, every byte reserved against the aggregate budget
// before it is held. The body arrives in one ArrayBuffer sized to it, ready to be
// transferred (not copied) to the parser pool.

import type { IncomingMessage } from 'node:http'
import { SluiceError } from '../src/errors.ts'
import type { Holdings } from './holdings.ts'

export async function readBody (req: IncomingMessage, holdings: Holdings, maxBytes: number, signal: AbortSignal): Promise<Uint8Array> {
  const declared = req.headers['content-length']
  if (declared !== undefined) {
    const n = Number(declared)
    if (!Number.isSafeInteger(n) || n < 0) throw new SluiceError('invalid_request', { header: 'content-length' }, 'invalid Content-Length')
    if (n > maxBytes) throw new SluiceError('payload_too_large', { limit: maxBytes, declared: n })
    holdings.reserve(n)
    const out = new Uint8Array(new ArrayBuffer(n))
    let at = 0
    for await (const chunk of iterate(req, signal)) {
      if (at + chunk.byteLength > n) throw new SluiceError('invalid_request', { header: 'content-length' }, 'the body is longer than its Content-Length')
      out.set(chunk, at)
      at += chunk.byteLength
    }
    if (at !== n) throw new SluiceError('client_closed', { received: at, declared: n })
    return out
  }
  // Chunked: reserve as chunks arrive, then one exact-size copy (reserved too, while both exist).
  const chunks: Buffer[] = []
  let total = 0
  for await (const chunk of iterate(req, signal)) {
    total += chunk.byteLength
    if (total > maxBytes) throw new SluiceError('payload_too_large', { limit: maxBytes })
    holdings.reserve(chunk.byteLength)
    chunks.push(chunk)
  }
  holdings.reserve(total)
  const out = new Uint8Array(new ArrayBuffer(total))
  let at = 0
  for (const c of chunks) { out.set(c, at); at += c.byteLength }
  chunks.length = 0
  holdings.unreserve(total)
  return out
}

async function * iterate (req: IncomingMessage, signal: AbortSignal): AsyncGenerator<Buffer> {
  if (signal.aborted) throw new SluiceError('client_closed')
  try {
    for await (const chunk of req) {
      if (signal.aborted) throw new SluiceError('client_closed')
      yield chunk as Buffer
    }
  } catch (err) {
    if (err instanceof SluiceError) throw err
    throw new SluiceError('client_closed', { cause: (err as { code?: string }).code ?? 'aborted' })
  }
  if (signal.aborted || req.readableAborted) throw new SluiceError('client_closed')
}
