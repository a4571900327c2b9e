// Shared pieces for the unit tests of worker/: a validated config, the exchange deps built from
// the real classes (the same ones worker/app.ts builds), a reading of the run table's truth
// cells (turn counts are not part of idleProblems: they belong to runs, not to exchanges), and
// a throwaway node:http server on 127.0.0.1 whose handler the test supplies, and the relay rig
// (relayStream between a real upstream and a real client, see startRelayRig) with the Chat
// frames its tests build streams from.
//
// Run directly (`tap test/unit` runs every file under it), this file checks its own helpers.
//
// Only the parser pool is left out of the deps: it is a thread pool, and none of the units
// tested here reads it (the relay's streaming path inspects frames in this thread). Reading it
// throws, so a unit that starts to need it fails loudly instead of meeting a stand-in.

import { isMainThread } from 'node:worker_threads'
import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { request } from 'undici'
import { sha256Hex, validateConfig } from '../../../src/config/load.ts'
import type { Config } from '../../../src/config/schema.ts'
import { createRingBuffer, EventRing } from '../../../src/events/ring.ts'
import type { ParserPool } from '../../../src/json/pool.ts'
import type { Ledger } from '../../../src/ledger/ledger.ts'
import { RG_PENDING_BYTES, RUN_COUNT, RUN_FIELDS, RUN_HASH_A, RUN_HASH_B } from '../../../src/ledger/layout.ts'
import { RunTable } from '../../../src/ledger/runs.ts'
import type { Route } from '../../../src/protocols/routes.ts'
import { Router } from '../../../src/routing.ts'
import { Signer, type FailureRecord } from '../../../src/sse/sign.ts'
import { idleProblems, makeLedger, turn } from '../ledger/helpers.ts'
import { Admission } from '../../../worker/admission.ts'
import { Authenticator } from '../../../worker/auth.ts'
import { Background } from '../../../worker/background.ts'
import { Exemplars } from '../../../worker/exemplars.ts'
import { newRecord, type ExchangeDeps, type ExchangeRecord } from '../../../worker/deps.ts'
import { relayStream, type Outcome } from '../../../worker/relay.ts'
import { ExchangeScope } from '../../../worker/scope.ts'
import { TurnPins } from '../../../worker/turns.ts'
import { Upstreams } from '../../../worker/upstream.ts'

export const KEY = 'sk-unit-gateway-key-0123456789'
export const KEY_NAME = 'unit'
export const PROVIDER_KEY = 'sk-unit-provider-secret-abcdef'
export const SIGNING_KEY = Buffer.from('unit-signing-key-for-failure-tails')

export function unitConfig (limits: Record<string, unknown> = {}, key: Record<string, unknown> = {}): Config {
  return validateConfig({
    listen: { port: 0 },
    limits,
    keys: [{ name: KEY_NAME, sha256: sha256Hex(KEY), models: ['*'], ...key }],
    providers: [{ name: 'unit-chat', protocol: 'openai-chat', baseUrl: 'http://127.0.0.1:9', apiKeyEnv: 'UNIT_PROVIDER_KEY', models: ['*'] }],
  })
}

export interface UnitDeps extends ExchangeDeps { logs: Array<Record<string, unknown>> }

export function unitDeps (ledger: Ledger, config: Config = unitConfig()): UnitDeps {
  const logs: Array<Record<string, unknown>> = []
  return {
    config,
    ledger,
    admission: new Admission(ledger, config.limits),
    auth: new Authenticator(config.keys),
    router: new Router(config.providers, null, { UNIT_PROVIDER_KEY: PROVIDER_KEY }),
    upstreams: new Upstreams(config.upstream),
    get parser (): ParserPool { throw new Error('the parser pool is not part of this unit test') },
    turns: new TurnPins(ledger),
    ring: new EventRing(createRingBuffer(4096), ledger.row),
    continuations: null,
    tracing: null,
    background: new Background(),
    signer: new Signer(SIGNING_KEY),
    log: (rec) => { logs.push(rec) },
    exemplars: new Exemplars(),
    logs,
  }
}

