// Relay inspection cost per 1000 events: sluice's framer + byte classifier (+ tracker, and
// inspect() on the few frames that need it) against a naive relay inspector that decodes the
// chunks to strings, splits on "\n\n" and JSON.parses every frame.
//
// Streams: the simulated provider's Chat Completions (with include_usage), Responses and
// Messages streams of 2000 text deltas back to back, in the chunks the socket delivered them
// (the sim writes 16 KiB batches). Only the inspection work is timed, on bytes already in
// memory: no sockets, no HTTP. DESIGN.md's target for the whole relay is <= 2 ms of CPU per
// 1000 events; this share should be a small part of it.
//
//   node native-bench/relay-frames.bench.ts [--rounds N] [--quick]
// (also run by `npm run bench`; --quick = 60 rounds). Prints a table; exits 0.

import { fetchChunks } from './sim-chunks.ts'
import { startSim } from '../src/sim/index.ts'
import { SseFramer } from '../src/sse/framer.ts'
import { inspectorFor, StreamTracker, type Protocol } from '../src/protocols/index.ts'

interface Stream {
  name: string
  protocol: Protocol
  chunks: Buffer[]
  events: number
  bytes: number
}

const BODIES: Record<Protocol, [string, Record<string, unknown>]> = {
  'openai-chat': ['/v1/chat/completions', { model: 'gpt-4o-mini', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: '#sim tokens=2000' }] }],
  'openai-responses': ['/v1/responses', { model: 'gpt-5.5', stream: true, input: '#sim tokens=2000' }],
  anthropic: ['/v1/messages', { model: 'claude-opus-5-5', max_tokens: 4096, stream: true, messages: [{ role: 'user', content: '#sim tokens=2000' }] }],
}

/** sluice's path: framer -> classify -> tracker (inspect only what the tracker asks for). */
function sluice (s: Stream): number {
  const inspector = inspectorFor(s.protocol)
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

/** The framer alone: boundaries only. */
function framerOnly (s: Stream): number {
  let n = 0
  const framer = new SseFramer({ onFrame: () => { n++ } })
  for (const c of s.chunks) framer.push(c)
  framer.end()
  return n
}

/** The naive inspector: strings, split on "\n\n", JSON.parse every frame. */
function naive (s: Stream): number {
  let buffer = ''
  let n = 0
  let usage: unknown = null
  for (const c of s.chunks) {
    buffer += c.toString('utf8')
    const parts = buffer.split('\n\n')
    buffer = parts.pop() ?? ''
    for (const part of parts) {
      if (part === '') continue
      const i = part.indexOf('data: ')
      const data = i === -1 ? '' : part.slice(i + 6)
      n++
      if (data === '[DONE]') continue
      const obj = JSON.parse(data) as { usage?: unknown; response?: { usage?: unknown } }
      if (obj.usage) usage = obj.usage
      else if (obj.response?.usage) usage = obj.response.usage
    }
  }
  if (usage === null) throw new Error('naive: no usage')
  return n
}

function measure (fn: (s: Stream) => number, s: Stream, rounds: number): number {
  for (let i = 0; i < Math.min(50, rounds); i++) fn(s) // warm up
  const times: number[] = []
  for (let i = 0; i < rounds; i++) {
    const t0 = process.hrtime.bigint()
    const n = fn(s)
    const t1 = process.hrtime.bigint()
    if (n !== s.events) throw new Error(`counted ${n} events, expected ${s.events}`)
    times.push(Number(t1 - t0) / 1e6)
  }
  times.sort((a, b) => a - b)
  return times[Math.floor(times.length / 2)] // median ms per stream
}

export async function main (argv: string[] = process.argv.slice(2)): Promise<void> {
  const r = argv.indexOf('--rounds')
  const fallback = argv.includes('--quick') ? 60 : 300
  const rounds = r === -1 ? fallback : Math.max(10, Number(argv[r + 1]) || fallback)
  const sim = await startSim()
  const streams: Stream[] = []
  try {
    for (const [name, protocol] of [['chat', 'openai-chat'], ['responses', 'openai-responses'], ['messages', 'anthropic']] as const) {
      const [path, body] = BODIES[protocol]
      const chunks = await fetchChunks(sim.url, path, body)
      const s: Stream = { name, protocol, chunks, events: 0, bytes: chunks.reduce((a, c) => a + c.length, 0) }
      s.events = framerOnly(s)
      streams.push(s)
    }
  } finally {
    await sim.close()
  }

  const rows: string[][] = [['stream', 'events', 'KiB', 'chunks', 'framer', 'framer+classify+tracker', 'naive parse-all', 'speed-up']]
  for (const s of streams) {
    const per1k = (ms: number): number => (ms * 1000) / s.events
    const f = per1k(measure(framerOnly, s, rounds))
    const c = per1k(measure(sluice, s, rounds))
    const n = per1k(measure(naive, s, rounds))
    rows.push([s.name, String(s.events), (s.bytes / 1024).toFixed(0), String(s.chunks.length), f.toFixed(3) + ' ms', c.toFixed(3) + ' ms', n.toFixed(3) + ' ms', (n / c).toFixed(1) + 'x'])
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map(row => row[i].length)))
  console.log(`relay-frames: CPU per 1000 events (median of ${rounds} runs; Node ${process.versions.node}; target for the whole relay <= 2 ms)`)
  for (const row of rows) console.log(row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i]))).join('  '))
}

if (import.meta.main) await main()
