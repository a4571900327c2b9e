// Protocol translation through the real gateway: every pair (client route x provider protocol),
// streaming and not, validated by the official SDKs pointed at sluice (openai
// chat.completions.stream() / responses.stream() and their non-stream calls, @anthropic-ai/sdk
// messages.stream() / messages.create()), and by what reached the simulated provider
// (rig.bodies). After every case the ledger and every translation gauge are back at idle.

import t from 'tap'
import { readFileSync } from 'node:fs'
import { generateText, jsonSchema, streamText, tool } from 'ai'
import { createOpenAI } from '@ai-sdk/openai'
import { createAnthropic } from '@ai-sdk/anthropic'
import { KEY, SIGNING_KEY, startRig, type Rig } from '../helpers/exchange.ts'
import { isErrorCode } from '../../src/errors.ts'
import { verifyRecord, type FailureRecord } from '../../src/sse/sign.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { direct, fnTool, firstTurn, lastBody, MODEL, modelBodies, PAIRS, post, ROUTE_PATH, sseEvents, viaSdk, WEATHER, type Answer, type Obj, type Pair, type Raw, type Route } from './translation-helpers.ts'

let rig: Rig
t.before(async () => { rig = await startRig({ strict: true }) })
t.teardown(() => rig?.close())

async function idle (t: { same: (a: unknown, b: unknown, m: string) => unknown }): Promise<void> {
  t.same(await waitIdle(rig.gw), {}, 'ledger and translation gauges idle')
}

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=='
const IMG_URL = 'https://example.com/cat.png'

/** System text, a two-turn history and both image sources, in the client's shape. */
function richBody (pair: Pair, directive: string): Obj {
  const text = `describe these\n${directive}`
  if (pair.route === 'chat') {
    return {
      model: pair.model,
      messages: [
        { role: 'system', content: 'SYS-RULES' },
        { role: 'user', content: 'turn one' },
        { role: 'assistant', content: 'answer one' },
        { role: 'user', content: [{ type: 'text', text }, { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } }, { type: 'image_url', image_url: { url: IMG_URL } }] },
      ],
    }
  }
  if (pair.route === 'responses') {
    return {
      model: pair.model,
      instructions: 'SYS-RULES',
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'turn one' }] },
        { role: 'assistant', content: [{ type: 'output_text', text: 'answer one' }] },
        { role: 'user', content: [{ type: 'input_text', text }, { type: 'input_image', image_url: `data:image/png;base64,${PNG}` }, { type: 'input_image', image_url: IMG_URL }] },
      ],
    }
  }
  return {
    model: pair.model,
    max_tokens: 512,
    system: 'SYS-RULES',
    messages: [
      { role: 'user', content: 'turn one' },
      { role: 'assistant', content: 'answer one' },
      { role: 'user', content: [{ type: 'text', text }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } }, { type: 'image', source: { type: 'url', url: IMG_URL } }] },
    ],
  }
}

/** What the provider got: its system text, the history's texts in order, its image sources. */
function providerView (pair: Pair, b: Obj): { system: string; texts: string[]; images: string[] } {
  const texts: string[] = []
  const images: string[] = []
  let system = ''
  const partText = (c: Obj): void => {
    if (typeof c === 'string') { texts.push(c); return }
    if (c.type === 'text' || c.type === 'input_text' || c.type === 'output_text') texts.push(c.text)
    if (c.type === 'image_url') images.push(c.image_url.url)
    if (c.type === 'input_image') images.push(c.image_url)
    if (c.type === 'image') images.push(c.source.type === 'base64' ? `data:${c.source.media_type};base64,${c.source.data}` : c.source.url)
  }
  if (pair.provider === 'openai-chat') {
    for (const m of b.messages) {
      if (m.role === 'system' || m.role === 'developer') { system += typeof m.content === 'string' ? m.content : m.content.map((c: Obj) => c.text).join(''); continue }
      if (typeof m.content === 'string') texts.push(m.content)
      else for (const c of m.content ?? []) partText(c)
    }
  } else if (pair.provider === 'openai-responses') {
    system = b.instructions ?? ''
    for (const i of typeof b.input === 'string' ? [{ content: b.input }] : b.input) {
      if (i.role === 'system' || i.role === 'developer') { system += typeof i.content === 'string' ? i.content : i.content.map((c: Obj) => c.text).join(''); continue }
      if (typeof i.content === 'string') texts.push(i.content)
      else for (const c of i.content ?? []) partText(c)
    }
  } else {
    system = typeof b.system === 'string' ? b.system : (b.system ?? []).map((c: Obj) => c.text).join('')
    for (const m of b.messages) {
      if (typeof m.content === 'string') texts.push(m.content)
      else for (const c of m.content) partText(c)
    }
  }
  return { system, texts, images }
}

