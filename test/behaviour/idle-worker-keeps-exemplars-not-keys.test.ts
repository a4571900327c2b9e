// worker/exemplars.ts on a real gateway: after an exchange the HTTP worker keeps its objects
// (request, response, the provider's answer, the provider socket), so an idle full GC leaves
// the JIT's hidden classes. What it keeps carries no caller's key. The proof is a real heap
// snapshot of the worker, searched for the key. It finds the key while an exchange is in
// flight (so the search can fail), and not once the worker is idle again.

import t from 'tap'
import { request } from 'undici'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 1 }) })
t.teardown(() => rig.close())

interface Kept { exchange: boolean, authorization: string | null, upstream: boolean, upstreamSocket: boolean }

async function kept (): Promise<Kept> {
  return await (await request(rig.url + '/_test/exemplars')).body.json() as Kept
}

/** Whether the worker's heap holds the gateway key (anywhere: in a header value, a raw header list, ...). */
async function heapHoldsKey (): Promise<boolean> {
  const res = await request(rig.url + '/_test/heap-snapshot')
  const snapshot = await res.body.text()
  if (res.statusCode !== 200 || !snapshot.includes('"strings":[')) throw new Error(`no heap snapshot: ${res.statusCode} ${snapshot.slice(0, 200)}`)
  return snapshot.includes(KEY)
}

function post (content: string, headers: Record<string, string> = { authorization: `Bearer ${KEY}` }) {
  return request(rig.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { ...headers, 'content-type': 'application/json' },
    body: JSON.stringify(chatBody(content, { stream: true })),
  })
}

t.test('the last exchange is kept, scrubbed; the idle heap holds no key', async (t) => {
  t.match(await kept(), { exchange: false }, 'nothing kept before the first exchange')

  // In flight: the request (and so the key) is alive. The search finds it.
  const slow = await post('slow\n#sim tokens=30 interval=100')
  t.equal(slow.statusCode, 200)
  t.equal(await heapHoldsKey(), true, 'while an exchange is in flight its key is in the heap: the search works')
  const text = await slow.body.text()
  t.match(text, /\[DONE\]/, 'the stream ended whole')
  t.same(await waitIdle(rig.gw), {}, 'the ledger is idle')

  t.match(await kept(), { exchange: true, authorization: '[redacted]', upstream: true, upstreamSocket: true },
    'the exchange, the provider answer and the provider socket are kept; the authorization header is overwritten')
  t.equal(await heapHoldsKey(), false, 'the idle worker holds the kept exchange but not its key')

  // A refusal after authentication (the provider answers 503 before any byte) is kept too, scrubbed.
  const refused = await post('boom\n#sim fault=status-503')
  await refused.body.text()
  t.ok(refused.statusCode >= 500, `refused: ${refused.statusCode}`)
  t.same(await waitIdle(rig.gw), {})
  t.match(await kept(), { exchange: true, authorization: '[redacted]' })
  t.equal(await heapHoldsKey(), false, 'after a refusal neither')
})
