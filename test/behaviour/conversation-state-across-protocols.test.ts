// previous_response_id on a stateless provider (issue 13): the gateway keeps the chain in the
// store every worker shares and expands it for Chat Completions and Messages providers. The
// official openai SDK talks to two workers in turn (a connection pinned to each), and the
// provider must receive the whole history every time; the store's bytes grow linearly over
// 200 turns; the caps, expiry, tombstones and key scoping answer with their codes; a
// same-protocol Responses route forwards previous_response_id untouched.

import t, { type Test } from 'tap'
import OpenAI from 'openai'
import { fetch as undiciFetch, request, type Client } from 'undici'
import { sha256Hex } from '../../src/config/load.ts'
import { KEY, startRig, type Rig } from '../helpers/exchange.ts'
import { clientOnRow, until, waitIdle } from '../helpers/gateway.ts'
import { rpc } from '../helpers/sse.ts'

const OTHER = 'sk-another-gateway-key-9876543210'
const KEYS = [{ name: 'test', sha256: sha256Hex(KEY), models: ['*'] }, { name: 'other', sha256: sha256Hex(OTHER), models: ['*'] }]

/** The official SDK, every request on one pinned connection (one worker). */
function sdk (rig: Rig, client: Client, key = KEY): OpenAI {
  const f = ((url: string, init: RequestInit) => undiciFetch(url, { ...(init as object), dispatcher: client })) as unknown as typeof fetch
  return new OpenAI({ apiKey: key, baseURL: rig.url + '/v1', maxRetries: 0, logLevel: 'off', fetch: f })
}

async function post (rig: Rig, body: unknown, key = KEY): Promise<{ status: number, json: Record<string, unknown>, text: string }> {
  const res = await request(rig.url + '/v1/responses', { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })
  const text = await res.body.text()
  let json: Record<string, unknown> = {}
  try { json = JSON.parse(text) } catch {}
  return { status: res.statusCode, json, text }
}

const metric = async (rig: Rig, name: string): Promise<number> => (await rig.gw.metrics()).get(name) ?? NaN

/** The text of a Responses answer's output messages. */
function outputText (r: { output: Array<{ type: string, content?: Array<{ type: string, text?: string }> }> }): string {
  return r.output.filter(o => o.type === 'message').flatMap(o => o.content ?? []).map(c => c.text ?? '').join('')
}

async function idle (t: Test, rig: Rig, what: string): Promise<void> {
  t.same(await waitIdle(rig.gw), {}, `${what}: the ledger and the store's pins are back at idle`)
}

