// A hostile body that passes the byte, depth and node caps but blows the parser thread's heap:
// the parser thread dies, the exchange is refused honestly (local: worker_heap_exhausted), the
// parse permit is returned once that thread's exit is observed, and the next exchange parses
// on a fresh thread.

import t from 'tap'
import { request } from 'undici'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'

let rig: Rig
t.before(async () => {
  rig = await startRig({ workers: 1, limits: { parserHeapMb: 16, parserYoungGenMb: 4, maxBodyBytes: 32 * 1024 * 1024, maxJsonNodes: 20_000_000, storageBytes: 256 * 1024 * 1024 } })
})
t.teardown(() => rig.close())

t.test('a parser thread killed by a hostile body: honest refusal, permit back, pool recovers', async (t) => {
  // ~6 MiB of small objects: two million values, far past a 16 MiB parser heap.
  const hostile = '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}],"pad":[' + '{"a":[1,2]},'.repeat(500_000) + '{}]}'
  const before = rig.requests.length
  const res = await request(rig.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: hostile,
  })
  const j = await res.body.json() as Record<string, unknown>
  t.equal(res.statusCode, 503)
  t.equal(j.code, 'worker_heap_exhausted')
  t.equal(j.pool, 'parser')
  t.equal(rig.requests.length, before, 'nothing reached the provider')
  t.same(await waitIdle(rig.gw), {}, 'the parse permit and every byte came back')
  const m = await rig.gw.metrics()
  t.equal(m.get('sluice_permits_released_total{gate="parse"}'), m.get('sluice_permits_admitted_total{gate="parse"}'), 'the parse permit was released exactly once')

  const ok = await request(rig.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify(chatBody('after the crash\n#sim tokens=3')),
  })
  t.equal(ok.statusCode, 200, 'the next exchange parses on a fresh thread')
  await ok.body.dump()
  t.same(await waitIdle(rig.gw), {})
})
