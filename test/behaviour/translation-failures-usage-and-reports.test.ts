// Protocol translation through the real gateway, continued: usage and stop reasons in the
// client's own fields, provider errors before and after the first byte, structured output,
// hosted tools, count_tokens estimated locally, the log line's `translated`, client hang-ups
// mid-stream, and GET /v1/models in the caller's protocol. After every case the ledger and
// every translation gauge are back at idle.

import t from 'tap'
import { request } from 'undici'
import { KEY, SIGNING_KEY, startRig, type Rig } from '../helpers/exchange.ts'
import { until, waitIdle } from '../helpers/gateway.ts'
import { isErrorCode } from '../../src/errors.ts'
import { verifyRecord } from '../../src/sse/sign.ts'
import { direct, exchangeLine, firstTurn, fnTool, lastBody, modelBodies, PAIRS, post, ROUTE_PATH, sdks, sseEvents, viaSdk, type Obj, type Pair, type Raw, type Route } from './translation-helpers.ts'

let rig: Rig
t.before(async () => { rig = await startRig() })
t.teardown(() => rig?.close())

const SIGN = Buffer.from(SIGNING_KEY)
async function idle (t: { same: (a: unknown, b: unknown, m: string) => unknown }): Promise<void> {
  t.same(await waitIdle(rig.gw), {}, 'ledger and translation gauges idle')
}

/** Input (cached included), cached, output and reasoning tokens, read from a provider's or client's usage. */
function tokens (protocol: string, u: Obj): { input: number; cached: number; output: number; reasoning: number } {
  if (protocol === 'openai-chat') return { input: u.prompt_tokens, cached: u.prompt_tokens_details?.cached_tokens ?? 0, output: u.completion_tokens, reasoning: u.completion_tokens_details?.reasoning_tokens ?? 0 }
  if (protocol === 'openai-responses') return { input: u.input_tokens, cached: u.input_tokens_details?.cached_tokens ?? 0, output: u.output_tokens, reasoning: u.output_tokens_details?.reasoning_tokens ?? 0 }
  // Anthropic counts cached input apart from input_tokens, and has no reasoning field.
  return { input: u.input_tokens + (u.cache_read_input_tokens ?? 0), cached: u.cache_read_input_tokens ?? 0, output: u.output_tokens, reasoning: 0 }
}

/** The provider's usage in its own answer to the same bytes (JSON, or the stream's last usage). */
function providerUsage (protocol: string, text: string): Obj {
  if (!text.startsWith('data:') && !text.startsWith('event:')) return JSON.parse(text).usage
  let u: Obj = {}
  for (const e of sseEvents(text)) {
    const d = e.data
    if (typeof d !== 'object' || d === null) continue
    if (protocol === 'openai-chat' && d.usage) u = d.usage
    if (protocol === 'openai-responses' && d.response?.usage) u = d.response.usage
    if (protocol === 'anthropic') {
      if (d.type === 'message_start') u = { ...d.message.usage }
      if (d.type === 'message_delta') u = { ...u, ...d.usage }
    }
  }
  return u
}