for (const pair of PAIRS) {
  t.test(pair.name, async (t) => {
    for (const stream of [false, true]) {
      const mode = stream ? 'stream' : 'json'

      t.test(`${mode}: text, system, multi-turn history and images (base64 and url)`, async (t) => {
        const before = rig.bodies.length
        const a = await viaSdk(rig, pair.route, richBody(pair, '#sim tokens=5'), stream)
        t.equal(a.text.trim().split(/\s+/).length, 5, 'the five words the provider sent')
        t.equal(a.stop, pair.route === 'chat' ? 'stop' : pair.route === 'responses' ? 'completed' : 'end_turn', 'the client\'s own stop reason')
        const bodies = modelBodies(rig, before)
        t.equal(bodies.length, 1, 'one provider request')
        t.equal(bodies[0].protocol, pair.provider, 'in the provider\'s protocol')
        const v = providerView(pair, bodies[0].json as Obj)
        t.equal(v.system, 'SYS-RULES', 'the system text in the provider\'s field')
        t.same(v.texts, ['turn one', 'answer one', 'describe these\n#sim tokens=5'], 'the history, in order')
        t.same(v.images, [`data:image/png;base64,${PNG}`, IMG_URL], 'both images, base64 and url, as sent')
        await idle(t)
      })

      t.test(`${mode}: a function call and its result, ids correlated across turns`, async (t) => {
        const tools = [fnTool(pair.route, 'get_weather')]
        const body = firstTurn(pair, 'weather?\n#sim call=get_weather', { tools })
        const before = rig.bodies.length
        const a = await viaSdk(rig, pair.route, body, stream)
        t.equal(a.calls.length, 1, 'one call')
        t.equal(a.calls[0]?.name, 'get_weather')
        t.type(JSON.parse(a.calls[0]?.args ?? '{}').city, 'string', 'with the schema\'s required property')
        t.equal(a.stop, pair.route === 'chat' ? 'tool_calls' : pair.route === 'responses' ? 'completed' : 'tool_use', 'a tool stop in the client\'s field')
        const id = a.calls[0]?.id ?? ''
        t.ok(id.length > 0, 'a call id')
        // The second turn, as the client sends it: its history with the call, and the result under the call's id.
        const second = secondTurn(pair.route, body, a, 'sunny, 21C')
        const b2 = rig.bodies.length
        const a2 = await viaSdk(rig, pair.route, second, stream)
        t.ok(a2.text.length > 0, 'the model answers the result')
        const sent = lastBody(rig, b2)
        const ids = callAndResultIds(pair.provider, sent)
        t.equal(ids.calls.length, 1, 'the provider gets the call in the history')
        t.same(ids.results, ids.calls, 'and the result under the same id')
        // The provider's own id comes back: the one it issued on the first turn.
        const issued = issuedCallId(pair.provider, await direct(rig, modelBodies(rig, before)[0]))
        t.equal(ids.calls[0], issued, `the id the provider issued goes back (the client saw ${id})`)
        t.ok(ids.resultText.includes('sunny, 21C'), 'with the result\'s content')
        await idle(t)
      })
    }

    t.test('tool_choice auto/none/required/named and parallel_tool_calls reach the provider mapped', async (t) => {
      const tools = [fnTool(pair.route, 'get_weather'), fnTool(pair.route, 'get_time')]
      for (const choice of ['auto', 'none', 'required', 'named'] as const) {
        for (const parallel of [undefined, false]) {
          const extra: Obj = { tools, ...clientChoice(pair.route, choice, parallel) }
          const before = rig.bodies.length
          const r = await post(rig, ROUTE_PATH[pair.route], firstTurn(pair, 'hi\n#sim tokens=1', extra))
          t.equal(r.status, 200, `${choice}/${String(parallel)}: 200 (${r.text.slice(0, 200)})`)
          const sent = lastBody(rig, before)
          t.same(providerChoice(pair.provider, sent), expectedChoice(pair.provider, choice, parallel), `${choice}, parallel ${String(parallel)}: mapped`)
        }
      }
      await idle(t)
    })
  })
}

