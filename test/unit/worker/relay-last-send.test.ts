// The stream's terminal frame and the response's end leave in one send (worker/relay.ts
// holdForEnd), and the hold never outlasts the turn of the loop it began in.
//
// The relay rig (startRelayRig, ./helpers.ts) counts the client socket's writes (its own
// _write/_writev, which still do the writing): a stream the provider sends and ends at once
// reaches the client in one socket write, head, frames and the chunked encoding's last chunk
// together. A provider that keeps its response open after [DONE] does not keep the client
// waiting: the rig's upstream ends only once the client has every byte.

import t from 'tap'
import { chunk, DONE, HELD_END_BOUND_MS, idleOf, startRelayRig, USAGE } from './helpers.ts'

const FRAMES = [chunk('Hel'), chunk('lo'), chunk(null, 'stop'), USAGE, DONE]
const BYTES = Buffer.from(FRAMES.join(''))

const rig = await startRelayRig()
t.teardown(rig.close)

t.test('a stream its provider ends at once: one socket write to the client, the last chunk of the encoding with it', async (t) => {
  for (let i = 0; i < 5; i++) {
    const r = await rig.relay('chat', BYTES, 0)
    t.equal(r.outcome.code, 'ok')
    t.ok(r.client.equals(BYTES), 'byte-exact')
    t.equal(r.run.socketWrites, 1, 'head, frames and the end in one write')
    t.same(idleOf(r.run.ledger), [])
  }
})

t.test('a provider that keeps its response open after [DONE]: the client has the terminal before the provider ends', async (t) => {
  const r = await rig.relay('chat', BYTES, 0, undefined, undefined, { endOnceClientHasAll: true })
  t.equal(r.heldPastBound, false, `the client had every byte within ${HELD_END_BOUND_MS} ms, while the provider still held its response`)
  t.ok(r.client.equals(BYTES), 'byte-exact')
  t.equal(r.outcome.code, 'ok')
  t.ok(r.run.socketWrites >= 2, 'the terminal went out on its own; the end followed')
  t.same(idleOf(r.run.ledger), [])
})
