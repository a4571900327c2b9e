// One terminal per stream (worker/relay.ts relayStream): when the provider's in-band failure
// frame is itself its protocol's terminal (Responses `response.failed`), it goes out whole and
// the relay ends there, with no signed tail after it (a second terminal). The exchange still
// counts the failure (its code, evidence false). Messages `event: error`, a Chat error frame
// and a Responses `error` event are no terminal of their protocol: the signed tail follows.
// The first test failed on the relay before the fix (the tail came after response.failed); so did
// the last (a withheld closing frame got no tail).
//
// The rig of relay.test.ts (startRelayRig, ./helpers.ts), on the Chat, Responses and Messages
// routes: a real node:http upstream sends the stream in two writes cut at a given byte offset (the
// second only once the relay reserved for the first: the ledger's stream gauge turns non-zero);
// the relay reads it through undici and writes to a second node:http server's ServerResponse,
// whose undici client collects every byte.

import t from 'tap'
import type { Route } from '../../../src/protocols/routes.ts'
import { verifyRecord, type FailureRecord } from '../../../src/sse/sign.ts'
import { assertIdle } from '../ledger/helpers.ts'
import { PROVIDER_KEY, SIGNING_KEY, startRelayRig, type RelayResult } from './helpers.ts'

const named = (event: string, data: Record<string, unknown>): string => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`
const RESP = { id: 'resp_u1', object: 'response', created_at: 1796000000, model: 'unit-model', output: [], usage: null }
const created = named('response.created', { type: 'response.created', sequence_number: 0, response: { ...RESP, status: 'in_progress' } })
const delta = (seq: number, text: string): string => named('response.output_text.delta', { type: 'response.output_text.delta', sequence_number: seq, item_id: 'msg_u1', output_index: 0, content_index: 0, delta: text })
const failed = (seq: number, message: string): string => named('response.failed', {
  type: 'response.failed', sequence_number: seq,
  response: { ...RESP, status: 'failed', error: { code: 'rate_limit_exceeded', message } },
})

const rig = await startRelayRig()
t.teardown(rig.close)

/** Relays `bytes` on `route`, cut into two writes at `split` (none when 0 or the end). */
const relay = (route: Route, bytes: Buffer, split: number): Promise<RelayResult> => rig.relay(route, bytes, split)

const terminals = (text: string): string[] => [...text.matchAll(/^event: (response\.(?:completed|incomplete|failed))$/gm)].map((m) => m[1])

/** `{ record, signature }` of the one sluice tail in `text`, or null; throws on two. */
function tailIn (text: string): { record: FailureRecord; signature: string } | null {
  const n = text.match(/"sluice":\{"record"/g)?.length ?? 0
  if (n > 1) throw new Error(`${n} sluice tails`)
  if (n === 0) return null
  const last = [...text.matchAll(/^data: (.*)$/gm)].at(-1)![1]
  const j = JSON.parse(last) as { response?: { error: { sluice: { record: FailureRecord; signature: string } } }; error?: { sluice: { record: FailureRecord; signature: string } }; sluice?: { record: FailureRecord; signature: string } }
  return j.response?.error.sluice ?? j.error?.sluice ?? j.sluice ?? null
}

t.test('a Responses stream ending with the provider\'s response.failed: relayed whole, no second terminal, at every split', async (t) => {
  // A frame after the provider's terminal never goes out either.
  const frames = [created, delta(1, 'Hel'), delta(2, 'lo'), failed(3, 'Rate limit reached (unit)'), delta(4, 'late')]
  const bytes = Buffer.from(frames.join(''))
  const through = Buffer.byteLength(frames.slice(0, 4).join(''))
  const wrong: string[] = []
  for (let split = 0; split < bytes.length; split += 7) {
    const r = await relay('responses', bytes, split)
    const text = r.client.toString('utf8')
    if (!r.client.equals(bytes.subarray(0, through))) wrong.push(`split ${split}: the client got ${r.client.length} bytes${text.includes('"sluice":{"record"') ? ' with a sluice tail' : ''}, not exactly the provider's ${through} through its response.failed`)
    if (terminals(text).length !== 1) wrong.push(`split ${split}: terminals ${JSON.stringify(terminals(text))}`)
    if (r.outcome.code !== 'provider_rate_limited') wrong.push(`split ${split}: outcome ${r.outcome.code}`)
    if (r.rec.evidence !== false || r.rec.partial !== true) wrong.push(`split ${split}: evidence ${r.rec.evidence}, partial ${r.rec.partial}`)
    if (r.rec.frames !== 4 || r.rec.bytesOut !== through) wrong.push(`split ${split}: ${r.rec.frames} frames, ${r.rec.bytesOut} bytes recorded`)
    assertIdle(t, r.run.ledger)
  }
  t.same(wrong, [])
})