t.test('multi-turn chains through Chat and Messages providers, across workers, streaming and not', async (t) => {
  const rig = await startRig({ workers: 2, keys: KEYS })
  t.teardown(() => rig.close())
  const c1 = await clientOnRow(rig.gw.port, 1)
  const c2 = await clientOnRow(rig.gw.port, 2)
  t.teardown(async () => { await Promise.all([c1.destroy(), c2.destroy()]) })
  const on = [sdk(rig, c1), sdk(rig, c2)]
  const tools = [{ type: 'function' as const, name: 'lookup', strict: false, parameters: { type: 'object', properties: { q: { type: 'string' } } } }]

  for (const model of ['gpt-4o-mini', 'claude-opus-5-5']) {
    for (const stream of [false, true]) {
      const tag = `${model}-${stream ? 'stream' : 'json'}`
      const userTexts: string[] = []
      const answers: string[] = []
      let prev: string | null = null
      let callId: string | null = null
      for (let turn = 0; turn < 5; turn++) {
        const client = on[turn % 2] // alternate the two workers
        const text = `${tag} turn ${turn} ${turn === 1 ? '\n#sim tools=1' : '\n#sim tokens=6'}`
        // turn 2 answers the tool call of turn 1 (by previous_response_id alone)
        const input: OpenAI.Responses.ResponseInput = turn === 2 && callId !== null
          ? [{ type: 'function_call_output', call_id: callId, output: `${tag} tool result` }, { role: 'user', content: text }]
          : [{ role: 'user', content: text }]
        userTexts.push(text)
        const before = rig.bodies.length
        const params = { model, input, tools, ...(prev !== null ? { previous_response_id: prev } : {}) }
        let r: OpenAI.Responses.Response
        if (stream) {
          const s = await client.responses.create({ ...params, stream: true })
          let done: OpenAI.Responses.Response | null = null
          for await (const e of s) if (e.type === 'response.completed') done = e.response
          if (done === null) throw new Error('no response.completed')
          r = done
        } else {
          r = await client.responses.create(params)
        }
        t.equal(r.previous_response_id, prev, `${tag} turn ${turn}: the answer echoes previous_response_id`)
        const call = r.output.find(o => o.type === 'function_call')
        if (turn === 1) {
          t.ok(call, `${tag}: turn 1 calls the tool`)
          callId = call?.type === 'function_call' ? call.call_id : null
        }
        answers.push(outputText(r as never))
        const sent = rig.bodies.slice(before)
        t.equal(sent.length, 1, `${tag} turn ${turn}: one provider request`)
        const wire = JSON.stringify(sent[0].json)
        t.notOk(wire.includes('previous_response_id'), `${tag} turn ${turn}: no previous_response_id reaches a ${model} provider`)
        // The whole history, in order: every user text and every answer so far.
        let at = -1
        const wanted = [...userTexts.slice(0, -1).flatMap((u, i) => [u, answers[i]]), userTexts[turn]].filter(x => x !== '')
        for (const w of wanted) {
          const next = wire.indexOf(JSON.stringify(w).slice(1, -1), at + 1)
          t.ok(next > at, `${tag} turn ${turn}: the provider got "${w.slice(0, 30)}" in order`)
          at = Math.max(at, next)
        }
        if (turn >= 2 && callId !== null) {
          t.ok(wire.includes(JSON.stringify(callId)), `${tag} turn ${turn}: the tool call is in the history`)
          t.ok(wire.includes(`${tag} tool result`), `${tag} turn ${turn}: the tool result is in the history`)
        }
        prev = r.id
      }
      await idle(t, rig, tag)
    }
  }
  t.ok(await metric(rig, 'sluice_continuation_entries') >= 20, 'every turn is an entry')

  // Another key never reads this key's state: not found, as if it never existed.
  const other = await post(rig, { model: 'gpt-4o-mini', input: 'hi', previous_response_id: (await on[0].responses.create({ model: 'gpt-4o-mini', input: 'mine\n#sim tokens=2' })).id }, OTHER)
  t.equal(other.status, 400)
  t.equal(other.json.code, 'continuation_not_found', 'another key\'s id is not found')
  const unknown = await post(rig, { model: 'claude-opus-5-5', input: 'hi', previous_response_id: 'resp_never_issued' })
  t.equal(unknown.status, 400)
  t.equal(unknown.json.code, 'continuation_not_found')
  t.equal(unknown.json.id, 'resp_never_issued', 'the refusal names the id')
  t.equal(rig.bodies.filter(b => JSON.stringify(b.json).includes('resp_never_issued')).length, 0, 'nothing was sent upstream')

  const ephemeralParent = (await on[0].responses.create({ model: 'gpt-4o-mini', input: 'parent for rpc\n#sim tokens=2' })).id

  // The same body twice: the provider (the sim is deterministic) repeats its id, the gateway
  // does not: each kept turn has its own id, so no conversation overwrites another's turn.
  const twin = { model: 'gpt-4o-mini', input: 'twin\n#sim tokens=2' }
  const [ta, tb] = [await on[0].responses.create(twin), await on[1].responses.create(twin)]
  t.equal(ta.id.slice(0, -13), tb.id.slice(0, -13), 'the provider gave both the same id')
  t.not(ta.id, tb.id, 'identical provider answers, distinct response ids')
  const [ca, cb] = [await post(rig, { model: 'gpt-4o-mini', input: 'twin A', previous_response_id: ta.id }), await post(rig, { model: 'gpt-4o-mini', input: 'twin B', previous_response_id: tb.id })]
  t.ok(ca.status === 200 && cb.status === 200, 'both continue')

  // store: false keeps nothing.
  const entries = await metric(rig, 'sluice_continuation_entries')
  const ephemeral = await on[1].responses.create({ model: 'gpt-4o-mini', input: 'do not keep this\n#sim tokens=3', store: false })
  t.equal((ephemeral as unknown as { store: boolean }).store, false, 'the answer says it was not stored')
  t.equal(await metric(rig, 'sluice_continuation_entries'), entries, 'store: false adds no entry')
  const after = await post(rig, { model: 'gpt-4o-mini', input: 'next', previous_response_id: ephemeral.id })
  t.equal(after.json.code, 'continuation_not_found', 'an unstored response cannot be continued')

  // JSON-RPC session/prompt runs the same exchange: a chain continues through it, and on.
  const viaRpc = await rpc(rig.url, KEY, 'session/prompt', { sessionId: 'rpc-chain', route: 'responses', body: { model: 'claude-opus-5-5', input: 'rpc turn\n#sim tokens=2', previous_response_id: ephemeralParent } })
  const rpcBody = (viaRpc.json.result as { body: Record<string, unknown> } | undefined)?.body
  t.equal(rpcBody?.previous_response_id, ephemeralParent, `an RPC turn continues a chain (${viaRpc.text.slice(0, 200)})`)
  t.ok(JSON.stringify(rig.bodies[rig.bodies.length - 1].json).includes('parent for rpc'), 'with its history')
  const afterRpc = await post(rig, { model: 'gpt-4o-mini', input: 'after rpc\n#sim tokens=2', previous_response_id: rpcBody?.id })
  t.equal(afterRpc.status, 200, 'and the RPC turn is itself continuable')

  // Same protocol: the provider keeps its own state; the bytes go through untouched.
  const same = JSON.stringify({ model: 'gpt-5.5', input: 'same protocol\n#sim tokens=2', previous_response_id: 'resp_provider_side_1', store: true })
  const before = rig.bodies.length
  const res = await request(rig.url + '/v1/responses', { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: same })
  const answer = await res.body.json() as Record<string, unknown>
  t.equal(res.statusCode, 200)
  t.equal(answer.previous_response_id, 'resp_provider_side_1', 'the Responses provider saw it')
  t.equal(Buffer.from(rig.bodies[before].bytes).toString(), same, 'byte-exact: previous_response_id forwarded untouched')
  await idle(t, rig, 'after the refusals')
})

