// The real clients, unmodified, reading translated streams: Codex CLI (@openai/codex) on a
// Responses stream translated from Messages and Chat provider frames; Claude Code
// (@anthropic-ai/claude-code) on a Messages stream translated from Responses and Chat
// provider frames. A loopback server answers each client request with the next translated
// turn (no gateway: the encoders alone are under test here). What must hold: the client runs
// the tools it was given (apply_patch as a custom call, exec_command, a namespaced call, a
// tool search; Bash), and replays the reasoning it got byte-exact (the sluice envelope in
// Responses `encrypted_content`, in the Messages thinking `signature`).
import t from 'tap'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { existsSync, mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { spawn } from 'node:child_process'
import { CountingBudget, type CanonicalRequest, type Protocol, type ToolDef } from '../../../src/translate/canonical.ts'
import { createStreamTranslator } from '../../../src/translate/stream/index.ts'
import { buildFailureRecord, signRecord, type FailureRecord } from '../../../src/sse/sign.ts'
import { chatFrames, messagesFrames, parseSse, type Frame } from './helpers.ts'

const BIN = new URL('../../../node_modules/.bin/', import.meta.url).pathname

interface Served { url: string; bodies: any[]; sent: Buffer[]; close: () => Promise<void> }

async function serveTurns (answer: (body: any, req: IncomingMessage) => Buffer | null): Promise<Served> {
  const bodies: any[] = []
  const sent: Buffer[] = []
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const body = chunks.length > 0 ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : {}
      const bytes = answer(body, req)
      if (bytes === null) {
        res.writeHead(404, { 'content-type': 'application/json' })
        res.end('{"type":"error","error":{"type":"not_found_error","message":"not here"}}')
        return
      }
      bodies.push(body)
      sent.push(bytes)
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.end(bytes)
    })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, bodies, sent, close: () => new Promise(resolve => server.close(() => resolve())) }
}

function translated (from: Protocol, to: Protocol, tools: ToolDef[], frames: Frame[], budget: CountingBudget): Buffer {
  const request: CanonicalRequest = { client: to, model: 'm', stream: true, system: [], messages: [], tools, droppedTools: [] }
  const tr = createStreamTranslator({ from, to, request, budget, issuer: `${from}:prov` })
  const out: Buffer[] = []
  for (const f of frames) out.push(...tr.push(f.event, f.data))
  out.push(...tr.end())
  if (tr.failure !== null) throw new Error(tr.failure.message)
  return Buffer.concat(out)
}

function runClient (cmd: string, args: string[], cwd: string, env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise(resolve => {
    const child = spawn(BIN + cmd, args, { cwd, env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => { stdout += d.toString() })
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString() })
    const timer = setTimeout(() => child.kill('SIGKILL'), 90_000)
    child.on('close', code => { clearTimeout(timer); resolve({ code, stdout, stderr }) })
  })
}

