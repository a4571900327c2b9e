// One refusal, three transports: a blocking HTTP call, a non-blocking submit and a JSON-RPC
// call refused for the same reason carry the same catalogue code, status, human message,
// retry hint and details (DESIGN.md "Errors": the same code everywhere). The HTTP routes
// answer `{ code, error, ...details }` with the catalogue status; JSON-RPC answers HTTP 200
// with `error.data = { errorKind, status, retryAfterSeconds, ...details }`.
// The session's pending count is one count for all three transports.

import t from 'tap'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { until, waitIdle } from '../helpers/gateway.ts'
import { dropConnections, postJson, rpc, submit, type Answer } from '../helpers/sse.ts'

const LIMIT = 3

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 2, limits: { maxPendingPromptsPerSession: LIMIT } }) })
// Client connections first: see dropConnections.
t.teardown(async () => { await dropConnections(); await rig.close() })

interface Shape {
  code: unknown
  status: unknown
  message: unknown
  retryAfter: unknown
  details: Record<string, unknown>
}

function drop (o: Record<string, unknown>, keys: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(o)) if (!keys.includes(k)) out[k] = v
  return out
}

/** An HTTP refusal `{ code, error, ...details }` (the blocking route's exchangeId set aside). */
function httpShape (a: Answer): Shape {
  return {
    code: a.json.code,
    status: a.status,
    message: a.json.error,
    retryAfter: a.headers['retry-after'] ?? null,
    details: drop(a.json, ['code', 'error', 'exchangeId']),
  }
}

/** A JSON-RPC error: HTTP 200, the same facts inside error.data. */
function rpcShape (a: Answer): Shape {
  const e = (a.json.error ?? {}) as { code?: number; message?: unknown; data?: Record<string, unknown> }
  const data = e.data ?? {}
  if (a.status !== 200) throw new Error(`JSON-RPC answered HTTP ${a.status}`)
  const header = a.headers['retry-after'] ?? null
  const hint = data.retryAfterSeconds === null ? null : String(data.retryAfterSeconds)
  if (hint !== header) throw new Error(`data.retryAfterSeconds ${String(data.retryAfterSeconds)} vs Retry-After ${String(header)}`)
  return {
    code: data.errorKind,
    status: data.status,
    message: e.message,
    retryAfter: header,
    details: drop(data, ['errorKind', 'status', 'retryAfterSeconds']),
  }
}

const FULL = 'shapes-full'
const BROKEN = '{"route":"chat","body":{"model":"gpt-4o-mini",'
const auth = { authorization: `Bearer ${KEY}` }

interface Row {
  kind: string
  rpcCode: number
  expect: { code: string; status: number; retryAfter: string | null; details: Record<string, unknown> }
  blocking: () => Promise<Answer>
  nonBlocking: () => Promise<Answer>
  rpc: () => Promise<Answer>
}

const ROWS: Row[] = [
  {
    kind: 'prompt_queue_full',
    rpcCode: -32001,
    expect: { code: 'prompt_queue_full', status: 503, retryAfter: '5', details: { sessionId: FULL, limit: LIMIT, pendingCount: LIMIT } },
    blocking: () => postJson(rig.url, '/v1/chat/completions', chatBody('one too many'), { ...auth, 'x-session-id': FULL }),
    nonBlocking: () => submit(rig.url, KEY, FULL, 'chat', chatBody('one too many')),
    rpc: () => rpc(rig.url, KEY, 'session/prompt', { sessionId: FULL, route: 'chat', body: chatBody('one too many') }),
  },
  {
    kind: 'unauthorized',
    rpcCode: -32002,
    expect: { code: 'unauthorized', status: 401, retryAfter: null, details: {} },
    blocking: () => postJson(rig.url, '/v1/chat/completions', chatBody('no key'), { 'x-session-id': 'shapes-anon' }),
    nonBlocking: () => postJson(rig.url, '/v1/sessions/shapes-anon/exchanges', { route: 'chat', body: chatBody('no key') }, {}),
    rpc: () => rpc(rig.url, null, 'session/prompt', { sessionId: 'shapes-anon', route: 'chat', body: chatBody('no key') }),
  },
  {
    kind: 'unauthorized (wrong key)',
    rpcCode: -32002,
    expect: { code: 'unauthorized', status: 401, retryAfter: null, details: {} },
    blocking: () => postJson(rig.url, '/v1/chat/completions', chatBody('bad key'), { authorization: 'Bearer sk-wrong', 'x-session-id': 'shapes-anon' }),
    nonBlocking: () => submit(rig.url, 'sk-wrong', 'shapes-anon', 'chat', chatBody('bad key')),
    rpc: () => rpc(rig.url, 'sk-wrong', 'session/prompt', { sessionId: 'shapes-anon', route: 'chat', body: chatBody('bad key') }),
  },
  {
    // The same broken bytes everywhere, so the same position is reported.
    kind: 'invalid_json',
    rpcCode: -32700,
    expect: { code: 'invalid_json', status: 400, retryAfter: null, details: {} },
    blocking: () => postJson(rig.url, '/v1/chat/completions', BROKEN, { ...auth, 'x-session-id': 'shapes-json' }),
    nonBlocking: () => postJson(rig.url, '/v1/sessions/shapes-json/exchanges', BROKEN, auth),
    rpc: () => postJson(rig.url, '/rpc', BROKEN, auth),
  },
]

