// Strict structural schemas of the provider request bodies the request encoders produce,
// written from the official SDKs' request types (openai 7.59 `ChatCompletionCreateParams`,
// `ResponseCreateParams`; @anthropic-ai/sdk 1.14 `MessageCreateParams`), narrowed to the fields
// the encoders may write: an unknown field, a wrong type or a misplaced block fails the parse.
import { z } from 'zod'

const json = z.record(z.string(), z.unknown())
const text = z.strictObject({ type: z.literal('text'), text: z.string().min(1) })

// ─── Chat Completions ──────────────────────────────────────────────────────────────────

const chatImage = z.strictObject({ type: z.literal('image_url'), image_url: z.strictObject({ url: z.string(), detail: z.string().optional() }) })
const chatToolCall = z.strictObject({ id: z.string().min(1).max(40), type: z.literal('function'), function: z.strictObject({ name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/), arguments: z.string() }) })
const chatMessage = z.discriminatedUnion('role', [
  z.strictObject({ role: z.literal('system'), content: z.string() }),
  z.strictObject({ role: z.literal('user'), content: z.union([z.string(), z.array(z.union([text, chatImage])).min(1)]) }),
  z.strictObject({ role: z.literal('assistant'), content: z.string().nullable(), tool_calls: z.array(chatToolCall).min(1).optional() }),
  z.strictObject({ role: z.literal('tool'), tool_call_id: z.string().min(1).max(40), content: z.string() }),
])
export const chatRequest = z.strictObject({
  model: z.string(),
  messages: z.array(chatMessage).min(1),
  tools: z.array(z.strictObject({
    type: z.literal('function'),
    function: z.strictObject({ name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/), description: z.string().optional(), parameters: json, strict: z.boolean().optional() }),
  })).min(1).optional(),
  tool_choice: z.union([z.enum(['auto', 'none', 'required']), z.strictObject({ type: z.literal('function'), function: z.strictObject({ name: z.string() }) })]).optional(),
  parallel_tool_calls: z.boolean().optional(),
  max_completion_tokens: z.number().int().positive().optional(),
  temperature: z.number().optional(),
  top_p: z.number().optional(),
  stop: z.array(z.string()).optional(),
  reasoning_effort: z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max']).optional(),
  response_format: z.union([
    z.strictObject({ type: z.literal('json_object') }),
    z.strictObject({ type: z.literal('json_schema'), json_schema: z.strictObject({ name: z.string(), schema: json.optional(), strict: z.boolean().optional() }) }),
  ]).optional(),
  stream: z.boolean(),
  stream_options: z.strictObject({ include_usage: z.literal(true) }).optional(),
})

// ─── Responses ─────────────────────────────────────────────────────────────────────────