t.test('reasoning kept in a chain goes back to the provider that issued it (Messages thinking before a tool call)', async (t) => {
  const rig = await startRig({ workers: 1 })
  t.teardown(() => rig.close())
  const tools = [{ type: 'function', name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } }]
  const r1 = await post(rig, { model: 'claude-opus-5-5', input: 'think then call\n#sim thinking=2 tools=1', tools, reasoning: { effort: 'medium' }, max_output_tokens: 4096 })
  t.equal(r1.status, 200, 'turn 1 answered')
  const output = r1.json.output as Array<Record<string, unknown>>
  const call = output.find(o => o.type === 'function_call')
  t.ok(output.some(o => o.type === 'reasoning' && typeof o.encrypted_content === 'string'), 'the answer has reasoning with its opaque content')
  const r2 = await post(rig, { model: 'claude-opus-5-5', input: [{ type: 'function_call_output', call_id: call?.call_id, output: 'found it' }], previous_response_id: r1.json.id, tools, reasoning: { effort: 'medium' }, max_output_tokens: 4096 })
  t.equal(r2.status, 200, `the continued turn is accepted (${r2.text.slice(0, 200)})`)
  const wire = rig.bodies[rig.bodies.length - 1].json as { messages: Array<{ role: string, content: Array<Record<string, unknown>> }> }
  const assistant = wire.messages.find(m => m.role === 'assistant')
  const blocks = assistant?.content ?? []
  const thinking = blocks.findIndex(b => b.type === 'thinking' && typeof b.signature === 'string' && b.signature.length > 0)
  const toolUse = blocks.findIndex(b => b.type === 'tool_use')
  t.ok(thinking >= 0 && toolUse > thinking, 'the thinking block goes back signed, before the tool_use')
  await idle(t, rig, 'reasoning chain')
})

