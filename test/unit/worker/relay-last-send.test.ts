// The stream's terminal frame and the response's end leave in one send (worker/relay.ts
// holdForEnd), and the hold never outlasts the turn of the loop it began in.
//
// A real node:http upstream, relayStream through undici, a second node:http server whose client
// socket's writes are counted (its own _write/_writev, which still do the writing): a stream the
// provider sends and ends at once reaches the client in one socket write, head, frames and the
// chunked encoding's last chunk together. A provider that keeps its response open after [DONE]
// does not keep the client waiting: the upstream ends only once the client has the terminal.

import t from 'tap'
import { randomUUID } from 'node:crypto'
import type { ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { request } from 'undici'
import { ExchangeScope } from '../../../worker/scope.ts'
import { newRecord } from '../../../worker/deps.ts'
import { relayStream, type Outcome } from '../../../worker/relay.ts'
import { makeLedger } from '../ledger/helpers.ts'
import { chunk, DONE, idleOf, RELAY_STORAGE, startServer, unitConfig, unitDeps, USAGE } from './helpers.ts'

const FRAMES = [chunk('Hel'), chunk('lo'), chunk(null, 'stop'), USAGE, DONE]
const BYTES = Buffer.from(FRAMES.join(''))

/** How the upstream ends its response: with the frames, or once `release` is called. */
let upstreamEnd: 'at-once' | 'later' = 'at-once'
let release: () => void = () => {}

const upstream = await startServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  if (upstreamEnd === 'at-once') { res.end(BYTES); return }
  res.write(BYTES)
  release = () => { res.end() }
})
t.teardown(upstream.close)

interface Run { outcome: Promise<Outcome>; socketWrites: number; ledger: ReturnType<typeof makeLedger> }
let current: Run | null = null

/** Counts the socket's writes, each still done by Node's own method. */
function countWrites (socket: Socket, onWrite: () => void): void {
  const s = socket as Socket & { _write: (...a: unknown[]) => void; _writev: (...a: unknown[]) => void }
  const write = s._write
  const writev = s._writev
  s._write = function (...a: unknown[]) { onWrite(); return write.apply(this, a) }
  s._writev = function (...a: unknown[]) { onWrite(); return writev.apply(this, a) }
}

const gateway = await startServer((req, res: ServerResponse) => {
  const run = current!
  countWrites(req.socket, () => { run.socketWrites++ })
  const deps = unitDeps(run.ledger, unitConfig())
  const scope = new ExchangeScope(run.ledger, ['processing'])
  const ac = new AbortController()
  req.once('close', () => { if (!res.writableFinished) ac.abort() })
  const rec = newRecord({ exchangeId: randomUUID(), runId: null, route: 'chat', mode: 'blocking', provider: 'unit-chat', model: 'unit-model', stream: true })
  run.outcome = (async () => {
    const up = await request(upstream.url + '/v1/chat/completions', { method: 'POST', body: '{}', signal: ac.signal })
    const outcome = await relayStream({ deps, rec, route: 'chat', up, res, scope, signal: ac.signal })
    scope.settle('processing')
    return outcome
  })()
})
t.teardown(gateway.close)

function newRun (): Run {
  const run: Run = { outcome: Promise.resolve({ code: 'ok' }), socketWrites: 0, ledger: makeLedger({ storageBytes: RELAY_STORAGE }) }
  current = run
  return run
}

t.test('a stream its provider ends at once: one socket write to the client, the last chunk of the encoding with it', async (t) => {
  upstreamEnd = 'at-once'
  for (let i = 0; i < 5; i++) {
    const run = newRun()
    const res = await request(gateway.url + '/')
    const client = Buffer.from(await res.body.arrayBuffer())
    t.equal((await run.outcome).code, 'ok')
    t.ok(client.equals(BYTES), 'byte-exact')
    t.equal(run.socketWrites, 1, 'head, frames and the end in one write')
    t.same(idleOf(run.ledger), [])
  }
})

t.test('a provider that keeps its response open after [DONE]: the client has the terminal before the provider ends', async (t) => {
  upstreamEnd = 'later'
  const run = newRun()
  const res = await request(gateway.url + '/')
  const got: Buffer[] = []
  let released = false
  const body = (async () => {
    for await (const c of res.body) {
      got.push(c as Buffer)
      if (!released && Buffer.concat(got).includes(DONE)) { released = true; release() }
    }
  })()
  // Without the bound (a hold kept until the end), the provider would never be released.
  const bound = new Promise<'held'>((resolve) => setTimeout(() => resolve('held'), 5000).unref())
  const first = await Promise.race([body.then(() => 'done' as const), bound])
  t.not(first, 'held', 'the terminal reached the client while the provider still held its response')
  if (!released) release() // (failed: let the exchange finish)
  await body
  t.ok(Buffer.concat(got).equals(BYTES), 'byte-exact')
  t.equal((await run.outcome).code, 'ok')
  t.ok(run.socketWrites >= 2, 'the terminal went out on its own; the end followed')
  t.same(idleOf(run.ledger), [])
})
