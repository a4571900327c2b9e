// Real backpressure: the upstream is read only as fast as the client drains. A client that
// stops reading stalls the provider's stream (nothing buffers it all), and the bytes it then
// reads are exactly the provider's.

import t from 'tap'
import { request } from 'undici'
import type { SimEndEvent } from '../../src/sim/index.ts'
import { KEY, PROVIDER_KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { socketBufferBytes } from '../helpers/platform.ts'

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 1 }) })
t.teardown(() => rig.close())

t.test('a paused client pauses the provider; resuming delivers every byte exactly', async (t) => {
  // More events than every buffer on the way can take (the kernel's on the one TCP connection,
  // plus 8 MiB for the streams'): at least ~24 MB.
  const tokens = Math.max(24_000, Math.ceil((socketBufferBytes(1) + 8 * 2 ** 20) / 1000))
  const body = chatBody(`big\n#sim tokens=${tokens} bytes=1000`, { stream: true })
  const ends: SimEndEvent[] = []
  rig.sim.events.on('end', (e) => ends.push(e))
  const res = await request(rig.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    highWaterMark: 16 * 1024,
  })
  res.body.pause()
  await new Promise((r) => setTimeout(r, 1500))
  t.equal(ends.length, 0, 'the provider could not finish while the client was not reading')
  const m = await rig.gw.metrics()
  t.ok(m.get('sluice_storage_bytes_reserved')! < 2 * 1024 * 1024, `the gateway holds little (${m.get('sluice_storage_bytes_reserved')} bytes reserved)`)
  t.equal(m.get('sluice_exchanges_active'), 1)

  const chunks: Buffer[] = []
  res.body.on('data', (c: Buffer) => chunks.push(c))
  res.body.resume()
  await new Promise((r) => res.body.once('end', r))
  const via = Buffer.concat(chunks)
  const direct = await request(rig.sim.url + '/v1/chat/completions', { method: 'POST', headers: { authorization: `Bearer ${PROVIDER_KEY}` }, body: JSON.stringify(body) })
  const directBytes = Buffer.from(await direct.body.arrayBuffer())
  t.ok(via.length > tokens * 1000, `${via.length} bytes relayed`)
  t.ok(via.equals(directBytes), 'exactly the provider\'s bytes')
  t.equal(ends[0]?.outcome, 'completed')
  t.same(await waitIdle(rig.gw), {}, 'idle')
})
