// The client SDK end to end against the real gateway (`sluice serve`, two HTTP workers) and
// the in-process simulated provider: the limit read from /v1/capabilities, the official SDKs
// through session.fetch, the local guard and the server's authority agreeing, and the
// non-blocking mode (submit / events / cancel) over the shared event ring. After each test
// the SDK's count is 0 and the gateway's ledger is idle.
import t from 'tap'
import OpenAI from 'openai'
import Anthropic from '@anthropic-ai/sdk'
import { KEY, chatBody, messagesBody, responsesBody, startRig, type Rig } from '../helpers/exchange.ts'
import { until, waitIdle } from '../helpers/gateway.ts'
import { PendingPromptLimitError, SluiceClient, SluiceRequestError, SluiceTurnError, type SessionEvent, type SluiceSession } from '../../src/client/index.ts'

const LIMIT = 2
let rig: Rig
t.before(async () => { rig = await startRig({ workers: 2, limits: { maxPendingPromptsPerSession: LIMIT } }) })
t.teardown(() => rig.close())

const CHAT = '/v1/chat/completions'
let n = 0
const sid = (what: string): string => `e2e-${what}-${++n}`
const metric = async (name: string): Promise<number | undefined> => (await rig.gw.metrics()).get(name)
const refusals = async (): Promise<number> => (await metric('sluice_refusals_total{code="prompt_queue_full"}')) ?? 0

/** A streaming chat request through session.fetch; resolves once the gateway answered its head. */
function stream (s: SluiceSession, sim: string, signal?: AbortSignal): Promise<Response> {
  return s.fetch(rig.url + CHAT, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(chatBody(`x\n#sim ${sim}`, { stream: true })), signal })
}

t.test('connect() takes the gateway\'s limit; readCapabilities() shows it', async (t) => {
  const client = await SluiceClient.connect({ baseURL: rig.url, apiKey: KEY })
  t.equal(client.limit, LIMIT)
  const caps = await SluiceClient.readCapabilities({ baseURL: rig.url, apiKey: KEY })
  t.equal(caps.limits.maxPendingPromptsPerSession, LIMIT)
  t.ok(caps.features.includes('non-blocking-exchanges'))
  await t.rejects(SluiceClient.connect({ baseURL: rig.url, apiKey: 'sk-wrong' }), { name: 'SluiceRequestError', code: 'unauthorized', status: 401 })
})