/** The run's turn count, read from the run table's cells (0 when the run has no slot). */
export function turnsTaken (ledger: Ledger, keyName: string, runId: string): number {
  const [a, b] = RunTable.hash(keyName, runId)
  const { i32, layout } = ledger.core
  for (let s = 0; s < layout.dims.runs; s++) {
    const at = layout.runs32 + s * RUN_FIELDS
    if (i32[at + RUN_HASH_A] === a && i32[at + RUN_HASH_B] === b) return i32[at + RUN_COUNT]
  }
  return 0
}

export interface TestServer { url: string; port: number; server: Server; close (): Promise<void> }

/** A node:http server on 127.0.0.1:0 running `handler` for every request. */
export async function startServer (handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<TestServer> {
  const server = createServer(handler)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    server,
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
  }
}

/** All orderings of `items`. */
export function permutations<T> (items: readonly T[]): T[][] {
  if (items.length <= 1) return [[...items]]
  const out: T[][] = []
  items.forEach((x, i) => {
    for (const rest of permutations([...items.slice(0, i), ...items.slice(i + 1)])) out.push([x, ...rest])
  })
  return out
}

// ---- the relay rig (relayStream, worker/relay.ts) ----
//
// A real node:http upstream sends an event stream in two writes, cut at a given byte offset; the
// relay reads it through undici's `request` (a real Dispatcher.ResponseData) and writes to the
// ServerResponse of a second node:http server, whose client (undici again) collects every byte.
// The upstream sends its second part only once the relay has taken in the first: the ledger's
// stream gauge (sluice_stream_pending_bytes) turns non-zero when the relay reserves for the first
// chunk, and by the next turn of the event loop its synchronous flush is done. So each run relays
// exactly the split it names, with no timing involved.
//
// What the relay wrote is read off the real ServerResponse's write()/end() calls (a recording
// wrapper around Node's own methods, which still do the writing), to see where the client's
// bytes stood when the first part had been relayed.

/** Room for any of the relay tests' streams (a chunk is reserved with the framer's copy of its partial frame). */
export const RELAY_STORAGE = 64 * 1024

/** One Chat chunk frame: a content delta (none when null) and its finish_reason. */
export function chunk (content: string | null, finish: string | null = null): string {
  const delta = content === null ? {} : { content }
  return 'data: ' + JSON.stringify({ id: 'chatcmpl-u1', object: 'chat.completion.chunk', model: 'unit-model', choices: [{ index: 0, delta, finish_reason: finish }] }) + '\n\n'
}
export const USAGE = 'data: ' + JSON.stringify({ id: 'chatcmpl-u1', object: 'chat.completion.chunk', model: 'unit-model', choices: [], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } }) + '\n\n'
export const DONE = 'data: [DONE]\n\n'

/** Where each frame starts, and the end. */
export function boundaries (frames: readonly string[]): number[] {
  const out = [0]
  for (const f of frames) out.push(out[out.length - 1] + Buffer.byteLength(f))
  return out
}

/** The failure tail (one Chat error frame) after `prefix` bytes of the client's stream. */
export function tailOf (client: Buffer, prefix: number): { record: FailureRecord; signature: string; error: Record<string, unknown> } {
  const text = client.subarray(prefix).toString('utf8')
  if (!text.startsWith('data: {"error":') || !text.endsWith('\n\n') || text.indexOf('\n\n') !== text.length - 2) throw new Error(`not one error frame: ${JSON.stringify(text.slice(0, 80))}`)
  const error = (JSON.parse(text.slice(6)) as { error: Record<string, unknown> & { sluice: { record: FailureRecord; signature: string } } }).error
  return { record: error.sluice.record, signature: error.sluice.signature, error }
}

/** idleProblems, plus this worker's stream gauges back at 0. */
export function idleOf (ledger: Ledger): string[] {
  const g = ledger.gauges()
  return [...idleProblems(ledger), ...(g.some((v) => v !== 0) ? [`gauges ${JSON.stringify(g)}`] : [])]
}

export interface RelayRun {
  ledger: Ledger
  route: Route
  parts: Buffer[]
  writes: Buffer[]
  /** Bytes the relay had written when the first part was relayed (null: one part only). */
  writtenAtSplit: number | null
  deps: UnitDeps | null
  /** Writes the client socket made (Node's own _write/_writev calls, counted). */
  socketWrites: number
  /** When set, the upstream ends its response only once this settles. */
  endGate: Promise<void> | null
}

