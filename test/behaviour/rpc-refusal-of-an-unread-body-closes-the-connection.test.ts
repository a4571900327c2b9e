// A JSON-RPC call refused before its whole body was read (over maxBodyBytes, chunked or by
// its Content-Length) says `Connection: close`, as the HTTP routes' refusals do: the rest of
// the body is never read, so the connection cannot carry another request. Without it a
// keep-alive client sends its next request on a connection the gateway is closing and gets
// a reset instead of an answer (found by test/fuzz/request-bodies.test.ts).

import t from 'tap'
import { Readable } from 'node:stream'
import { Client } from 'undici'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'

const MAX = 4096

let rig: Rig
t.before(async () => { rig = await startRig({ limits: { maxBodyBytes: MAX } }) })
t.teardown(async () => { await rig.close() })

function bigCall (): string {
  return JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'session/prompt', params: { sessionId: 's-big', route: 'chat', body: chatBody('x'.repeat(3 * MAX)) } })
}

const smallCall = JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'capabilities' })

for (const framing of ['chunked', 'content-length'] as const) {
  t.test(`${framing}: payload_too_large over JSON-RPC closes the connection, and the client's next call is answered`, async (t) => {
    // One connection: the second call goes where the first went, unless the first was closed.
    const client = new Client(rig.url, { pipelining: 1 })
    t.teardown(() => client.close())
    const text = bigCall()
    const body = framing === 'chunked'
      ? Readable.from([Buffer.from(text.slice(0, 1000)), Buffer.from(text.slice(1000))], { objectMode: false })
      : text
    const first = await client.request({ method: 'POST', path: '/rpc', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body })
    const j = await first.body.json() as { error?: { data?: { errorKind?: string } } }
    t.equal(first.statusCode, 200, 'JSON-RPC answers with 200')
    t.equal(j.error?.data?.errorKind, 'payload_too_large')
    t.equal(first.headers.connection, 'close', 'the connection is closed after the refusal')
    const second = await client.request({ method: 'POST', path: '/rpc', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: smallCall })
    const k = await second.body.json() as { result?: unknown }
    t.equal(second.statusCode, 200)
    t.ok(k.result, 'the next call is answered')
    t.same(await waitIdle(rig.gw), {})
  })
}