t.test('a chain of 200 turns: the store grows linearly (each turn adds only what it added)', async (t) => {
  const rig = await startRig({ workers: 2 })
  t.teardown(() => rig.close())
  let prev: string | null = null
  const sizes: number[] = [await metric(rig, 'sluice_continuation_bytes')]
  let lastBody = 0
  for (let i = 0; i < 200; i++) {
    const r = await post(rig, { model: i % 2 === 0 ? 'gpt-4o-mini' : 'claude-opus-5-5', input: `turn ${String(i).padStart(3, '0')}\n#sim tokens=4`, ...(prev !== null ? { previous_response_id: prev } : {}) })
    if (r.status !== 200) { t.fail(`turn ${i}: ${r.text.slice(0, 300)}`); return }
    prev = String(r.json.id)
    sizes.push(await metric(rig, 'sluice_continuation_bytes'))
    lastBody = rig.bodies[rig.bodies.length - 1].bytes.byteLength
  }
  const growth = sizes.slice(1).map((s, i) => s - sizes[i])
  const avg = (a: number[]): number => a.reduce((x, y) => x + y, 0) / a.length
  const early = avg(growth.slice(1, 21))
  const late = avg(growth.slice(-20))
  t.ok(growth.every(g => g > 0), 'every turn adds an entry')
  t.ok(late < early * 1.5, `per-turn growth stays constant: first turns ${early.toFixed(0)} B, last turns ${late.toFixed(0)} B`)
  t.ok(sizes[200] < 200 * early * 1.5, `200 turns cost ${sizes[200]} B: linear, not quadratic`)
  t.ok(lastBody > 100 * early / 4, `the provider got the whole history on turn 200 (${lastBody} B)`)
  t.equal(await metric(rig, 'sluice_continuation_entries'), 200)
  await idle(t, rig, '200 turns')
})