for (const pair of PAIRS) {
  for (const stream of [false, true]) {
    const mode = stream ? 'stream' : 'json'
    t.test(`${pair.name} ${mode}: usage (cached, reasoning) and stop reasons in the client's own fields`, async (t) => {
      const before = rig.bodies.length
      const a = await viaSdk(rig, pair.route, firstTurn(pair, 'count\n#sim tokens=4 cached=3 reasoning_tokens=2'), stream)
      const own = tokens(pair.provider, providerUsage(pair.provider, await direct(rig, modelBodies(rig, before)[0])))
      t.equal(own.cached, 3, 'the provider reported 3 cached tokens')
      const got = tokens(pair.client, a.usage)
      t.equal(got.input, own.input, 'input tokens (cached included) as the provider counted')
      t.equal(got.cached, 3, 'cached tokens in the client\'s field')
      t.equal(got.output, own.output, 'output tokens')
      if (pair.client !== 'anthropic') t.equal(got.reasoning, own.reasoning, `reasoning tokens (${own.reasoning} from the provider)`)
      // An Anthropic `refusal` stop is translated as a refusal (canonical 'refusal', pinned by
      // the answer unit tests): Chat content_filter, a Responses answer that completes.
      const stops: Array<[string, Record<Route, string>]> = [
        ['truncate=length', { chat: 'length', responses: 'incomplete:max_output_tokens', messages: 'max_tokens' }],
        ['truncate=filter', { chat: 'content_filter', responses: pair.provider === 'anthropic' ? 'completed' : 'incomplete:content_filter', messages: 'refusal' }],
      ]
      for (const [d, want] of stops) {
        const s = await viaSdk(rig, pair.route, firstTurn(pair, `cut\n#sim tokens=6 ${d}`), stream)
        t.equal(s.stop, want[pair.route], `${d}: ${want[pair.route]}`)
        const kept = s.text + (s.raw.choices?.[0]?.message?.refusal ?? '') + JSON.stringify((s.raw.output ?? []).flatMap((i: Obj) => i.content ?? []).filter((c: Obj) => c.type === 'refusal'))
        t.ok(kept.replace('[]', '').length > 0, `${d}: the text before the stop is kept (as text or as the refusal)`)
      }
      await idle(t)
    })
  }
}

/** The signed failure in a raw answer: a JSON refusal's record, or a stream's failure event. */
function failureOf (r: Raw): { record: any; signature: string; event: Obj } | null {
  if (r.json !== null) return r.json.record !== undefined ? { record: r.json.record, signature: r.json.signature, event: r.json } : null
  for (const e of sseEvents(r.text).reverse()) {
    const d = e.data
    if (typeof d !== 'object' || d === null) continue
    const s = d.error?.sluice ?? d.response?.error?.sluice ?? d.sluice
    if (s !== undefined) return { record: s.record, signature: s.signature, event: d }
  }
  return null
}

for (const pair of PAIRS) {
  t.test(`${pair.name}: provider errors before the first byte are the catalogue refusal`, async (t) => {
    for (const stream of [false, true]) {
      for (const [d, status, code] of [['fault=status-503', 502, 'provider_unavailable'], ['fault=status-429', 429, 'provider_rate_limited']] as const) {
        const r = await post(rig, ROUTE_PATH[pair.route], firstTurn(pair, `x\n#sim ${d}`, stream ? { stream: true } : {}))
        t.equal(r.status, status, `${d} ${stream}: status`)
        t.equal(r.json?.code, code, `${d}: code`)
        t.equal(r.json?.providerStatus, d === 'fault=status-503' ? 503 : 429, 'the provider\'s status is kept')
        t.ok(verifyRecord(r.json?.record, r.json?.signature, SIGN), 'signed')
        if (code === 'provider_rate_limited') t.equal(r.headers['retry-after'], '7', 'the provider\'s Retry-After')
      }
    }
    await idle(t)
  })

  t.test(`${pair.name}: provider errors after the first byte are the client protocol's own error event`, async (t) => {
    const want: Record<string, { code: string; type: string }> = {
      overloaded: { code: 'server_is_overloaded', type: 'overloaded_error' },
      rate_limit: { code: 'rate_limit_exceeded', type: 'rate_limit_error' },
      context_length: { code: 'context_length_exceeded', type: 'invalid_request_error' },
      insufficient_quota: { code: 'insufficient_quota', type: 'billing_error' },
    }
    for (const [e, w] of Object.entries(want)) {
      const body = firstTurn(pair, `x\n#sim tokens=6 error=${e} at=3`, { stream: true })
      const r = await post(rig, ROUTE_PATH[pair.route], body)
      t.equal(r.status, 200, `${e}: the stream had begun`)
      const f = failureOf(r)
      t.ok(f !== null, `${e}: a failure event (${r.text.slice(-200)})`)
      if (f === null) continue
      t.ok(isErrorCode(f.record.code), `${e}: a catalogued code (${f.record.code})`)
      t.ok(verifyRecord(f.record, f.signature, SIGN), `${e}: signed`)
      if (pair.route === 'responses') {
        t.equal(f.event.type, 'response.failed', `${e}: response.failed`)
        t.equal(f.event.response.error.code, w.code, `${e}: error.code ${w.code}`)
        // An OpenAI provider says how long (an Anthropic stream error event does not).
        if (e === 'rate_limit' && pair.provider !== 'anthropic') t.match(f.event.response.error.message, /try again in 1\.5s/i, 'with its "try again in" time')
      } else if (pair.route === 'messages') {
        t.equal(f.event.type, 'error', `${e}: event: error`)
        t.equal(f.event.error.type, w.type, `${e}: error.type ${w.type}`)
      } else {
        t.equal(f.event.error.code, w.code, `${e}: error frame code ${w.code}`)
      }
      // The SDK fails the stream (what the client acts on), never a clean finish. The openai
      // SDK's responses.stream() resolves with the failed response; the others throw.
      let threw: any = null
      let answer: Obj | null = null
      try { answer = (await viaSdk(rig, pair.route, body, true)).raw } catch (err) { threw = err }
      if (pair.route === 'responses') {
        t.equal(answer?.status, 'failed', `${e}: the SDK's final response is failed`)
        t.equal(answer?.error?.code, w.code, `${e}: with error.code ${w.code}`)
      } else {
        t.ok(threw !== null, `${e}: the SDK reports the failure`)
      }
      if (pair.route === 'messages') t.match(JSON.stringify(threw?.error ?? threw?.message), w.type, `${e}: the SDK sees ${w.type}`)
    }
    await idle(t)
  })
}

