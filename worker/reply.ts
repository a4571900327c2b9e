// Writing a JSON answer: one place for the headers every JSON reply and refusal carries.

import type { IncomingMessage, ServerResponse } from 'node:http'

export function sendJson (res: ServerResponse, status: number, value: unknown, extra: Record<string, string> = {}): void {
  const text = JSON.stringify(value)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...extra })
  res.end(text)
}

/** A body we never read is not drained: close the connection after the answer instead. */
export function closeIfUnread (req: IncomingMessage | null): Record<string, string> {
  return req && !req.readableEnded ? { connection: 'close' } : {}
}
