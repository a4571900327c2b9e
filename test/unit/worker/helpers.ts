// Shared pieces for the unit tests of worker/: a validated config, the exchange deps built from
// the real classes (the same ones worker/app.ts builds), a reading of the run table's truth
// cells (turn counts are not part of idleProblems: they belong to runs, not to exchanges), and
// a throwaway node:http server on 127.0.0.1 whose handler the test supplies.
//
// Run directly (`tap test/unit` runs every file under it), this file checks its own helpers.
//
// Only the parser pool is left out of the deps: it is a thread pool, and none of the units
// tested here reads it (the relay's streaming path inspects frames in this thread). Reading it
// throws, so a unit that starts to need it fails loudly instead of meeting a stand-in.

import { isMainThread } from 'node:worker_threads'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { sha256Hex, validateConfig } from '../../../src/config/load.ts'
import type { Config } from '../../../src/config/schema.ts'
import { createRingBuffer, EventRing } from '../../../src/events/ring.ts'
import type { ParserPool } from '../../../src/json/pool.ts'
import type { Ledger } from '../../../src/ledger/ledger.ts'
import { RUN_COUNT, RUN_FIELDS, RUN_HASH_A, RUN_HASH_B } from '../../../src/ledger/layout.ts'
import { RunTable } from '../../../src/ledger/runs.ts'
import { Router } from '../../../src/routing.ts'
import { Signer } from '../../../src/sse/sign.ts'
import { Admission } from '../../../worker/admission.ts'
import { Authenticator } from '../../../worker/auth.ts'
import { Background } from '../../../worker/background.ts'
import type { ExchangeDeps } from '../../../worker/deps.ts'
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

// ---- self-test: run when tap executes this file directly ----
if (isMainThread && import.meta.main) {
  const { default: t } = await import('tap')
  const { makeLedger } = await import('../ledger/helpers.ts')

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
}