for (const pair of PAIRS) {
  t.test(`${pair.name}: transport faults mid-stream end in the client's failure event, signed, and leave nothing held`, async (t) => {
    for (const [d, code] of [['fault=cut-mid-stream at=5 tokens=20', 'provider_unavailable'], ['fault=malformed-frame at=5 tokens=20', 'provider_protocol_error'], ['fault=oversize-frame at=5 tokens=20 size=1200000', 'provider_protocol_error']] as const) {
      const r = await post(rig, ROUTE_PATH[pair.route], firstTurn(pair, `x\n#sim ${d}`, { stream: true }))
      t.equal(r.status, 200, `${d}: the stream had begun`)
      const f = failureOf(r)
      t.equal(f?.record.code, code, `${d}: ${code}`)
      t.ok(f !== null && verifyRecord(f.record, f.signature, SIGN), `${d}: signed`)
      t.notOk(r.text.includes('sim-malformed'), `${d}: the bad frame never reaches the client`)
      const events = sseEvents(r.text)
      if (pair.route === 'responses') t.equal(events.filter(e => /^response\.(completed|failed|incomplete)$/.test(e.data?.type)).length, 1, `${d}: exactly one terminal`)
      if (pair.route === 'messages') t.notOk(events.some(e => e.event === 'message_stop'), `${d}: no message_stop`)
      if (pair.route === 'chat') t.notOk(r.text.includes('[DONE]'), `${d}: no [DONE]`)
      t.same(await waitIdle(rig.gw), {}, `${d}: idle`)
    }
  })
}

t.test('structured output: mapped where the provider has it, refused naming the field where it has none', async (t) => {
  const schema = { type: 'object', properties: { a: { type: 'string' } }, required: ['a'], additionalProperties: false }
  const clientFormat: Record<Route, Obj> = {
    chat: { response_format: { type: 'json_schema', json_schema: { name: 'out', schema, strict: true } } },
    responses: { text: { format: { type: 'json_schema', name: 'out', schema, strict: true } } },
    messages: { output_config: { format: { type: 'json_schema', schema } } },
  }
  for (const pair of PAIRS) {
    const before = rig.bodies.length
    const r = await post(rig, ROUTE_PATH[pair.route], firstTurn(pair, 'json\n#sim tokens=1', clientFormat[pair.route]))
    t.equal(r.status, 200, `${pair.name}: 200`)
    const b = lastBody(rig, before)
    const got = pair.provider === 'openai-chat' ? b.response_format?.json_schema?.schema : pair.provider === 'openai-responses' ? b.text?.format?.schema : b.output_config?.format?.schema
    t.same(got, schema, `${pair.name}: the schema in the provider's field`)
  }
  for (const [route, extra, field] of [['chat', { response_format: { type: 'json_object' } }, 'response_format'], ['responses', { text: { format: { type: 'json_object' } } }, 'text.format']] as const) {
    const pair = PAIRS.find(p => p.route === route && p.provider === 'anthropic')!
    const before = rig.requests.length
    const r = await post(rig, ROUTE_PATH[route], firstTurn(pair, 'json', extra))
    t.equal(r.status, 400, `${pair.name} json_object: 400`)
    t.equal(r.json?.code, 'invalid_request')
    t.ok(JSON.stringify(r.json).includes(field), `names the field ${field} (${r.text})`)
    t.equal(rig.requests.length, before, 'nothing sent upstream')
  }
  await idle(t)
})

