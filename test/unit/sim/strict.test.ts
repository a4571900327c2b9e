// startSim({ strict: true }): replayed reasoning is checked as the providers check it, so a
// round trip through a gateway must bring back what the provider issued.
import t from 'tap'
import OpenAI from 'openai'
import Anthropic from '@anthropic-ai/sdk'
import type { MessageParam, Tool } from '@anthropic-ai/sdk/resources/messages'
import { startSim } from '../../../src/sim/index.ts'

const strict = await startSim({ strict: true })
const lax = await startSim()
t.teardown(async () => {
  await strict.close()
  await lax.close()
})
const anthropic = new Anthropic({ baseURL: strict.url, apiKey: 'k', maxRetries: 0 })
const openai = new OpenAI({ baseURL: strict.url + '/v1', apiKey: 'k', maxRetries: 0 })

type Json = Record<string, any>
const tools: Tool[] = [{ name: 'Bash', input_schema: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } }]
const THINKING = { type: 'enabled', budget_tokens: 1024 } as const

t.test('Anthropic: the tool turn replayed with the issued thinking passes; without it, or faked, 400', async t => {
  const first = await anthropic.messages.create({ model: 'm', max_tokens: 2048, thinking: THINKING, tools, messages: [{ role: 'user', content: '#sim tokens=0 call=Bash redacted=1' }] })
  t.same(first.content.map(b => b.type), ['thinking', 'redacted_thinking', 'tool_use'])
  const use = first.content[2]
  const history = (assistant: unknown[]): MessageParam[] => [
    { role: 'user', content: '#sim tokens=0 call=Bash redacted=1' },
    { role: 'assistant', content: assistant as MessageParam['content'] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.type === 'tool_use' ? use.id : '', content: 'sim' }] },
  ]
  const ok = await anthropic.messages.create({ model: 'm', max_tokens: 2048, thinking: THINKING, tools, messages: history(first.content) })
  t.equal(ok.stop_reason, 'end_turn', 'the replay as issued is accepted')

  const refused = async (assistant: unknown[], thinking: unknown = THINKING): Promise<Json | null> => {
    const e = await anthropic.messages.create({ model: 'm', max_tokens: 2048, thinking: thinking as typeof THINKING, tools, messages: history(assistant) }).catch((x: unknown) => x)
    return e instanceof Anthropic.APIError && e.status === 400 ? (e.error as Json) : null
  }
  const dropped = await refused([first.content[2]])
  t.equal(dropped?.error?.type, 'invalid_request_error', 'thinking dropped from the tool turn: refused')
  t.match(dropped?.error?.message, /Expected `thinking` or `redacted_thinking`, but found `tool_use`/)
  const faked = await refused([{ ...first.content[0], signature: 'ZmFrZQ==' }, first.content[1], first.content[2]])
  t.match(faked?.error?.message, /messages\.1\.content\.0: Invalid `signature`/, 'a faked signature: refused')
  const foreign = await refused([first.content[0], { type: 'redacted_thinking', data: 'gAAAAABforeign==' }, first.content[2]])
  t.match(foreign?.error?.message, /messages\.1\.content\.1: Invalid `data`/, "another provider's blob: refused")
  t.equal(await refused([first.content[2]], { type: 'disabled' }), null, 'thinking off: a tool turn without thinking is fine')

  const e = await new Anthropic({ baseURL: lax.url, apiKey: 'k', maxRetries: 0 }).messages.create({ model: 'm', max_tokens: 2048, thinking: THINKING, tools, messages: history([first.content[2]]) })
  t.equal(e.type, 'message', 'without strict the sim checks nothing (as before)')
})

t.test('Responses: issued encrypted_content replays; a foreign one is invalid_encrypted_content', async t => {
  const request = { model: 'gpt-5.5', store: false, include: ['reasoning.encrypted_content' as const], tools: [{ type: 'function' as const, name: 'exec_command', strict: false, parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] } }] }
  const first = await openai.responses.create({ ...request, input: '#sim tokens=0 thinking=2 call=exec_command' })
  const [reasoning, call] = first.output as Json[]
  t.equal(reasoning.type, 'reasoning')
  const replay = (r: Json): Json[] => [
    { role: 'user', content: '#sim tokens=0 thinking=2 call=exec_command' },
    { type: 'reasoning', id: r.id, summary: r.summary, encrypted_content: r.encrypted_content },
    { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
    { type: 'function_call_output', call_id: call.call_id, output: 'sim' },
  ]
  const ok = await openai.responses.create({ ...request, input: replay(reasoning) as any })
  t.equal(ok.status, 'completed')
  const e = await openai.responses.create({ ...request, input: replay({ ...reasoning, encrypted_content: 'gAAAAABforeignBlob==' }) as any }).catch((x: unknown) => x)
  t.ok(e instanceof OpenAI.APIError && e.status === 400 && e.code === 'invalid_encrypted_content', 'refused as the API refuses it')
  t.match(e instanceof OpenAI.APIError ? e.message : '', new RegExp(`item ${reasoning.id} could not be verified`))
  const noBlob = await openai.responses.create({ ...request, input: replay({ ...reasoning, encrypted_content: undefined }) as any })
  t.equal(noBlob.status, 'completed', 'a reasoning item without encrypted_content is not checked')
})