t.test('a response.failed quoting a provider key is kept back: the signed tail is the one terminal', async (t) => {
  const frames = [created, delta(1, 'Hel'), failed(2, `invalid key ${PROVIDER_KEY}`)]
  const bytes = Buffer.from(frames.join(''))
  const cut = Buffer.byteLength(frames.slice(0, 2).join(''))
  for (const split of [0, cut + 5]) {
    const r = await relay('responses', bytes, split)
    const text = r.client.toString('utf8')
    t.notOk(text.includes(PROVIDER_KEY), `split ${split}: the key never reaches the client`)
    t.ok(r.client.subarray(0, cut).equals(bytes.subarray(0, cut)), `split ${split}: the frames before it`)
    t.same(terminals(text), ['response.failed'], `split ${split}: one terminal`)
    const tail = tailIn(text.slice(cut))
    t.ok(tail !== null && verifyRecord(tail.record, tail.signature, SIGNING_KEY), `split ${split}: it is the signed tail`)
    t.equal(r.outcome.code, 'provider_rate_limited')
    assertIdle(t, r.run.ledger)
  }
})

t.test('in-band failures that are no terminal of their protocol: the signed tail follows them', async (t) => {
  const respError = named('error', { type: 'error', sequence_number: 2, code: 'server_error', message: 'the server had an error (unit)', param: null })
  const msgStart = named('message_start', { type: 'message_start', message: { id: 'msg_u1', type: 'message', role: 'assistant', model: 'unit-model', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 3, output_tokens: 1 } } })
  const msgError = named('error', { type: 'error', error: { type: 'rate_limit_error', message: 'rate limited (unit)' } })
  const cases: Array<[Route, string[], string]> = [
    ['responses', [created, delta(1, 'Hel'), respError], 'provider_error'],
    ['messages', [msgStart, msgError], 'provider_rate_limited'],
  ]
  for (const [route, frames, code] of cases) {
    const bytes = Buffer.from(frames.join(''))
    for (const split of [0, bytes.length - 10]) {
      const r = await relay(route, bytes, split)
      const text = r.client.toString('utf8')
      t.ok(r.client.subarray(0, bytes.length).equals(bytes), `${route} split ${split}: the provider's event went out whole`)
      const tail = tailIn(text.slice(bytes.length))
      t.ok(tail !== null && verifyRecord(tail.record, tail.signature, SIGNING_KEY), `${route} split ${split}: then the signed tail`)
      t.equal(tail?.record.code, code, `${route}: the tail's code`)
      if (route === 'responses') t.same(terminals(text), ['response.failed'], 'one terminal: the tail')
      t.equal(r.outcome.code, code)
      assertIdle(t, r.run.ledger)
    }
  }
})

// A closing frame that fails its check ([DONE] without a finish_reason, response.completed
// without response.created, message_stop without message_start) is kept from the client like
// any bad frame, so the client has no terminal yet: the signed tail must follow. (Before the
// fix the relay took the withheld frame for a terminal the client had, and sent nothing: the
// stream ended with neither a terminal nor a failure.) A bad frame after a terminal the client
// has still gets no tail.
t.test('a closing frame that fails its check is withheld, and the signed tail is the one terminal', async (t) => {
  const chatChunk = 'data: ' + JSON.stringify({ id: 'chatcmpl-u1', object: 'chat.completion.chunk', model: 'unit-model', choices: [{ index: 0, delta: { content: 'a' }, finish_reason: null }] }) + '\n\n'
  const completed = named('response.completed', { type: 'response.completed', sequence_number: 2, response: { ...RESP, status: 'completed' } })
  const msgDelta = named('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'a' } })
  const cases: Array<[Route, string[], string]> = [
    ['chat', [chatChunk], 'data: [DONE]\n\n'],
    ['responses', [delta(1, 'x')], completed],
    ['messages', [msgDelta], named('message_stop', { type: 'message_stop' })],
  ]
  for (const [route, before, closing] of cases) {
    const head = Buffer.from(before.join(''))
    const bytes = Buffer.concat([head, Buffer.from(closing)])
    for (const split of [0, head.length, head.length + 3]) {
      const r = await relay(route, bytes, split)
      const text = r.client.toString('utf8')
      t.ok(r.client.subarray(0, head.length).equals(head), `${route} split ${split}: the frames before it`)
      t.notOk(text.slice(head.length).includes(closing.trim()), `${route} split ${split}: not the bad closing frame`)
      const tail = tailIn(text.slice(head.length))
      t.ok(tail !== null && verifyRecord(tail.record, tail.signature, SIGNING_KEY), `${route} split ${split}: the signed tail follows`)
      t.equal(tail?.record.code, 'provider_protocol_error', `${route} split ${split}: its code`)
      t.equal(r.outcome.code, 'provider_protocol_error')
      assertIdle(t, r.run.ledger)
    }
  }
  // A malformed frame after the terminal the client has: no tail after that terminal.
  const good = [created, delta(1, 'x'), named('response.completed', { type: 'response.completed', sequence_number: 2, response: { ...RESP, status: 'completed' } })].join('')
  const r = await relay('responses', Buffer.from(good + 'data: {not json\n\n'), 0)
  t.equal(r.client.toString('utf8'), good, 'after a terminal: the stream through it, nothing more')
  t.equal(r.outcome.code, 'provider_protocol_error', 'the bad frame still counts')
  assertIdle(t, r.run.ledger)
})