t.test('hosted tools: mapped where the provider has one, else left out and reported', async (t) => {
  const cases: Array<{ route: Route; provider: string; hosted: Obj; dropped: string | null; mapped: (b: Obj) => boolean }> = [
    { route: 'responses', provider: 'openai-chat', hosted: { type: 'web_search', external_web_access: true }, dropped: 'web_search', mapped: () => false },
    { route: 'responses', provider: 'anthropic', hosted: { type: 'web_search', external_web_access: true }, dropped: null, mapped: b => b.tools.some((x: Obj) => String(x.type).startsWith('web_search')) },
    { route: 'messages', provider: 'openai-chat', hosted: { type: 'web_search_20250305', name: 'web_search', max_uses: 3 }, dropped: 'web_search', mapped: () => false },
    { route: 'messages', provider: 'openai-responses', hosted: { type: 'web_search_20250305', name: 'web_search', max_uses: 3 }, dropped: null, mapped: b => b.tools.some((x: Obj) => String(x.type).startsWith('web_search')) },
  ]
  for (const c of cases) {
    const pair = PAIRS.find(p => p.route === c.route && p.provider === c.provider)!
    for (const stream of [false, true]) {
      const before = rig.bodies.length
      const r = await post(rig, ROUTE_PATH[c.route], firstTurn(pair, 'search\n#sim tokens=2', { tools: [fnTool(c.route, 'get_weather'), c.hosted], ...(stream ? { stream: true } : {}) }))
      t.equal(r.status, 200, `${pair.name} ${stream}: never a refusal`)
      const b = lastBody(rig, before)
      const line = await lineOf(r)
      if (c.dropped !== null) {
        t.match(String(r.headers['x-sluice-dropped-tools']), c.dropped, `${pair.name}: x-sluice-dropped-tools names it`)
        t.match(line?.droppedTools, [c.dropped], `${pair.name}: the log line's droppedTools`)
        t.equal(b.tools.length, 1, 'only the function tool reached the provider')
      } else {
        t.equal(r.headers['x-sluice-dropped-tools'], undefined, `${pair.name}: nothing dropped`)
        t.ok(c.mapped(b), `${pair.name}: mapped to the provider's server tool (${JSON.stringify(b.tools.map((x: Obj) => x.type ?? x.name))})`)
      }
    }
  }
  await idle(t)
})

t.test('a provider\'s hosted-tool items (a web search it ran) are left out of the client\'s answer, which stays well-formed', async (t) => {
  const cases: Array<{ route: Route; provider: string; hosted: Obj }> = [
    { route: 'responses', provider: 'anthropic', hosted: { type: 'web_search', external_web_access: true } },
    { route: 'messages', provider: 'openai-responses', hosted: { type: 'web_search_20250305', name: 'web_search', max_uses: 3 } },
  ]
  for (const c of cases) {
    const pair = PAIRS.find(p => p.route === c.route && p.provider === c.provider)!
    for (const stream of [false, true]) {
      const a = await viaSdk(rig, c.route, firstTurn(pair, 'search\n#sim call=web_search tokens=3', { tools: [c.hosted] }), stream)
      t.equal(a.calls.length, 0, `${pair.name} ${stream}: no client tool call for the provider's own search`)
      t.equal(a.text.trim().split(/\s+/).length, 3, 'the answer text')
      const kinds = c.route === 'responses' ? (a.raw.output as Obj[]).map(i => i.type) : (a.raw.content as Obj[]).map(b => b.type)
      t.same(kinds, c.route === 'responses' ? ['message'] : ['text'], `only what the client can read (${kinds.join(',')})`)
      t.equal(a.stop, c.route === 'responses' ? 'completed' : 'end_turn', 'an ordinary stop, not a tool stop')
    }
  }
  await idle(t)
})

