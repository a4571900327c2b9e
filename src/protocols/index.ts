// Stream inspection for the three wire protocols.
//
// Per frame (reported by src/sse/framer.ts): classify() decides from bytes alone whether the
// frame can carry a terminal, usage or an error ('inspect'), carries nothing the gateway reads
// ('pass', nearly every frame) or breaks the framing ('malformed'). Only 'inspect' frames are
// decoded, by inspect(), under the parse permit the caller holds around that one call. A
// StreamTracker per exchange turns the results into the verdict (validated terminal, usage,
// the first fatal) and the context a failure tail needs; failureTail() renders the signed
// failure as the client protocol's own error event.

import type { Protocol, ProtocolInspector } from './types.ts'
import { chat } from './chat.ts'
import { responses } from './responses.ts'
import { messages } from './messages.ts'

export type { FrameClass, FrameFacts, Protocol, ProtocolInspector, ProviderErrorFacts, TailContext, TerminalKind, Usage } from './types.ts'
export { chat } from './chat.ts'
export { responses } from './responses.ts'
export { messages } from './messages.ts'
export { tailMessage } from './tail.ts'
export { StreamTracker } from './tracker.ts'
export type { StreamFailure, StreamTerminal, StreamVerdict } from './tracker.ts'
export {
  mapProviderError, parseErrorBody, providerErrorCode, providerErrorFromResponse, providerSluiceError, retryAfterSeconds,
  streamErrorCode,
} from './provider-error.ts'
export type { ProviderErrorInfo } from './provider-error.ts'
export { MAX_RETRY_AFTER_SECONDS } from './provider-error.ts'
export { Scrubber, PROVIDER_FIELD_CAP, PROVIDER_MESSAGE_CAP, REDACTED } from './scrub.ts'

export const inspectors: Readonly<Record<Protocol, ProtocolInspector>> = Object.freeze({
  'openai-chat': chat,
  'openai-responses': responses,
  anthropic: messages,
})

export function inspectorFor (protocol: Protocol): ProtocolInspector {
  return inspectors[protocol]
}
