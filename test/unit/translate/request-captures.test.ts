// The real client requests (../shared/fixtures/clients: Codex with namespace, apply_patch,
// exec, reasoning with parallel calls; Claude Code with thinking and Bash; the SDKs), each
// decoded and encoded for both providers of the other protocols. The encoded bodies are held to
// the providers' request shapes (shapes.ts) and protocol rules (invariants.ts); tool names and
// call ids are checked against the raw client body, not against the decoder's own output.
import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import type { Protocol } from '../../../src/translate/canonical.ts'
import { toolLookup, WIRE_NAME } from '../../../src/translate/names.ts'
import { calledNames, callIds, declaredNames, translate, turnRules } from './invariants.ts'
import { shapes } from './shapes.ts'

type Json = Record<string, any>
const dir = new URL('../../../../shared/fixtures/clients/', import.meta.url)
const files = readdirSync(dir).filter(f => f.includes('-POST-')).sort()
const protocols: Protocol[] = ['openai-chat', 'openai-responses', 'anthropic']

function clientProtocol (file: string): Protocol {
  return file.includes('chat_completions') ? 'openai-chat' : file.includes('v1_responses') ? 'openai-responses' : 'anthropic'
}

interface Identity { kind: string; name: string; namespace?: string }
const id = (kind: string, name: string, namespace?: string): Identity => namespace === undefined ? { kind, name } : { kind, name, namespace }

/** The client's own (non-hosted) tools, read straight from the raw body. */
function clientTools (p: Protocol, body: Json): Identity[] {
  const out: Identity[] = []
  for (const tool of body.tools ?? []) {
    if (p === 'openai-chat') out.push(id(tool.type, tool.type === 'custom' ? tool.custom.name : tool.function.name))
    else if (p === 'anthropic') { if (tool.type === undefined) out.push(id('function', tool.name)) }
    else if (tool.type === 'namespace') for (const s of tool.tools) out.push(id(s.type, s.name, tool.name))
    else if (tool.type === 'function' || tool.type === 'custom') out.push(id(tool.type, tool.name))
    else if (tool.type === 'tool_search') out.push(id('tool_search', 'tool_search'))
  }
  return out
}

/** The client's calls in its history, in order, read straight from the raw body. */
function clientCalls (p: Protocol, body: Json): Array<{ callId: string; name: string; namespace?: string }> {
  const out: Array<{ callId: string; name: string; namespace?: string }> = []
  if (p === 'openai-responses') {
    for (const it of body.input) if (it.type === 'function_call' || it.type === 'custom_tool_call') out.push({ callId: it.call_id, name: it.name, ...(it.namespace !== undefined ? { namespace: it.namespace } : {}) })
  } else if (p === 'openai-chat') {
    for (const m of body.messages) for (const c of m.tool_calls ?? []) out.push({ callId: c.id, name: c.function.name })
  } else {
    for (const m of body.messages) if (Array.isArray(m.content)) for (const b of m.content) if (b.type === 'tool_use') out.push({ callId: b.id, name: b.name })
  }
  return out
}

t.ok(files.length >= 20, `${files.length} captured requests`)

for (const file of files) {
  const from = clientProtocol(file)
  const raw = JSON.parse(readFileSync(new URL(file, dir), 'utf8')).body as Json
  for (const to of protocols.filter(p => p !== from)) {
    t.test(`${file} -> ${to}`, async t => {
      const { body, request } = translate({ from, to, body: structuredClone(raw), model: 'provider-model', issuer: `${to}:prov` })
      const shape = shapes[to].safeParse(body)
      t.same(shape.success ? [] : shape.error.issues.map(i => `${i.path.join('.')}: ${i.message}`), [], 'the body has the provider request shape')
      t.same(turnRules(to, body), [], 'tool calls and results where the provider needs them')
      t.equal(body.model, 'provider-model')
      t.equal(body.stream, raw.stream === true)

      // names: valid, unique, and each one restores to the client's own tool
      const declared = declaredNames(to, body)
      t.same(declared.filter(n => !WIRE_NAME.test(n)), [], 'every declared name is a valid function name')
      t.equal(new Set(declared).size, declared.length, 'declared names are unique')
      const lookup = toolLookup(request.tools)
      const restored = declared.map(n => lookup.get(n))
      t.same(restored, clientTools(from, raw), 'every declared name restores to the client tool, in order')

      // calls: same ids, in order, every one answered, names restore to the client's call
      const calls = clientCalls(from, raw)
      const got = callIds(to, body)
      t.same(got.calls, calls.map(c => c.callId), 'call ids kept, in order')
      t.same([...got.results].sort(), calls.map(c => c.callId).sort(), 'every call answered once')
      t.same(calledNames(to, body).map(n => {
        const r = lookup.get(n)
        return r === undefined ? { name: n } : r.namespace === undefined ? { name: r.name } : { name: r.name, namespace: r.namespace }
      }), calls.map(c => c.namespace === undefined ? { name: c.name } : { name: c.name, namespace: c.namespace }), 'called names restore to the client call')

      // reasoning blobs the client replayed were not issued through us: never forwarded
      const text = JSON.stringify(body)
      t.notOk(text.includes('EqMockSignatureBase64=='), 'no foreign Anthropic signature')
      t.notOk(text.includes('gAAAAABmockEncryptedReasoningBlob'), 'no foreign encrypted_content')
      t.notOk(text.includes('sluice1.'), 'no envelope')
      if (to === 'anthropic' && body.thinking !== undefined) {
        const loopTools = (body.messages as Json[]).filter(m => m.role === 'assistant' && m.content.some((b: Json) => b.type === 'tool_use'))
        t.same(loopTools.filter(m => m.content[0].type !== 'thinking'), [], 'thinking on: every tool turn starts with a thinking block')
      }
    })
  }
}