function clientChoice (route: Route, choice: 'auto' | 'none' | 'required' | 'named', parallel: boolean | undefined): Obj {
  if (route === 'messages') {
    const c: Obj = choice === 'auto' ? { type: 'auto' } : choice === 'none' ? { type: 'none' } : choice === 'required' ? { type: 'any' } : { type: 'tool', name: 'get_time' }
    if (parallel === false) c.disable_parallel_tool_use = true
    return { tool_choice: c }
  }
  const c = choice === 'named' ? (route === 'chat' ? { type: 'function', function: { name: 'get_time' } } : { type: 'function', name: 'get_time' }) : choice
  return parallel === undefined ? { tool_choice: c } : { tool_choice: c, parallel_tool_calls: parallel }
}

function providerChoice (p: string, b: Obj): Obj {
  if (p === 'anthropic') return { tool_choice: b.tool_choice }
  return b.parallel_tool_calls === undefined ? { tool_choice: b.tool_choice } : { tool_choice: b.tool_choice, parallel_tool_calls: b.parallel_tool_calls }
}

function expectedChoice (p: string, choice: 'auto' | 'none' | 'required' | 'named', parallel: boolean | undefined): Obj {
  if (p === 'anthropic') {
    const c: Obj = choice === 'auto' ? { type: 'auto' } : choice === 'none' ? { type: 'none' } : choice === 'required' ? { type: 'any' } : { type: 'tool', name: 'get_time' }
    if (parallel === false && choice !== 'none') c.disable_parallel_tool_use = true
    return { tool_choice: c }
  }
  const c = choice === 'named' ? (p === 'openai-chat' ? { type: 'function', function: { name: 'get_time' } } : { type: 'function', name: 'get_time' }) : choice
  return parallel === undefined ? { tool_choice: c } : { tool_choice: c, parallel_tool_calls: parallel }
}

/** The client's second turn: the first request's history, the answer's call(s), a result for each. */
export function secondTurn (route: Route, first: Obj, a: Answer, result: string): Obj {
  if (route === 'chat') {
    const m = a.raw.choices[0].message
    return { ...first, messages: [...first.messages, { role: 'assistant', content: m.content ?? null, tool_calls: m.tool_calls }, ...a.calls.map(c => ({ role: 'tool', tool_call_id: c.id, content: result }))] }
  }
  if (route === 'responses') {
    return { ...first, input: [...first.input, ...a.raw.output, ...a.calls.map(c => ({ type: c.type === 'custom_tool_call' ? 'custom_tool_call_output' : 'function_call_output', call_id: c.id, output: result }))] }
  }
  return { ...first, messages: [...first.messages, { role: 'assistant', content: a.raw.content }, { role: 'user', content: a.calls.map(c => ({ type: 'tool_result', tool_use_id: c.id, content: result })) }] }
}

function callAndResultIds (p: string, b: Obj): { calls: string[]; results: string[]; resultText: string } {
  const calls: string[] = []
  const results: string[] = []
  let resultText = ''
  if (p === 'openai-chat') {
    for (const m of b.messages) {
      if (m.role === 'assistant') for (const c of m.tool_calls ?? []) calls.push(c.id)
      if (m.role === 'tool') { results.push(m.tool_call_id); resultText += JSON.stringify(m.content) }
    }
  } else if (p === 'openai-responses') {
    for (const i of b.input) {
      if (/_call$/.test(i.type)) calls.push(i.call_id)
      if (/_call_output$/.test(i.type)) { results.push(i.call_id); resultText += JSON.stringify(i.output) }
    }
  } else {
    for (const m of b.messages) {
      if (!Array.isArray(m.content)) continue
      for (const c of m.content) {
        if (c.type === 'tool_use') calls.push(c.id)
        if (c.type === 'tool_result') { results.push(c.tool_use_id); resultText += JSON.stringify(c.content) }
      }
    }
  }
  return { calls, results, resultText }
}

/** The call id in the provider's own answer (the sim answers the same bytes the same way). */
function issuedCallId (p: string, answer: string): string {
  const m = p === 'openai-chat' ? /"id":"(call_[^"]+)"/.exec(answer) : p === 'openai-responses' ? /"call_id":"([^"]+)"/.exec(answer) : /"id":"(toolu_[^"]+)"/.exec(answer)
  return m?.[1] ?? '(none)'
}

