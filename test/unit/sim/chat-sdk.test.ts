// The official openai SDK (7.x) pointed straight at the sim's Chat Completions route.
import t from 'tap'
import OpenAI from 'openai'
import type { ChatCompletionChunk, ChatCompletionTool } from 'openai/resources/chat/completions'
import { startSim } from '../../../src/sim/index.ts'

const sim = await startSim()
t.teardown(() => sim.close())
const client = new OpenAI({ baseURL: sim.url + '/v1', apiKey: 'sk-test', maxRetries: 0 })

const tools: ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'lookup_order',
      description: 'Find an order',
      parameters: {
        type: 'object',
        properties: { order_id: { type: 'string' }, verbose: { type: 'boolean' }, note: { type: 'string' } },
        required: ['order_id', 'verbose'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'get_time',
      parameters: { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] }, offset: { type: 'integer' } }, required: ['zone', 'offset'] },
    },
  },
]

t.test('non-streaming text has the requested number of words and usage', async t => {
  const r = await client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'say hi\n#sim tokens=5' }] })
  t.equal(r.object, 'chat.completion')
  t.equal(r.model, 'gpt-4o-mini')
  t.equal(r.choices[0].finish_reason, 'stop')
  const text = r.choices[0].message.content ?? ''
  t.match(text, /^[A-Z][a-z]+( [a-z]+){4}$/, 'five words')
  t.ok(r.usage && r.usage.completion_tokens > 0)
  t.equal(r.usage?.total_tokens, (r.usage?.prompt_tokens ?? 0) + (r.usage?.completion_tokens ?? 0))
})

t.test('streaming chunks: role first, one content delta per token, finish, usage, [DONE]', async t => {
  const stream = await client.chat.completions.create({
    model: 'gpt-4o-mini',
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: [{ type: 'text', text: 'hello' }, { type: 'text', text: '#sim tokens=7' }] }],
  })
  const chunks: ChatCompletionChunk[] = []
  for await (const c of stream) chunks.push(c)
  t.equal(chunks[0].choices[0].delta.role, 'assistant')
  const contents = chunks.flatMap(c => (c.choices[0]?.delta.content ? [c.choices[0].delta.content] : []))
  t.equal(contents.length, 7)
  const withFinish = chunks.filter(c => c.choices[0]?.finish_reason)
  t.equal(withFinish.length, 1)
  t.equal(withFinish[0].choices[0].finish_reason, 'stop')
  const last = chunks[chunks.length - 1]
  t.same(last.choices, [])
  t.ok(last.usage && last.usage.completion_tokens >= 1, 'usage chunk last')
  t.equal(new Set(chunks.map(c => c.id)).size, 1, 'one id for every chunk')
})

t.test('non-streaming tool calls use the declared tools with schema-shaped arguments', async t => {
  const r = await client.chat.completions.create({ model: 'gpt-4o-mini', tools, messages: [{ role: 'user', content: '#sim tools=3 tokens=0' }] })
  const msg = r.choices[0].message
  t.equal(r.choices[0].finish_reason, 'tool_calls')
  t.equal(msg.content, null)
  const calls = msg.tool_calls ?? []
  t.equal(calls.length, 3)
  t.same(calls.map(c => (c.type === 'function' ? c.function.name : c.type)), ['lookup_order', 'get_time', 'lookup_order'], 'declared tools, cycled')
  t.equal(new Set(calls.map(c => c.id)).size, 3, 'distinct call ids')
  const first = calls[0].type === 'function' ? JSON.parse(calls[0].function.arguments) : null
  t.same(Object.keys(first).sort(), ['order_id', 'verbose'], 'required properties only')
  t.type(first.order_id, 'string')
  t.type(first.verbose, 'boolean')
  const second = calls[1].type === 'function' ? JSON.parse(calls[1].function.arguments) : null
  t.equal(second.zone, 'UTC', 'first enum value')
  t.ok(Number.isInteger(second.offset))
})

t.test('stream() helper assembles interleaved parallel tool calls (parallel=1)', async t => {
  const stream = client.chat.completions.stream({ model: 'gpt-4o-mini', tools, messages: [{ role: 'user', content: 'do both\n#sim tools=2 tokens=2 parallel=1' }] })
  const indexes: number[] = []
  stream.on('chunk', c => {
    for (const tc of c.choices[0]?.delta.tool_calls ?? []) indexes.push(tc.index)
  })
  const done = await stream.finalChatCompletion()
  const msg = done.choices[0].message
  t.equal(done.choices[0].finish_reason, 'tool_calls')
  t.match(msg.content, /^[A-Z][a-z]+ [a-z]+$/, 'text before the calls')
  const calls = msg.tool_calls ?? []
  t.same(calls.map(c => (c.type === 'function' ? c.function.name : '')), ['lookup_order', 'get_time'])
  for (const c of calls) {
    if (c.type !== 'function') continue
    t.doesNotThrow(() => JSON.parse(c.function.arguments), `${c.function.name} arguments are JSON`)
    t.match(c.id, /^call_[0-9a-z]{24}$/)
  }
  // The deltas really were interleaved on the wire: the index goes back from 1 to 0.
  const backwards = indexes.some((ix, i) => i > 0 && ix < indexes[i - 1])
  t.ok(backwards, `tool indexes interleave: ${indexes.join(',')}`)
})

t.test('stream() helper, sequential tool calls, synthetic tool when none is declared', async t => {
  const stream = client.chat.completions.stream({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: '#sim tools=2 tokens=0' }] })
  const done = await stream.finalChatCompletion()
  const calls = done.choices[0].message.tool_calls ?? []
  t.equal(calls.length, 2)
  for (const c of calls) {
    if (c.type !== 'function') continue
    t.equal(c.function.name, 'get_weather')
    t.type(JSON.parse(c.function.arguments).city, 'string')
  }
})

t.test('the directive of an earlier turn does not apply after a tool result', async t => {
  const r = await client.chat.completions.create({
    model: 'gpt-4o-mini',
    tools,
    messages: [
      { role: 'user', content: '#sim tools=1 tokens=0' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_time', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '12:00' },
    ],
  })
  t.equal(r.choices[0].finish_reason, 'stop')
  t.equal(r.choices[0].message.tool_calls, undefined)
  t.match(r.choices[0].message.content, /^[A-Z][a-z]+( [a-z]+){7}$/, 'default: eight words')
})
