// A flood of JSON-RPC envelopes (parsed before any exchange permit is taken) must not starve
// the exchanges that hold a permit: under 80 concurrent `capabilities` calls with 300 KB
// params, 12 streaming and 12 buffered fault-free exchanges all complete, untouched; JSON-RPC
// prompts that reached the provider get their result; and every flood call gets either its
// answer or an honest refusal before acceptance (parse_capacity_exhausted with Retry-After),
// never a cut. Afterwards the ledger is idle, and parse-capacity refusals are exactly the
// flood's.

import t from 'tap'
import { request } from 'undici'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { dropConnections, postJson, type Answer } from '../helpers/sse.ts'

const FLOOD = 80
const STREAMS = 12
const BUFFERED = 12
const PROMPTS = 6
const TAG = 'x-test-tag'

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 2 }) })
t.teardown(async () => { await dropConnections(); await rig.close() })

const auth = { authorization: `Bearer ${KEY}` }

/** A streaming exchange, read to its end; resolves with the status and the whole text. */
async function stream (i: number): Promise<{ status: number; text: string }> {
  const res = await request(`${rig.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify(chatBody(`stream ${i}\n#sim tokens=60 interval=25`, { stream: true })),
  })
  return { status: res.statusCode, text: await res.body.text() }
}

function buffered (i: number): Promise<Answer> {
  return postJson(rig.url, '/v1/chat/completions', chatBody(`buffered ${i}\n#sim ttft=150 tokens=30`), auth)
}

function floodCall (i: number): Promise<Answer> {
  return postJson(rig.url, '/rpc', { jsonrpc: '2.0', id: i, method: 'capabilities', params: { pad: 'x'.repeat(300_000) } }, auth)
}

function prompt (i: number): Promise<Answer> {
  return postJson(rig.url, '/rpc', {
    jsonrpc: '2.0', id: `p${i}`, method: 'session/prompt',
    params: { sessionId: `flood-prompt-${i}`, route: 'chat', body: chatBody(`prompt ${i}\n#sim ttft=100 tokens=20`), pad: 'y'.repeat(300_000) },
  }, { ...auth, [TAG]: `prompt-${i}` })
}

t.test('envelope flood beside fault-free exchanges: no admitted exchange is cut or refused for parse capacity', async (t) => {
  const streams = Array.from({ length: STREAMS }, (_, i) => stream(i))
  // Let the streams get going (headers out, frames flowing) before the flood.
  await new Promise((r) => setTimeout(r, 300))
  const flood = Array.from({ length: FLOOD }, (_, i) => floodCall(i))
  const buffers = Array.from({ length: BUFFERED }, (_, i) => buffered(i))
  const prompts = Array.from({ length: PROMPTS }, (_, i) => prompt(i))
  const [s, b, f, p] = await Promise.all([Promise.all(streams), Promise.all(buffers), Promise.all(flood), Promise.all(prompts)])

  for (const [i, r] of s.entries()) {
    t.equal(r.status, 200, `stream ${i}: 200`)
    t.ok(r.text.trimEnd().endsWith('data: [DONE]'), `stream ${i}: complete, to its terminal`)
    t.notMatch(r.text, /parse_capacity|"error"/, `stream ${i}: no failure tail`)
  }
  for (const [i, r] of b.entries()) {
    t.equal(r.status, 200, `buffered ${i}: 200`)
    t.ok(Array.isArray(r.json.choices), `buffered ${i}: the provider's answer`)
  }
  let answered = 0
  let refused = 0
  for (const [i, r] of f.entries()) {
    t.equal(r.status, 200, `flood ${i}: a JSON-RPC answer`)
    if (r.json.result !== undefined) { answered++; continue }
    const err = r.json.error as { data?: { errorKind?: string } } | undefined
    t.equal(err?.data?.errorKind, 'parse_capacity_exhausted', `flood ${i}: refused honestly, before acceptance`)
    t.equal(r.headers['retry-after'], '1', `flood ${i}: with Retry-After`)
    refused++
  }
  t.equal(answered + refused, FLOOD, 'every flood call was answered')
  t.ok(answered > 0, `some of the flood was served (${answered} answered, ${refused} refused)`)
  t.comment(`flood: ${answered} answered, ${refused} refused before acceptance`)
  let reachedProvider = 0
  for (const [i, r] of p.entries()) {
    const reached = rig.requests.some((q) => q.headers[TAG] === `prompt-${i}`)
    if (reached) {
      reachedProvider++
      const result = r.json.result as { status?: number; body?: { choices?: unknown } } | undefined
      t.equal(result?.status, 200, `prompt ${i}: accepted, so its result is delivered`)
      t.ok(Array.isArray(result?.body?.choices), `prompt ${i}: the provider's JSON`)
    } else {
      const err = r.json.error as { data?: { errorKind?: string } } | undefined
      t.equal(err?.data?.errorKind, 'parse_capacity_exhausted', `prompt ${i}: refused before acceptance`)
      refused++
    }
  }
  t.comment(`prompts that reached the provider: ${reachedProvider}/${PROMPTS}`)

  t.same(await waitIdle(rig.gw), {}, 'ledger idle')
  const m = await rig.gw.metrics()
  t.equal(m.get('sluice_refusals_total{code="parse_capacity_exhausted"}') ?? 0, refused, 'the only parse-capacity refusals are envelopes refused before acceptance')
  t.equal(m.get('sluice_refusals_total{code="parse_capacity_timeout"}') ?? 0, 0, 'no parse wait ran out')
  t.equal(m.get('sluice_admissions_total'), m.get('sluice_releases_total'))
})