t.test('the caps: an oversize entry, eviction under pressure with a pinned blob, tombstones', async (t) => {
  const rig = await startRig({
    workers: 2,
    keys: KEYS,
    limits: {
      continuationBytes: 1024 * 1024,
      continuationEntryBytes: 8 * 1024,
      continuationBlobThreshold: 1024,
      continuationBlobBytes: 64 * 1024,
      continuationBlobTotalBytes: 256 * 1024,
    },
  })
  t.teardown(() => rig.close())

  // An entry over the per-entry cap: the answer is delivered, the id is not continuable.
  const many = Array.from({ length: 12 }, (_, i) => ({ role: 'user', content: `${i} ${'x'.repeat(900)}` }))
  const big = await post(rig, { model: 'gpt-4o-mini', input: [...many, { role: 'user', content: 'too big to keep\n#sim tokens=3' }] })
  t.equal(big.status, 200, 'the oversize turn is answered')
  t.equal(await metric(rig, 'sluice_continuation_evictions_total{reason="entry_too_large"}'), 1, 'counted as refused at write time')
  const next = await post(rig, { model: 'gpt-4o-mini', input: 'go on', previous_response_id: big.json.id })
  t.equal(next.status, 400)
  t.equal(next.json.code, 'continuation_expired', 'the tombstoned id answers with its code')
  t.equal(next.json.id, big.json.id)
  t.equal(next.json.reason, 'not_continuable')
  const refusedLine = (): boolean => rig.gw.logs.some(l => { try { return JSON.parse(l).continuation?.stored === 'entry_too_large' } catch { return false } })
  await until(refusedLine, 'the exchange\'s log line names the refused write')
  t.ok(refusedLine(), 'the exchange\'s log line names the refused write')

  // A turn with a large tool output (a blob): A1, then A2 continues it slowly. While A2 runs,
  // other conversations' blobs push the store past its blob cap: A1's entry is evicted, its
  // blob is pinned by A2 and stays; once A2 is done the blob has nobody and goes.
  const blobText = 'B'.repeat(40 * 1024)
  const a1 = await post(rig, { model: 'claude-opus-5-5', input: [{ role: 'user', content: 'with a blob\n#sim tokens=2' }, { role: 'user', content: [{ type: 'input_text', text: blobText }] }] })
  t.equal(a1.status, 200)
  const blobBytes = await metric(rig, 'sluice_continuation_blob_bytes')
  t.ok(blobBytes >= 40 * 1024, `the big text is a blob (${blobBytes} B)`)
  const c = await clientOnRow(rig.gw.port, 1)
  t.teardown(() => c.destroy())
  const slow = sdk(rig, c).responses.create({ model: 'claude-opus-5-5', input: 'slowly\n#sim tokens=30 interval=100', previous_response_id: String(a1.json.id), stream: true })
    .then(async (s) => { let done: OpenAI.Responses.Response | null = null; for await (const e of s) if (e.type === 'response.completed') done = e.response; return done })
  await until(async () => await metric(rig, 'sluice_continuation_blob_bytes_pinned') >= 40 * 1024, 'A2 pins the blob')
  const fillers: string[] = []
  for (let i = 0; i < 10; i++) {
    const f = await post(rig, { model: 'gpt-4o-mini', input: [{ role: 'user', content: `filler ${i}\n#sim tokens=2` }, { role: 'user', content: String(i).repeat(50 * 1024) }] })
    t.equal(f.status, 200)
    fillers.push(String(f.json.id))
  }
  t.ok(await metric(rig, 'sluice_continuation_evictions_total{reason="cap"}') > 0, 'eviction ran under pressure')
  t.ok(await metric(rig, 'sluice_continuation_blob_bytes') <= 256 * 1024, 'blob bytes stay under their cap')
  const gone = await post(rig, { model: 'claude-opus-5-5', input: 'go on', previous_response_id: a1.json.id })
  t.equal(gone.json.code, 'continuation_expired', 'A1 was evicted: expired, never a shorter conversation')
  t.equal(gone.json.reason, 'evicted')
  t.ok(await metric(rig, 'sluice_continuation_blob_bytes_pinned') >= 40 * 1024, 'the pinned blob stays while A2 runs')
  const during = await metric(rig, 'sluice_continuation_blob_bytes')
  const done = await slow
  t.ok(done !== null, 'A2 completed')
  const a2wire = rig.bodies.find(b => JSON.stringify(b.json).includes('slowly'))
  t.ok(a2wire !== undefined && JSON.stringify(a2wire.json).includes(blobText), 'the provider got A1\'s blob back in A2\'s history')
  await until(async () => await metric(rig, 'sluice_continuation_pins') === 0, 'A2 released its pins')
  t.ok(await metric(rig, 'sluice_continuation_blob_bytes') <= during - 40 * 1024, 'unpinned and named by no live entry, the blob is gone')
  const last = await post(rig, { model: 'gpt-4o-mini', input: 'newest', previous_response_id: fillers[fillers.length - 1] })
  t.equal(last.status, 200, 'the newest conversation continues')
  t.ok(await metric(rig, 'sluice_continuation_blob_bytes') <= 256 * 1024)
  const stale = await post(rig, { model: 'claude-opus-5-5', input: 'go on', previous_response_id: done?.id })
  t.equal(stale.json.code, 'continuation_expired', 'A2 itself is stored, but its parent is gone: the chain is refused whole')
  await idle(t, rig, 'caps')
})

