// sluice/client — the client SDK for a sluice gateway's sessions (README.md beside this file).
//
// A SluiceClient hands out one SluiceSession per session id. A session keeps the SDK's local
// count of pending prompts (an early-failure guard; the gateway's session lane is the
// authority) and offers a bound `fetch` for the official OpenAI / Anthropic SDKs, blocking
// prompt(), non-blocking submit() followed on the session event stream, events() and cancel().

export { SluiceClient, normaliseLimit, DEFAULT_MAX_PENDING_PROMPTS_PER_SESSION, DEFAULT_EVENT_STREAM_RETRIES } from './client.ts'
export type { SluiceClientOptions, ConnectOptions, Capabilities } from './client.ts'
export { SluiceSession, ROUTE_PATHS } from './session.ts'
export type { Route, PromptOptions, SubmitOptions, EventsOptions, Submitted } from './session.ts'
export type { TurnResult } from './watch.ts'
export type { SessionEvent, TurnStartedEvent, TurnProgressEvent, TurnCompleteEvent, TurnErrorEvent, ReplayGapEvent, UnknownSessionEvent } from './events.ts'
export { PendingPromptLimitError, SluiceRequestError, SluiceTurnError, SluiceStreamError, SluiceResponseError } from './errors.ts'
export type { SluiceErrorBody, StreamErrorCode } from './errors.ts'
export { SseParser } from './sse.ts'
export type { SseEvent } from './sse.ts'
