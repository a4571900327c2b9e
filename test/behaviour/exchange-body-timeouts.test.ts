// A body that stops arriving cannot hold what its exchange took before reading it (the
// exchange permit, the lane slot, the turn, the bytes reserved so far): after
// limits.bodyIdleMs without a byte, or limits.bodyReadMs after its reading began, it is
// refused with body_timeout (408), everything is released at once and the connection is
// closed (the rest of the body is never read). Same for the envelopes of non-blocking mode
// and JSON-RPC.

import t from 'tap'
import { connect, type Socket } from 'node:net'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { dropConnections, postJson, rpc } from '../helpers/sse.ts'

const IDLE_MS = 400
const READ_MS = 1500
const MAX_ACTIVE = 32

let rig: Rig
t.before(async () => {
  rig = await startRig({ workers: 2, limits: { bodyIdleMs: IDLE_MS, bodyReadMs: READ_MS, maxActiveExchanges: MAX_ACTIVE, queueWaitMs: 20_000 } })
})
t.teardown(async () => { await dropConnections(); await rig.close() })

interface Raw { status: number; head: string; body: string; closed: boolean; ms: number }

/**
 * Sends the request head (content-length `declared`) and `start` of the body on a raw
 * socket, then (optionally) trickles one byte every `trickleMs`, never completing the body.
 * Resolves with what came back once the server closed the connection.
 */
function stalledUpload (path: string, start: string, opts: { declared?: number; trickleMs?: number; headers?: Record<string, string>; onSent?: () => void } = {}): Promise<Raw> {
  const declared = opts.declared ?? 100
  return new Promise((resolve, reject) => {
    const sock: Socket = connect(rig.gw.port, '127.0.0.1')
    let data = ''
    let timer: ReturnType<typeof setInterval> | undefined
    const t0 = performance.now()
    sock.setEncoding('utf8')
    sock.on('data', (c: string) => { data += c })
    sock.on('error', () => {}) // a reset after the answer is still a close
    sock.on('connect', () => {
      const extra = Object.entries(opts.headers ?? {}).map(([k, v]) => `${k}: ${v}\r\n`).join('')
      sock.write(`POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${KEY}\r\ncontent-type: application/json\r\ncontent-length: ${declared}\r\n${extra}\r\n${start}`, () => opts.onSent?.())
      if (opts.trickleMs !== undefined) {
        let sent = start.length
        timer = setInterval(() => { if (sent < declared - 1 && !sock.destroyed) { sock.write(' '); sent++ } }, opts.trickleMs)
      }
    })
    sock.on('close', () => {
      clearInterval(timer)
      const ms = performance.now() - t0
      const split = data.indexOf('\r\n\r\n')
      if (split < 0) { resolve({ status: 0, head: data, body: '', closed: true, ms }); return }
      const head = data.slice(0, split)
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0), head, body: data.slice(split + 4), closed: true, ms })
    })
    setTimeout(() => { sock.destroy(); reject(new Error(`no close within 30 s; got: ${data}`)) }, 30_000).unref()
  })
}

function json (r: Raw): Record<string, unknown> {
  try { return JSON.parse(r.body) as Record<string, unknown> } catch { return {} }
}