t.test('Codex CLI: apply_patch, exec_command, a namespaced call and tool_search from translated streams; reasoning replayed', async t => {
  const budget = new CountingBudget()
  const patch = '*** Begin Patch\n*** Add File: translated.txt\n+patched through a translation\n*** End Patch\n'
  const tools: ToolDef[] = [
    { kind: 'custom', name: 'apply_patch', wireName: 'apply_patch' },
    { kind: 'function', name: 'exec_command', wireName: 'exec_command' },
    { kind: 'function', name: 'close_agent', namespace: 'multi_agent_v1', wireName: 'multi_agent_v1__close_agent' },
    { kind: 'tool_search', name: 'tool_search', wireName: 'tool_search' },
  ]
  const turns: Array<() => Buffer> = [
    () => translated('anthropic', 'openai-responses', tools, messagesFrames({ thinking: { text: 'I will add the file.', signature: 'EqSIGNATURE+/==' }, text: 'Applying a patch.', calls: [{ id: 'toolu_patch1', name: 'apply_patch', args: JSON.stringify({ input: patch }) }], piece: 7 }), budget),
    () => translated('openai-chat', 'openai-responses', tools, chatFrames({ calls: [{ id: 'call_exec1', name: 'exec_command', args: JSON.stringify({ cmd: 'cat translated.txt > copied.txt' }) }, { id: 'call_ns1', name: 'multi_agent_v1__close_agent', args: '{"target":"nobody"}' }, { id: 'call_ts1', name: 'tool_search', args: '{"query":"calendar"}' }], interleave: true }), budget),
    () => translated('openai-chat', 'openai-responses', tools, chatFrames({ text: 'All done.' }), budget),
  ]
  const srv = await serveTurns((_body, req) => req.url?.endsWith('/responses') === true ? (turns.shift() ?? turns[0] ?? (() => null))() : null)
  t.teardown(srv.close)
  const home = mkdtempSync(join(tmpdir(), 'sluice-codex-home-'))
  const work = mkdtempSync(join(tmpdir(), 'sluice-codex-work-'))
  t.teardown(() => { rmSync(home, { recursive: true, force: true }); rmSync(work, { recursive: true, force: true }) })
  writeFileSync(join(home, 'config.toml'), `model = "gpt-5.5"\nmodel_provider = "sluice"\n[model_providers.sluice]\nname = "sluice"\nbase_url = "${srv.url}/v1"\nenv_key = "SLUICE_KEY"\nwire_api = "responses"\n`)
  const r = await runClient('codex', ['exec', '--skip-git-repo-check', '--dangerously-bypass-approvals-and-sandbox', 'add the file'], work, { CODEX_HOME: home, SLUICE_KEY: 'sk-test', HOME: home })
  t.equal(r.code, 0, `codex exited 0 (${r.stderr.slice(-400)})`)
  t.equal(srv.bodies.length, 3, 'three turns, no retry')
  t.equal(readFileSync(join(work, 'translated.txt'), 'utf8'), 'patched through a translation\n', 'the custom apply_patch call was applied')
  t.equal(readFileSync(join(work, 'copied.txt'), 'utf8'), 'patched through a translation\n', 'the exec_command call ran')
  const sentReasoning = parseSse(srv.sent[0]).find(e => e.type === 'response.output_item.done' && e.item.type === 'reasoning').item
  const second = srv.bodies[1].input
  const replayed = second.find((i: any) => i.type === 'reasoning')
  t.equal(replayed?.encrypted_content, sentReasoning.encrypted_content, 'Codex replays the envelope byte-exact')
  t.match(second.find((i: any) => i.type === 'custom_tool_call'), { call_id: 'toolu_patch1', name: 'apply_patch', input: patch })
  t.match(second.find((i: any) => i.type === 'custom_tool_call_output'), { call_id: 'toolu_patch1' })
  const third = srv.bodies[2].input
  t.match(third.find((i: any) => i.call_id === 'call_ns1' && i.type === 'function_call'), { name: 'close_agent', namespace: 'multi_agent_v1' }, 'the namespaced call is kept as {namespace, name}')
  const nsOut = third.find((i: any) => i.call_id === 'call_ns1' && i.type === 'function_call_output')
  t.ok(nsOut !== undefined && !/unsupported|unknown tool|not found/i.test(String(nsOut.output)), `its handler ran: ${String(nsOut?.output).slice(0, 80)}`)
  t.match(third.find((i: any) => i.type === 'tool_search_call'), { call_id: 'call_ts1', execution: 'client' }, 'the tool search is a tool_search_call')
  t.match(third.find((i: any) => i.type === 'tool_search_output'), { call_id: 'call_ts1' }, 'and Codex answered it as one')
  t.match(third.find((i: any) => i.type === 'function_call_output' && i.call_id === 'call_exec1'), { call_id: 'call_exec1' })
  t.ok(budget.idle)
})

