// The scenario keys of the `#sim` directive: parsing, their independence from SimDirective,
// the directive read from the last user turn of translated requests, and determinism.
import t from 'tap'
import { DEFAULT_DIRECTIVE, lastUserText, nextExchange, parseDirective, rawRequest, startSim, streamProblems, type SimProtocol } from '../../../src/sim/index.ts'
import { chat } from '../../../src/sim/chat.ts'
import { messages } from '../../../src/sim/messages.ts'
import type { Renderer } from '../../../src/sim/protocol.ts'
import { responses } from '../../../src/sim/responses.ts'
import { seedFrom } from '../../../src/sim/rng.ts'
import { DEFAULT_SCENARIO, parseScenario, SCENARIO_LIMITS } from '../../../src/sim/scenario.ts'
import { buildScript } from '../../../src/sim/script.ts'

t.test('defaults, every key, aliases', async t => {
  t.same(parseScenario(null), DEFAULT_SCENARIO)
  t.same(parseScenario('#sim tokens=3 tools=2'), DEFAULT_SCENARIO, 'the original keys are not scenario keys')
  const s = parseScenario('#sim call=a,b call=c args={"x":1} truncate=length error=rate_limit redacted=2 cached=7 reasoning_tokens=9 reasoning_content stagger')
  t.same(s, { calls: ['a', 'b', 'c'], args: '{"x":1}', truncate: 'length', error: 'rate_limit', redacted: 2, cached: 7, reasoningTokens: 9, reasoningContent: true, stagger: true })
  t.equal(parseScenario('#sim error=overloaded_error').error, 'overloaded')
  t.equal(parseScenario('#sim error=rate_limit_exceeded').error, 'rate_limit')
  t.equal(parseScenario('#sim error=context_length_exceeded').error, 'context_length')
  t.equal(parseScenario('#sim error=invalid_request_error').error, 'invalid_request')
  t.equal(parseScenario('#sim error=billing_error').error, 'insufficient_quota')
})

t.test('bad values are ignored, numbers clamped, args decoded', async t => {
  const s = parseScenario('#sim truncate=half error=explode redacted=x cached=-1 reasoning_content=maybe call=,,')
  t.same(s, DEFAULT_SCENARIO)
  t.equal(parseScenario('#sim redacted=999').redacted, SCENARIO_LIMITS.redacted)
  t.equal(parseScenario('#sim args=none').args, '')
  t.equal(parseScenario('#sim args=a%20b').args, 'a b')
  t.equal(parseScenario('#sim args=100%').args, '100%', 'a lone % stays')
  t.equal(parseScenario('#sim reasoning_content reasoning_content=0').reasoningContent, false, 'later wins')
  t.equal(parseScenario('#sim truncate=eof\n#sim truncate=args').truncate, 'args', 'later lines win')
  t.equal(parseScenario('#sim truncate=content_filter').truncate, 'filter')
  t.equal(parseScenario(`#sim call=${Array.from({ length: 200 }, (_v, i) => 't' + i).join(',')}`).calls.length, SCENARIO_LIMITS.calls)
})

t.test('SimDirective keeps its keys and defaults whatever scenario keys a line holds', async t => {
  t.same(parseDirective('#sim call=a args={} truncate=eof error=rate_limit redacted=2 cached=3 reasoning_tokens=4 reasoning_content'), DEFAULT_DIRECTIVE)
  const d = parseDirective('#sim tokens=3 call=a tools=2 truncate=args')
  t.equal(d.tokens, 3)
  t.equal(d.tools, 2)
})

const DIRECTIVE = '#sim tokens=2 call=exec_command truncate=args cached=5'