t.test('uploads that go quiet holding every permit: each gets 408 body_timeout, the rest are then admitted', async (t) => {
  const n = MAX_ACTIVE + 4
  let sent = 0
  const uploads: Promise<Raw>[] = []
  const allSent = new Promise<void>((resolve) => {
    const onSent = (): void => { if (++sent === n) resolve() }
    for (let i = 0; i < n; i++) uploads.push(stalledUpload('/v1/chat/completions', '{"model":', { onSent }))
  })
  await allSent
  // While they hold the permits, a well-behaved caller waits in the queue and is admitted
  // once they are refused.
  const waiting = postJson(rig.url, '/v1/chat/completions', chatBody('after the stalls'), { authorization: `Bearer ${KEY}` })
  const results = await Promise.all(uploads)
  for (const [i, r] of results.entries()) {
    t.equal(r.status, 408, `upload ${i}: 408`)
    t.equal(json(r).code, 'body_timeout', `upload ${i}: the catalogue code`)
    t.match(r.head, /connection: close/i, `upload ${i}: the connection is closed (the rest of the body is unread)`)
    t.ok(r.closed, `upload ${i}: closed`)
  }
  t.ok(results.every((r) => r.ms >= IDLE_MS - 50), 'none before bodyIdleMs')
  const ok = await waiting
  t.equal(ok.status, 200, 'the queued caller was admitted and answered')
  t.same(await waitIdle(rig.gw), {}, 'permits, bytes and lanes back at idle')
  const m = await rig.gw.metrics()
  t.equal(m.get('sluice_refusals_total{code="body_timeout"}'), n, 'each counted once')
  t.equal(m.get('sluice_admissions_total'), m.get('sluice_releases_total'))
  // Admitted afterwards, at once: nothing is held any more.
  const again = await Promise.all(Array.from({ length: 4 }, (_, i) => postJson(rig.url, '/v1/chat/completions', chatBody(`later ${i}`), { authorization: `Bearer ${KEY}` })))
  t.same(again.map((a) => a.status), [200, 200, 200, 200])
})

t.test('a body that trickles (never idle) but is not complete within bodyReadMs: 408 body_timeout', async (t) => {
  const r = await stalledUpload('/v1/chat/completions', '{"model":', { trickleMs: 100, declared: 200 })
  t.equal(r.status, 408)
  t.equal(json(r).code, 'body_timeout')
  t.equal(json(r).reason, 'deadline', 'the total deadline, not the idle one')
  t.ok(r.ms >= READ_MS - 50, `not before bodyReadMs (${r.ms.toFixed(0)} ms)`)
  t.same(await waitIdle(rig.gw), {})
})

t.test('a session lane slot held by a stalled upload is released: the session goes on', async (t) => {
  const r = await stalledUpload('/v1/chat/completions', '{"model":', { headers: { 'x-session-id': 'stall-s1' } })
  t.equal(r.status, 408)
  t.equal(json(r).code, 'body_timeout')
  t.equal(json(r).reason, 'idle')
  const next = await postJson(rig.url, '/v1/chat/completions', chatBody('next in the session'), { authorization: `Bearer ${KEY}`, 'x-session-id': 'stall-s1' })
  t.equal(next.status, 200)
  t.same(await waitIdle(rig.gw), {})
})

t.test('a non-blocking envelope that goes quiet: 408 body_timeout before acceptance, its lane slot returned', async (t) => {
  const r = await stalledUpload('/v1/sessions/stall-s2/exchanges', '{"route":"chat","body":{"model":')
  t.equal(r.status, 408)
  t.equal(json(r).code, 'body_timeout')
  t.match(r.head, /connection: close/i)
  t.same(await waitIdle(rig.gw), {})
  const ok = await postJson(rig.url, '/v1/sessions/stall-s2/exchanges', { route: 'chat', body: chatBody('after') }, { authorization: `Bearer ${KEY}` })
  t.equal(ok.status, 202, 'the session accepts the next one')
  t.same(await waitIdle(rig.gw), {})
})

t.test('a JSON-RPC envelope that goes quiet: the JSON-RPC error body_timeout, connection closed', async (t) => {
  const r = await stalledUpload('/rpc', '{"jsonrpc":"2.0","id":1,"method":')
  t.equal(r.status, 200, 'JSON-RPC answers are HTTP 200 (a transport)')
  const err = (json(r).error ?? {}) as { code?: number; data?: Record<string, unknown> }
  t.equal(err.data?.errorKind, 'body_timeout')
  t.equal(err.data?.status, 408)
  t.equal(err.code, -32002, 'a caller error')
  t.match(r.head, /connection: close/i)
  t.same(await waitIdle(rig.gw), {})
  const caps = await rpc(rig.url, KEY, 'capabilities')
  const limits = (caps.json.result as { limits: Record<string, unknown> }).limits
  t.equal(limits.bodyIdleMs, IDLE_MS, 'capabilities list bodyIdleMs')
  t.equal(limits.bodyReadMs, READ_MS, 'capabilities list bodyReadMs')
})