async function lineOf (r: Raw): Promise<Obj | undefined> {
  const id = String(r.headers['x-sluice-exchange-id'])
  let line: Obj | undefined
  await until(() => (line = exchangeLine(rig, id)) !== undefined, `the log line of ${id}`)
  return line
}

t.test('count_tokens for a model on a non-Anthropic provider: a local estimate, marked in a header', async (t) => {
  for (const model of ['gpt-4o-mini', 'gpt-5.5']) {
    const before = rig.requests.length
    const short = await post(rig, '/v1/messages/count_tokens', { model, messages: [{ role: 'user', content: 'hello there' }] })
    const long = await post(rig, '/v1/messages/count_tokens', { model, system: 'be brief', messages: [{ role: 'user', content: 'hello there, '.repeat(50) }] })
    t.equal(short.status, 200, `${model}: 200`)
    t.equal(short.headers['x-sluice-token-estimate'], 'gpt-tokenizer/o200k_base', 'marked as an estimate, naming the tokenizer')
    t.type(short.json?.input_tokens, 'number')
    t.ok(short.json!.input_tokens > 0 && long.json!.input_tokens > short.json!.input_tokens + 40, `counts grow with the text (${short.json?.input_tokens} < ${long.json?.input_tokens})`)
    t.equal(rig.requests.length, before, 'nothing sent upstream')
    const line = await lineOf(short)
    t.equal(line?.translated, `anthropic->${model.startsWith('gpt-4o') ? 'openai-chat' : 'openai-responses'}`, 'the log line says translated')
  }
  const before = rig.requests.length
  const native = await post(rig, '/v1/messages/count_tokens', { model: 'claude-opus-5-5', messages: [{ role: 'user', content: 'hello' }] })
  t.equal(native.status, 200)
  t.equal(native.headers['x-sluice-token-estimate'], undefined, 'an Anthropic provider counts itself')
  t.equal(rig.requests.length, before + 1, 'forwarded')
  await idle(t)
})

t.test('the exchange log line and the x-sluice-translated header name the pair', async (t) => {
  for (const pair of PAIRS) {
    for (const stream of [false, true]) {
      const r = await post(rig, ROUTE_PATH[pair.route], firstTurn(pair, 'hi\n#sim tokens=2', stream ? { stream: true } : {}))
      t.equal(r.status, 200)
      t.equal(r.headers['x-sluice-translated'], pair.name, `${pair.name}: header`)
      const line = await lineOf(r)
      t.equal(line?.translated, pair.name, `${pair.name} ${stream}: log line translated`)
      t.equal(line?.code, 'ok')
    }
  }
  // Same-protocol routes are not translated.
  const r = await post(rig, '/v1/chat/completions', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] })
  t.equal(r.headers['x-sluice-translated'], undefined, 'same protocol: no header')
  t.equal((await lineOf(r))?.translated ?? null, null, 'same protocol: no translated field')
  await idle(t)
})

t.test('a client that hangs up mid-stream on a translated route leaves nothing held', async (t) => {
  for (const pair of PAIRS) {
    const ac = new AbortController()
    const ends = rig.ends.length
    const res = await request(rig.url + ROUTE_PATH[pair.route], {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify(firstTurn(pair, 'long\n#sim tokens=400 interval=5 call=get_weather', { stream: true, tools: [fnTool(pair.route, 'get_weather')] })),
      signal: ac.signal,
    })
    t.equal(res.statusCode, 200)
    let got = 0
    try {
      for await (const chunk of res.body) {
        got += (chunk as Buffer).length
        if (got > 200) { ac.abort(); break }
      }
    } catch {}
    await until(() => rig.ends.length > ends, `${pair.name}: the provider's stream ended`)
    t.equal(rig.ends[rig.ends.length - 1].outcome, 'client-closed', `${pair.name}: the upstream was cancelled`)
    t.same(await waitIdle(rig.gw), {}, `${pair.name}: idle after the hang-up`)
  }
})