t.test('translated requests: the directive is read from the last user turn, none after tool results', async t => {
  // Responses -> Messages: history with thinking and tool_use; the tool result and a new user
  // text merged into one user turn (as an adapter does) carry the directive.
  const messages = [
    { role: 'user', content: [{ type: 'text', text: 'first\n#sim tools=1' }] },
    { role: 'assistant', content: [{ type: 'thinking', thinking: 'x', signature: 's' }, { type: 'tool_use', id: 'toolu_1', name: 'exec_command', input: { cmd: 'ls' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'a b' }] },
  ]
  t.equal(lastUserText('anthropic', { messages }), null, 'a turn of tool results only: no directive')
  t.equal(lastUserText('anthropic', { messages: [...messages.slice(0, 2), { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'a' }, { type: 'text', text: DIRECTIVE }] }] }), DIRECTIVE)
  // Messages -> Chat: system first, tool results as role "tool", then the next user message.
  const chat = [
    { role: 'system', content: 'be brief' },
    { role: 'user', content: [{ type: 'text', text: '#sim tools=1' }] },
    { role: 'assistant', content: null, tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'Bash', arguments: '{}' } }] },
    { role: 'tool', tool_call_id: 'toolu_1', content: 'ok' },
  ]
  t.equal(lastUserText('openai-chat', { messages: chat }), null)
  t.equal(lastUserText('openai-chat', { messages: [...chat, { role: 'user', content: [{ type: 'text', text: DIRECTIVE }] }] }), DIRECTIVE)
  // Chat / Messages -> Responses: instructions aside, items with call outputs, a user message
  // with or without `type`.
  const input = [
    { type: 'message', role: 'developer', content: [{ type: 'input_text', text: '#sim tokens=99' }] },
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: '#sim tools=1' }] },
    { type: 'function_call', call_id: 'call_1', name: 'exec_command', arguments: '{}' },
    { type: 'custom_tool_call_output', call_id: 'call_2', output: 'done' },
  ]
  t.equal(lastUserText('openai-responses', { input }), null, 'any *_output item ends the turn')
  t.equal(lastUserText('openai-responses', { input: [...input, { role: 'user', content: DIRECTIVE }] }), DIRECTIVE)
  t.equal(lastUserText('openai-responses', { input: [...input, { type: 'message', role: 'user', content: [{ type: 'input_text', text: DIRECTIVE }] }] }), DIRECTIVE)
})

t.test('scenario directives: identical bytes for an identical body, in every protocol, streaming and not', async t => {
  const sim = await startSim()
  t.teardown(() => sim.close())
  const tools = {
    chat: [{ type: 'function', function: { name: 'exec_command', parameters: { type: 'object', properties: { cmd: { type: 'string' }, note: { type: 'string' } }, required: ['cmd', 'note'] } } }],
    responses: [
      { type: 'function', name: 'exec_command', parameters: { type: 'object', properties: { cmd: { type: 'string' }, note: { type: 'string' } }, required: ['cmd', 'note'] } },
      { type: 'custom', name: 'apply_patch' },
      { type: 'tool_search', execution: 'client' },
    ],
    messages: [{ name: 'exec_command', input_schema: { type: 'object', properties: { cmd: { type: 'string' }, note: { type: 'string' } }, required: ['cmd', 'note'] } }],
  }
  const make = (path: string, text: string, stream: boolean): unknown => {
    if (path === '/v1/chat/completions') return { model: 'm', stream, tools: tools.chat, messages: [{ role: 'user', content: text }] }
    if (path === '/v1/responses') return { model: 'm', stream, include: ['reasoning.encrypted_content'], tools: tools.responses, input: text }
    return { model: 'm', stream, max_tokens: 64, tools: tools.messages, messages: [{ role: 'user', content: text }] }
  }
  const directives = [
    '#sim tokens=3 tools=3 call=exec_command,apply_patch,tool_search thinking=2 redacted=1 reasoning_content cached=4 reasoning_tokens=6',
    '#sim tokens=0 call=exec_command truncate=length',
    '#sim tokens=4 error=rate_limit at=2',
  ]
  for (const path of ['/v1/chat/completions', '/v1/responses', '/v1/messages']) {
    for (const stream of [true, false]) {
      for (const d of directives) {
        const a = await rawRequest(sim.url, { path, body: make(path, d, stream) })
        const b = await rawRequest(sim.url, { path, body: make(path, d, stream) })
        const c = await rawRequest(sim.url, { path, body: make(path, 'other\n' + d, stream) })
        t.ok(a.body.length > 50, `${path} stream=${stream} ${d}: a body`)
        t.ok(a.body.equals(b.body), `${path} stream=${stream} ${d}: same bytes`)
        if (!d.includes('error=') || stream) t.notOk(a.body.equals(c.body), `${path} stream=${stream} ${d}: another body, other bytes`)
      }
    }
  }
})

