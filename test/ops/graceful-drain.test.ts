// What a supervisor's stop relies on (systemd KillSignal=SIGTERM + TimeoutStopSec, a
// container's STOPSIGNAL + grace period): SIGTERM with a REAL streaming model exchange in
// flight — through the provider path, not a test hook — lets it finish byte for byte while
// readiness says 503 and liveness stays 200, then exits 0; and a stream that outlasts drainMs
// does not hold the stop beyond it. (test/behaviour/start-and-stop.test.ts covers the drain
// with a held permit, the refusal of new exchanges and the second signal.)

import t from 'tap'
import { request } from 'undici'
import { KEY, PROVIDER_KEY, chatBody, messagesBody, startRig } from '../helpers/exchange.ts'

interface Streamed { status: number; first: Promise<void>; done: Promise<{ bytes: Buffer; error: string | null }> }

function stream (base: string, key: string, path: string, body: unknown): Promise<Streamed> {
  return request(base + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'x-api-key': key, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(body),
  }).then((res) => {
    const chunks: Buffer[] = []
    let gotFirst!: () => void
    const first = new Promise<void>((resolve) => { gotFirst = resolve })
    const done = (async () => {
      try {
        for await (const c of res.body) { chunks.push(c as Buffer); gotFirst() }
        return { bytes: Buffer.concat(chunks), error: null }
      } catch (err) {
        return { bytes: Buffer.concat(chunks), error: (err as NodeJS.ErrnoException).code ?? String(err) }
      } finally { gotFirst() }
    })()
    return { status: res.statusCode, first, done }
  })
}

async function status (url: string): Promise<number> {
  const res = await request(url)
  await res.body.dump()
  return res.statusCode
}

t.test('SIGTERM mid-stream: readiness 503, liveness 200, the exchanges finish exactly, exit 0', async (t) => {
  const rig = await startRig({ workers: 2, limits: { drainMs: 15_000 } })
  t.teardown(() => rig.close())
  const admin = `http://127.0.0.1:${rig.gw.adminPort}`
  t.equal(await status(`${admin}/readyz`), 200, 'ready before')

  // About 1.5 s each, on two protocols, so they straddle the signal.
  const cases: Array<[string, Record<string, unknown>]> = [
    ['/v1/chat/completions', chatBody('drain me\n#sim ttft=50 tokens=30 interval=50', { stream: true })],
    ['/v1/messages', messagesBody('drain me too\n#sim ttft=50 tokens=30 interval=50', { stream: true })],
  ]
  const inFlight = await Promise.all(cases.map(([path, body]) => stream(rig.url, KEY, path, body)))
  for (const s of inFlight) t.equal(s.status, 200)
  await Promise.all(inFlight.map((s) => s.first))
  const exitedAt = rig.gw.exited.then(() => Date.now())
  rig.gw.proc.kill('SIGTERM')

  await new Promise((r) => setTimeout(r, 150))
  t.equal(await status(`${admin}/readyz`), 503, 'not ready while draining (a load balancer stops sending)')
  t.equal(await status(`${admin}/healthz`), 200, 'still alive while draining (no restart)')

  const results = await Promise.all(inFlight.map((s) => s.done))
  const streamsEndedAt = Date.now()
  for (const [i, got] of results.entries()) {
    const [path, body] = cases[i]
    t.equal(got.error, null, `${path}: the stream ended cleanly`)
    const direct = await stream(rig.sim.url, PROVIDER_KEY, path, body)
    t.ok(got.bytes.equals((await direct.done).bytes), `${path}: every byte of the provider's stream arrived (${got.bytes.length})`)
  }
  t.equal(await rig.gw.exited, 0, 'exit 0')
  const after = (await exitedAt) - streamsEndedAt
  t.ok(after < 3_000, `exited ${after} ms after the last stream ended: once the exchanges were done, not at drainMs (15 s)`)
  t.ok(rig.gw.logs.some((l) => l.includes('"stopped"') && l.includes('"abandonedActive":0')), 'nothing abandoned')
})

t.test('a stream longer than drainMs does not hold the stop: it ends with a signed shutting_down tail, exit 0 soon after drainMs', async (t) => {
  const drainMs = 800
  const rig = await startRig({ workers: 1, limits: { drainMs } })
  t.teardown(() => rig.close())
  // About 6 s: far past the drain.
  const s = await stream(rig.url, KEY, '/v1/chat/completions', chatBody('too long\n#sim tokens=60 interval=100', { stream: true }))
  t.equal(s.status, 200)
  await s.first
  const signalledAt = Date.now()
  rig.gw.proc.kill('SIGTERM')
  t.equal(await rig.gw.exited, 0, 'exit 0 after the drain deadline')
  const took = Date.now() - signalledAt
  t.ok(took >= drainMs - 400 && took < drainMs + 5_000, `stopped ${took} ms after SIGTERM (drainMs ${drainMs}, cut 250 ms before it; TimeoutStopSec must exceed drainMs + a few s)`)
  const got = await Promise.race([s.done, new Promise<null>((r) => setTimeout(() => r(null), 5_000))])
  t.ok(got !== null, 'the client\'s stream ended too')
  t.equal(got?.error, null, 'a clean end, not a torn socket')
  const text = got?.bytes.toString('utf8') ?? ''
  t.match(text, /"code":"shutting_down"/, 'the last event is the failure tail naming shutting_down')
  t.match(text, /"sluice":\{"record":\{/, 'with its signed record')
  t.ok(rig.gw.logs.some((l) => l.includes('"drain deadline: exchanges cut"')), 'the worker says it cut what was left')
  t.ok(rig.gw.logs.some((l) => l.includes('"stopped"') && l.includes('"abandonedActive":0')), 'nothing abandoned: it was ended, not dropped')
})
