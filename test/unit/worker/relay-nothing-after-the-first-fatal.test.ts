// Two relay defects the worker unit tests found (each test failed on worker/relay.ts before the
// fix): frames after an in-band provider error in the same upstream read reached the client,
// and whole frames before an oversize one in the same read were withheld. Same rig as relay.test.ts.
//
// A real node:http upstream sends a Chat event stream in two writes, cut at a given byte
// offset; the relay reads it through undici's `request` (a real Dispatcher.ResponseData) and
// writes to the ServerResponse of a second node:http server, whose client (undici again)
// collects every byte. The upstream sends its second part only once the relay has taken in
// the first: the ledger's stream gauge (sluice_stream_pending_bytes) turns non-zero when the
// relay reserves for the first chunk, and by the next turn of the event loop its synchronous
// flush is done. So each run relays exactly the split it names, with no timing involved.
//
// What the relay wrote is read off the real ServerResponse's write()/end() calls (a
// recording wrapper around Node's own methods, which still do the writing), to see where the
// client's bytes stood when the first part had been relayed.

import t from 'tap'
import { randomUUID } from 'node:crypto'
import type { ServerResponse } from 'node:http'
import { request } from 'undici'
import { RG_PENDING_BYTES } from '../../../src/ledger/layout.ts'
import type { Ledger } from '../../../src/ledger/ledger.ts'
import { verifyRecord, type FailureRecord } from '../../../src/sse/sign.ts'
import { assertIdle, idleProblems, makeLedger, turn } from '../ledger/helpers.ts'
import { newRecord, type ExchangeRecord } from '../../../worker/deps.ts'
import { relayStream, type Outcome } from '../../../worker/relay.ts'
import { ExchangeScope } from '../../../worker/scope.ts'
import { PROVIDER_KEY, SIGNING_KEY, startServer, unitConfig, unitDeps } from './helpers.ts'

const FRAME_CAP = 1024
/** Room for any of these streams (a chunk is reserved with the framer's copy of its partial frame). */
const STORAGE = 64 * 1024

function chunk (content: string | null, finish: string | null = null): string {
  const delta = content === null ? {} : { content }
  return 'data: ' + JSON.stringify({ id: 'chatcmpl-u1', object: 'chat.completion.chunk', model: 'unit-model', choices: [{ index: 0, delta, finish_reason: finish }] }) + '\n\n'
}
const USAGE = 'data: ' + JSON.stringify({ id: 'chatcmpl-u1', object: 'chat.completion.chunk', model: 'unit-model', choices: [], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } }) + '\n\n'
const DONE = 'data: [DONE]\n\n'

/** A complete, valid stream: deltas, the finish chunk, usage, [DONE]. */
const GOOD = [chunk('Hel'), chunk('lo, '), ': keep-alive\n\n', chunk('world'), chunk(null, 'stop'), USAGE, DONE]
/** Two good frames, then one cut short (not a JSON object: malformed), then more. */
const MALFORMED_AT = 2
const MALFORMED = [chunk('Hel'), chunk('lo'), 'data: {"id":"chatcmpl-u1","choices":[{"delta":{"content":"bro\n\n', chunk('ken'), chunk(null, 'stop'), DONE]

/** Where each frame starts, and the end. */
function boundaries (frames: readonly string[]): number[] {
  const out = [0]
  for (const f of frames) out.push(out[out.length - 1] + Buffer.byteLength(f))
  return out
}

interface Run {
  ledger: Ledger
  parts: Buffer[]
  writes: Buffer[]
  /** Bytes the relay had written when the first part was relayed (null: one part only). */
  writtenAtSplit: number | null
}

interface Result { client: Buffer; outcome: Outcome; rec: ExchangeRecord; writtenAtSplit: number | null; run: Run }

let current: Run | null = null
let done: ((r: { outcome: Outcome; rec: ExchangeRecord }) => void) | null = null
const written = (run: Run): number => run.writes.reduce((n, b) => n + b.length, 0)

const upstream = await startServer((_req, res) => {
  const run = current!
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
  let closed = false
  res.once('close', () => { closed = true })
  void (async () => {
    for (let i = 0; i < run.parts.length; i++) {
      res.write(run.parts[i])
      if (i === 0 && run.parts.length > 1) {
        // (A relay that refused the first chunk ends the exchange: the upstream is closed.)
        while (run.ledger.gauges()[RG_PENDING_BYTES] === 0 && !closed) await turn()
        await turn()
        run.writtenAtSplit = written(run)
      }
    }
    res.end()
  })()
})