t.test('GET /v1/models answers in the caller\'s protocol', async (t) => {
  const openaiShape = await request(rig.url + '/v1/models', { headers: { authorization: `Bearer ${KEY}` } })
  const o = await openaiShape.body.json() as Obj
  t.equal(openaiShape.statusCode, 200)
  t.equal(o.object, 'list', 'the OpenAI list')
  t.ok(o.data.length > 0 && o.data.every((m: Obj) => m.object === 'model' && typeof m.id === 'string' && typeof m.owned_by === 'string'), 'OpenAI model entries')
  const anthropicShape = await request(rig.url + '/v1/models', { headers: { 'x-api-key': KEY, 'anthropic-version': '2023-06-01' } })
  const a = await anthropicShape.body.json() as Obj
  t.equal(anthropicShape.statusCode, 200)
  t.equal(a.object, undefined, 'not the OpenAI list')
  t.equal(a.has_more, false)
  t.ok(a.data.every((m: Obj) => m.type === 'model' && typeof m.display_name === 'string' && typeof m.created_at === 'string'), 'Anthropic model entries')
  t.same(a.data.map((m: Obj) => m.id), o.data.map((m: Obj) => m.id), 'the same models either way')
  t.equal(a.first_id, a.data[0]?.id)
  t.equal(a.last_id, a.data[a.data.length - 1]?.id)
  // The SDKs read them.
  const { openai, anthropic } = sdks(rig)
  const viaOpenai: string[] = []
  for await (const m of openai.models.list()) viaOpenai.push(m.id)
  const viaAnthropic: string[] = []
  for await (const m of anthropic.models.list()) viaAnthropic.push(m.id)
  t.same(viaOpenai, o.data.map((m: Obj) => m.id), 'openai.models.list()')
  t.same(viaAnthropic, o.data.map((m: Obj) => m.id), 'anthropic.models.list()')
  const refused = await request(rig.url + '/v1/models', { headers: { 'anthropic-version': '2023-06-01' } })
  t.equal(refused.statusCode, 401, 'still authenticated')
  t.equal((await refused.body.json() as Obj).code, 'unauthorized')
  await idle(t)
})

export type { Pair }

t.test('the item and byte caps hold on translated answers: output_too_large, signed, nothing held', async (t) => {
  const small = await startRig({ limits: { maxOutputItems: 8, maxOutputBytes: 1048576 } })
  t.teardown(() => small.close())
  for (const pair of PAIRS) {
    for (const stream of [false, true]) {
      const r = await post(small, ROUTE_PATH[pair.route], firstTurn(pair, 'many\n#sim tools=16 parallel call=get_weather', { tools: [fnTool(pair.route, 'get_weather')], ...(stream ? { stream: true } : {}) }))
      if (!stream) {
        // The gateway's own limit before the first byte: the local refusal (no provider record).
        t.equal(r.status, 502, `${pair.name} json: 502`)
        t.match(r.json, { code: 'output_too_large', reason: 'items', limit: 8 }, `${pair.name} json: output_too_large naming the cap`)
      } else {
        const f = failureOf(r)
        t.equal(f?.record.code, 'output_too_large', `${pair.name} stream: output_too_large in the failure event`)
        t.ok(f !== null && verifyRecord(f.record, f.signature, SIGN), 'signed')
      }
      t.same(await waitIdle(small.gw), {}, `${pair.name}: idle`)
    }
    // 1.6 MB of text: a translated answer's content is at most maxOutputBytes, streamed or not.
    const r = await post(small, ROUTE_PATH[pair.route], firstTurn(pair, 'big\n#sim tokens=400 bytes=4096', { stream: true }))
    const f = failureOf(r)
    t.equal(f?.record.code, 'output_too_large', `${pair.name}: a long stream ends with output_too_large`)
    t.ok(f !== null && verifyRecord(f.record, f.signature, SIGN), 'signed')
    t.same(await waitIdle(small.gw), {}, `${pair.name}: idle`)
  }
})