const inputText = z.strictObject({ type: z.literal('input_text'), text: z.string() })
const inputImage = z.strictObject({ type: z.literal('input_image'), image_url: z.string(), detail: z.enum(['low', 'high', 'auto', 'original']) })
const responsesItem = z.union([
  z.strictObject({ type: z.literal('message'), role: z.enum(['user', 'system', 'developer']), content: z.array(z.union([inputText, inputImage])).min(1) }),
  z.strictObject({ type: z.literal('message'), role: z.literal('assistant'), content: z.array(z.strictObject({ type: z.literal('output_text'), text: z.string(), annotations: z.array(z.unknown()) })).min(1) }),
  z.strictObject({ type: z.literal('function_call'), call_id: z.string().min(1), name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/), arguments: z.string() }),
  z.strictObject({ type: z.literal('custom_tool_call'), call_id: z.string().min(1), name: z.string(), input: z.string() }),
  z.strictObject({ type: z.literal('function_call_output'), call_id: z.string().min(1), output: z.union([z.string(), z.array(z.union([inputText, inputImage]))]) }),
  z.strictObject({ type: z.literal('custom_tool_call_output'), call_id: z.string().min(1), output: z.union([z.string(), z.array(z.union([inputText, inputImage]))]) }),
  z.strictObject({ type: z.literal('reasoning'), id: z.string().optional(), summary: z.array(z.unknown()), encrypted_content: z.string() }),
])
export const responsesRequest = z.strictObject({
  model: z.string(),
  instructions: z.string().optional(),
  input: z.array(responsesItem),
  tools: z.array(z.union([
    z.strictObject({ type: z.literal('function'), name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/), description: z.string().optional(), parameters: json, strict: z.boolean() }),
    z.strictObject({ type: z.literal('custom'), name: z.string(), description: z.string().optional(), format: json.optional() }),
    z.strictObject({ type: z.literal('web_search'), filters: z.strictObject({ allowed_domains: z.array(z.string()) }).optional() }),
  ])).min(1).optional(),
  tool_choice: z.union([z.enum(['auto', 'none', 'required']), z.strictObject({ type: z.enum(['function', 'custom']), name: z.string() })]).optional(),
  parallel_tool_calls: z.boolean().optional(),
  max_output_tokens: z.number().int().positive().optional(),
  temperature: z.number().optional(),
  top_p: z.number().optional(),
  reasoning: z.strictObject({ effort: z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max']).optional(), summary: z.enum(['auto', 'concise', 'detailed']).optional() }).optional(),
  include: z.array(z.literal('reasoning.encrypted_content')).optional(),
  text: z.strictObject({ format: z.union([
    z.strictObject({ type: z.literal('json_object') }),
    z.strictObject({ type: z.literal('json_schema'), name: z.string(), schema: json.optional(), strict: z.boolean().optional() }),
  ]) }).optional(),
  store: z.literal(false),
  stream: z.boolean(),
})

// ─── Anthropic Messages ────────────────────────────────────────────────────────────────

const anthropicImage = z.strictObject({
  type: z.literal('image'),
  source: z.union([
    z.strictObject({ type: z.literal('base64'), media_type: z.enum(['image/jpeg', 'image/png', 'image/gif', 'image/webp']), data: z.string() }),
    z.strictObject({ type: z.literal('url'), url: z.string().url() }),
  ]),
})
const toolUse = z.strictObject({ type: z.literal('tool_use'), id: z.string().regex(/^[a-zA-Z0-9_-]+$/), name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/), input: json })
const thinking = z.strictObject({ type: z.literal('thinking'), thinking: z.string(), signature: z.string() })
const redacted = z.strictObject({ type: z.literal('redacted_thinking'), data: z.string() })
const toolResult = z.strictObject({
  type: z.literal('tool_result'),
  tool_use_id: z.string().regex(/^[a-zA-Z0-9_-]+$/),
  content: z.union([z.string(), z.array(z.union([text, anthropicImage]))]),
  is_error: z.literal(true).optional(),
})
export const messagesRequest = z.strictObject({
  model: z.string(),
  max_tokens: z.number().int().positive(),
  system: z.array(text).min(1).optional(),
  messages: z.array(z.discriminatedUnion('role', [
    z.strictObject({ role: z.literal('user'), content: z.array(z.union([text, anthropicImage, toolResult])).min(1) }),
    z.strictObject({ role: z.literal('assistant'), content: z.array(z.union([text, toolUse, thinking, redacted])).min(1) }),
    z.strictObject({ role: z.literal('system'), content: z.array(text).min(1) }),
  ])).min(1),
  tools: z.array(z.union([
    z.strictObject({ name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/), description: z.string().optional(), input_schema: json.refine(s => s.type === 'object', 'input_schema.type must be object') }),
    z.strictObject({ type: z.literal('web_search_20250305'), name: z.literal('web_search'), allowed_domains: z.array(z.string()).optional() }),
  ])).min(1).optional(),
  tool_choice: z.union([
    z.strictObject({ type: z.literal('auto'), disable_parallel_tool_use: z.boolean().optional() }),
    z.strictObject({ type: z.literal('any'), disable_parallel_tool_use: z.boolean().optional() }),
    z.strictObject({ type: z.literal('tool'), name: z.string(), disable_parallel_tool_use: z.boolean().optional() }),
    z.strictObject({ type: z.literal('none') }),
  ]).optional(),
  thinking: z.strictObject({ type: z.literal('enabled'), budget_tokens: z.number().int().min(1024) }).optional(),
  temperature: z.number().optional(),
  top_p: z.number().optional(),
  stop_sequences: z.array(z.string()).optional(),
  output_config: z.strictObject({ format: z.strictObject({ type: z.literal('json_schema'), schema: json }) }).optional(),
  stream: z.boolean(),
}).refine(b => b.thinking === undefined || b.thinking.budget_tokens < b.max_tokens, 'thinking.budget_tokens must be below max_tokens')
  .refine(b => b.thinking === undefined || (b.temperature === undefined && b.top_p === undefined), 'no temperature/top_p with thinking')

export const shapes = { 'openai-chat': chatRequest, 'openai-responses': responsesRequest, anthropic: messagesRequest } as const