const gateway = await startServer((req, res) => {
  const run = current!
  const deps = unitDeps(run.ledger, unitConfig({ sseFrameBytes: FRAME_CAP }))
  const scope = new ExchangeScope(run.ledger, ['processing'])
  const ac = new AbortController()
  req.once('close', () => { if (!res.writableFinished) ac.abort() })
  record(res, run.writes)
  const rec = newRecord({ exchangeId: randomUUID(), runId: null, route: 'chat', mode: 'blocking', provider: 'unit-chat', model: 'unit-model', stream: true })
  void (async () => {
    const up = await request(upstream.url + '/v1/chat/completions', { method: 'POST', body: '{}', signal: ac.signal })
    const outcome = await relayStream({ deps, rec, route: 'chat', up, res, scope, signal: ac.signal })
    scope.settle('processing')
    done!({ outcome, rec })
  })()
})

t.teardown(async () => { await gateway.close(); await upstream.close() })

/** Records what goes through `res.write` / `res.end` (Node's own methods do the writing). */
function record (res: ServerResponse, into: Buffer[]): void {
  const write = res.write.bind(res) as (chunk: Buffer) => boolean
  const end = res.end.bind(res) as (chunk?: Buffer, cb?: () => void) => ServerResponse
  res.write = ((c: Buffer) => { into.push(Buffer.from(c)); return write(c) }) as typeof res.write
  res.end = ((c?: Buffer | (() => void), cb?: () => void) => {
    if (typeof c === 'function') return end(undefined, c)
    if (c !== undefined && c !== null) into.push(Buffer.from(c))
    return end(c, cb)
  }) as typeof res.end
}

/** Relays `bytes`, cut into two writes at `split` (none when 0 or the end). */
async function relay (bytes: Buffer, split: number): Promise<Result> {
  const parts = split > 0 && split < bytes.length ? [bytes.subarray(0, split), bytes.subarray(split)] : [bytes]
  const run: Run = { ledger: makeLedger({ storageBytes: STORAGE }), parts, writes: [], writtenAtSplit: null }
  current = run
  const settled = new Promise<{ outcome: Outcome; rec: ExchangeRecord }>((resolve) => { done = resolve })
  const res = await request(gateway.url + '/')
  const client = Buffer.from(await res.body.arrayBuffer())
  const { outcome, rec } = await settled
  return { client, outcome, rec, writtenAtSplit: run.writtenAtSplit, run }
}

/** The failure tail (one Chat error frame) after `prefix` bytes of the client's stream. */
function tailOf (client: Buffer, prefix: number): { record: FailureRecord; signature: string; error: Record<string, unknown> } {
  const text = client.subarray(prefix).toString('utf8')
  if (!text.startsWith('data: {"error":') || !text.endsWith('\n\n') || text.indexOf('\n\n') !== text.length - 2) throw new Error(`not one error frame: ${JSON.stringify(text.slice(0, 80))}`)
  const error = (JSON.parse(text.slice(6)) as { error: Record<string, unknown> & { sluice: { record: FailureRecord; signature: string } } }).error
  return { record: error.sluice.record, signature: error.sluice.signature, error }
}


t.test('DEFECT: no frame after the provider\'s own error event reaches the client, at every split', async (t) => {
  const inBand = 'data: ' + JSON.stringify({ error: { message: 'the server is overloaded', type: 'server_error', code: 'overloaded' } }) + '\n\n'
  const frames = [chunk('a'), inBand, chunk('b')]
  const bytes = Buffer.from(frames.join(''))
  const after = boundaries(frames)[2]
  const wrong: string[] = []
  for (let split = 0; split < bytes.length; split++) {
    const r = await relay(bytes, split)
    const at = r.client.indexOf('data: {"error":{"message":"sluice ')
    const record = tailOf(r.client, at).record
    if (at !== after) wrong.push(`split ${split}: the tail starts at ${at}, not ${after} (frame b went out after the error event); the record says ${record.framesRelayed} frames, ${record.bytesRelayed} bytes`)
  }
  t.same(wrong, [])
})

t.test('DEFECT: whole frames before an oversize frame reach the client, whatever the chunking', async (t) => {
  const big = 'data: ' + JSON.stringify({ id: 'chatcmpl-u1', choices: [{ index: 0, delta: { content: 'x'.repeat(FRAME_CAP) }, finish_reason: null }] }) + '\n\n'
  const frames = [chunk('a'), chunk('b'), big, chunk(null, 'stop'), DONE]
  const bytes = Buffer.from(frames.join(''))
  const cut = boundaries(frames)[2]
  const wrong: string[] = []
  for (let split = 0; split < bytes.length; split += 37) {
    const r = await relay(bytes, split)
    const at = r.client.indexOf('data: {"error":')
    if (at !== cut) wrong.push(`split ${split}: the tail starts at ${at}, not ${cut}`)
  }
  t.same(wrong, [])
})

/** idleProblems, plus this worker's stream gauges back at 0. */
function idleOf (ledger: Ledger): string[] {
  const g = ledger.gauges()
  return [...idleProblems(ledger), ...(g.some((v) => v !== 0) ? [`gauges ${JSON.stringify(g)}`] : [])]
}