/** The signed failure a client got: from a stream's failure event, or a JSON refusal. */
function failureOf (r: Raw): { code: string; record: FailureRecord; signature: string; clientCode: unknown; event: Obj } | null {
  if (r.json !== null) return r.json.record !== undefined ? { code: r.json.code, record: r.json.record, signature: r.json.signature, clientCode: r.json.code, event: r.json } : null
  for (const e of sseEvents(r.text).reverse()) {
    const d = e.data
    if (typeof d !== 'object' || d === null) continue
    const s = d.error?.sluice ?? d.response?.error?.sluice ?? d.sluice
    if (s !== undefined) return { code: s.record.code, record: s.record, signature: s.signature, clientCode: d.response?.error?.code ?? d.error?.code ?? d.error?.type ?? d.code, event: d }
  }
  return null
}

/** The SDK's view: what it resolved with, or the error it threw. */
async function sdkOutcome (route: Route, body: Obj, stream: boolean): Promise<{ answer?: Answer; error?: any }> {
  try {
    return { answer: await viaSdk(rig, route, body, stream) }
  } catch (error) {
    return { error }
  }
}

const SIGN = Buffer.from(SIGNING_KEY)

for (const pair of PAIRS) {
  t.test(`${pair.name}: tools`, async (t) => {
    for (const stream of [false, true]) {
      const mode = stream ? 'stream' : 'json'
      t.test(`${mode}: a no-argument call finalises as {}`, async (t) => {
        const a = await viaSdk(rig, pair.route, firstTurn(pair, 'go\n#sim call=get_weather args=none', { tools: [fnTool(pair.route, 'get_weather', { type: 'object', properties: {} })] }), stream)
        t.equal(a.calls.length, 1)
        t.same(JSON.parse(a.calls[0]?.args ?? 'null'), {}, 'arguments {}')
        await idle(t)
      })

      for (const cut of ['args', 'length', 'eof'] as const) {
        // An Anthropic JSON answer cannot carry cut arguments (input is an object): the sim sends
        // `input: {}` with stop tool_use there, a well-formed call. Not a truncation to detect.
        if (!stream && cut === 'args' && pair.provider === 'anthropic') continue
        t.test(`${mode}: truncate=${cut} is the client's failure with a signed record, never a completed call`, async (t) => {
          const body = firstTurn(pair, `go\n#sim call=get_weather truncate=${cut}`, { tools: [fnTool(pair.route, 'get_weather')], ...(stream ? { stream: true } : {}) })
          const r = await post(rig, ROUTE_PATH[pair.route], body)
          const f = failureOf(r)
          t.ok(f !== null, `a failure (${r.status}: ${r.text.slice(-300)})`)
          if (f === null) return
          t.ok(isErrorCode(f.record.code), `a catalogued code (${f.record.code})`)
          t.equal(f.record.code, 'provider_protocol_error', 'the provider broke the call')
          t.ok(verifyRecord(f.record, f.signature, SIGN), 'the record verifies with the signing key')
          if (!stream) t.equal(r.status, 502, 'refused before the first byte')
          else {
            t.equal(r.status, 200, 'after the first byte: the stream\'s own failure')
            if (pair.route === 'responses') t.ok(sseEvents(r.text).some(e => e.data?.type === 'response.failed'), 'response.failed')
            if (pair.route === 'messages') t.ok(sseEvents(r.text).some(e => e.event === 'error'), 'event: error')
            t.notOk(/"(function_call_arguments\.done|tool_calls)"/.test(r.text) && /"finish_reason":"tool_calls"/.test(r.text), 'no tool_calls finish')
          }
          const o = await sdkOutcome(pair.route, body, stream)
          t.ok(o.error !== undefined || o.answer?.calls.length === 0, 'the SDK reports no completed call')
          if (o.answer !== undefined) t.notOk(['completed', 'tool_calls', 'tool_use'].includes(o.answer.stop), `and no completed stop (${o.answer.stop})`)
          await idle(t)
        })
      }
    }
  })
}

