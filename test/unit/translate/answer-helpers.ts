// Shared by the answer-*.test.ts files: the request summaries of real client captures
// (../shared/fixtures/clients) translated for a provider, and a few provider answers.
import { readFileSync } from 'node:fs'
import { SluiceError, type ErrorCode } from '../../../src/errors.ts'
import { CountingBudget, type Protocol } from '../../../src/translate/canonical.ts'
import { translateRequest } from '../../../src/translate/request/index.ts'
import { errorDetails, translateJson, type TranslateLimits } from '../../../src/translate/stream/index.ts'
import { requestOf, summarise, type RequestSummary } from '../../../src/translate/summary.ts'

export type Json = Record<string, any>

const dir = new URL('../../../../shared/fixtures/clients/', import.meta.url)

export function capture (file: string): Json {
  return JSON.parse(readFileSync(new URL(file, dir), 'utf8')).body as Json
}

export function clientOf (file: string): Protocol {
  return file.includes('chat_completions') ? 'openai-chat' : file.includes('v1_responses') ? 'openai-responses' : 'anthropic'
}

/** The summary the pool hands back for `file` translated for a `to` provider. */
export function summaryFor (file: string, to: Protocol): RequestSummary {
  const raw = capture(file)
  const { request } = translateRequest({ from: clientOf(file), to, body: structuredClone(raw), model: 'provider-model', issuer: `${to}:prov` })
  return summarise(request, raw)
}

/** The wire name the provider was given for the client's tool. */
export function wireOf (s: RequestSummary, name: string, namespace?: string): string {
  const t = s.tools.find(x => x.name === name && x.namespace === namespace)
  if (t === undefined) throw new Error(`no tool ${namespace ?? ''}/${name} in the summary`)
  return t.wireName
}

export const LIMITS = { maxOutputItems: 256, maxOutputBytes: 8 * 1024 * 1024 }

export const CHAT_FILE = 'sdk-openai7-01-POST-v1_chat_completions.json'
export const RESPONSES_FILE = 'sdk-openai7-04-POST-v1_responses.json'
export const MESSAGES_FILE = 'sdk-anthropic-01-POST-v1_messages.json'
export const CLIENT_FILE: Record<Protocol, string> = { 'openai-chat': CHAT_FILE, 'openai-responses': RESPONSES_FILE, anthropic: MESSAGES_FILE }

/** One answer per provider: reasoning, then text, stopped normally, with cached and reasoning usage. */
export const TEXT_ANSWERS: Record<Protocol, Json> = {
  'openai-chat': {
    id: 'chatcmpl-abc123',
    object: 'chat.completion',
    created: 1_764_000_000,
    model: 'provider-model',
    choices: [{ index: 0, message: { role: 'assistant', content: 'Hello there.', reasoning_content: 'The user greets me.', refusal: null }, logprobs: null, finish_reason: 'stop' }],
    usage: { prompt_tokens: 450, completion_tokens: 20, total_tokens: 470, prompt_tokens_details: { cached_tokens: 300 }, completion_tokens_details: { reasoning_tokens: 7 } },
  },
  'openai-responses': {
    id: 'resp_abc123',
    object: 'response',
    created_at: 1_764_000_000,
    status: 'completed',
    model: 'provider-model',
    output: [
      { id: 'rs_1', type: 'reasoning', summary: [{ type: 'summary_text', text: 'The user greets me.' }], encrypted_content: 'gAAAAB-enc+/=' },
      { id: 'msg_1', type: 'message', status: 'completed', role: 'assistant', content: [{ type: 'output_text', annotations: [], text: 'Hello there.' }] },
    ],
    usage: { input_tokens: 450, input_tokens_details: { cached_tokens: 300 }, output_tokens: 20, output_tokens_details: { reasoning_tokens: 7 }, total_tokens: 470 },
  },
  anthropic: {
    id: 'msg_abc123',
    type: 'message',
    role: 'assistant',
    model: 'provider-model',
    content: [
      { type: 'thinking', thinking: 'The user greets me.', signature: 'EqQBCkgIARAB+sig/==' },
      { type: 'text', text: 'Hello there.' },
    ],
    stop_reason: 'end_turn',
    stop_sequence: null,
    usage: { input_tokens: 100, cache_read_input_tokens: 300, cache_creation_input_tokens: 50, output_tokens: 20 },
  },
}

/**
 * A provider's JSON answer translated as the parser pool's answer task does it (src/json/answer.ts):
 * translateJson over requestOf(summary), a CountingBudget capped at maxOutputBytes. Returns the
 * client's answer, or throws the refusal as a SluiceError; throws as well when the budget is not
 * back at idle afterwards (in either case).
 */
export function translateAnswer (from: Protocol, to: Protocol, answer: unknown, ctx: { request: RequestSummary; issuer: string; limits: TranslateLimits }): Json {
  const budget = new CountingBudget(ctx.limits.maxOutputBytes)
  const r = translateJson({ from, to, request: requestOf(ctx.request), budget, issuer: ctx.issuer, limits: ctx.limits, answer })
  if (!budget.idle) throw new Error(`translation budget not idle after the answer: ${JSON.stringify(budget.held)}`)
  if (!r.ok) throw new SluiceError(r.error.code as ErrorCode, errorDetails(r.error), r.error.message)
  return r.body
}
