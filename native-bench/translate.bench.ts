// Translated relay cost per 1000 provider events: a Chat Completions provider stream
// translated for a Responses client and for a Messages client (SseFramer -> pushFrame: the
// frame's JSON parsed, decoded to canonical events, rendered as the client's SSE), against
// the same-protocol path on the same bytes (framer + byte classifier + tracker, the relay's
// inspector). Issue 12's target for the translated relay: <= 3 ms CPU per 1000 events.
//
// Streams: the simulated provider's Chat stream of 2000 text deltas (with include_usage), in
// the chunks the socket delivered them; and a scripted Chat stream of 32 interleaved parallel
// tool calls (6-byte argument fragments, ~1900 frames), the buffering case. Only the work on
// bytes already in memory is timed: no sockets, no HTTP.
//
//   node native-bench/translate.bench.ts [--rounds N] [--quick]
// (also run by `npm run bench`; --quick = 60 rounds). Prints a table; exits 0.

import { fetchChunks } from './sim-chunks.ts'
import { startSim } from '../src/sim/index.ts'
import { SseFramer } from '../src/sse/framer.ts'
import { inspectorFor, StreamTracker } from '../src/protocols/index.ts'
import { CountingBudget, type CanonicalRequest, type Protocol } from '../src/translate/canonical.ts'
import { createStreamTranslator } from '../src/translate/stream/index.ts'

interface Stream { name: string; chunks: Buffer[]; events: number; bytes: number }

/** 32 calls, their 6-byte fragments interleaved by index, then finish, usage, [DONE]. */
function interleaved (): Buffer[] {
  const head = (delta: unknown, finish: string | null = null): string => 'data: ' + JSON.stringify({ id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: 1796000000, model: 'gpt-x', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] }) + '\n\n'
  const out: string[] = [head({ role: 'assistant', content: '' })]
  const args = Array.from({ length: 32 }, (_, i) => JSON.stringify({ cmd: `grep -rn "pattern-${i}" src/ | head -50`, workdir: '/work/repo', yield_time_ms: 1000 + i }))
  const parts = args.map(a => { const p: string[] = []; for (let i = 0; i < a.length; i += 6) p.push(a.slice(i, i + 6)); return p })
  const longest = Math.max(...parts.map(p => p.length))
  for (let k = 0; k < longest; k++) {
    for (let i = 0; i < 32; i++) {
      if (k >= parts[i].length) continue
      out.push(head({ tool_calls: [k === 0 ? { index: i, id: `call_${i}`, type: 'function', function: { name: 'exec_command', arguments: parts[i][0] } } : { index: i, function: { arguments: parts[i][k] } }] }))
    }
  }
  out.push(head({}, 'tool_calls'))
  out.push('data: ' + JSON.stringify({ id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: 1796000000, model: 'gpt-x', choices: [], usage: { prompt_tokens: 100, completion_tokens: 900, total_tokens: 1000 } }) + '\n\n')
  out.push('data: [DONE]\n\n')
  const all = Buffer.from(out.join(''))
  const chunks: Buffer[] = []
  for (let i = 0; i < all.length; i += 16384) chunks.push(all.subarray(i, i + 16384))
  return chunks
}

const REQ = (client: Protocol): CanonicalRequest => ({ client, model: 'gpt-x', stream: true, system: [], messages: [], tools: [{ kind: 'function', name: 'exec_command', wireName: 'exec_command' }], droppedTools: [] })

function sameProtocol (s: Stream): number {
  const inspector = inspectorFor('openai-chat')
  const tracker = new StreamTracker(inspector)
  const framer = new SseFramer({
    onFrame: frame => {
      if (tracker.frame(frame, inspector.classify(frame))) tracker.apply(inspector.inspect(frame))
    },
    onOversize: n => tracker.oversize(n),
  })
  for (const c of s.chunks) framer.push(c)
  const v = tracker.end({ trailingBytes: framer.end()?.length ?? 0 })
  if (!v.ok) throw new Error(`bench stream did not validate: ${v.failure?.message}`)
  return tracker.framesSeen
}

function translated (to: Protocol): (s: Stream) => number {
  const request = REQ(to)
  return s => {
    const budget = new CountingBudget()
    const t = createStreamTranslator({ from: 'openai-chat', to, request, budget, issuer: 'openai-chat:bench', includeUsage: true })
    let n = 0
    let out = 0
    const framer = new SseFramer({
      onFrame: frame => {
        n++
        for (const b of t.pushFrame(frame)) out += b.length
      },
    })
    for (const c of s.chunks) framer.push(c)
    framer.end()
    for (const b of t.end()) out += b.length
    if (t.failure !== null || !t.finished) throw new Error(`translation did not finish: ${t.failure?.message}`)
    if (!budget.idle || out === 0) throw new Error('budget not idle after the stream')
    return n
  }
}

function framerOnly (s: Stream): number {
  let n = 0
  const framer = new SseFramer({ onFrame: () => { n++ } })
  for (const c of s.chunks) framer.push(c)
  framer.end()
  return n
}

function measure (fn: (s: Stream) => number, s: Stream, rounds: number): number {
  for (let i = 0; i < Math.min(50, rounds); i++) fn(s) // warm up
  const times: number[] = []
  for (let i = 0; i < rounds; i++) {
    const t0 = process.cpuUsage()
    const n = fn(s)
    const d = process.cpuUsage(t0)
    if (n !== s.events) throw new Error(`counted ${n} events, expected ${s.events}`)
    times.push((d.user + d.system) / 1000)
  }
  times.sort((a, b) => a - b)
  return times[Math.floor(times.length / 2)] // median CPU ms per stream
}

export async function main (argv: string[] = process.argv.slice(2)): Promise<void> {
  const r = argv.indexOf('--rounds')
  const fallback = argv.includes('--quick') ? 60 : 300
  const rounds = r === -1 ? fallback : Math.max(10, Number(argv[r + 1]) || fallback)
  const sim = await startSim()
  const streams: Stream[] = []
  try {
    const text = await fetchChunks(sim.url, '/v1/chat/completions', { model: 'gpt-4o-mini', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: '#sim tokens=2000' }] })
    for (const [name, chunks] of [['chat text', text], ['chat 32 interleaved calls', interleaved()]] as const) {
      const s: Stream = { name, chunks, events: 0, bytes: chunks.reduce((a, c) => a + c.length, 0) }
      s.events = framerOnly(s)
      streams.push(s)
    }
  } finally {
    await sim.close()
  }
  const rows: string[][] = [['provider stream', 'events', 'KiB', 'same-protocol relay', '-> Responses client', '-> Messages client']]
  for (const s of streams) {
    const per1k = (ms: number): string => ((ms * 1000) / s.events).toFixed(3) + ' ms'
    rows.push([s.name, String(s.events), (s.bytes / 1024).toFixed(0), per1k(measure(sameProtocol, s, rounds)), per1k(measure(translated('openai-responses'), s, rounds)), per1k(measure(translated('anthropic'), s, rounds))])
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map(row => row[i].length)))
  console.log(`translate: CPU per 1000 provider events (median of ${rounds} runs, process.cpuUsage; Node ${process.versions.node}; target for the translated relay <= 3 ms)`)
  for (const row of rows) console.log(row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i]))).join('  '))
}

if (import.meta.main) await main()