t.test('a worker\'s death loses nothing of the store; its pins are reclaimed', async (t) => {
  const rig = await startRig({ workers: 2, limits: { continuationBlobThreshold: 1024 } })
  t.teardown(() => rig.close())
  const c1 = await clientOnRow(rig.gw.port, 1)
  const killer = await clientOnRow(rig.gw.port, 1)
  t.teardown(async () => { await Promise.all([c1.destroy(), killer.destroy()]) })
  const root = await post(rig, { model: 'gpt-4o-mini', input: [{ role: 'user', content: 'root\n#sim tokens=2' }, { role: 'user', content: [{ type: 'input_text', text: 'R'.repeat(8192) }] }] })
  t.equal(root.status, 200)
  // A slow continuation on row 1 pins the root's blob; row 1 dies under it.
  const slow = sdk(rig, c1).responses.create({ model: 'gpt-4o-mini', input: 'slowly\n#sim tokens=50 interval=100', previous_response_id: String(root.json.id), stream: true })
    .then(async (s) => { for await (const e of s) void e; return 'ended' }).catch((err: unknown) => `cut: ${String(err)}`)
  await until(async () => await metric(rig, 'sluice_continuation_pins') > 0, 'the slow turn pins the blob')
  await (await killer.request({ method: 'GET', path: '/_test/exit' })).body.text()
  t.ok(await slow, 'the stream on the dead worker ended')
  await until(async () => await metric(rig, 'sluice_continuation_pins') === 0, 'the dead row\'s pins are reclaimed')
  t.ok(await metric(rig, 'sluice_continuation_pins_reclaimed_total') >= 1, 'counted as reclaimed')
  const again = await post(rig, { model: 'gpt-4o-mini', input: 'after the death\n#sim tokens=2', previous_response_id: root.json.id })
  t.equal(again.status, 200, 'the chain continues on the surviving worker')
  t.ok(JSON.stringify(rig.bodies[rig.bodies.length - 1].json).includes('R'.repeat(8192)), 'with its blob')
  await idle(t, rig, 'after the death')
})

t.test('expiry: an entry older than continuationTtlMs is continuation_expired', async (t) => {
  const rig = await startRig({ workers: 1, limits: { continuationTtlMs: 600 } })
  t.teardown(() => rig.close())
  const r = await post(rig, { model: 'gpt-4o-mini', input: 'short lived\n#sim tokens=2' })
  t.equal(r.status, 200)
  const soon = await post(rig, { model: 'gpt-4o-mini', input: 'at once', previous_response_id: r.json.id })
  t.equal(soon.status, 200, 'continued within the TTL')
  await new Promise((resolve) => setTimeout(resolve, 900))
  const late = await post(rig, { model: 'gpt-4o-mini', input: 'too late', previous_response_id: soon.json.id })
  t.equal(late.status, 400)
  t.equal(late.json.code, 'continuation_expired')
  t.equal(late.json.reason, 'expired')
  t.ok(await metric(rig, 'sluice_continuation_evictions_total{reason="ttl"}') >= 2, 'both turns expired')
  await idle(t, rig, 'expiry')
})

t.test('the store off: previous_response_id on a translated route is refused by name', async (t) => {
  const rig = await startRig({ workers: 1, limits: { continuationBytes: 0 } })
  t.teardown(() => rig.close())
  const r = await post(rig, { model: 'gpt-4o-mini', input: 'hi', previous_response_id: 'resp_x' })
  t.equal(r.status, 400)
  t.equal(r.json.code, 'invalid_request')
  t.equal(r.json.field, 'previous_response_id')
  const plain = await post(rig, { model: 'gpt-4o-mini', input: 'hi\n#sim tokens=2' })
  t.equal(plain.status, 200, 'without it the route works')
  await idle(t, rig, 'store off')
})
