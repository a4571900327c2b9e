// The official SDKs, unchanged, through session.fetch: `openai` 7.x and `@anthropic-ai/sdk`,
// non-streaming and streaming, against the simulated provider (a real node:http server that
// speaks both protocols and reports each request's headers and how it ended). The session
// header arrives, and the count returns to 0 after a completed and after an aborted stream.
import t from 'tap'
import OpenAI from 'openai'
import Anthropic from '@anthropic-ai/sdk'
import { startSim, type Sim, type SimEndEvent, type SimRequestEvent } from '../../src/sim/index.ts'
import { PendingPromptLimitError, SluiceClient } from '../../src/client/index.ts'
import { until } from './server.ts'

const KEY = 'sk-sdk-through-session-fetch'
let sim: Sim
const requests: SimRequestEvent[] = []
const ends: SimEndEvent[] = []
t.before(async () => {
  sim = await startSim({ apiKey: KEY })
  sim.events.on('request', (e) => requests.push(e))
  sim.events.on('end', (e) => ends.push(e))
})
t.teardown(() => sim.close())

const endOf = async (id: number): Promise<SimEndEvent> => {
  await until(() => ends.some((e) => e.id === id), `request ${id} ended`)
  return ends.find((e) => e.id === id)!
}

t.test('openai: chat and responses, plain and streaming, completed and aborted', async (t) => {
  const client = new SluiceClient({ baseURL: sim.url, apiKey: KEY })
  const session = client.session('openai-session')
  const openai = new OpenAI({ baseURL: sim.url + '/v1', apiKey: KEY, fetch: session.fetch })

  const done = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hello' }] })
  t.type(done.choices[0].message.content, 'string')
  t.equal(requests.at(-1)!.headers['x-session-id'], 'openai-session', 'the session header arrived')
  t.equal(requests.at(-1)!.headers.authorization, `Bearer ${KEY}`)
  t.equal(session.pending, 0, 'plain completion: released')

  const resp = await openai.responses.create({ model: 'gpt-5.5', input: 'hello' })
  t.equal(resp.status, 'completed')
  t.equal(session.pending, 0)

  const stream = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x\n#sim tokens=5 interval=5' }], stream: true })
  let text = ''
  for await (const chunk of stream) {
    t.equal(session.pending, 1, 'held while streaming')
    text += chunk.choices[0]?.delta?.content ?? ''
  }
  t.ok(text.length > 0, `streamed ${JSON.stringify(text)}`)
  t.equal(session.pending, 0, 'completed stream: released')
  t.equal((await endOf(requests.at(-1)!.id)).outcome, 'completed')

  const long = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x\n#sim tokens=200 interval=20' }], stream: true })
  const id = requests.at(-1)!.id
  let got = 0
  for await (const _ of long) {
    if (++got === 2) {
      long.controller.abort()
      break
    }
  }
  t.equal(session.pending, 0, 'aborted stream: released')
  const end = await endOf(id)
  t.equal(end.outcome, 'client-closed', 'the provider saw the caller leave')
  t.ok(end.eventsSent < 200)
})

t.test('anthropic: messages, plain and streaming, completed and aborted', async (t) => {
  const client = new SluiceClient({ baseURL: sim.url, apiKey: KEY })
  const session = client.session('anthropic-session')
  const anthropic = new Anthropic({ baseURL: sim.url, apiKey: KEY, fetch: session.fetch })

  const msg = await anthropic.messages.create({ model: 'claude-opus-5-5', max_tokens: 64, messages: [{ role: 'user', content: 'hello' }] })
  t.equal(msg.type, 'message')
  t.equal(msg.content[0].type, 'text')
  const h = requests.at(-1)!.headers
  t.equal(h['x-session-id'], 'anthropic-session', 'the session header arrived')
  t.ok(h['x-api-key'] === KEY || h.authorization === `Bearer ${KEY}`, 'the SDK\'s own key header')
  t.equal(session.pending, 0, 'plain message: released')

  const stream = await anthropic.messages.create({ model: 'claude-opus-5-5', max_tokens: 64, messages: [{ role: 'user', content: 'x\n#sim tokens=5 interval=5' }], stream: true })
  const types: string[] = []
  for await (const ev of stream) {
    t.equal(session.pending, 1, 'held while streaming')
    types.push(ev.type)
  }
  t.equal(types.at(-1), 'message_stop')
  t.equal(session.pending, 0, 'completed stream: released')

  const helper = anthropic.messages.stream({ model: 'claude-opus-5-5', max_tokens: 64, messages: [{ role: 'user', content: 'x\n#sim tokens=5' }] })
  const final = await helper.finalMessage()
  t.equal(final.stop_reason, 'end_turn')
  t.equal(session.pending, 0, 'the stream helper: released')

  const long = await anthropic.messages.create({ model: 'claude-opus-5-5', max_tokens: 64, messages: [{ role: 'user', content: 'x\n#sim tokens=200 interval=20' }], stream: true })
  const id = requests.at(-1)!.id
  let got = 0
  for await (const _ of long) {
    if (++got === 3) {
      long.controller.abort()
      break
    }
  }
  t.equal(session.pending, 0, 'aborted stream: released')
  t.equal((await endOf(id)).outcome, 'client-closed')
})

t.test('a local refusal through an SDK: nothing sent, the SDK reports a connection error caused by it', async (t) => {
  const client = new SluiceClient({ baseURL: sim.url, apiKey: KEY, maxPendingPromptsPerSession: 1 })
  const session = client.session('refusing')
  const openai = new OpenAI({ baseURL: sim.url + '/v1', apiKey: KEY, fetch: session.fetch, maxRetries: 0 })
  const running = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x\n#sim tokens=50 interval=20' }], stream: true })
  const before = requests.length
  const err = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e)
  t.ok(err instanceof OpenAI.APIConnectionError, 'openai: APIConnectionError')
  t.ok((err as Error).cause instanceof PendingPromptLimitError, 'caused by PendingPromptLimitError')
  const anthropic = new Anthropic({ baseURL: sim.url, apiKey: KEY, fetch: session.fetch, maxRetries: 0 })
  const aerr = await anthropic.messages.create({ model: 'claude-opus-5-5', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e)
  t.ok(aerr instanceof Anthropic.APIConnectionError, 'anthropic: APIConnectionError')
  t.ok((aerr as Error).cause instanceof PendingPromptLimitError, 'caused by PendingPromptLimitError')
  t.equal(requests.length, before, 'nothing reached the provider')
  running.controller.abort()
  t.equal(session.pending, 0)
})

t.test('an SDK\'s own retries wait for a slot: the refusal is retried with its backoff', async (t) => {
  const client = new SluiceClient({ baseURL: sim.url, apiKey: KEY, maxPendingPromptsPerSession: 1 })
  const session = client.session('retrying')
  const openai = new OpenAI({ baseURL: sim.url + '/v1', apiKey: KEY, fetch: session.fetch }) // maxRetries: 2 by default
  const running = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x\n#sim tokens=50 interval=20' }], stream: true })
  const before = requests.length
  const later = openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] })
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.equal(requests.length, before, 'refused locally, not sent')
  running.controller.abort()
  const done = await later
  t.type(done.choices[0].message.content, 'string', 'a retry after the slot freed went through')
  t.equal(requests.length, before + 1, 'sent once')
  t.equal(session.pending, 0)
})
