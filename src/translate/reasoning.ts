// The opaque reasoning data each provider family issues, as the `data` of an `Opaque`
// (canonical.ts) — what a request encoder must send back to that provider byte-exact:
//
//   Anthropic thinking            JSON {"thinking": "<the thinking text>", "signature": "<sig>"}
//   Anthropic redacted_thinking   JSON {"redacted": "<data>"}
//   OpenAI reasoning item         JSON {"id": "rs_...", "encrypted_content": "..."}
//
// Anthropic verifies a signature against its thinking text, so the text travels with it: a
// client of another protocol may show or send back the text differently (as a summary), and
// the replay must not depend on that. The envelope around it (issuer, version) is envelope.ts.

export type AnthropicThinking = { thinking: string; signature: string } | { redacted: string }

export interface OpenaiReasoning { id: string; encrypted_content: string }

export function anthropicThinkingOpaque (block: AnthropicThinking): string {
  return 'redacted' in block
    ? JSON.stringify({ redacted: block.redacted })
    : JSON.stringify({ thinking: block.thinking, signature: block.signature })
}

/** The block back from anthropicThinkingOpaque's data; null when `data` is not one. */
export function parseAnthropicThinkingOpaque (data: string): AnthropicThinking | null {
  const v = parse(data)
  if (v === null) return null
  if (typeof v.redacted === 'string') return { redacted: v.redacted }
  if (typeof v.thinking === 'string' && typeof v.signature === 'string') return { thinking: v.thinking, signature: v.signature }
  return null
}

export function openaiReasoningOpaque (item: OpenaiReasoning): string {
  return JSON.stringify({ id: item.id, encrypted_content: item.encrypted_content })
}

/** The item back from openaiReasoningOpaque's data; null when `data` is not one. */
export function parseOpenaiReasoningOpaque (data: string): OpenaiReasoning | null {
  const v = parse(data)
  if (v === null || typeof v.id !== 'string' || typeof v.encrypted_content !== 'string') return null
  return { id: v.id, encrypted_content: v.encrypted_content }
}

function parse (data: string): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(data)
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? v as Record<string, unknown> : null
  } catch {
    return null
  }
}