t.test('Claude Code: Bash from a translated Responses stream with reasoning; the signature replayed', async t => {
  const budget = new CountingBudget()
  const tools: ToolDef[] = [{ kind: 'function', name: 'Bash', wireName: 'Bash' }]
  const ev = (event: string, data: Record<string, unknown>): Frame => ({ event, data: { type: event, ...data } })
  const resp = { id: 'resp_cc1', object: 'response', created_at: 1796000000, status: 'in_progress', model: 'gpt-5.5', output: [] }
  const args = JSON.stringify({ command: 'echo from-claude > cc.txt', description: 'write a file' })
  const fc = { id: 'fc_cc1', type: 'function_call', status: 'in_progress', arguments: '', call_id: 'call_cc1', name: 'Bash' }
  const first: Frame[] = [
    ev('response.created', { response: resp }),
    ev('response.output_item.added', { output_index: 0, item: { id: 'rs_cc1', type: 'reasoning', summary: [] } }),
    ev('response.reasoning_summary_part.added', { item_id: 'rs_cc1', output_index: 0, summary_index: 0, part: { type: 'summary_text', text: '' } }),
    ev('response.reasoning_summary_text.delta', { item_id: 'rs_cc1', output_index: 0, summary_index: 0, delta: 'I should write the file with Bash.' }),
    ev('response.output_item.done', { output_index: 0, item: { id: 'rs_cc1', type: 'reasoning', summary: [{ type: 'summary_text', text: 'I should write the file with Bash.' }], encrypted_content: 'gAAAAABencryptedByOpenAI==' } }),
    ev('response.output_item.added', { output_index: 1, item: fc }),
    ev('response.function_call_arguments.delta', { item_id: 'fc_cc1', output_index: 1, delta: args.slice(0, 10) }),
    ev('response.function_call_arguments.delta', { item_id: 'fc_cc1', output_index: 1, delta: args.slice(10) }),
    ev('response.output_item.done', { output_index: 1, item: { ...fc, status: 'completed', arguments: args } }),
    ev('response.completed', { response: { ...resp, status: 'completed', usage: { input_tokens: 50, output_tokens: 20, total_tokens: 70 } } }),
  ]
  let bashTurns = 0
  const srv = await serveTurns(body => {
    if (body.stream !== true) return null
    const withBash = Array.isArray(body.tools) && body.tools.some((x: any) => x.name === 'Bash')
    if (withBash && bashTurns++ === 0) return translated('openai-responses', 'anthropic', tools, first, budget)
    return translated('openai-chat', 'anthropic', tools, chatFrames({ text: withBash ? 'Done: the file is written.' : 'ok' }), budget)
  })
  t.teardown(srv.close)
  const home = mkdtempSync(join(tmpdir(), 'sluice-claude-home-'))
  const work = mkdtempSync(join(tmpdir(), 'sluice-claude-work-'))
  t.teardown(() => { rmSync(home, { recursive: true, force: true }); rmSync(work, { recursive: true, force: true }) })
  const r = await runClient('claude', ['-p', 'write the file', '--allowedTools', 'Bash', '--model', 'claude-opus-5-5'], work, { HOME: home, ANTHROPIC_BASE_URL: srv.url, ANTHROPIC_API_KEY: 'sk-test', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1' })
  t.equal(r.code, 0, `claude exited 0 (${r.stderr.slice(-400)})`)
  t.match(r.stdout, /Done: the file is written\./)
  t.equal(readFileSync(join(work, 'cc.txt'), 'utf8'), 'from-claude\n', 'the Bash call ran')
  const bash = srv.bodies.filter(b => Array.isArray(b.tools) && b.tools.some((x: any) => x.name === 'Bash'))
  t.equal(bash.length, 2, 'two Bash turns (streaming: the translated stream was accepted, no fallback)')
  const sentSignature = parseSse(srv.sent[srv.bodies.indexOf(bash[0])]).find(e => e.type === 'content_block_delta' && e.delta.type === 'signature_delta').delta.signature
  const assistant = bash[1].messages.find((m: any) => m.role === 'assistant' && Array.isArray(m.content) && m.content.some((b: any) => b.type === 'thinking'))
  const thinking = assistant?.content.find((b: any) => b.type === 'thinking')
  t.equal(thinking?.signature, sentSignature, 'Claude Code replays the signature (our envelope) byte-exact')
  t.equal(thinking?.thinking, 'I should write the file with Bash.')
  t.match(assistant.content.find((b: any) => b.type === 'tool_use'), { id: 'call_cc1', name: 'Bash' })
  t.ok(budget.idle)
})

/** A translated stream that fails, with its signed failure tail, as the worker will write it. */
function failing (from: Protocol, to: Protocol, tools: ToolDef[], frames: Frame[], budget: CountingBudget): Buffer {
  const request: CanonicalRequest = { client: to, model: 'm', stream: true, system: [], messages: [], tools, droppedTools: [] }
  const tr = createStreamTranslator({ from, to, request, budget, issuer: `${from}:prov` })
  const out: Buffer[] = []
  for (const f of frames) out.push(...tr.push(f.event, f.data))
  out.push(...tr.end())
  const f = tr.failure
  if (f === null) throw new Error('expected a failure')
  const record = buildFailureRecord({ code: f.code as FailureRecord['code'], message: f.message, exchangeId: 'ex', runId: null, provider: 'prov', model: 'm', framesRelayed: 0, bytesRelayed: 0, usage: null, partial: true })
  out.push(tr.failureTail(record, signRecord(record, Buffer.from('sluice-test-signing-key-32-bytes'))))
  return Buffer.concat(out)
}

t.test('Codex CLI: a length stop inside a call is never run; rate limit and context window read from error.code', async t => {
  const tools: ToolDef[] = [{ kind: 'function', name: 'exec_command', wireName: 'exec_command' }]
  const providerError = (code: string, message: string): Frame[] => [...chatFrames({ text: 'a', finish: null, usage: false, done: false }), { event: null, data: { error: { message, type: 'invalid_request_error', code } } }]
  const cases: Array<[string, Frame[], RegExp]> = [
    // complete-looking arguments, but the provider said length: running it would create ran.txt
    ['length inside a call', chatFrames({ text: 'Creating.', calls: [{ id: 'call_x', name: 'exec_command', args: '{"cmd":"touch ran.txt"}' }], finish: 'length' }), /stream disconnected before completion: sluice provider_protocol_error/],
    ['rate limit', providerError('rate_limit_exceeded', 'Rate limit reached. Please try again in 1s.'), /rate limit exceeded: sluice provider_rate_limited/],
    ['context window', providerError('context_length_exceeded', 'maximum context length is 1000 tokens'), /ran out of room in the model's context window/],
  ]
  for (const [name, frames, message] of cases) {
    const budget = new CountingBudget()
    const srv = await serveTurns((_b, req) => req.url?.endsWith('/responses') === true ? failing('openai-chat', 'openai-responses', tools, frames, budget) : null)
    const home = mkdtempSync(join(tmpdir(), 'sluice-codex-home-'))
    const work = mkdtempSync(join(tmpdir(), 'sluice-codex-work-'))
    writeFileSync(join(home, 'config.toml'), `model = "gpt-5.5"\nmodel_provider = "sluice"\n[model_providers.sluice]\nname = "sluice"\nbase_url = "${srv.url}/v1"\nenv_key = "SLUICE_KEY"\nwire_api = "responses"\nstream_max_retries = 1\nrequest_max_retries = 0\n`)
    const r = await runClient('codex', ['exec', '--skip-git-repo-check', '--dangerously-bypass-approvals-and-sandbox', 'go'], work, { CODEX_HOME: home, SLUICE_KEY: 'sk-test', HOME: home })
    await srv.close()
    t.not(r.code, 0, `${name}: codex failed`)
    t.match(r.stdout + r.stderr, message, `${name}: ${message}`)
    t.notOk(existsSync(join(work, 'ran.txt')), `${name}: no call ran`)
    t.ok(budget.idle, `${name}: budget idle`)
    rmSync(home, { recursive: true, force: true })
    rmSync(work, { recursive: true, force: true })
  }
})

t.test('Claude Code: a length stop inside a Bash call is an API error mid-response, the call never runs', async t => {
  const budget = new CountingBudget()
  const tools: ToolDef[] = [{ kind: 'function', name: 'Bash', wireName: 'Bash' }]
  const srv = await serveTurns(body => body.stream === true ? failing('openai-chat', 'anthropic', tools, chatFrames({ text: 'Creating.', calls: [{ id: 'call_x', name: 'Bash', args: '{"command":"touch ran.txt"}' }], finish: 'length' }), budget) : null)
  t.teardown(srv.close)
  const home = mkdtempSync(join(tmpdir(), 'sluice-claude-home-'))
  const work = mkdtempSync(join(tmpdir(), 'sluice-claude-work-'))
  t.teardown(() => { rmSync(home, { recursive: true, force: true }); rmSync(work, { recursive: true, force: true }) })
  const r = await runClient('claude', ['-p', 'go', '--allowedTools', 'Bash', '--model', 'claude-opus-5-5'], work, { HOME: home, ANTHROPIC_BASE_URL: srv.url, ANTHROPIC_API_KEY: 'sk-test', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1' })
  t.not(r.code, 0)
  t.match(r.stdout, /API Error/)
  t.notOk(existsSync(join(work, 'ran.txt')), 'the cut call never ran')
  t.ok(budget.idle)
})