export interface RelayResult {
  client: Buffer
  outcome: Outcome
  rec: ExchangeRecord
  writtenAtSplit: number | null
  run: RelayRun
  /** An endOnceClientHasAll run's upstream waited out HELD_END_BOUND_MS: the client did not have every byte before the upstream ended. */
  heldPastBound: boolean
}

export interface RelayOptions {
  /**
   * The upstream keeps its response open after the last byte until the client has every byte
   * of the stream (a provider that does not end after its terminal); bounded by
   * HELD_END_BOUND_MS, after which it ends anyway and the result says `heldPastBound`.
   */
  endOnceClientHasAll?: boolean
}

/** How long the upstream of an endOnceClientHasAll run waits for the client to have every byte. */
export const HELD_END_BOUND_MS = 5000

export interface RelayRig {
  /** Relays `bytes` on `route`, cut into two writes at `split` (none when 0 or the end), on a fresh ledger of `storageBytes`; `prepare` sees that ledger first. */
  relay (route: Route, bytes: Buffer, split: number, storageBytes?: number, prepare?: (ledger: Ledger) => void, options?: RelayOptions): Promise<RelayResult>
  close (): Promise<void>
}

/** Records what goes through `res.write` / `res.end` (Node's own methods do the writing). */
function recordWrites (res: ServerResponse, into: Buffer[]): void {
  const write = res.write.bind(res) as (chunk: Buffer) => boolean
  const end = res.end.bind(res) as (chunk?: Buffer, cb?: () => void) => ServerResponse
  res.write = ((c: Buffer) => { into.push(Buffer.from(c)); return write(c) }) as typeof res.write
  res.end = ((c?: Buffer | (() => void), cb?: () => void) => {
    if (typeof c === 'function') return end(undefined, c)
    if (c !== undefined && c !== null) into.push(Buffer.from(c))
    return end(c, cb)
  }) as typeof res.end
}

/** Counts a socket's writes (its own _write/_writev, which still do the writing). */
function countSocketWrites (socket: Socket, onWrite: () => void): void {
  const s = socket as Socket & { _write: (...a: unknown[]) => void; _writev: (...a: unknown[]) => void }
  const write = s._write
  const writev = s._writev
  s._write = function (...a: unknown[]) { onWrite(); return write.apply(this, a) }
  s._writev = function (...a: unknown[]) { onWrite(); return writev.apply(this, a) }
}

/** The upstream and the gateway servers of the relay rig; the gateway's config has `limits`. Runs are one at a time. */
export async function startRelayRig (limits: Record<string, unknown> = {}): Promise<RelayRig> {
  let current: RelayRun | null = null
  let done: ((r: { outcome: Outcome; rec: ExchangeRecord }) => void) | null = null
  const written = (run: RelayRun): number => run.writes.reduce((n, b) => n + b.length, 0)

  const upstream = await startServer((_req, res) => {
    const run = current!
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    let closed = false
    res.once('close', () => { closed = true })
    void (async () => {
      for (let i = 0; i < run.parts.length; i++) {
        res.write(run.parts[i])
        if (i === 0 && run.parts.length > 1) {
          // (A relay that refused the first chunk ends the exchange: the upstream is closed.)
          while (run.ledger.gauges()[RG_PENDING_BYTES] === 0 && !closed) await turn()
          await turn()
          run.writtenAtSplit = written(run)
        }
      }
      if (run.endGate !== null) await run.endGate
      res.end()
    })()
  })

  const gateway = await startServer((req, res) => {
    const run = current!
    const deps = unitDeps(run.ledger, unitConfig(limits))
    run.deps = deps
    const scope = new ExchangeScope(run.ledger, ['processing'])
    const ac = new AbortController()
    req.once('close', () => { if (!res.writableFinished) ac.abort() })
    recordWrites(res, run.writes)
    countSocketWrites(req.socket, () => { run.socketWrites++ })
    const rec = newRecord({ exchangeId: randomUUID(), runId: null, route: run.route, mode: 'blocking', provider: 'unit-chat', model: 'unit-model', stream: true })
    void (async () => {
      const up = await request(upstream.url + '/v1/chat/completions', { method: 'POST', body: '{}', signal: ac.signal })
      const outcome = await relayStream({ deps, rec, route: run.route, up, res, scope, signal: ac.signal })
      scope.settle('processing')
      done!({ outcome, rec })
    })()
  })

  return {
    async relay (route, bytes, split, storageBytes = RELAY_STORAGE, prepare, options = {}) {
      const parts = split > 0 && split < bytes.length ? [bytes.subarray(0, split), bytes.subarray(split)] : [bytes]
      let openGate = (): void => {}
      let heldPastBound = false
      let bound: NodeJS.Timeout | undefined
      const endGate = options.endOnceClientHasAll === true
        ? new Promise<void>((resolve) => {
          openGate = resolve
          bound = setTimeout(() => { heldPastBound = true; resolve() }, HELD_END_BOUND_MS)
        })
        : null
      const run: RelayRun = { ledger: makeLedger({ storageBytes }), route, parts, writes: [], writtenAtSplit: null, deps: null, socketWrites: 0, endGate }
      prepare?.(run.ledger)
      current = run
      const settled = new Promise<{ outcome: Outcome; rec: ExchangeRecord }>((resolve) => { done = resolve })
      const res = await request(gateway.url + '/')
      const got: Buffer[] = []
      let n = 0
      for await (const c of res.body) {
        got.push(c as Buffer)
        n += (c as Buffer).length
        if (!heldPastBound && n >= bytes.length) { clearTimeout(bound); openGate() }
      }
      clearTimeout(bound)
      const client = Buffer.concat(got)
      const { outcome, rec } = await settled
      return { client, outcome, rec, writtenAtSplit: run.writtenAtSplit, run, heldPastBound }
    },
    close: async () => { await gateway.close(); await upstream.close() },
  }
}

