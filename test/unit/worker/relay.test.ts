// relayStream (worker/relay.ts): provider bytes to the client, whole frames only.
//
// The rig (startRelayRig, ./helpers.ts): a real node:http upstream sends a Chat event stream in
// two writes cut at a given byte offset, the second only once the relay has taken in the first;
// the relay reads it through undici and writes to a second node:http server's ServerResponse,
// whose undici client collects every byte; what the relay wrote by the time the first part was
// relayed is read off that ServerResponse's write()/end() calls. No timing involved.

import t from 'tap'
import type { Ledger } from '../../../src/ledger/ledger.ts'
import { verifyRecord } from '../../../src/sse/sign.ts'
import { assertIdle } from '../ledger/helpers.ts'
import { ExchangeScope } from '../../../worker/scope.ts'
import { until } from '../../helpers/gateway.ts'
import { boundaries, chunk, DONE, idleOf, PROVIDER_KEY, SIGNING_KEY, startRelayRig, tailOf, USAGE, type RelayResult } from './helpers.ts'

const FRAME_CAP = 1024

/** A complete, valid stream: deltas, the finish chunk, usage, [DONE]. */
const GOOD = [chunk('Hel'), chunk('lo, '), ': keep-alive\n\n', chunk('world'), chunk(null, 'stop'), USAGE, DONE]
/** Two good frames, then one cut short (not a JSON object: malformed), then more. */
const MALFORMED_AT = 2
const MALFORMED = [chunk('Hel'), chunk('lo'), 'data: {"id":"chatcmpl-u1","choices":[{"delta":{"content":"bro\n\n', chunk('ken'), chunk(null, 'stop'), DONE]

const rig = await startRelayRig({ sseFrameBytes: FRAME_CAP })
t.teardown(rig.close)

/** Relays `bytes` on the Chat route, cut into two writes at `split` (none when 0 or the end). */
const relay = (bytes: Buffer, split: number, storageBytes?: number, prepare?: (ledger: Ledger) => void): Promise<RelayResult> =>
  rig.relay('chat', bytes, split, storageBytes, prepare)

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

t.test('a relay waiting for the parse permit keeps its chunk\'s frames while other relays run chunks of their own', async (t) => {
  // The frame lists are shared through a worker-wide free list (worker/relay.ts FrameList). A
  // relay that waits for the permit in the middle of a chunk must keep its list until that
  // chunk is judged: here a second rig (same process, same free list) relays whole streams,
  // cut at every 3 bytes, while the first waits; given back too early, the waiting relay's
  // frames would be the other relays' (or cleared) when it goes on.
  const other = await startRelayRig({ sseFrameBytes: FRAME_CAP })
  t.teardown(other.close)
  const bytes = Buffer.from(GOOD.join(''))
  const otherBytes = Buffer.from([chunk('one'), chunk('two'), chunk('three'), chunk(null, 'stop'), DONE].join(''))
  let release = (): void => {}
  let waiting!: () => boolean
  const first = relay(bytes, 0, undefined, (ledger) => {
    t.ok(ledger.parse.tryAcquire(), 'the test holds the permit')
    release = () => ledger.parse.release()
    waiting = () => ledger.parse.snapshot().queued > 0
  })
  await until(() => waiting(), 'the first relay waits for the permit', 10_000)
  t.ok(waiting(), 'the first relay waits for the permit, its chunk half judged')
  const wrong: string[] = []
  for (let split = 0; split < otherBytes.length; split += 3) {
    const r = await other.relay('chat', otherBytes, split)
    if (!r.client.equals(otherBytes) || r.outcome.code !== 'ok' || r.rec.frames !== 5) wrong.push(`split ${split}: ${r.outcome.code}, ${r.rec.frames} frames, ${r.client.length} bytes`)
  }
  t.same(wrong, [], 'the other relays were whole')
  t.ok(waiting(), 'the first relay was still waiting all along')
  release()
  const r = await first
  t.ok(r.client.equals(bytes), 'the waiting relay went on with its own frames: byte-exact')
  t.equal(r.outcome.code, 'ok')
  t.equal(r.rec.frames, GOOD.length)
  t.equal(r.rec.evidence, true)
  t.same(idleOf(r.run.ledger), [])
})

t.test('the parse permit taken by another exchange when a frame needs it: the relay waits for it, then goes on, byte-exact, at every split', async (t) => {
  // The frames that are inspected (the finish chunk, usage, [DONE]) find the permit taken; it
  // is given back a few milliseconds later. The relay takes the asynchronous path (pauses the
  // body, waits, inspects, goes on with the rest of the chunk) and must end exactly as when
  // the permit is free: every byte, whole frames only, the ledger idle.
  const bytes = Buffer.from(GOOD.join(''))
  const wrong: string[] = []
  let waited = 0
  for (let split = 0; split < bytes.length; split += 7) {
    let held = false
    const r = await relay(bytes, split, undefined, (ledger) => {
      held = ledger.parse.tryAcquire()
      const release = (): void => { held = false; ledger.parse.release() }
      if (held) setTimeout(release, 3)
    })
    if (held) wrong.push(`split ${split}: the test's permit was not given back`)
    if (!r.client.equals(bytes)) wrong.push(`split ${split}: the client got ${r.client.length} bytes, not the stream`)
    if (r.outcome.code !== 'ok') wrong.push(`split ${split}: outcome ${r.outcome.code}`)
    if (r.rec.frames !== GOOD.length || r.rec.evidence !== true) wrong.push(`split ${split}: rec ${JSON.stringify({ frames: r.rec.frames, evidence: r.rec.evidence })}`)
    const idle = idleOf(r.run.ledger)
    if (idle.length > 0) wrong.push(`split ${split}: ${idle.join('; ')}`)
    waited += r.run.ledger.parse.snapshot().queuedTotal
  }
  t.same(wrong, [], 'every split')
  t.ok(waited > 0, `the relay queued for the permit (${waited} times): the waiting path was taken`)
})