/** Per provider index, the argument text a Chat stream's interleaved deltas join to. */
function chatArgsByIndex (sse: string): { ids: string[]; args: string[]; interleaved: boolean } {
  const ids: string[] = []
  const args: string[] = []
  let last = -1
  let interleaved = false
  for (const e of sseEvents(sse)) {
    for (const c of e.data?.choices?.[0]?.delta?.tool_calls ?? []) {
      if (c.id !== undefined) ids[c.index] = c.id
      args[c.index] = (args[c.index] ?? '') + (c.function?.arguments ?? '')
      if (last !== -1 && c.index < last) interleaved = true
      last = c.index
    }
  }
  return { ids, args, interleaved }
}

for (const route of ['responses', 'messages'] as const) {
  for (const stream of [true, false]) {
    t.test(`32 provider-interleaved parallel Chat calls reach a ${route} client (${stream ? 'stream' : 'json'}) as 32 complete sequential calls`, async (t) => {
      const pair = PAIRS.find(p => p.route === route && p.provider === 'openai-chat')!
      const body = firstTurn(pair, 'many\n#sim tools=32 parallel stagger', { tools: [fnTool(route, 'get_weather')] })
      const before = rig.bodies.length
      const a = await viaSdk(rig, route, body, stream)
      const sent = modelBodies(rig, before)[0]
      // The provider's own answer to the same bytes: its deltas (interleaved), or its JSON calls.
      const own = await direct(rig, sent)
      const provider = stream ? chatArgsByIndex(own) : { args: JSON.parse(own).choices[0].message.tool_calls.map((c: Obj) => c.function.arguments), interleaved: true }
      t.ok(provider.interleaved, 'the provider did interleave its deltas')
      t.equal(provider.args.length, 32)
      t.equal(a.calls.length, 32, '32 calls')
      t.equal(new Set(a.calls.map(c => c.id)).size, 32, 'distinct ids')
      t.same(a.calls.map(c => JSON.parse(c.args)), provider.args.map((x: string) => JSON.parse(x)), 'each call\'s arguments whole, in the provider\'s index order')
      if (stream) {
        // Non-overlapping: each item's events between its start and its end, indexes distinct and in order.
        const starts: number[] = []
        let open: number | null = null
        let overlap = false
        for (const e of a.events) {
          const idx = route === 'responses' ? e.output_index : e.index
          const start = route === 'responses' ? e.type === 'response.output_item.added' : e.type === 'content_block_start'
          const end = route === 'responses' ? e.type === 'response.output_item.done' : e.type === 'content_block_stop'
          if (idx === undefined) continue
          if (start) { if (open !== null) overlap = true; open = idx; starts.push(idx) } else if (open !== idx) overlap = true
          if (end) open = null
        }
        t.notOk(overlap, 'no item opens before the previous one ended')
        t.same(starts, starts.map((_, i) => i + starts[0]), 'contiguous increasing indexes')
        t.ok(starts.length >= 32, 'one start per call (at least)')
      }
      await idle(t)
    })
  }
}

// Codex's tool kinds (../shared/fixtures/clients): an MCP namespace, the freeform apply_patch, tool_search.
const FIXTURES = new URL('../../../shared/fixtures/clients/', import.meta.url)
function codexTools (): Obj[] {
  const tools: Obj[] = []
  for (const f of ['codex-tool-namespace-01-POST-v1_responses.json', 'codex-tool-applypatch-01-POST-v1_responses.json']) {
    const j = JSON.parse(readFileSync(new URL(f, FIXTURES), 'utf8'))
    for (const tool of (j.body ?? j).tools) if (['namespace', 'custom', 'tool_search'].includes(tool.type) && !tools.some(x => x.type === tool.type)) tools.push(tool)
  }
  return tools
}