t.test('renderers: plan.total is the frame count with every scenario key; complete streams are well-formed', async t => {
  const renderers: Array<[SimProtocol, Renderer]> = [['openai-chat', chat], ['openai-responses', responses], ['anthropic', messages]]
  const complete = ['#sim call=a,b tokens=2', '#sim tools=4 call=a parallel args=none', '#sim tools=5 parallel stagger', '#sim tools=3 call=a parallel stagger truncate=args', '#sim thinking=2 redacted=3 reasoning_content tokens=1 call=x', '#sim truncate=args call=a,b']
  const cut = ['#sim truncate=length call=a', '#sim truncate=length tokens=5', '#sim truncate=filter tokens=4', '#sim truncate=eof call=a,b', '#sim truncate=eof tokens=5']
  for (const [protocol, renderer] of renderers) {
    for (const d of [...complete, ...cut]) {
      const body = { model: 'm', stream: true, messages: [{ role: 'user', content: d }], input: d }
      const raw = Buffer.from(JSON.stringify(body))
      const s = buildScript(protocol, body, raw.length, seedFrom(raw), parseDirective(d), parseScenario(d))
      const plan = renderer.stream(s)
      const frames = [...plan.frames()]
      t.equal(frames.length, plan.total, `${protocol} ${d}: total`)
      const problems = streamProblems(protocol, frames.join(''))
      if (complete.includes(d)) t.same(problems, [], `${protocol} ${d}: well-formed`)
      else if (d.includes('eof')) t.not(problems.length, 0, `${protocol} ${d}: not a complete stream`)
      else if (protocol === 'openai-responses') t.same(problems, ['last event is not response.completed'], `${protocol} ${d}: ends with response.incomplete`)
      else t.same(problems, [], `${protocol} ${d}: a length stop is a well-formed end`)
    }
  }
})

t.test("the 'body' event: the exact request bytes and the directive text the sim read", async t => {
  const sim = await startSim({ apiKey: 'sk-up' })
  t.teardown(() => sim.close())
  const sent = { model: 'm', messages: [{ role: 'user', content: 'first' }, { role: 'assistant', content: 'ok' }, { role: 'user', content: [{ type: 'text', text: 'hi' }, { type: 'text', text: DIRECTIVE }] }] }
  const ex = nextExchange(sim)
  await rawRequest(sim.url, { path: '/v1/chat/completions', body: sent, headers: { authorization: 'Bearer sk-up' } })
  const b = await ex.body
  t.ok(b !== null && b.bytes.equals(Buffer.from(JSON.stringify(sent))), 'exact bytes')
  t.same(b?.json, sent)
  t.equal(b?.directiveText, 'hi\n' + DIRECTIVE)
  t.equal(b?.endpoint, 'chat.completions')
  const count = nextExchange(sim)
  await rawRequest(sim.url, { path: '/v1/messages/count_tokens', body: { model: 'm', messages: sent.messages }, headers: { 'x-api-key': 'sk-up' } })
  t.equal((await count.body)?.directiveText, null, 'count_tokens reads no directive')
  const bad = nextExchange(sim)
  await rawRequest(sim.url, { path: '/v1/responses', body: 'not json', headers: { authorization: 'Bearer sk-up' } })
  const badBody = await bad.body
  t.equal(badBody?.json, undefined)
  t.equal(badBody?.bytes.toString(), 'not json')
  const refused = nextExchange(sim)
  await rawRequest(sim.url, { path: '/v1/responses', body: { model: 'm', input: 'x' } })
  t.equal(await refused.body, null, 'refused before the body (401): no body event')
  t.equal((await refused.end).status, 401)
})
