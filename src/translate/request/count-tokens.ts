// A local token count for `POST /v1/messages/count_tokens` when the model lives on a provider
// of another protocol (Anthropic's own endpoint is not there to ask). It is an estimate, and the
// route says so in a response header.
//
// Tokenizer: gpt-tokenizer's o200k_base (the encoding of current OpenAI models): pure
// JavaScript, no dependencies, its vocabulary ships inside the package (works offline, nothing
// downloaded at run time). Claude's own tokenizer is not published for current models, so for
// an Anthropic-shaped body this is the OpenAI count of the same text. The encoding is loaded on
// first use (its rank table is several MB) so threads that never count never pay for it.
//
// What is counted (decodeMessagesRequest of the body, so the same shapes are refused):
//   every system text, message text, thinking text, tool call (name + arguments), tool result
//   text, tool definition (name + description + JSON of the schema); special-token text is
//   counted as plain text;
//   + MESSAGE_OVERHEAD per message and per system entry (role and delimiters, as OpenAI's chat
//     format does), + TOOL_OVERHEAD per tool;
//   + IMAGE_TOKENS per image (the size is not known without decoding it: 1600 is Anthropic's
//     figure for a ~1.15 megapixel image, the largest that is not downscaled).

import { createRequire } from 'node:module'
import type { Part } from '../canonical.ts'
import { outputText } from './common.ts'
import { decodeMessagesRequest } from './messages.ts'

export const MESSAGE_OVERHEAD = 4
export const TOOL_OVERHEAD = 8
export const IMAGE_TOKENS = 1600

type Count = (text: string, options: { disallowedSpecial: Set<string> }) => number
let count: Count | null = null

function tokens (text: string): number {
  if (text === '') return 0
  if (count === null) {
    const require = createRequire(import.meta.url)
    count = (require('gpt-tokenizer/encoding/o200k_base') as { countTokens: Count }).countTokens
  }
  return count(text, { disallowedSpecial: new Set() })
}

function partTokens (p: Part): number {
  switch (p.type) {
    case 'text': return tokens(p.text)
    case 'image': return IMAGE_TOKENS
    case 'reasoning': return tokens(p.text)
    case 'tool_call': return tokens(p.call.name) + tokens(p.call.arguments)
    case 'tool_result': {
      const images = typeof p.output === 'string' ? 0 : p.output.filter(o => o.type === 'image').length
      return tokens(outputText(p.output)) + images * IMAGE_TOKENS
    }
  }
}

/** `{ input_tokens }` for an Anthropic count_tokens body; refuses what translation refuses. */
export function countTokensEstimate (body: unknown): { input_tokens: number } {
  const req = decodeMessagesRequest({ ...(body as object), model: (body as { model?: unknown } | null)?.model ?? '' })
  let n = 0
  for (const s of req.system) n += MESSAGE_OVERHEAD + tokens(s.text)
  for (const m of req.messages) {
    n += MESSAGE_OVERHEAD
    for (const p of m.parts) n += partTokens(p)
  }
  for (const t of req.tools) {
    n += TOOL_OVERHEAD + tokens(t.name) + tokens(t.description ?? '')
    if (t.parameters !== undefined) n += tokens(JSON.stringify(t.parameters))
  }
  return { input_tokens: n }
}
