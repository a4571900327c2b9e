// Reasoning envelopes: a provider-issued opaque blob carried through a client of another
// protocol and restored byte-exact when the client sends it back (DESIGN.md "Protocol
// translation", reasoning).
//
//   Anthropic thinking signature / redacted_thinking data  -> Responses reasoning `encrypted_content`
//   OpenAI reasoning `encrypted_content` (+ item id)        -> Anthropic thinking `signature`
//
// The envelope is versioned and names its issuer (`<protocol>:<provider name>`): a client may
// replay a blob to a different provider than the one that issued it (a model switch, another
// route), and a blob is only ever sent back to its issuer. Any other blob is dropped by the
// request encoder, never forwarded. A string that is not an envelope is what the client got
// from a same-protocol provider directly; it is passed through only on same-protocol routes
// (which never decode requests) and dropped here.
//
// Format: `sluice1.` + base64url(JSON { i: issuer, d: data }). base64url keeps it inside
// every field's character set (a signature, an encrypted_content string).

import type { Opaque } from './canonical.ts'

const PREFIX = 'sluice1.'

export function issuerOf (protocol: string, provider: string): string {
  return `${protocol}:${provider}`
}

/** Wraps a provider's opaque reasoning data for a client of another protocol. */
export function wrapOpaque (o: Opaque): string {
  return PREFIX + Buffer.from(JSON.stringify({ i: o.issuer, d: o.data }), 'utf8').toString('base64url')
}

/** The envelope's content, or null when `s` is not one of ours (or is damaged). */
export function unwrapOpaque (s: string): Opaque | null {
  if (typeof s !== 'string' || !s.startsWith(PREFIX)) return null
  try {
    const v = JSON.parse(Buffer.from(s.slice(PREFIX.length), 'base64url').toString('utf8')) as { i?: unknown; d?: unknown }
    if (typeof v.i !== 'string' || typeof v.d !== 'string') return null
    return { issuer: v.i, data: v.d }
  } catch {
    return null
  }
}

/** The blob to send to `issuer`, or null: a blob from anyone else is dropped, never sent. */
export function opaqueFor (o: Opaque | undefined, issuer: string): string | null {
  return o !== undefined && o.issuer === issuer ? o.data : null
}