t.test('codex namespace call on Chat: one flattened function, restored as {namespace, name}', async t => {
  const raw = JSON.parse(readFileSync(new URL('codex-tool-namespace-02-POST-v1_responses.json', dir), 'utf8')).body
  const { body, request } = translate({ from: 'openai-responses', to: 'openai-chat', body: raw, model: 'm', issuer: 'openai-chat:p' })
  const call = body.messages.find((m: Json) => m.tool_calls !== undefined).tool_calls[0]
  t.equal(call.function.name, 'multi_agent_v1__close_agent')
  t.equal(call.function.arguments, '{"target":"x"}')
  t.same(toolLookup(request.tools).get('multi_agent_v1__close_agent'), { kind: 'function', name: 'close_agent', namespace: 'multi_agent_v1' })
  t.same(request.droppedTools, ['web_search'], 'web_search has no Chat equivalent: dropped and listed')
})

t.test('codex apply_patch on Chat and Anthropic: a function with one input string, the patch byte-exact', async t => {
  const raw = JSON.parse(readFileSync(new URL('codex-tool-applypatch-02-POST-v1_responses.json', dir), 'utf8')).body
  const patch = raw.input.find((i: Json) => i.type === 'custom_tool_call').input as string
  const grammar = raw.tools.find((x: Json) => x.type === 'custom').format.definition as string
  const chat = translate({ from: 'openai-responses', to: 'openai-chat', body: structuredClone(raw), model: 'm', issuer: 'openai-chat:p' })
  const fn = chat.body.tools.find((x: Json) => x.function.name === 'apply_patch').function
  t.same(Object.keys(fn.parameters.properties), ['input'])
  t.same(fn.parameters.required, ['input'])
  t.equal(fn.parameters.additionalProperties, false)
  t.equal(fn.parameters.properties.input.type, 'string')
  t.ok(fn.parameters.properties.input.description.includes(grammar), 'the grammar is in the parameter description')
  const call = chat.body.messages.find((m: Json) => m.tool_calls !== undefined).tool_calls[0]
  t.equal(JSON.parse(call.function.arguments).input, patch)
  t.equal(toolLookup(chat.request.tools).get('apply_patch')?.kind, 'custom')
  t.equal(toolLookup(chat.request.tools).get('tool_search')?.kind, 'tool_search', 'tool_search stays a tool search')

  const anth = translate({ from: 'openai-responses', to: 'anthropic', body: structuredClone(raw), model: 'm', issuer: 'anthropic:p' })
  const use = anth.body.messages.flatMap((m: Json) => m.content).find((b: Json) => b.type === 'tool_use')
  t.same(use.input, { input: patch })
  t.same(anth.body.tools.find((x: Json) => x.name === 'apply_patch').input_schema, fn.parameters)
  t.same(anth.body.tools.find((x: Json) => x.type === 'web_search_20250305'), { type: 'web_search_20250305', name: 'web_search' }, 'web_search mapped to the server tool')
  t.same(anth.request.droppedTools, [])
})

t.test('codex parallel calls on Anthropic: one assistant turn, both results first in the next user turn', async t => {
  const raw = JSON.parse(readFileSync(new URL('codex-tool-reasoning-parallel-02-POST-v1_responses.json', dir), 'utf8')).body
  const { body } = translate({ from: 'openai-responses', to: 'anthropic', body: raw, model: 'm', issuer: 'anthropic:p' })
  const i = body.messages.findIndex((m: Json) => m.role === 'assistant')
  t.same(body.messages[i].content.map((b: Json) => b.type), ['tool_use', 'tool_use'], 'the foreign reasoning item is dropped')
  t.same(body.messages[i + 1].content.map((b: Json) => b.type), ['tool_result', 'tool_result'])
  t.equal(body.thinking, undefined, 'no thinking block of ours for the tool turn: thinking off rather than an invalid request')
  t.equal(body.max_tokens, 8192, 'no client max: the documented default')
})

t.test('claude code on Responses: system blocks become instructions, the mid-conversation system entry stays in place', async t => {
  const raw = JSON.parse(readFileSync(new URL('claude-tool-thinking-02-POST-v1_messages.json', dir), 'utf8')).body
  const { body } = translate({ from: 'anthropic', to: 'openai-responses', body: raw, model: 'm', issuer: 'openai-responses:p' })
  t.equal(body.instructions, raw.system.map((s: Json) => s.text).join('\n\n'))
  t.same(body.input.map((i: Json) => i.type === 'message' ? i.role : i.type), ['user', 'system', 'assistant', 'function_call', 'function_call_output'])
  t.equal(body.max_output_tokens, 128000)
  t.same(body.reasoning, { effort: 'medium', summary: 'auto' }, 'adaptive thinking + output_config.effort -> reasoning.effort')
  t.same(body.include, ['reasoning.encrypted_content'])
})