// ---- self-test: run when tap executes this file directly ----
if (isMainThread && import.meta.main) {
  const { default: t } = await import('tap')

  t.test('turnsTaken reads the run table', async (t) => {
    const ledger = makeLedger()
    t.equal(turnsTaken(ledger, KEY_NAME, 'r'), 0)
    ledger.runs.take(KEY_NAME, 'r', 5)
    ledger.runs.take(KEY_NAME, 'r', 5)
    ledger.runs.take('other', 'r', 5)
    t.equal(turnsTaken(ledger, KEY_NAME, 'r'), 2)
    ledger.runs.giveBack(KEY_NAME, 'r')
    t.equal(turnsTaken(ledger, KEY_NAME, 'r'), 1)
    t.equal(turnsTaken(ledger, 'other', 'r'), 1)
  })

  t.test('permutations lists every ordering once', async (t) => {
    const p = permutations(['a', 'b', 'c'])
    t.equal(p.length, 6)
    t.equal(new Set(p.map((x) => x.join())).size, 6)
    t.same(permutations([]), [[]])
  })

  t.test('unitDeps: real pieces; the parser pool is not there', async (t) => {
    const deps = unitDeps(makeLedger())
    t.equal(deps.auth.authenticate({ authorization: `Bearer ${KEY}` }).name, KEY_NAME)
    t.ok(deps.router.scrubber.carriesSecret(Buffer.from(`x ${PROVIDER_KEY} y`)))
    t.throws(() => deps.parser, /not part of this unit test/)
  })

  t.test('startServer serves on 127.0.0.1 and closes', async (t) => {
    const s = await startServer((_req, res) => { res.end('ok') })
    t.match(s.url, /^http:\/\/127\.0\.0\.1:\d+$/)
    t.equal(await (await fetch(s.url)).text(), 'ok')
    await s.close()
    t.equal(s.server.listening, false)
  })

  t.test('the relay rig relays a Chat stream cut in two, and sees where the first part ended', async (t) => {
    const rig = await startRelayRig()
    t.teardown(rig.close)
    const frames = [chunk('a'), chunk(null, 'stop'), USAGE, DONE]
    const bytes = Buffer.from(frames.join(''))
    const bounds = boundaries(frames)
    const r = await rig.relay('chat', bytes, bounds[1] + 3)
    t.ok(r.client.equals(bytes), 'byte-exact')
    t.equal(r.outcome.code, 'ok')
    t.equal(r.writtenAtSplit, bounds[1], 'the whole frame before the cut went out with the first part')
    t.equal(r.run.deps?.config.limits.sseFrameBytes, unitConfig().limits.sseFrameBytes)
    t.same(idleOf(r.run.ledger), [])
  })
}
