// The official openai SDK (7.x) pointed straight at the sim's Responses route.
import t from 'tap'
import OpenAI from 'openai'
import type { FunctionTool, ResponseStreamEvent } from 'openai/resources/responses/responses'
import { startSim } from '../../../src/sim/index.ts'

const sim = await startSim()
t.teardown(() => sim.close())
const client = new OpenAI({ baseURL: sim.url + '/v1', apiKey: 'sk-test', maxRetries: 0 })

const tools: FunctionTool[] = [
  {
    type: 'function',
    name: 'exec_command',
    description: 'Run a command',
    strict: false,
    parameters: { type: 'object', properties: { cmd: { type: 'string' }, workdir: { type: 'string' } }, required: ['cmd'], additionalProperties: false },
  },
  { type: 'function', name: 'list_dir', strict: false, parameters: { type: 'object', properties: { path: { type: 'string' }, depth: { type: 'number' } }, required: [] } },
]

t.test('non-streaming text: output_text, usage, echoed settings', async t => {
  const r = await client.responses.create({ model: 'gpt-5.5', instructions: 'be brief', input: 'hello\n#sim tokens=6' })
  t.equal(r.object, 'response')
  t.equal(r.status, 'completed')
  t.equal(r.instructions, 'be brief')
  t.match(r.output_text, /^[A-Z][a-z]+( [a-z]+){5}$/, 'six words')
  t.equal(r.output.length, 1)
  t.equal(r.output[0].type, 'message')
  t.ok(r.usage && r.usage.output_tokens > 0 && r.usage.input_tokens > 0)
  t.equal(r.usage?.total_tokens, (r.usage?.input_tokens ?? 0) + (r.usage?.output_tokens ?? 0))
})

t.test('stream(): text events in order, contiguous sequence numbers, final response', async t => {
  const stream = client.responses.stream({
    model: 'gpt-5.5',
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'hi' }, { type: 'input_text', text: '#sim tokens=4' }] }],
  })
  const events: ResponseStreamEvent[] = []
  for await (const e of stream) events.push(e)
  const final = await stream.finalResponse()
  t.same(events.map(e => e.sequence_number), events.map((_e, i) => i), 'sequence_number is 0..n-1')
  t.same(
    events.map(e => e.type),
    [
      'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
      'response.output_text.delta', 'response.output_text.delta', 'response.output_text.delta', 'response.output_text.delta',
      'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed',
    ],
  )
  const deltas = events.flatMap(e => (e.type === 'response.output_text.delta' ? [e.delta] : []))
  t.equal(final.output_text, deltas.join(''), 'final text is the deltas')
  t.match(final.output_text, /^[A-Z][a-z]+( [a-z]+){3}$/)
  t.ok(final.usage && final.usage.output_tokens > 0)
})

t.test('stream(): function calls after text, output_index contiguous', async t => {
  const stream = client.responses.stream({ model: 'gpt-5.5', tools, input: 'run it\n#sim tools=2 tokens=1' })
  const events: ResponseStreamEvent[] = []
  for await (const e of stream) events.push(e)
  const final = await stream.finalResponse()
  const added = events.flatMap(e => (e.type === 'response.output_item.added' ? [e.output_index] : []))
  t.same(added, [0, 1, 2], 'output_index 0 (message), 1, 2 (calls)')
  const calls = final.output.flatMap(o => (o.type === 'function_call' ? [o] : []))
  t.same(calls.map(c => c.name), ['exec_command', 'list_dir'])
  const args0 = JSON.parse(calls[0].arguments)
  t.same(Object.keys(args0), ['cmd'], 'required property only')
  t.type(args0.cmd, 'string')
  const args1 = JSON.parse(calls[1].arguments)
  t.same(Object.keys(args1), ['path'], 'first property when none is required')
  for (const c of calls) {
    t.match(c.call_id, /^call_[0-9a-z]{24}$/)
    t.match(c.id, /^fc_[0-9a-z]{24}$/)
    const deltas = events.flatMap(e => (e.type === 'response.function_call_arguments.delta' && e.item_id === c.id ? [e.delta] : []))
    t.ok(deltas.length >= 1)
    t.equal(deltas.join(''), c.arguments, 'deltas add up to the arguments')
  }
})

t.test('non-streaming function call only (tokens=0)', async t => {
  const r = await client.responses.create({ model: 'gpt-5.5', tools, input: [{ role: 'user', content: '#sim tools=1 tokens=0' }] })
  t.equal(r.output.length, 1)
  const item = r.output[0]
  t.equal(item.type, 'function_call')
  if (item.type === 'function_call') {
    t.equal(item.name, 'exec_command')
    t.type(JSON.parse(item.arguments).cmd, 'string')
  }
  t.equal(r.output_text, '')
})

t.test('a function_call_output after the user turn means no directive', async t => {
  const r = await client.responses.create({
    model: 'gpt-5.5',
    tools,
    input: [
      { role: 'user', content: '#sim tools=1 tokens=0' },
      { type: 'function_call', call_id: 'call_a', name: 'exec_command', arguments: '{"cmd":"ls"}' },
      { type: 'function_call_output', call_id: 'call_a', output: 'a b c' },
    ],
  })
  t.same(r.output.map(o => o.type), ['message'])
  t.match(r.output_text, /^[A-Z][a-z]+( [a-z]+){7}$/, 'default eight words')
})

t.test('stream(): thinking=3 gives a reasoning item with summary and encrypted_content first', async t => {
  const stream = client.responses.stream({ model: 'gpt-5.5', reasoning: { effort: 'low', summary: 'auto' }, include: ['reasoning.encrypted_content'], store: false, input: '#sim thinking=3 tokens=2' })
  const events: ResponseStreamEvent[] = []
  for await (const e of stream) events.push(e)
  const final = await stream.finalResponse()
  t.same(final.output.map(o => o.type), ['reasoning', 'message'])
  const reasoning = final.output[0]
  if (reasoning.type === 'reasoning') {
    const deltas = events.flatMap(e => (e.type === 'response.reasoning_summary_text.delta' ? [e.delta] : []))
    t.equal(deltas.length, 3)
    t.equal(reasoning.summary[0]?.text, deltas.join(''))
    t.match(reasoning.encrypted_content, /^Sim[A-Za-z0-9+/=]+$/)
  }
  t.match(final.output_text, /^[A-Z][a-z]+ [a-z]+$/)
  t.same(events.map(e => e.sequence_number), events.map((_e, i) => i))
  const plain = await client.responses.create({ model: 'gpt-5.5', reasoning: { effort: 'low' }, input: '#sim thinking=1' })
  const item = plain.output[0]
  t.ok(item.type === 'reasoning' && item.encrypted_content === undefined, 'no encrypted_content unless included')
})
