// ClientDrain (worker/relay.ts): the relay's waits for a full client socket. Resolves on 'drain';
// rejects with the exchange's abort cause when its signal aborts, and with client_stalled when
// the client read nothing for stallMs; and once closed leaves no listener or timer behind.
// A real node:http ServerResponse, filled until write() says no, and a real client socket that
// reads (or not) when told.

import t, { type Test } from 'tap'
import { createServer, type ServerResponse } from 'node:http'
import { connect, type Socket } from 'node:net'
import { once, getEventListeners } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import { ClientDrain } from '../../../worker/relay.ts'
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
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  await fill(res, client)
  return { res, client }
}

/** Stops the client reading and writes until the kernel's buffers are full too: write() says no and no 'drain' comes for a while. */
async function fill (res: ServerResponse, client: Socket): Promise<void> {
  client.pause()
  const block = Buffer.alloc(64 * 1024, 120)
  for (;;) {
    while (res.write(block)) { /* until this side's buffer is full */ }
    const drainedSoon = await once(res, 'drain', { signal: AbortSignal.timeout(100) }).then(() => true, () => false)
    if (!drainedSoon) break
  }
}

const listeners = (res: ServerResponse, signal: AbortSignal) => ({ drain: res.listenerCount('drain'), error: res.listenerCount('error'), abort: getEventListeners(signal, 'abort').length })

t.test('resolves when the client reads, and leaves nothing behind once closed', async (t) => {
  const { res, client } = await fullResponse(t)
  const ac = new AbortController()
  const before = listeners(res, ac.signal)
  const d = new ClientDrain(res, ac.signal, 5000)
  const wait = d.wait()
  t.not(listeners(res, ac.signal).drain, before.drain, 'waiting on drain')
  client.resume()
  await wait
  d.close()
  t.same(listeners(res, ac.signal), before, 'no listener left')
})

t.test('client_stalled when nothing is read for stallMs', async (t) => {
  const { res } = await fullResponse(t)
  const ac = new AbortController()
  const before = listeners(res, ac.signal)
  const t0 = performance.now()
  const d = new ClientDrain(res, ac.signal, 60)
  const err = await d.wait().then(() => null, (e: unknown) => e)
  t.ok(err instanceof SluiceError && err.code === 'client_stalled', 'client_stalled')
  t.match((err as SluiceError).details, { stallMs: 60 })
  t.ok(performance.now() - t0 >= 55, 'not before stallMs')
  d.close()
  t.same(listeners(res, ac.signal), before, 'no listener left')
})

t.test('the signal aborting: its SluiceError reason, or client_closed; an aborted signal rejects at once', async (t) => {
  const { res } = await fullResponse(t)
  const ac = new AbortController()
  const before = listeners(res, ac.signal)
  const d = new ClientDrain(res, ac.signal, 5000)
  const wait = d.wait()
  ac.abort(new SluiceError('exchange_cancelled'))
  const err = await wait.then(() => null, (e: unknown) => e)
  t.ok(err instanceof SluiceError && err.code === 'exchange_cancelled', 'the reason')
  d.close()
  t.same(listeners(res, ac.signal), before, 'no listener left')

  const plain = new AbortController()
  const d2 = new ClientDrain(res, plain.signal, 5000)
  t.teardown(() => d2.close())
  const w2 = d2.wait()
  plain.abort()
  t.match(await w2.then(() => null, (e: unknown) => e), { code: 'client_closed' })
  t.match(await d2.wait().then(() => null, (e: unknown) => e), { code: 'client_closed' }, 'already aborted')
})

t.test('no timer is left running once closed (the process can exit)', async (t) => {
  const { res, client } = await fullResponse(t)
  const ac = new AbortController()
  const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length
  const before = timers()
  const d = new ClientDrain(res, ac.signal, 60_000)
  const wait = d.wait()
  t.equal(timers(), before + 1, 'one stall timer while waiting')
  client.resume()
  await wait
  d.close()
  t.equal(timers(), before, 'cleared')
})

// ClientDrain: one exchange's waits share one set of listeners and one stall timer.
t.test('ClientDrain: many waits, one set of listeners, nothing left after close()', async (t) => {
  const { res, client } = await fullResponse(t)
  const ac = new AbortController()
  const before = listeners(res, ac.signal)
  const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length
  const timersBefore = timers()
  const d = new ClientDrain(res, ac.signal, 5000)
  t.same(listeners(res, ac.signal), before, 'nothing added before the first wait')
  for (let i = 0; i < 3; i++) {
    const wait = d.wait()
    t.same(listeners(res, ac.signal), { drain: before.drain + 1, error: before.error + 1, abort: before.abort + 1 }, `wait ${i}: one listener of each`)
    t.equal(timers(), timersBefore + 1, `wait ${i}: one stall timer`)
    t.throws(() => d.wait(), /a second wait/, 'one wait at a time')
    client.resume()
    await wait
    await fill(res, client) // for the next wait
  }
  d.close()
  t.same(listeners(res, ac.signal), before, 'no listener left after close()')
  t.equal(timers(), timersBefore, 'no timer left after close()')
  t.throws(() => d.wait(), /after close/)
  d.close() // twice is harmless
})

t.test('ClientDrain: the stall is counted from the start of each wait, not from the first', async (t) => {
  const stallMs = 600
  // A first wait that ends at once, then no quiet spell (the next wait begins while the timer
  // the first one armed has not fired: filling the socket again takes ~100-200 ms) or one
  // longer than stallMs (the timer fired with no wait pending and must do nothing); then a
  // wait the client never ends: client_stalled, stallMs after it began.
  for (const quietMs of [0, stallMs + 100]) {
    const { res, client } = await fullResponse(t)
    const d = new ClientDrain(res, new AbortController().signal, stallMs)
    t.teardown(() => d.close())
    const first = d.wait()
    client.resume()
    await first
    await sleep(quietMs)
    await fill(res, client)
    const t0 = performance.now()
    const err = await d.wait().then(() => null, (e: unknown) => e)
    const waited = performance.now() - t0
    t.ok(err instanceof SluiceError && err.code === 'client_stalled', `quiet ${quietMs} ms: client_stalled`)
    t.ok(waited >= stallMs - 5, `quiet ${quietMs} ms: not before stallMs from this wait's start (${waited.toFixed(0)} ms)`)
  }
})

t.test('ClientDrain: an abort rejects the pending wait with its cause, and every later wait at once', async (t) => {
  const { res } = await fullResponse(t)
  const ac = new AbortController()
  const d = new ClientDrain(res, ac.signal, 5000)
  t.teardown(() => d.close())
  const wait = d.wait()
  ac.abort(new SluiceError('exchange_cancelled'))
  t.match(await wait.then(() => null, (e: unknown) => e), { code: 'exchange_cancelled' })
  t.match(await d.wait().then(() => null, (e: unknown) => e), { code: 'exchange_cancelled' }, 'already aborted')
})

