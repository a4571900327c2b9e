// CollectingSink and sinkResult (worker/sink.ts): the stand-in for a ServerResponse in
// non-blocking mode and JSON-RPC. Bodies are written through real Node streams (pipeline) into
// a sink whose bytes are an ExchangeScope's reservation on a real ledger.

import t from 'tap'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { SluiceError } from '../../../src/errors.ts'
import type { Ledger } from '../../../src/ledger/ledger.ts'
import { assertIdle, makeLedger } from '../ledger/helpers.ts'
import { ExchangeScope } from '../../../worker/scope.ts'
import { CollectingSink, sinkResult, withRawMember, type SinkOptions } from '../../../worker/sink.ts'

function setup (cap: number, over: Partial<SinkOptions> = {}, storageBytes = 1_000): { ledger: Ledger; scope: ExchangeScope; sink: CollectingSink } {
  const ledger = makeLedger({ storageBytes })
  // 'processing' stands for the delivery, which disposes of the sink before it settles.
  const scope = new ExchangeScope(ledger, ['processing', 'http'])
  const sink = new CollectingSink({ cap, bytes: scope, frameBytes: 4096, ...over })
  scope.settleOnClose(sink)
  return { ledger, scope, sink }
}

/** Writes `status`/`headers` then every chunk through a real pipeline into the sink. */
async function deliver (sink: CollectingSink, status: number, contentType: string, chunks: Array<string | Buffer>): Promise<void> {
  sink.writeHead(status, { 'content-type': contentType })
  await pipeline(Readable.from(chunks.map((c) => Buffer.from(c))), sink)
}

const json = (v: unknown): string => JSON.stringify(v)

/** The delivery's end: dispose, settle 'processing', wait for the sink's close (http). */
async function finish (sink: CollectingSink, scope: ExchangeScope): Promise<void> {
  sink.dispose()
  scope.settle('processing')
  // 'close' may still be on its way after `closed` turned true (destroy emits it next tick).
  if (scope.pendingParty('http')) await new Promise((resolve) => sink.once('close', resolve))
}

t.test('a body within the cap is kept whole, reserved, and returned at dispose', async (t) => {
  const { ledger, scope, sink } = setup(100)
  const body = json({ id: 'x', choices: [{ message: { content: 'hello' } }] })
  sink.writeHead(200, { 'content-type': 'application/json' })
  sink.write(Buffer.from(body.slice(0, 10)))
  sink.write(Buffer.from(body.slice(10)))
  await new Promise<void>((resolve) => sink.end(resolve))
  t.equal(sink.overflow, 'none')
  t.equal(sink.bytes, body.length)
  t.equal(scope.heldBytes, body.length, 'every kept byte is reserved through the scope')
  t.equal(ledger.snapshot().storage.reserved, body.length)
  const r = sinkResult(sink, { code: 'ok' })
  t.same(r, { ok: true, status: 200, raw: body })
  t.equal(scope.isReleased, false, 'the sink closed, but the delivery has not settled')
  sink.dispose()
  sink.dispose()
  t.equal(scope.heldBytes, 0, 'bytes back at 0 after dispose (idempotent)')
  t.equal(ledger.snapshot().storage.reserved, 0)
  t.equal(sink.body, null)
  scope.settle('processing')
  t.equal(scope.isReleased, true, 'the sink closing settled http')
  assertIdle(t, ledger)
})

t.test('past the cap: output_too_large, nothing kept, every byte counted', async (t) => {
  const { ledger, scope, sink } = setup(50)
  await deliver(sink, 200, 'application/json', ['{"a":"' + 'x'.repeat(30), 'y'.repeat(30) + '"}', 'more'])
  t.equal(sink.overflow, 'cap')
  t.equal(sink.bytes, 6 + 30 + 32 + 4)
  t.equal(sink.body, null, 'a truncated body is never kept')
  t.equal(scope.heldBytes, 0, 'the reservation went back at the overflow')
  const r = sinkResult(sink, { code: 'ok' }, { rpcId: 7 })
  t.equal(r.ok, false)
  if (!r.ok) {
    t.equal(r.error.code, 'output_too_large')
    t.same(r.error.details, { rpcId: 7, bytes: 72 })
    t.equal(r.error.status, 502)
  }
  await finish(sink, scope)
  assertIdle(t, ledger)
})