t.test('prompt() on all three routes', async (t) => {
  const client = await SluiceClient.connect({ baseURL: rig.url, apiKey: KEY })
  const s = client.session(sid('prompt'))
  t.match(await s.prompt('chat', chatBody('hi')), { object: 'chat.completion' })
  t.match(await s.prompt('responses', responsesBody('hi')), { object: 'response', status: 'completed' })
  t.match(await s.prompt('messages', messagesBody('hi')), { type: 'message' })
  t.equal(s.pending, 0)
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('the official SDKs through session.fetch: plain, streaming, aborted', async (t) => {
  const client = await SluiceClient.connect({ baseURL: rig.url, apiKey: KEY })
  const session = client.session(sid('sdk'))
  const openai = new OpenAI({ baseURL: rig.url + '/v1', apiKey: KEY, fetch: session.fetch })
  const anthropic = new Anthropic({ baseURL: rig.url, apiKey: KEY, fetch: session.fetch })

  const done = await openai.chat.completions.create(chatBody('hello') as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming)
  t.type(done.choices[0].message.content, 'string')
  t.equal(session.pending, 0)

  const live = await openai.chat.completions.create(chatBody('x\n#sim tokens=30 interval=10', { stream: true }) as unknown as OpenAI.ChatCompletionCreateParamsStreaming)
  let first = true
  for await (const _ of live) {
    if (first) {
      first = false
      t.equal(await metric('sluice_session_pending'), 1, 'the gateway laned it: the session header arrived')
      t.equal(session.pending, 1)
    }
  }
  t.equal(session.pending, 0, 'completed stream: released')

  const msg = await anthropic.messages.create(messagesBody('hello') as unknown as Anthropic.MessageCreateParamsNonStreaming)
  t.equal(msg.type, 'message')
  const long = await anthropic.messages.create(messagesBody('x\n#sim tokens=200 interval=20', { stream: true }) as unknown as Anthropic.MessageCreateParamsStreaming)
  let got = 0
  for await (const _ of long) {
    if (++got === 3) {
      long.controller.abort()
      break
    }
  }
  t.equal(session.pending, 0, 'aborted stream: released')
  await until(() => rig.ends.at(-1)?.outcome === 'client-closed', 'the provider saw the abort')
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('a local refusal sends nothing, and the gateway would have refused it too', async (t) => {
  const client = await SluiceClient.connect({ baseURL: rig.url, apiKey: KEY })
  const s = client.session(sid('full'))
  const ac = new AbortController()
  const running = await stream(s, 'tokens=200 interval=20', ac.signal)
  const queued = stream(s, 'tokens=2') // behind it in the session's FIFO at the gateway
  await until(async () => (await metric('sluice_session_queued')) === 1, 'queued in the session lane')
  t.equal(s.pending, 2)
  const sent = rig.requests.length
  const refused = await refusals()

  const err = await s.prompt('chat', chatBody('one too many')).catch((e: unknown) => e)
  t.ok(err instanceof PendingPromptLimitError)
  t.match(err, { local: true, limit: LIMIT, pendingCount: 2, sessionId: s.id })
  t.equal(rig.requests.length, sent, 'nothing reached the provider')
  t.equal(await refusals(), refused, 'nothing reached the gateway either (no refusal counted)')
  t.equal(await metric('sluice_session_pending'), 2)

  ac.abort()
  t.equal(s.pending, 1, 'the abort released its slot at once')
  const res = await queued
  await res.text()
  t.equal(s.pending, 0)
  running.body?.cancel().catch(() => {})
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('the server is the authority: with no local cap, its refusal arrives as SluiceRequestError', async (t) => {
  const client = new SluiceClient({ baseURL: rig.url, apiKey: KEY, maxPendingPromptsPerSession: null })
  const s = client.session(sid('server-cap'))
  const ac = new AbortController()
  const running = await stream(s, 'tokens=200 interval=20', ac.signal)
  const queued = stream(s, 'tokens=2', ac.signal).catch((e: unknown) => e)
  await until(async () => (await metric('sluice_session_queued')) === 1, 'queued in the session lane')
  const sent = rig.requests.length

  const err = await s.prompt('chat', chatBody('one too many')).catch((e: unknown) => e)
  t.ok(err instanceof SluiceRequestError)
  t.match(err, { code: 'prompt_queue_full', status: 503, retryAfterSeconds: 5, local: false, body: { sessionId: s.id, limit: LIMIT, pendingCount: 2 } })
  t.equal(s.pending, 2, 'the refused one released its reservation')
  const subErr = await s.submit('chat', chatBody('also one too many')).catch((e: unknown) => e)
  t.match(subErr, { name: 'SluiceRequestError', code: 'prompt_queue_full', status: 503 })
  t.equal(s.pending, 2)
  t.equal(rig.requests.length, sent, 'neither reached the provider')

  ac.abort()
  await queued
  running.body?.cancel().catch(() => {})
  t.equal(s.pending, 0)
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('submit(): turn_complete with the provider\'s JSON; a stream\'s frames on events()', async (t) => {
  const client = await SluiceClient.connect({ baseURL: rig.url, apiKey: KEY })
  const s = client.session(sid('submit'))
  const plain = await s.submit('chat', chatBody('hello'))
  t.match(plain.exchangeId, /^[0-9a-f-]{36}$/)
  const r = await plain.result
  t.match(r, { exchangeId: plain.exchangeId, status: 200, body: { object: 'chat.completion' } })
  t.equal(s.pending, 0)

  const streamed = await s.submit('messages', messagesBody('x\n#sim tokens=4', { stream: true }))
  t.match(streamed.lastEventId, /^\d+$/, 'the 202 names the id to read its events after')
  t.match(await streamed.result, { exchangeId: streamed.exchangeId, status: 200, body: null })
  t.equal(s.pending, 0)
  const seen: SessionEvent[] = []
  for await (const e of s.events({ lastEventId: streamed.lastEventId! })) {
    seen.push(e)
    if (e.type === 'turn_complete') break
  }
  t.ok(seen.every((e) => 'exchangeId' in e && e.exchangeId === streamed.exchangeId), 'only its events, replayed from the ring')
  t.equal(seen[0].type, 'turn_started')
  const frames = seen.filter((e) => e.type === 'turn_progress')
  t.ok(frames.length >= 4, `${frames.length} provider frames`)
  t.match(frames[0], { event: 'message_start' })
  t.match(seen.at(-1), { type: 'turn_complete', body: null })
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('submit(): the local limit counts accepted exchanges; turn_error; cancel(); caller abort', async (t) => {
  const client = await SluiceClient.connect({ baseURL: rig.url, apiKey: KEY })
  const s = client.session(sid('submit-end'))
  const a = await s.submit('chat', chatBody('x\n#sim tokens=200 interval=20', { stream: true }))
  const ac = new AbortController()
  const b = await s.submit('chat', chatBody('x\n#sim tokens=200 interval=20', { stream: true }), { signal: ac.signal })
  t.equal(s.pending, 2)
  const sent = rig.requests.length
  await t.rejects(s.submit('chat', chatBody('three')), PendingPromptLimitError)
  t.equal(rig.requests.length, sent)

  ac.abort()
  t.equal(s.pending, 1, 'abort: released at once')
  await t.rejects(b.result, { name: 'AbortError' })

  t.equal(await s.cancel(a.exchangeId), true)
  const err = await a.result.catch((e: unknown) => e)
  t.ok(err instanceof SluiceTurnError)
  t.match(err, { code: 'exchange_cancelled', exchangeId: a.exchangeId })
  t.equal(s.pending, 0)

  const failing = await s.submit('chat', chatBody('x\n#sim fault=status-503', { stream: true }))
  const ferr = await failing.result.catch((e: unknown) => e)
  t.ok(ferr instanceof SluiceTurnError, 'a provider failure ends in turn_error')
  t.match(ferr, { exchangeId: failing.exchangeId, code: /^provider_/ })
  t.equal(s.pending, 0)
  t.same(await waitIdle(rig.gw), {}, 'idle')
})
