// The data-plane routes and the protocol each speaks: one table, used by the HTTP routes, the
// request preparation (src/json/prepare.ts), the exchange and the relay.

import type { Protocol } from '../config/schema.ts'

export type Route = 'chat' | 'responses' | 'messages' | 'count_tokens'

export const ROUTES: readonly Route[] = ['chat', 'responses', 'messages', 'count_tokens']

export const ROUTE_PROTOCOL: Readonly<Record<Route, Protocol>> = {
  chat: 'openai-chat',
  responses: 'openai-responses',
  messages: 'anthropic',
  count_tokens: 'anthropic',
}

export const ROUTE_PATH: Readonly<Record<Route, string>> = {
  chat: '/v1/chat/completions',
  responses: '/v1/responses',
  messages: '/v1/messages',
  count_tokens: '/v1/messages/count_tokens',
}

/** The model route of each protocol (what a translated exchange sends to its provider). */
export const PROTOCOL_ROUTE: Readonly<Record<Protocol, Route>> = {
  'openai-chat': 'chat',
  'openai-responses': 'responses',
  anthropic: 'messages',
}
