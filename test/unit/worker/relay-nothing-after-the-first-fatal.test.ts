// Two relay defects the worker unit tests found (each test failed on worker/relay.ts before the
// fix): frames after an in-band provider error in the same upstream read reached the client,
// and whole frames before an oversize one in the same read were withheld. Same rig as relay.test.ts.
//
// The rig (startRelayRig, ./helpers.ts): a real node:http upstream sends a Chat event stream in
// two writes cut at a given byte offset, the second only once the relay has taken in the first;
// the relay reads it through undici and writes to a second node:http server's ServerResponse,
// whose undici client collects every byte. No timing involved.

import t from 'tap'
import { boundaries, chunk, DONE, startRelayRig, tailOf, type RelayResult } from './helpers.ts'

const FRAME_CAP = 1024

const rig = await startRelayRig({ sseFrameBytes: FRAME_CAP })
t.teardown(rig.close)

/** Relays `bytes` on the Chat route, cut into two writes at `split` (none when 0 or the end). */
const relay = (bytes: Buffer, split: number): Promise<RelayResult> => rig.relay('chat', bytes, split)

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
