// The data inside an Opaque (envelope.ts) for each issuing protocol: one agreed format that the
// stream encoders write (provider answer -> client) and the request encoders read back
// (client replay -> provider). Both sides import these helpers; nothing else builds or parses
// the data string.
//
//   issuer protocol   data (JSON text)                              restored as
//   ───────────────   ───────────────────────────────────────────   ───────────────────────────────────────
//   anthropic         {"t":"thinking","thinking":..,"signature":..}  {type:'thinking', thinking, signature}
//   anthropic         {"t":"redacted","data":..}                    {type:'redacted_thinking', data}
//   openai-responses  {"t":"reasoning","id"?:..,"enc":..}            {type:'reasoning', id?, summary:[], encrypted_content}
//
// The thinking text is kept inside the Anthropic data because Anthropic checks the whole block
// (text and signature) when it comes back: the client's copy of the text (a Responses summary)
// is not trusted to be byte-identical. Every string goes through JSON.stringify/JSON.parse, so
// it comes back byte-exact.

import type { Opaque } from './canonical.ts'

export type AnthropicThinkingBlock =
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'redacted_thinking'; data: string }

export interface OpenaiReasoning { id?: string; encrypted_content: string }

/** The Opaque for an Anthropic thinking or redacted_thinking block issued by `issuer`. */
export function anthropicThinkingOpaque (issuer: string, block: AnthropicThinkingBlock): Opaque {
  const data = block.type === 'thinking'
    ? JSON.stringify({ t: 'thinking', thinking: block.thinking, signature: block.signature })
    : JSON.stringify({ t: 'redacted', data: block.data })
  return { issuer, data }
}

/** The original block, or null when `data` is not one (damaged, or another protocol's). */
export function parseAnthropicThinkingOpaque (data: string): AnthropicThinkingBlock | null {
  const v = parse(data)
  if (v === null) return null
  if (v.t === 'thinking' && typeof v.thinking === 'string' && typeof v.signature === 'string') {
    return { type: 'thinking', thinking: v.thinking, signature: v.signature }
  }
  if (v.t === 'redacted' && typeof v.data === 'string') return { type: 'redacted_thinking', data: v.data }
  return null
}

/** The Opaque for an OpenAI Responses reasoning item's encrypted_content (and its item id). */
export function openaiReasoningOpaque (issuer: string, item: OpenaiReasoning): Opaque {
  const v: Record<string, string> = { t: 'reasoning' }
  if (item.id !== undefined) v.id = item.id
  v.enc = item.encrypted_content
  return { issuer, data: JSON.stringify(v) }
}

export function parseOpenaiReasoningOpaque (data: string): OpenaiReasoning | null {
  const v = parse(data)
  if (v === null || v.t !== 'reasoning' || typeof v.enc !== 'string') return null
  if (v.id !== undefined && typeof v.id !== 'string') return null
  return v.id === undefined ? { encrypted_content: v.enc } : { id: v.id as string, encrypted_content: v.enc }
}

function parse (data: string): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(data)
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? v as Record<string, unknown> : null
  } catch {
    return null
  }
}
