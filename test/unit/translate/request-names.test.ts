// Tool wire names: valid, deterministic, unique, restorable; collisions refused with a 400 that
// names both tools.
import t from 'tap'
import type { ToolDef } from '../../../src/translate/canonical.ts'
import { restoreName, toolLookup, WIRE_NAME, wireNameOf } from '../../../src/translate/names.ts'
import { translateRequest } from '../../../src/translate/request/index.ts'
import { thrown } from './invariants.ts'

t.test('valid names are untouched; a namespace is flattened with __', async t => {
  t.equal(wireNameOf('Bash'), 'Bash')
  t.equal(wireNameOf('exec_command'), 'exec_command')
  t.equal(wireNameOf('close_agent', 'multi_agent_v1'), 'multi_agent_v1__close_agent')
  t.equal(wireNameOf('x', ''), 'x', 'an empty namespace is none')
})

t.test('other characters and long names: sanitised, shortened, hash-suffixed, deterministic', async t => {
  const names: Array<[string, string | undefined]> = [
    ['read.file', undefined], ['read_file', 'mcp.server/fs'], ['ünïcode tool', undefined], ['a'.repeat(80), undefined],
    ['b'.repeat(40), 'n'.repeat(40)], ['', undefined], ['read file', undefined], ['read/file', undefined],
  ]
  const wires = names.map(([n, ns]) => wireNameOf(n, ns))
  for (const w of wires) t.match(w, WIRE_NAME, w)
  t.same(names.map(([n, ns]) => wireNameOf(n, ns)), wires, 'the same input gives the same name')
  t.equal(new Set(wires).size, wires.length, 'distinct inputs give distinct names (read file / read/file / read.file)')
  t.ok(wires[0].startsWith('read_file_'), 'sanitised prefix kept readable: ' + wires[0])
  t.equal(wires[3].length, 64)
  t.not(wireNameOf('read.file'), wireNameOf('read_file'), 'a rewritten name cannot take a plain valid one')
  t.not(wireNameOf('a'.repeat(80)), wireNameOf('a'.repeat(81)), 'two long names sharing a prefix differ')
})

const fn = (name: string, namespace?: string): ToolDef => ({ kind: 'function', name, wireName: wireNameOf(name, namespace), ...(namespace !== undefined ? { namespace } : {}) })

t.test('lookup: each wire name back to {kind, name, namespace}; undeclared names are plain functions', async t => {
  const lookup = toolLookup([fn('a'), fn('close_agent', 'multi_agent_v1'), { kind: 'custom', name: 'apply_patch', wireName: 'apply_patch' }, { kind: 'tool_search', name: 'tool_search', wireName: 'tool_search' }, { kind: 'hosted', name: 'web_search', wireName: 'web_search', hosted: { type: 'web_search' } }])
  t.same(restoreName(lookup, 'multi_agent_v1__close_agent'), { kind: 'function', name: 'close_agent', namespace: 'multi_agent_v1' })
  t.same(restoreName(lookup, 'apply_patch'), { kind: 'custom', name: 'apply_patch' })
  t.same(restoreName(lookup, 'tool_search'), { kind: 'tool_search', name: 'tool_search' })
  t.same(restoreName(lookup, 'web_search'), { kind: 'function', name: 'web_search' }, 'hosted tools have no function name')
  t.same(restoreName(lookup, 'zzz'), { kind: 'function', name: 'zzz' })
})

t.test('collisions are refused with invalid_request naming both tools', async t => {
  const cases: Array<[ToolDef[], string[]]> = [
    [[fn('a'), fn('a')], ['"a"', '"a"']],
    [[fn('close_agent', 'multi_agent_v1'), fn('multi_agent_v1__close_agent')], ['"close_agent" in namespace "multi_agent_v1"', '"multi_agent_v1__close_agent"']],
    [[fn('b__c', 'a'), fn('c', 'a__b')], ['"b__c" in namespace "a"', '"c" in namespace "a__b"']],
  ]
  for (const [tools, mentions] of cases) {
    const e = thrown(() => toolLookup(tools))
    t.equal(e.code, 'invalid_request', e.message)
    t.equal(e.status, 400)
    t.equal(e.details?.field, 'tools')
    for (const m of mentions) t.ok(e.message.includes(m), `names ${m}: ${e.message}`)
  }
})

t.test('a Responses request whose namespace collides with a plain tool is refused before encoding', async t => {
  const body = {
    model: 'm',
    input: 'hi',
    tools: [
      { type: 'namespace', name: 'fs', tools: [{ type: 'function', name: 'read', parameters: { type: 'object', properties: {} } }] },
      { type: 'function', name: 'fs__read', parameters: { type: 'object', properties: {} } },
    ],
  }
  for (const to of ['openai-chat', 'anthropic'] as const) {
    const e = thrown(() => translateRequest({ from: 'openai-responses', to, body, model: 'p', issuer: `${to}:x` }))
    t.equal(e.code, 'invalid_request', `${to}: ${e.message}`)
    t.ok(e.message.includes('"fs__read"') && e.message.includes('"read" in namespace "fs"'), e.message)
  }
})
