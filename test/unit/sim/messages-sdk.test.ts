// The official @anthropic-ai/sdk (1.14) pointed straight at the sim's Messages route.
import t from 'tap'
import Anthropic from '@anthropic-ai/sdk'
import type { MessageStreamEvent, Tool } from '@anthropic-ai/sdk/resources/messages'
import { startSim, type SimRequestEvent } from '../../../src/sim/index.ts'

const sim = await startSim()
t.teardown(() => sim.close())
const client = new Anthropic({ baseURL: sim.url, apiKey: 'sk-ant-test', maxRetries: 0 })

const tools: Tool[] = [
  { name: 'Bash', description: 'Run a shell command', input_schema: { type: 'object', properties: { command: { type: 'string' }, timeout: { type: 'number' } }, required: ['command'] } },
  { name: 'Read', input_schema: { type: 'object', properties: { file_path: { type: 'string' } }, required: ['file_path'] } },
]

t.test('non-streaming text with usage', async t => {
  const m = await client.messages.create({ model: 'claude-opus-5-5', max_tokens: 100, system: 'be brief', messages: [{ role: 'user', content: 'hi\n#sim tokens=3' }] })
  t.equal(m.type, 'message')
  t.equal(m.role, 'assistant')
  t.equal(m.model, 'claude-opus-5-5')
  t.equal(m.stop_reason, 'end_turn')
  t.equal(m.content.length, 1)
  const block = m.content[0]
  t.equal(block.type, 'text')
  if (block.type === 'text') t.match(block.text, /^[A-Z][a-z]+( [a-z]+){2}$/)
  t.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0)
})

t.test('stream(): text then tool_use blocks, assembled by the SDK', async t => {
  const stream = client.messages.stream({ model: 'claude-opus-5-5', max_tokens: 100, tools, messages: [{ role: 'user', content: [{ type: 'text', text: 'list files' }, { type: 'text', text: '#sim tokens=2 tools=2' }] }] })
  const events: MessageStreamEvent[] = []
  stream.on('streamEvent', e => events.push(e))
  const m = await stream.finalMessage()
  t.equal(events[0].type, 'message_start')
  t.equal(events.filter(e => e.type === 'message_start').length, 1)
  t.equal(events[events.length - 1].type, 'message_stop')
  t.equal(m.stop_reason, 'tool_use')
  t.same(m.content.map(b => b.type), ['text', 'tool_use', 'tool_use'])
  const text = m.content[0]
  if (text.type === 'text') t.match(text.text, /^[A-Z][a-z]+ [a-z]+$/)
  const uses = m.content.flatMap(b => (b.type === 'tool_use' ? [b] : []))
  t.same(uses.map(u => u.name), ['Bash', 'Read'])
  t.type((uses[0].input as { command: unknown }).command, 'string')
  t.type((uses[1].input as { file_path: unknown }).file_path, 'string')
  for (const u of uses) t.match(u.id, /^toolu_[0-9a-z]{24}$/)
  const delta = events.find(e => e.type === 'message_delta')
  t.ok(delta && delta.type === 'message_delta' && delta.usage.output_tokens > 0, 'usage on message_delta')
  t.equal(m.usage.output_tokens, delta && delta.type === 'message_delta' ? delta.usage.output_tokens : -1)
})

t.test('create({stream:true}) raw events: starts before deltas, stops after', async t => {
  const stream = await client.messages.create({ model: 'claude-opus-5-5', max_tokens: 100, stream: true, messages: [{ role: 'user', content: '#sim tokens=3 tools=1' }] })
  const open = new Set<number>()
  const closed = new Set<number>()
  let ok = true
  for await (const e of stream) {
    if (e.type === 'content_block_start') open.add(e.index)
    if (e.type === 'content_block_delta' && (!open.has(e.index) || closed.has(e.index))) ok = false
    if (e.type === 'content_block_stop') closed.add(e.index)
  }
  t.ok(ok, 'every delta inside its block')
  t.same([...open], [0, 1])
  t.same([...closed], [0, 1])
})

t.test('beta route with ?beta=true and count_tokens', async t => {
  const seen: SimRequestEvent[] = []
  const onRequest = (e: SimRequestEvent): void => {
    seen.push(e)
  }
  sim.events.on('request', onRequest)
  t.teardown(() => sim.events.off('request', onRequest))
  const m = await client.beta.messages.create({ model: 'claude-opus-5-5', max_tokens: 10, messages: [{ role: 'user', content: '#sim tokens=1' }] })
  t.equal(m.content.length, 1)
  const count = await client.messages.countTokens({ model: 'claude-opus-5-5', messages: [{ role: 'user', content: 'how many tokens is this?' }] })
  t.ok(count.input_tokens > 0)
  t.same(seen.map(e => e.endpoint), ['messages', 'messages.count_tokens'])
  t.equal(seen[0].path, '/v1/messages', 'query string ignored')
  t.equal(seen[0].apiKey, 'sk-ant-test')
})

t.test('a tool_result turn carries no directive', async t => {
  const m = await client.messages.create({
    model: 'claude-opus-5-5',
    max_tokens: 100,
    tools,
    messages: [
      { role: 'user', content: '#sim tools=1 tokens=0' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'Bash', input: { command: 'ls' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'a b' }] },
    ],
  })
  t.equal(m.stop_reason, 'end_turn')
  t.same(m.content.map(b => b.type), ['text'])
})

t.test('models.list() accepts the shared model list', async t => {
  const ids: string[] = []
  for await (const model of client.models.list()) ids.push(model.id)
  t.ok(ids.length > 0)
  t.ok(ids.includes('sim-model'))
})

t.test('thinking enabled: a thinking block with a signature comes first; thinking=0 turns it off', async t => {
  const stream = client.messages.stream({ model: 'claude-opus-5-5', max_tokens: 1024, thinking: { type: 'enabled', budget_tokens: 512 }, tools, messages: [{ role: 'user', content: '#sim tokens=2 tools=1' }] })
  const m = await stream.finalMessage()
  t.same(m.content.map(b => b.type), ['thinking', 'text', 'tool_use'])
  const th = m.content[0]
  if (th.type === 'thinking') {
    t.match(th.thinking, /^[A-Z][a-z]+ [a-z]+$/, 'two thinking deltas by default')
    t.match(th.signature, /^Sim[A-Za-z0-9+/=]+$/)
  }
  const off = await client.messages.create({ model: 'claude-opus-5-5', max_tokens: 1024, thinking: { type: 'enabled', budget_tokens: 512 }, messages: [{ role: 'user', content: '#sim thinking=0' }] })
  t.same(off.content.map(b => b.type), ['text'])
  const many = await client.messages.create({ model: 'claude-opus-5-5', max_tokens: 1024, messages: [{ role: 'user', content: '#sim thinking=5 tokens=1' }] })
  const first = many.content[0]
  t.ok(first.type === 'thinking' && first.thinking.split(' ').length === 5, 'thinking=5 without the request asking')
})