t.test('past the storage budget: storage_budget_exhausted, the reservation returned', async (t) => {
  const { ledger, scope, sink } = setup(10_000, {}, 100)
  const other = new ExchangeScope(ledger)
  other.reserve(40) // someone else holds part of the budget
  await deliver(sink, 200, 'application/json', ['{"a":"' + 'x'.repeat(30), 'y'.repeat(30) + '"}'])
  t.equal(sink.overflow, 'budget')
  t.equal(scope.heldBytes, 0)
  t.equal(ledger.snapshot().storage.reserved, 40, "only the other exchange's bytes remain")
  const r = sinkResult(sink, { code: 'ok' })
  t.equal(r.ok, false)
  if (!r.ok) {
    t.equal(r.error.code, 'storage_budget_exhausted')
    t.equal(r.error.details.bytes, 68)
  }
  other.discard()
  await finish(sink, scope)
  assertIdle(t, ledger)
})

t.test('a refusal written into the sink is read back with its code, details and status', async (t) => {
  const { ledger, scope, sink } = setup(1000)
  const refusal = new SluiceError('provider_error', { providerStatus: 404, type: 'not_found_error' }, 'the provider answered with an error: no such model').withStatus(404)
  await deliver(sink, refusal.status, 'application/json', [json(refusal.toBody())])
  const r = sinkResult(sink, { code: 'provider_error' })
  t.equal(r.ok, false)
  if (!r.ok) {
    t.equal(r.error.code, 'provider_error')
    t.equal(r.error.status, 404, 'the status it was sent with')
    t.equal(r.error.message, 'the provider answered with an error: no such model')
    t.same(r.error.details, { providerStatus: 404, type: 'not_found_error' })
  }
  await finish(sink, scope)
  assertIdle(t, ledger)
})

t.test('a 4xx/5xx that is not our refusal shape, or an ending without a body, gives the exchange code', async (t) => {
  const a = setup(1000)
  await deliver(a.sink, 503, 'application/json', ['not json'])
  const ra = sinkResult(a.sink, { code: 'ok' }, { rpcId: 1 })
  t.equal(ra.ok, false)
  if (!ra.ok) { t.equal(ra.error.code, 'provider_error'); t.same(ra.error.details, { rpcId: 1 }) }
  await finish(a.sink, a.scope)
  assertIdle(t, a.ledger)

  const b = setup(1000)
  b.sink.writeHead(200, { 'content-type': 'text/event-stream' })
  b.sink.destroy()
  const rb = sinkResult(b.sink, { code: 'client_closed' })
  t.equal(rb.ok, false)
  if (!rb.ok) t.equal(rb.error.code, 'client_closed')
  await finish(b.sink, b.scope)
  t.equal(b.scope.isReleased, true)
  assertIdle(t, b.ledger)
})

t.test('an event stream goes out frame by frame, whatever the write boundaries; nothing is kept', async (t) => {
  const frames: Array<[string | null, string]> = []
  const { ledger, scope, sink } = setup(10, { onFrame: (event, data) => { frames.push([event, data]) } })
  const stream = 'event: a\ndata: {"x":1}\n\n: comment\n\ndata: two\ndata: lines\n\nevent: b\ndata: last\n\n'
  const chunks: string[] = []
  for (let i = 0; i < stream.length; i += 3) chunks.push(stream.slice(i, i + 3))
  await deliver(sink, 200, 'text/event-stream; charset=utf-8', chunks)
  t.same(frames, [['a', '{"x":1}'], [null, 'two\nlines'], ['b', 'last']])
  t.equal(sink.overflow, 'none', 'the cap is for collected bodies, not frames handed on')
  t.equal(sink.bytes, stream.length)
  t.equal(scope.heldBytes, 0)
  t.same(sinkResult(sink, { code: 'ok' }), { ok: true, status: 200, raw: null })
  await finish(sink, scope)
  assertIdle(t, ledger)
})

t.test('withRawMember embeds the raw JSON text as one more member', async (t) => {
  const raw = json({ id: 'chatcmpl-1', choices: [{ message: { role: 'assistant', content: 'a "quoted" \u00e9 text' } }], usage: { total_tokens: 3 } })
  t.same(JSON.parse(withRawMember({ jsonrpc: '2.0', id: 4 }, 'result', raw)), { jsonrpc: '2.0', id: 4, result: JSON.parse(raw) })
  t.same(JSON.parse(withRawMember({}, 'result', raw)), { result: JSON.parse(raw) }, 'into an empty object')
  t.same(JSON.parse(withRawMember({ a: [1, { b: null }] }, 'r', null)), { a: [1, { b: null }], r: null }, 'null when there is none')
  t.same(JSON.parse(withRawMember({ 'k"ey': 1 }, 'we"ird', '[]')), { 'k"ey': 1, 'we"ird': [] }, 'the key is escaped')
})