for (const provider of ['openai-chat', 'anthropic'] as const) {
  for (const stream of [true, false]) {
    t.test(`Codex's namespace, custom (apply_patch) and tool_search calls restored for a Responses client from ${provider} (${stream ? 'stream' : 'json'})`, async (t) => {
      const pair = PAIRS.find(p => p.route === 'responses' && p.provider === provider)!
      const tools = codexTools()
      t.same(tools.map(x => x.type).sort(), ['custom', 'namespace', 'tool_search'])
      const body = firstTurn(pair, 'do it\n#sim call=multi_agent_v1.close_agent,apply_patch,tool_search', { tools })
      const before = rig.bodies.length
      const a = await viaSdk(rig, 'responses', body, stream)
      const sent = lastBody(rig, before)
      const names = provider === 'anthropic' ? sent.tools.map((x: Obj) => x.name) : sent.tools.map((x: Obj) => x.function.name)
      t.ok(names.every((n: string) => /^[a-zA-Z0-9_-]{1,64}$/.test(n)), `valid flat function names for the provider (${names.join(', ')})`)
      const items = (a.raw.output as Obj[]).filter(i => /_call$/.test(i.type))
      t.same(items.map(i => i.type), ['function_call', 'custom_tool_call', 'tool_search_call'], 'each kind restored, none as a plain function call')
      t.match(items[0], { namespace: 'multi_agent_v1', name: 'close_agent' }, 'the namespaced call as {namespace, name}')
      t.equal(items[1]?.name, 'apply_patch')
      t.equal(items[1]?.input, '*** Begin Patch\n*** Add File: sim.txt\n+hello\n*** End Patch\n', 'the custom call\'s raw input')
      t.match(items[2], { execution: 'client' }, 'a client tool_search call')
      t.equal(typeof items[2]?.arguments, 'object', 'its arguments an object, as Codex parses them')
      if (stream) {
        t.ok(a.events.some(e => e.type === 'response.custom_tool_call_input.delta'), 'custom_tool_call_input.delta streamed')
        t.notOk(a.events.some(e => e.type === 'response.function_call_arguments.delta' && e.output_index === (a.raw.output as Obj[]).indexOf(items[1])), 'not as function arguments')
      }
      await idle(t)
    })
  }
}

for (const stream of [true, false]) {
  const mode = stream ? 'stream' : 'json'
  t.test(`${mode}: Anthropic thinking + signature (and redacted thinking) reach a Responses client as encrypted_content and go back byte-exact (strict provider)`, async (t) => {
    const pair = PAIRS.find(p => p.route === 'responses' && p.provider === 'anthropic')!
    const body = firstTurn(pair, 'think, then call\n#sim call=get_weather redacted=1', { tools: [fnTool('responses', 'get_weather')], reasoning: { effort: 'low', summary: 'auto' }, include: ['reasoning.encrypted_content'], store: false })
    const b1 = rig.bodies.length
    const a = await viaSdk(rig, 'responses', body, stream)
    const sent1 = lastBody(rig, b1)
    t.equal(sent1.thinking?.type, 'enabled', 'thinking enabled for the provider')
    const own = await direct(rig, modelBodies(rig, b1)[0])
    const signature = /"signature":"(Sim[^"]+)"/.exec(own)?.[1]
    const redacted = /"data":"(SimRedacted[^"]+)"/.exec(own)?.[1]
    t.ok(signature !== undefined && redacted !== undefined, 'the provider issued a signature and a redacted block')
    const reasoning = (a.raw.output as Obj[]).filter(i => i.type === 'reasoning')
    t.ok(reasoning.length >= 1, 'reasoning items for the client')
    t.ok(reasoning.every(r => typeof r.encrypted_content === 'string' && r.encrypted_content.length > 0), 'each with encrypted_content')
    t.notOk(JSON.stringify(reasoning).includes(signature ?? '#'), 'the signature is not exposed raw (it is inside the envelope)')
    t.equal(a.calls.length, 1)
    const b2 = rig.bodies.length
    const a2 = await viaSdk(rig, 'responses', secondTurn('responses', body, a, 'sunny'), stream)
    t.ok(a2.text.length > 0, 'the strict provider accepted the replay and answered')
    const sent2 = lastBody(rig, b2)
    const assistant = (sent2.messages as Obj[]).filter(m => m.role === 'assistant').flatMap(m => m.content as Obj[])
    t.same(assistant.map(c => c.type), ['thinking', 'redacted_thinking', 'text', 'tool_use'], 'the turn as the provider sent it, thinking blocks first')
    t.equal(assistant[0]?.signature, signature, 'the signature byte-exact')
    t.equal(assistant[1]?.data, redacted, 'the redacted data byte-exact')
    t.equal(sent2.thinking?.type, 'enabled', 'thinking stays on (the tool turn carries its thinking)')
    await idle(t)
  })

  t.test(`${mode}: OpenAI encrypted_content reaches a Messages client as a thinking signature and goes back (strict provider)`, async (t) => {
    const pair = PAIRS.find(p => p.route === 'messages' && p.provider === 'openai-responses')!
    const body = firstTurn(pair, 'think, then call\n#sim thinking=2 call=get_weather', { tools: [fnTool('messages', 'get_weather')], thinking: { type: 'enabled', budget_tokens: 2048 }, max_tokens: 4096 })
    const b1 = rig.bodies.length
    const a = await viaSdk(rig, 'messages', body, stream)
    const sent1 = lastBody(rig, b1)
    t.ok(sent1.reasoning !== undefined && (sent1.include as string[] | undefined)?.includes('reasoning.encrypted_content'), 'reasoning asked with encrypted_content')
    const own = await direct(rig, modelBodies(rig, b1)[0])
    const enc = /"encrypted_content":"([^"]+)"/.exec(own)?.[1]
    t.ok(enc !== undefined, 'the provider issued encrypted_content')
    const thinking = (a.raw.content as Obj[]).filter(c => c.type === 'thinking' || c.type === 'redacted_thinking')
    t.equal(thinking.length, 1, 'one thinking block')
    t.ok(typeof (thinking[0]?.signature ?? thinking[0]?.data) === 'string' && (thinking[0]?.signature ?? thinking[0]?.data).length > 0, 'carrying the opaque')
    const b2 = rig.bodies.length
    const a2 = await viaSdk(rig, 'messages', secondTurn('messages', body, a, 'sunny'), stream)
    t.ok(a2.text.length > 0, 'the strict provider accepted the replay and answered')
    const sent2 = lastBody(rig, b2)
    const replayed = (sent2.input as Obj[]).filter(i => i.type === 'reasoning')
    t.equal(replayed.length, 1, 'the reasoning item goes back')
    t.equal(replayed[0]?.encrypted_content, enc, 'its encrypted_content byte-exact')
    await idle(t)
  })
}

