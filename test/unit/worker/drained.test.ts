// drained (worker/relay.ts): the relay's wait for a full client socket. Resolves on 'drain';
// rejects with the exchange's abort cause when its signal aborts, and with client_stalled when
// the client read nothing for stallMs; and leaves no listener or timer behind in any case.
// A real node:http ServerResponse, filled until write() says no, and a real client socket that
// reads (or not) when told.

import t, { type Test } from 'tap'
import { createServer, type ServerResponse } from 'node:http'
import { connect, type Socket } from 'node:net'
import { once, getEventListeners } from 'node:events'
import { drained } from '../../../worker/relay.ts'
import { SluiceError } from '../../../src/errors.ts'

async function fullResponse (t: Test): Promise<{ res: ServerResponse; client: Socket }> {
  let got!: (res: ServerResponse) => void
  const resP = new Promise<ServerResponse>((resolve) => { got = resolve })
  const srv = createServer((_req, res) => { got(res) }).listen(0, '127.0.0.1')
  await once(srv, 'listening')
  t.teardown(() => { srv.closeAllConnections(); srv.close() })
  const client = connect((srv.address() as { port: number }).port, '127.0.0.1')
  client.write('GET / HTTP/1.1\r\nhost: x\r\n\r\n')
  const res = await resP
  client.pause()
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  const block = Buffer.alloc(64 * 1024, 120)
  // Until the kernel's buffers are full too: write() says no and no 'drain' comes for a while.
  for (;;) {
    while (res.write(block)) { /* until this side's buffer is full */ }
    const drainedSoon = await once(res, 'drain', { signal: AbortSignal.timeout(100) }).then(() => true, () => false)
    if (!drainedSoon) break
  }
  return { res, client }
}

const listeners = (res: ServerResponse, signal: AbortSignal) => ({ drain: res.listenerCount('drain'), error: res.listenerCount('error'), abort: getEventListeners(signal, 'abort').length })

t.test('resolves when the client reads, and leaves nothing behind', async (t) => {
  const { res, client } = await fullResponse(t)
  const ac = new AbortController()
  const before = listeners(res, ac.signal)
  const wait = drained(res, ac.signal, 5000)
  t.not(listeners(res, ac.signal).drain, before.drain, 'waiting on drain')
  client.resume()
  await wait
  t.same(listeners(res, ac.signal), before, 'no listener left')
})

t.test('client_stalled when nothing is read for stallMs', async (t) => {
  const { res } = await fullResponse(t)
  const ac = new AbortController()
  const before = listeners(res, ac.signal)
  const t0 = performance.now()
  const err = await drained(res, ac.signal, 60).then(() => null, (e: unknown) => e)
  t.ok(err instanceof SluiceError && err.code === 'client_stalled', 'client_stalled')
  t.match((err as SluiceError).details, { stallMs: 60 })
  t.ok(performance.now() - t0 >= 55, 'not before stallMs')
  t.same(listeners(res, ac.signal), before, 'no listener left')
})

t.test('the signal aborting: its SluiceError reason, or client_closed; an aborted signal rejects at once', async (t) => {
  const { res } = await fullResponse(t)
  const ac = new AbortController()
  const before = listeners(res, ac.signal)
  const wait = drained(res, ac.signal, 5000)
  ac.abort(new SluiceError('exchange_cancelled'))
  const err = await wait.then(() => null, (e: unknown) => e)
  t.ok(err instanceof SluiceError && err.code === 'exchange_cancelled', 'the reason')
  t.same(listeners(res, ac.signal), before, 'no listener left')

  const plain = new AbortController()
  const w2 = drained(res, plain.signal, 5000)
  plain.abort()
  t.match(await w2.then(() => null, (e: unknown) => e), { code: 'client_closed' })
  t.match(await drained(res, plain.signal, 5000).then(() => null, (e: unknown) => e), { code: 'client_closed' }, 'already aborted')
})

t.test('no timer is left running after it resolved (the process can exit)', async (t) => {
  const { res, client } = await fullResponse(t)
  const ac = new AbortController()
  const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length
  const before = timers()
  const wait = drained(res, ac.signal, 60_000)
  t.equal(timers(), before + 1, 'one stall timer while waiting')
  client.resume()
  await wait
  t.equal(timers(), before, 'cleared')
})
