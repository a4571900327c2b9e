// Session identity (DESIGN.md "Sessions"): the id comes from the headers, before the body —
// the first present of `x-session-id`, `session-id` (Codex CLI) and
// `x-claude-code-session-id` (Claude Code); the non-blocking routes take it from the path and
// JSON-RPC from its params. Requests without one are not laned.

import type { IncomingMessage } from 'node:http'
import { SluiceError } from '../src/errors.ts'

export const SESSION_HEADERS = ['x-session-id', 'session-id', 'x-claude-code-session-id'] as const

/** Longest session id accepted; a longer one is refused, never truncated (two ids must not merge). */
export const MAX_SESSION_ID = 256

/**
 * The session id of a request, null when it names none; throws invalid_request when
 * malformed or given twice. Node joins a repeated header into one "a, b" string, which would
 * silently make a third session, so a present header is counted in `req.rawHeaders`, which
 * keeps each occurrence (building `req.headersDistinct` for this, an object of every header,
 * was ~10 us of a cold request path).
 */
export function sessionIdOf (req: IncomingMessage): string | null {
  const h = req.headers
  for (const name of SESSION_HEADERS) {
    const v = h[name]
    if (v === undefined) continue
    if (occurrences(req.rawHeaders, name) !== 1 || typeof v !== 'string') throw new SluiceError('invalid_request', { header: name, reason: 'given more than once' }, `the ${name} header is given more than once`)
    return checkSessionId(v, name)
  }
  return null
}

/** How many times the (lower-case) header `name` is in raw [name, value, ...] pairs. */
function occurrences (raw: readonly string[], name: string): number {
  let n = 0
  for (let i = 0; i < raw.length; i += 2) {
    const k = raw[i]
    if (k.length === name.length && k.toLowerCase() === name) n++
  }
  return n
}

/** Validates a session id from any source (header, path, params). */
export function checkSessionId (id: unknown, where: string): string {
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_SESSION_ID || /[\u0000-\u001f\u007f]/.test(id)) {
    throw new SluiceError('invalid_request', { field: where, reason: `a session id is 1 to ${MAX_SESSION_ID} printable characters` }, `invalid session id in ${where}`)
  }
  return id
}
