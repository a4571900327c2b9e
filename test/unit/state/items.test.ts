// What a conversation entry holds (src/state/items.ts) and how the parser pool expands a chain
// (src/json/prepare.ts with `continuation`): blobs split out and restored exactly, literals
// that look like references survive, the history goes in front of the turn's own input, the
// turn's own items come back for the store, and a history with a missing blob is refused as
// continuation_expired (never a shorter conversation).

import t from 'tap'
import { prepare, type PrepareOk, type PrepareTask } from '../../../src/json/prepare.ts'
import { entryPayload, historyItems, inputItems, joinPayloads, restoreBlobs, splitBlobs, BLOB_REF } from '../../../src/state/items.ts'

const enc = new TextEncoder()
const dec = new TextDecoder()
const LIMITS = { maxDepth: 128, maxNodes: 1_000_000 }

t.test('splitBlobs / restoreBlobs: big strings become references and come back exactly', async (t) => {
  const image = 'data:image/png;base64,' + 'A'.repeat(5000)
  const tool = 'é'.repeat(400) // 800 UTF-8 bytes: over a 500-byte threshold though only 400 characters
  const items = [
    { role: 'user', content: [{ type: 'input_text', text: 'small' }, { type: 'input_image', image_url: image }] },
    { type: 'function_call_output', call_id: 'c1', output: tool },
    { type: 'function_call_output', call_id: 'c2', output: tool },
    { role: 'user', content: [{ type: 'input_text', text: 'x', [BLOB_REF]: 'looks like a ref' }] },
    { role: 'user', content: [{ type: 'input_text', text: 'y', $sluice_lit: 1 }] },
  ]
  const copy = structuredClone(items)
  const split = splitBlobs(items, 500)
  t.same(items, copy, 'the input is not modified')
  t.equal(split.blobs.length, 2, 'the image and the tool output, the repeated output stored once')
  const text = JSON.stringify(split.items)
  t.notOk(text.includes('AAAA'), 'no image bytes in the entry')
  t.ok(text.length < 1000, `the entry is small (${text.length})`)
  t.equal(split.blobs.reduce((n, b) => n + b.bytes.byteLength, 0), image.length + 800)
  const back = restoreBlobs(JSON.parse(text), new Map(split.blobs.map(b => [b.hash, b.bytes])))
  t.same(back, items, 'restored exactly, the client\'s look-alike members included')
  t.throws(() => restoreBlobs(JSON.parse(text), new Map()), { name: 'Error', message: 'a stored entry names a blob that is not there' }, 'a missing blob is an error, never a hole')
  t.same(splitBlobs(items.slice(0, 3), 1_000_000).items, items.slice(0, 3), 'under the threshold nothing moves')
})

t.test('payloads: joined, flattened, one entry per turn', async (t) => {
  t.same(inputItems('hi'), [{ type: 'message', role: 'user', content: 'hi' }])
  t.same(inputItems(undefined), [])
  const p1 = entryPayload(enc.encode('[{"a":1}]'), enc.encode('[{"b":2},{"c":3}]'))
  t.equal(dec.decode(p1), '[{"a":1},{"b":2},{"c":3}]')
  t.equal(dec.decode(entryPayload(enc.encode('[]'), enc.encode('[{"b":2}]'))), '[{"b":2}]')
  t.equal(dec.decode(entryPayload(enc.encode('[{"a":1}]'), enc.encode('[]'))), '[{"a":1}]')
  const joined = joinPayloads([p1, enc.encode('[{"d":4}]')])
  t.same(historyItems(JSON.parse(dec.decode(joined))), [{ a: 1 }, { b: 2 }, { c: 3 }, { d: 4 }])
  t.same(historyItems(JSON.parse(dec.decode(joinPayloads([])))), [])
  t.throws(() => entryPayload(enc.encode('{}'), enc.encode('[]')))
})

function task (body: unknown, continuation: PrepareTask['continuation']): PrepareTask {
  const t: PrepareTask = { body: enc.encode(JSON.stringify(body)), route: 'responses', limits: LIMITS, aliases: {}, translate: { to: 'openai-chat', issuer: 'openai-chat:sim' } }
  if (continuation !== undefined) t.continuation = continuation
  return t
}

t.test('prepare with a history: the chain goes in front of the input, previous_response_id is dropped', async (t) => {
  const first = prepare({ body: enc.encode('{"model":"m","input":"hi","previous_response_id":"resp_1","store":false}'), route: 'responses', limits: LIMITS, aliases: {} })
  t.ok(first.ok && first.state?.previousResponseId === 'resp_1' && first.state.store === false, 'the first parse reports previous_response_id and store')
  const plain = prepare({ body: enc.encode('{"model":"m","input":"hi"}'), route: 'responses', limits: LIMITS, aliases: {} })
  t.equal(plain.ok && plain.state, undefined, 'the defaults are not reported')

  const big = 'Z'.repeat(3000)
  const stored = splitBlobs([{ role: 'user', content: 'turn one' }, { role: 'user', content: [{ type: 'input_text', text: big }] }], 1024)
  const payload = entryPayload(enc.encode(JSON.stringify(stored.items)), enc.encode('[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"answer one"}]}]'))
  const r = prepare(task({ model: 'm', input: 'turn two', previous_response_id: 'resp_1' }, { history: joinPayloads([payload]), blobs: stored.blobs, keep: { blobThreshold: 1024 } }))
  if (!r.ok) { t.fail(JSON.stringify(r.error)); return }
  const body = JSON.parse(dec.decode(r.body)) as { messages: Array<{ role: string, content: unknown }> }
  const wire = JSON.stringify(body.messages)
  t.ok(wire.indexOf('turn one') < wire.indexOf('answer one') && wire.indexOf('answer one') < wire.indexOf('turn two'), 'history first, in order')
  t.ok(wire.includes(big), 'the blob is restored for the provider')
  t.same(JSON.parse(dec.decode(r.turn!.input)), [{ type: 'message', role: 'user', content: 'turn two' }], 'the turn\'s own input only')
  t.same(r.turn!.blobs, [])

  const noKeep = prepare(task({ model: 'm', input: 'x' }, {})) as PrepareOk
  t.equal(noKeep.turn, undefined, 'store: false: nothing returned for the store')

  const hole = prepare(task({ model: 'm', input: 'turn two', previous_response_id: 'resp_1' }, { history: joinPayloads([payload]), blobs: [] }))
  t.same(hole.ok ? null : hole.error, { code: 'continuation_expired', details: { field: 'previous_response_id', reason: 'a stored blob is missing' } })
  const withoutHistory = prepare(task({ model: 'm', input: 'x', previous_response_id: 'resp_1' }, undefined))
  t.equal(withoutHistory.ok ? null : withoutHistory.error.details.field, 'previous_response_id', 'the translator refuses an id nobody expanded, by name')
  const notTranslated = prepare({ body: enc.encode('{"model":"m","input":"x"}'), route: 'responses', limits: LIMITS, aliases: {}, continuation: {} })
  t.equal(notTranslated.ok ? null : notTranslated.error.code, 'internal_error', 'expansion only with a translation')
})