t.test('the strict provider refuses a faked thinking signature (what the round trips above rely on)', async (t) => {
  const r = await post(rig, '/v1/messages', {
    model: 'claude-opus-5-5', max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 1024 }, tools: [fnTool('messages', 'get_weather')],
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: [{ type: 'thinking', thinking: 'x', signature: 'fake-signature' }, { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'x' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'ok' }] },
    ],
  })
  t.equal(r.status, 400, 'refused')
  t.match(r.text, /Invalid `signature`/)
  await idle(t)
})

// The Vercel AI SDK as a strict extra validator: its schemas check every chunk and every JSON answer.
;(globalThis as { AI_SDK_LOG_WARNINGS?: boolean }).AI_SDK_LOG_WARNINGS = false
function aiModel (route: Route, model: string) {
  if (route === 'messages') return createAnthropic({ baseURL: rig.url + '/v1', apiKey: KEY })(model)
  const o = createOpenAI({ baseURL: rig.url + '/v1', apiKey: KEY })
  return route === 'responses' ? o.responses(model) : o.chat(model)
}
const aiTools = { get_weather: tool({ inputSchema: jsonSchema<Record<string, unknown>>(WEATHER as any) }) }

for (const pair of PAIRS) {
  t.test(`${pair.name}: the Vercel AI SDK accepts every chunk and answer`, async (t) => {
    const prompt = 'weather?\n#sim tools=3 parallel call=get_weather reasoning_content thinking=2'
    const parts: any[] = []
    let streamError: unknown
    try {
      const s = streamText({ model: aiModel(pair.route, pair.model), prompt, tools: aiTools, maxOutputTokens: 2000, maxRetries: 0, onError: () => {} })
      for await (const p of s.fullStream) parts.push(p)
    } catch (err) { streamError = err }
    t.equal(streamError, undefined, `stream: no error (${(streamError as Error | undefined)?.message})`)
    t.same(parts.filter(p => p.type === 'error').map(p => String(p.error?.message ?? p.error)), [], 'stream: no error parts')
    const calls = parts.filter(p => p.type === 'tool-call')
    t.equal(calls.length, 3, 'stream: three tool calls')
    t.equal(new Set(calls.map(c => c.toolCallId)).size, 3, 'distinct ids')
    t.ok(calls.every(c => typeof c.input?.city === 'string'), 'each input parsed whole')
    t.ok(parts.filter(p => p.type === 'text-delta').map(p => p.text).join('').length > 0, 'stream: text')
    t.equal(parts.find(p => p.type === 'finish')?.finishReason, 'tool-calls', 'stream: finish tool-calls')
    const g = await generateText({ model: aiModel(pair.route, pair.model), prompt, tools: aiTools, maxOutputTokens: 2000, maxRetries: 0 })
    t.equal(g.toolCalls.length, 3, 'json: three tool calls')
    t.ok(g.toolCalls.every(c => typeof (c.input as Obj)?.city === 'string'), 'json: inputs parsed')
    t.equal(g.finishReason, 'tool-calls', 'json: finish tool-calls')
    t.ok(g.usage.inputTokens! > 0 && g.usage.outputTokens! > 0, 'json: usage read')
    // A truncated call is an error to the AI SDK, never a tool call: the call cut inside its
    // arguments, by the provider's length stop, or by its EOF. On a Chat client too: there the
    // cut call never goes out at all (encode-chat.ts sends a call whole, at its end), since the
    // AI SDK's chat model finalises every call it holds when the stream ends, after an error.
    for (const cut of ['args', 'length', 'eof'] as const) {
      const bad: any[] = []
      let badError: unknown
      try {
        const s = streamText({ model: aiModel(pair.route, pair.model), prompt: `x\n#sim call=get_weather truncate=${cut}`, tools: aiTools, maxOutputTokens: 2000, maxRetries: 0, onError: () => {} })
        for await (const p of s.fullStream) bad.push(p)
      } catch (err) { badError = err }
      t.same(bad.filter(p => p.type === 'tool-call').map(p => p.toolName), [], `truncate=${cut}: no tool call`)
      t.not(bad.find(p => p.type === 'finish')?.finishReason, 'tool-calls', `truncate=${cut}: no tool-calls finish`)
      const failed = bad.find(p => p.type === 'error')?.error ?? badError
      t.ok(failed !== undefined, `truncate=${cut}: the SDK reports an error`)
      t.match(String((failed as Error)?.message ?? JSON.stringify(failed)), /provider_protocol_error/, `truncate=${cut}: with the catalogue code`)
    }
    await idle(t)
  })
}

