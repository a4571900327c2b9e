// Strict mode (`startSim({ strict: true })`): the sim refuses replayed reasoning the way the
// real providers do, so a test can prove a gateway restores what the provider issued.
//
// What a real provider checks and the sim mirrors:
//   Anthropic, thinking enabled: a final assistant message holding tool_use blocks must start
//     with a thinking or redacted_thinking block (400 invalid_request_error).
//   Anthropic: every replayed thinking block carries a signature this sim issued, every
//     redacted_thinking block data it issued (400 "Invalid `signature` in `thinking` block").
//   Responses: every replayed reasoning item's encrypted_content is one this sim issued
//     (400 invalid_encrypted_content, "could not be verified").
// "Issued by this sim" is recognised by form (`Sim` + base64, `SimRedacted` + base64): a
// placeholder, a faked signature or another provider's blob fails, as it would upstream.
// Not per turn: the directive is absent from tool-result turns, where these checks matter.

import { isObject, type SimProtocol } from './directive.ts'

const SIGNATURE = /^Sim[A-Za-z0-9+/]+={0,2}$/
const REDACTED = /^SimRedacted[A-Za-z0-9+/]+={0,2}$/

export interface StrictRefusal {
  readonly status: number
  readonly body: string
}

/** Why a real provider would refuse this request body, or null when it would not. */
export function strictRefusal(protocol: SimProtocol, body: Record<string, unknown>): StrictRefusal | null {
  if (protocol === 'anthropic') return anthropicRefusal(body)
  if (protocol === 'openai-responses') return responsesRefusal(body)
  return null
}

function anthropicError(message: string): StrictRefusal {
  return { status: 400, body: JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message } }) }
}

function anthropicRefusal(body: Record<string, unknown>): StrictRefusal | null {
  const messages = Array.isArray(body.messages) ? (body.messages as unknown[]) : []
  let lastAssistant = -1
  let lastHasToolUse = false
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]
    if (!isObject(m) || m.role !== 'assistant') continue
    lastAssistant = i
    lastHasToolUse = false
    if (!Array.isArray(m.content)) continue
    const blocks = m.content as unknown[]
    for (let j = 0; j < blocks.length; j++) {
      const b = blocks[j]
      if (!isObject(b)) continue
      if (b.type === 'thinking' && !(typeof b.signature === 'string' && SIGNATURE.test(b.signature))) {
        return anthropicError(`messages.${i}.content.${j}: Invalid \`signature\` in \`thinking\` block`)
      }
      if (b.type === 'redacted_thinking' && !(typeof b.data === 'string' && REDACTED.test(b.data))) {
        return anthropicError(`messages.${i}.content.${j}: Invalid \`data\` in \`redacted_thinking\` block`)
      }
      if (b.type === 'tool_use') lastHasToolUse = true
    }
  }
  // Only the final assistant message (the current tool loop) must open with its thinking.
  const thinking = isObject(body.thinking) && (body.thinking.type === 'enabled' || body.thinking.type === 'adaptive')
  if (!thinking || !lastHasToolUse) return null
  const first = ((messages[lastAssistant] as Record<string, unknown>).content as unknown[])[0]
  const kind = isObject(first) ? first.type : undefined
  if (kind === 'thinking' || kind === 'redacted_thinking') return null
  return anthropicError(
    `messages.${lastAssistant}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${String(kind)}\`. ` +
      'When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceding the lastmost set of `tool_use` and `tool_result` blocks). (simulated)',
  )
}

function responsesRefusal(body: Record<string, unknown>): StrictRefusal | null {
  const input = Array.isArray(body.input) ? (body.input as unknown[]) : []
  for (const item of input) {
    if (!isObject(item) || item.type !== 'reasoning' || item.encrypted_content === undefined || item.encrypted_content === null) continue
    if (typeof item.encrypted_content === 'string' && SIGNATURE.test(item.encrypted_content)) continue
    const id = typeof item.id === 'string' ? item.id : 'reasoning'
    return {
      status: 400,
      body: JSON.stringify({ error: { message: `The encrypted content for item ${id} could not be verified. (simulated)`, type: 'invalid_request_error', param: null, code: 'invalid_encrypted_content' } }),
    }
  }
  return null
}