t.test('the same refusal through blocking HTTP, non-blocking POST and JSON-RPC', async (t) => {
  // Fill one session to its cap with one exchange of each transport: one shared count.
  const pending = async (n: number): Promise<boolean> => (await rig.gw.metrics()).get('sluice_session_pending') === n
  const httpHeld = postJson(rig.url, '/v1/chat/completions', chatBody('held by blocking HTTP\n#sim ttft=20000'), { ...auth, 'x-session-id': FULL })
  await until(() => pending(1), 'the blocking HTTP exchange pending')
  const rpcHeld = rpc(rig.url, KEY, 'session/prompt', { sessionId: FULL, route: 'chat', body: chatBody('held by JSON-RPC') }, 'held')
  await until(() => pending(2), 'the JSON-RPC prompt queued behind it')
  const accepted = await submit(rig.url, KEY, FULL, 'chat', chatBody('held by non-blocking'))
  t.equal(accepted.status, 202, 'the third transport takes the last place')
  t.equal((await rig.gw.metrics()).get('sluice_session_pending'), LIMIT, 'one count for the three transports')

  for (const row of ROWS) {
    const sent = rig.requests.length
    const b = await row.blocking()
    const n = await row.nonBlocking()
    const r = await row.rpc()
    const shapes = { blocking: httpShape(b), nonBlocking: httpShape(n), rpc: rpcShape(r) }
    const { details: expectDetails, ...expectTop } = row.expect
    for (const [transport, shape] of Object.entries(shapes)) {
      t.match(shape, expectTop, `${row.kind} via ${transport}: code, status, retry hint (${JSON.stringify(shape)})`)
      t.equal(typeof shape.message, 'string', `${row.kind} via ${transport}: a human message`)
      t.match(shape.details, expectDetails, `${row.kind} via ${transport}: details`)
    }
    t.strictSame(shapes.nonBlocking, shapes.blocking, `${row.kind}: non-blocking = blocking`)
    t.strictSame(shapes.rpc, shapes.blocking, `${row.kind}: JSON-RPC = blocking`)
    t.equal((r.json.error as { code: number }).code, row.rpcCode, `${row.kind}: JSON-RPC code ${row.rpcCode}`)
    t.notOk('exchangeId' in n.json, `${row.kind}: the non-blocking refusal issues no exchange id`)
    if (row.kind === 'prompt_queue_full') t.notOk('exchangeId' in b.json, `${row.kind}: nor the blocking one`)
    t.equal(rig.requests.length, sent, `${row.kind}: nothing reached the provider`)
    // Polled: a refused non-blocking submit (invalid_json: its lane entry is taken before the
    // envelope is read) releases the entry just after its answer (session-routes.ts acceptExchange).
    await until(() => pending(LIMIT), `${row.kind}: nothing counted`, 2000)
    t.pass(`${row.kind}: nothing counted`)
  }

  const c = await rpc(rig.url, KEY, 'session/cancel', { sessionId: FULL })
  t.equal((c.json.result as { cancelled: number }).cancelled, LIMIT, 'the three held exchanges cancelled')
  const [h, p] = await Promise.all([httpHeld, rpcHeld])
  t.equal(h.status, 499)
  t.equal(h.json.code, 'exchange_cancelled')
  t.equal((p.json.error as { data: Record<string, unknown> }).data.errorKind, 'exchange_cancelled')
  t.same(await waitIdle(rig.gw), {}, 'idle')
})
