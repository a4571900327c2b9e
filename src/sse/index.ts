// SSE framing (bytes only) and the signed failure record.
export { SseFramer, DEFAULT_MAX_FRAME_BYTES } from './framer.ts'
export type { FramerHandler, SseFramerOptions } from './framer.ts'
export { shapeOf, shape, readFrame, bytesEqual } from './fields.ts'
export type { ParsedFrame } from './fields.ts'
export { signRecord, verifyRecord, canonicalJson, buildFailureRecord } from './sign.ts'
export type { FailureRecord, TokenUsage } from './sign.ts'
