// relayStream (worker/relay.ts): provider bytes to the client, whole frames only.
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
async function relay (bytes: Buffer, split: number, storageBytes = STORAGE, prepare?: (ledger: Ledger) => void): Promise<Result> {
  const parts = split > 0 && split < bytes.length ? [bytes.subarray(0, split), bytes.subarray(split)] : [bytes]
  const run: Run = { ledger: makeLedger({ storageBytes }), parts, writes: [], writtenAtSplit: null }
  prepare?.(run.ledger)
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

t.test('a valid stream, cut at every byte offset: byte-exact, and only whole frames were ever written', async (t) => {
  const bytes = Buffer.from(GOOD.join(''))
  const bounds = boundaries(GOOD)
  const wrong: string[] = []
  for (let split = 0; split < bytes.length; split++) {
    const r = await relay(bytes, split)
    const expectAtSplit = split === 0 ? null : Math.max(...bounds.filter((b) => b <= split))
    if (!r.client.equals(bytes)) wrong.push(`split ${split}: the client got ${r.client.length} bytes, not the stream`)
    if (r.outcome.code !== 'ok') wrong.push(`split ${split}: outcome ${r.outcome.code}`)
    if (r.writtenAtSplit !== expectAtSplit) wrong.push(`split ${split}: ${r.writtenAtSplit} bytes written after the first part, expected ${expectAtSplit} (the last frame boundary before it)`)
    if (r.rec.bytesOut !== bytes.length || r.rec.frames !== GOOD.length || r.rec.evidence !== true || r.rec.partial !== false) wrong.push(`split ${split}: rec ${JSON.stringify({ bytesOut: r.rec.bytesOut, frames: r.rec.frames, evidence: r.rec.evidence, partial: r.rec.partial })}`)
    const idle = idleOf(r.run.ledger)
    if (idle.length > 0) wrong.push(`split ${split}: ${idle.join('; ')}`)
  }
  t.same(wrong, [], `${bytes.length} splits`)
})

t.test('a malformed frame, at every split: never reaches the client; the signed tail starts where it began', async (t) => {
  const bytes = Buffer.from(MALFORMED.join(''))
  const bounds = boundaries(MALFORMED)
  const cut = bounds[MALFORMED_AT]
  const bad = Buffer.from(MALFORMED[MALFORMED_AT])
  const wrong: string[] = []
  for (let split = 0; split < bytes.length; split++) {
    const r = await relay(bytes, split)
    try {
      if (!r.client.subarray(0, cut).equals(bytes.subarray(0, cut))) throw new Error('the frames before it are not exact')
      if (r.client.includes(bad.subarray(0, bad.length - 2))) throw new Error('the malformed frame reached the client')
      const tail = tailOf(r.client, cut)
      if (!verifyRecord(tail.record, tail.signature, SIGNING_KEY)) throw new Error('the tail does not verify')
      if (tail.record.code !== 'provider_protocol_error' || tail.record.framesRelayed !== MALFORMED_AT || tail.record.bytesRelayed !== cut) {
        throw new Error(`record ${JSON.stringify({ code: tail.record.code, frames: tail.record.framesRelayed, bytes: tail.record.bytesRelayed })}`)
      }
      if (r.outcome.code !== 'provider_protocol_error') throw new Error(`outcome ${r.outcome.code}`)
      if (r.writtenAtSplit !== null && r.writtenAtSplit > cut) throw new Error(`${r.writtenAtSplit} bytes out before the second part`)
      if (r.rec.bytesOut !== cut || r.rec.frames !== MALFORMED_AT || r.rec.partial !== true) throw new Error(`rec bytesOut ${r.rec.bytesOut} frames ${r.rec.frames}`)
      const idle = idleOf(r.run.ledger)
      if (idle.length > 0) throw new Error(idle.join('; '))
    } catch (err) {
      wrong.push(`split ${split}: ${(err as Error).message}`)
    }
  }
  t.same(wrong, [], `${bytes.length} splits`)
})

t.test('the failure tail verifies, and says what the client received', async (t) => {
  const bytes = Buffer.from(MALFORMED.join(''))
  const r = await relay(bytes, 0)
  const cut = boundaries(MALFORMED)[MALFORMED_AT]
  const tail = tailOf(r.client, cut)
  t.ok(verifyRecord(tail.record, tail.signature, SIGNING_KEY), 'verifyRecord accepts it')
  t.notOk(verifyRecord({ ...tail.record, bytesRelayed: cut + 1 }, tail.signature, SIGNING_KEY), 'and not a changed record')
  t.notOk(verifyRecord(tail.record, tail.signature, Buffer.from('another key')), 'nor another key')
  t.match(tail.record, {
    code: 'provider_protocol_error',
    side: 'provider',
    exchangeId: r.rec.exchangeId,
    provider: 'unit-chat',
    model: 'unit-model',
    framesRelayed: MALFORMED_AT,
    bytesRelayed: cut,
    partial: true,
  })
  t.match(tail.record.message, /frame 2 is malformed/)
  t.equal(tail.error.code, 'provider_protocol_error')
  t.notOk(r.client.toString().includes('[DONE]'), 'no [DONE] after a failure')
  t.same(r.run.ledger.refusals().get('provider_protocol_error'), 1, 'counted once')
  assertIdle(t, r.run.ledger)
})

t.test('an oversize frame: nothing of it goes out; the tail is at a frame boundary before it, and says so', async (t) => {
  const big = 'data: ' + JSON.stringify({ id: 'chatcmpl-u1', choices: [{ index: 0, delta: { content: 'x'.repeat(FRAME_CAP) }, finish_reason: null }] }) + '\n\n'
  const frames = [chunk('a'), chunk('b'), big, chunk(null, 'stop'), DONE]
  const bytes = Buffer.from(frames.join(''))
  const bounds = boundaries(frames)
  const cut = bounds[2]
  const wrong: string[] = []
  for (let split = 0; split < bytes.length; split += 37) {
    const r = await relay(bytes, split)
    try {
      const at = r.client.indexOf('data: {"error":')
      if (!bounds.includes(at) || at > cut) throw new Error(`the tail starts at ${at}, not at a frame boundary up to ${cut}`)
      if (!r.client.subarray(0, at).equals(bytes.subarray(0, at))) throw new Error('the frames before the tail are not exact')
      if (r.client.includes('xxxxxxxx')) throw new Error('bytes of the oversize frame reached the client')
      const tail = tailOf(r.client, at)
      if (!verifyRecord(tail.record, tail.signature, SIGNING_KEY)) throw new Error('the tail does not verify')
      if (!/larger than the frame cap/.test(tail.record.message)) throw new Error(`record message ${tail.record.message}`)
      if (tail.record.bytesRelayed !== at || tail.record.framesRelayed !== bounds.indexOf(at)) throw new Error(`the record says ${tail.record.framesRelayed} frames / ${tail.record.bytesRelayed} bytes, the client has ${bounds.indexOf(at)} / ${at}`)
      const idle = idleOf(r.run.ledger)
      if (idle.length > 0) throw new Error(idle.join('; '))
    } catch (err) {
      wrong.push(`split ${split}: ${(err as Error).message}`)
    }
  }
  t.same(wrong, [])
  // The first part ends where the oversize frame begins: everything before it went out.
  const r = await relay(bytes, cut)
  t.equal(r.writtenAtSplit, cut)
  t.equal(tailOf(r.client, cut).record.bytesRelayed, cut)
})

t.test('a stream that ends inside a frame: the unfinished frame is held back for good, the tail is at its start', async (t) => {
  const frames = [chunk('a'), chunk('b'), chunk('never ended')]
  const full = frames.join('')
  const bytes = Buffer.from(full.slice(0, full.length - 5))
  const cut = boundaries(frames)[2]
  for (const split of [0, cut - 3, cut, cut + 4]) {
    const r = await relay(bytes, split)
    t.ok(r.client.subarray(0, cut).equals(bytes.subarray(0, cut)), `split ${split}: the whole frames`)
    t.notOk(r.client.includes('never'), 'nothing of the unfinished frame')
    const tail = tailOf(r.client, cut)
    t.ok(verifyRecord(tail.record, tail.signature, SIGNING_KEY))
    t.match(tail.record.message, /ended inside a frame/)
    assertIdle(t, r.run.ledger)
  }
})

t.test("the provider's own error event goes out whole, then the tail; one quoting a provider key never does", async (t) => {
  const inBand = 'data: ' + JSON.stringify({ error: { message: 'the server is overloaded', type: 'server_error', code: 'overloaded' } }) + '\n\n'
  const frames = [chunk('a'), inBand, chunk('b')]
  const bytes = Buffer.from(frames.join(''))
  const after = boundaries(frames)[2]
  // (Splits where the error event is the last whole frame of its chunk; see the report of
  // issue 11 for a frame after it in the same chunk.)
  for (const split of [after, after + 1, after + 40]) {
    const r = await relay(bytes, split)
    t.ok(r.client.subarray(0, after).equals(bytes.subarray(0, after)), `split ${split}: the error event reached the client whole`)
    const tail = tailOf(r.client, after)
    t.ok(verifyRecord(tail.record, tail.signature, SIGNING_KEY))
    t.match(tail.record, { code: 'provider_unavailable', framesRelayed: 2, bytesRelayed: after })
    assertIdle(t, r.run.ledger)
  }

  const leaky = 'data: ' + JSON.stringify({ error: { message: `invalid key ${PROVIDER_KEY}`, type: 'invalid_request_error', code: 'invalid_api_key' } }) + '\n\n'
  const frames2 = [chunk('a'), leaky, chunk('b')]
  const bytes2 = Buffer.from(frames2.join(''))
  const cut = boundaries(frames2)[1]
  for (const split of [0, cut + 3]) {
    const r2 = await relay(bytes2, split)
    t.notOk(r2.client.includes(PROVIDER_KEY), `split ${split}: the provider key never reaches the client`)
    t.ok(r2.client.subarray(0, cut).equals(bytes2.subarray(0, cut)))
    const tail2 = tailOf(r2.client, cut)
    t.ok(verifyRecord(tail2.record, tail2.signature, SIGNING_KEY))
    t.notOk(JSON.stringify(tail2.record).includes(PROVIDER_KEY), 'nor through the record')
    assertIdle(t, r2.run.ledger)
  }
})

t.test('a chunk the storage budget cannot hold: none of it goes out, the tail follows what did', async (t) => {
  const frames = [chunk('a'), chunk('b'), ...Array.from({ length: 20 }, (_, i) => chunk(`word ${i} `)), chunk(null, 'stop'), DONE]
  const bytes = Buffer.from(frames.join(''))
  const bounds = boundaries(frames)
  const split = bounds[2] + 10 // two whole frames, then 10 bytes of the third
  // Another exchange holds half of the budget: room for the first part (~330 bytes, plus what
  // the response still buffers), not for the rest (~3 KB, less than the whole budget).
  let other: ExchangeScope | null = null
  const r = await relay(bytes, split, 4_000, (ledger) => { other = new ExchangeScope(ledger); other.reserve(2_000) })
  t.equal(r.writtenAtSplit, bounds[2])
  const tail = tailOf(r.client, bounds[2])
  t.ok(verifyRecord(tail.record, tail.signature, SIGNING_KEY))
  t.match(tail.record, { code: 'storage_budget_exhausted', side: 'local', framesRelayed: 2, bytesRelayed: bounds[2] })
  t.equal(r.outcome.code, 'storage_budget_exhausted')
  other!.discard()
  t.same(idleOf(r.run.ledger), [])
})

/** idleProblems, plus this worker's stream gauges back at 0. */
function idleOf (ledger: Ledger): string[] {
  const g = ledger.gauges()
  return [...idleProblems(ledger), ...(g.some((v) => v !== 0) ? [`gauges ${JSON.stringify(g)}`] : [])]
}

t.test('a chunk larger than the whole storage budget is the local capacity, never the caller\'s storage_request_too_large', async (t) => {
  const frames = [chunk('a'), chunk('b'), ...Array.from({ length: 20 }, (_, i) => chunk(`word ${i} `)), chunk(null, 'stop'), DONE]
  const bytes = Buffer.from(frames.join(''))
  const bounds = boundaries(frames)
  const split = bounds[2] + 10
  // A budget of 1000 bytes: the first part fits, the ~3 KB second part is larger than all of it.
  const r = await relay(bytes, split, 1_000)
  const tail = tailOf(r.client, bounds[2])
  t.ok(verifyRecord(tail.record, tail.signature, SIGNING_KEY))
  t.match(tail.record, { code: 'storage_budget_exhausted', side: 'local' })
  t.equal(r.outcome.code, 'storage_budget_exhausted')
  t.same(idleOf(r.run.ledger), [])
})