t.test('namespace tools that collide on one wire name are refused with a clear 400, nothing sent', async (t) => {
  for (const provider of ['openai-chat', 'anthropic'] as const) {
    const pair = PAIRS.find(p => p.route === 'responses' && p.provider === provider)!
    const tools = [
      { type: 'namespace', name: 'ns', description: 'd', tools: [{ type: 'function', name: 'x', parameters: { type: 'object', properties: {} } }] },
      fnTool('responses', 'ns__x', { type: 'object', properties: {} }),
    ]
    const before = rig.requests.length
    const r = await post(rig, '/v1/responses', firstTurn(pair, 'hi', { tools }))
    t.equal(r.status, 400, `${pair.name}: 400`)
    t.equal(r.json?.code, 'invalid_request')
    t.match(r.text, /ns__x/, 'names the colliding tools')
    t.equal(rig.requests.length, before, 'nothing reached the provider')
  }
  await idle(t)
})

t.test('a reasoning envelope from one provider is never sent to another', async (t) => {
  // Claude client: thinking issued by the Responses provider, replayed to a model on the Chat provider.
  const onResponses = PAIRS.find(p => p.route === 'messages' && p.provider === 'openai-responses')!
  const body = firstTurn(onResponses, 'think\n#sim thinking=2 call=get_weather', { tools: [fnTool('messages', 'get_weather')], thinking: { type: 'enabled', budget_tokens: 2048 }, max_tokens: 4096 })
  const a = await viaSdk(rig, 'messages', body, false)
  const opaque = (a.raw.content as Obj[]).map(c => c.signature ?? c.data).find(x => typeof x === 'string' && x.length > 0)
  t.ok(opaque !== undefined, 'the Claude client holds an envelope')
  const second = secondTurn('messages', { ...body, model: MODEL['openai-chat'] }, a, 'sunny')
  const before = rig.bodies.length
  const r = await post(rig, '/v1/messages', second)
  t.equal(r.status, 200, `answered (${r.text.slice(0, 200)})`)
  const sent = modelBodies(rig, before)[0]
  t.equal(sent.protocol, 'openai-chat')
  t.notOk(sent.bytes.toString().includes(String(opaque)), 'the envelope is not in the Chat provider\'s request')
  t.notOk(/encrypted_content|"signature"/.test(sent.bytes.toString()), 'nor any opaque reasoning field')
  const ids = callAndResultIds('openai-chat', sent.json as Obj)
  t.equal(ids.calls.length, 1, 'the tool call still goes')
  t.same(ids.results, ids.calls, 'with its result')
  await idle(t)
})
