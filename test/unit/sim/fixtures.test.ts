// The request bodies real clients sent (Codex CLI, Claude Code, the official SDKs) are
// accepted, and the sim's streams have the shape of the streams those clients accepted.
import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { parseSse, rawRequest, startSim, streamProblems, type SimProtocol, type SseFrame } from '../../../src/sim/index.ts'

const dir = new URL('../../../ops/load/fixtures/', import.meta.url)
const names = readdirSync(dir).filter(f => f.endsWith('.request.json')).map(f => f.slice(0, -'.request.json'.length)).sort()

const sim = await startSim({ apiKey: 'sk-fixture' })
t.teardown(() => sim.close())

type Json = Record<string, any>

function protocolOf(url: string): SimProtocol {
  if (url.startsWith('/v1/chat/completions')) return 'openai-chat'
  if (url.startsWith('/v1/responses')) return 'openai-responses'
  return 'anthropic'
}

/** One label per frame; consecutive repeats collapse, so token counts don't matter. */
function kinds(protocol: SimProtocol, frames: SseFrame[]): string[] {
  const out: string[] = []
  for (const f of frames) {
    let k: string
    if (f.data === '[DONE]') k = '[DONE]'
    else {
      const d: Json = JSON.parse(f.data)
      if (protocol === 'openai-chat') {
        const c = d.choices[0]
        if (c === undefined) k = 'usage'
        else if (c.finish_reason) k = 'finish'
        else {
          const parts: string[] = []
          if (c.delta.role) parts.push('role')
          if (typeof c.delta.content === 'string' && c.delta.content !== '') parts.push('content')
          for (const tc of c.delta.tool_calls ?? []) parts.push(tc.id ? 'tool-head' : 'tool-args')
          k = parts.join('+')
        }
      } else if (protocol === 'openai-responses') {
        k = d.item ? `${d.type}:${d.item.type}` : d.type
      } else {
        k = d.type === 'content_block_start' ? `${d.type}:${d.content_block.type}` : d.type === 'content_block_delta' ? `${d.type}:${d.delta.type}` : d.type
      }
    }
    if (out[out.length - 1] !== k) out.push(k)
  }
  return out
}

/** The JSON shape of a value: keys and value types, a few levels deep. */
function shape(v: unknown, depth = 0): string {
  if (v === null) return 'null'
  if (Array.isArray(v)) return v.length === 0 ? '[]' : `[${shape(v[0], depth + 1)}]`
  if (typeof v !== 'object') return typeof v
  if (depth >= 4) return '{…}'
  return '{' + Object.keys(v).sort().map(k => `${k}:${shape((v as Json)[k], depth + 1)}`).join(',') + '}'
}

function shapes(protocol: SimProtocol, frames: SseFrame[]): Map<string, string> {
  const m = new Map<string, string>()
  const ks = frames.map(f => kinds(protocol, [f])[0])
  frames.forEach((f, i) => {
    if (f.data !== '[DONE]' && !m.has(ks[i])) m.set(ks[i], shape(JSON.parse(f.data)))
  })
  return m
}

/** Appends a directive to the last user turn when it is a text turn; false when it is a tool-result turn. */
function addDirective(protocol: SimProtocol, body: Json, directive: string): boolean {
  if (protocol === 'openai-responses' && typeof body.input === 'string') {
    body.input += '\n' + directive
    return true
  }
  const items: Json[] = protocol === 'openai-responses' ? body.input : body.messages
  for (let i = items.length - 1; i >= 0; i--) {
    const item = items[i]
    if (item.role === 'tool' || String(item.type ?? '').endsWith('_output')) return false
    if (item.role !== 'user') continue
    if (typeof item.content === 'string') {
      item.content += '\n' + directive
      return true
    }
    if (item.content.some((p: Json) => p.type === 'tool_result')) return false
    item.content.push({ type: protocol === 'openai-responses' ? 'input_text' : 'text', text: directive })
    return true
  }
  return false
}

/** What the captured answer held: text deltas, tool calls, thinking deltas. */
function answerOf(protocol: SimProtocol, frames: SseFrame[]): { tokens: number; tools: number; thinking: number } {
  let tokens = 0
  let tools = 0
  let thinking = 0
  for (const f of frames) {
    if (f.data === '[DONE]') continue
    const d: Json = JSON.parse(f.data)
    if (protocol === 'openai-chat') {
      const delta = d.choices[0]?.delta ?? {}
      if (delta.content) tokens++
      for (const tc of delta.tool_calls ?? []) if (tc.id) tools++
    } else if (protocol === 'openai-responses') {
      if (d.type === 'response.output_text.delta') tokens++
      if (d.type === 'response.output_item.added' && d.item.type === 'function_call') tools++
    } else {
      if (d.type === 'content_block_delta' && d.delta.type === 'text_delta') tokens++
      if (d.type === 'content_block_delta' && d.delta.type === 'thinking_delta') thinking++
      if (d.type === 'content_block_start' && d.content_block.type === 'tool_use') tools++
    }
  }
  return { tokens, tools, thinking }
}

for (const name of names) {
  const captured: { url: string; body: Json } = JSON.parse(readFileSync(new URL(`${name}.request.json`, dir), 'utf8'))
  const answer = parseSse(readFileSync(new URL(`${name}.response.sse`, dir)))
  const protocol = protocolOf(captured.url)

  t.test(name, async t => {
    const plain = await rawRequest(sim.url, { path: captured.url, body: captured.body, headers: { 'x-api-key': 'sk-fixture' } })
    t.equal(plain.status, 200, 'captured body accepted')
    t.match(plain.headers['content-type'], /^text\/event-stream/)
    t.same(streamProblems(protocol, plain.body), [], 'well-formed stream')

    const { tokens, tools, thinking } = answerOf(protocol, answer)
    const body = structuredClone(captured.body)
    const steered = addDirective(protocol, body, `#sim tokens=${tokens} tools=${tools} thinking=${thinking}`)
    const r = steered ? await rawRequest(sim.url, { path: captured.url, body, headers: { authorization: 'Bearer sk-fixture' } }) : plain
    t.equal(r.status, 200)
    const frames = parseSse(r.body)
    t.same(streamProblems(protocol, r.body), [])
    t.same(kinds(protocol, frames), kinds(protocol, answer), `same event sequence as the captured answer${steered ? ' (steered)' : ''}`)
    const want = shapes(protocol, answer)
    const got = shapes(protocol, frames)
    for (const [kind, s] of want) t.equal(got.get(kind), s, `${kind}: same JSON shape`)
  })
}
