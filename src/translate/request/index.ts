// Request translation: one client body -> the canonical request -> one provider body.
// Pure (no I/O): it runs in the parser pool under the parse permit, like any parsing.
//
//   translateRequest({ from, to, body, model, issuer })
//     from   the client's protocol (the route it called)
//     to     the provider's protocol
//     model  the provider's own model name (what goes in the provider body)
//     issuer issuerOf(to, provider name): only reasoning envelopes from it are restored
//     reasoning  false when the provider's model takes no reasoning parameters (default true)
//   -> { body, request }: request.droppedTools lists hosted tools left out (header, log, trace)
//
// Refusals are SluiceErrors with catalogue codes: invalid_request (400, naming the field) for a
// body that cannot be translated faithfully; internal_error for a same-protocol call (those
// routes are the byte-exact relay and never come here).

import { SluiceError } from '../../errors.ts'
import type { CanonicalRequest, Protocol } from '../canonical.ts'
import { toolLookup } from '../names.ts'
import { decodeChatRequest, encodeChatRequest } from './chat.ts'
import type { EncodeContext, Json } from './common.ts'
import { decodeMessagesRequest, encodeMessagesRequest } from './messages.ts'
import { decodeResponsesRequest, encodeResponsesRequest } from './responses.ts'

export { countTokensEstimate } from './count-tokens.ts'
export type { EncodeContext } from './common.ts'

const decoders: Record<Protocol, (body: unknown) => CanonicalRequest> = {
  'openai-chat': decodeChatRequest,
  'openai-responses': decodeResponsesRequest,
  anthropic: decodeMessagesRequest,
}

const encoders: Record<Protocol, (req: CanonicalRequest, ctx: EncodeContext) => Json> = {
  'openai-chat': encodeChatRequest,
  'openai-responses': encodeResponsesRequest,
  anthropic: encodeMessagesRequest,
}

export interface TranslateRequestInput {
  from: Protocol
  to: Protocol
  body: unknown
  model: string
  issuer: string
  /** The provider's model takes reasoning parameters (default true; see EncodeContext). */
  reasoning?: boolean
}

export function decodeRequest (from: Protocol, body: unknown): CanonicalRequest {
  const req = decoders[from](body)
  const lookup = toolLookup(req.tools) // refuses colliding wire names before anything is sent
  const choice = req.toolChoice
  if (choice?.type === 'tool' && !lookup.has(choice.wireName)) {
    throw new SluiceError('invalid_request', { field: 'tool_choice' }, `tool_choice: names a tool the request does not declare ("${choice.wireName}")`)
  }
  return req
}

export function translateRequest (input: TranslateRequestInput): { body: Json; request: CanonicalRequest } {
  if (input.from === input.to) {
    throw new SluiceError('internal_error', { from: input.from, to: input.to }, 'a same-protocol route is relayed byte-exact, never translated')
  }
  const request = decodeRequest(input.from, input.body)
  const ctx: EncodeContext = { model: input.model, issuer: input.issuer, stream: request.stream }
  if (input.reasoning !== undefined) ctx.reasoning = input.reasoning
  const body = encoders[input.to](request, ctx)
  return { body, request }
}
