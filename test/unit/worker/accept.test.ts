// accept() (worker/accept.ts): the one front door, in its one order
//   auth -> session id -> drain -> heap -> turn -> lane
// on real HTTP requests (node:http on 127.0.0.1, sent with undici) and a real ledger: every
// refusal leaves nothing counted (no turn taken, no lane entry), except what a caller's own
// scope held before the call.

import t, { type Test } from 'tap'
import type { IncomingMessage } from 'node:http'
import { request } from 'undici'
import { SluiceError } from '../../../src/errors.ts'
import type { Ledger, LedgerOptions } from '../../../src/ledger/ledger.ts'
import { assertIdle, makeLedger } from '../ledger/helpers.ts'
import { accept, type Accepted, type AcceptOptions } from '../../../worker/accept.ts'
import { ExchangeScope } from '../../../worker/scope.ts'
import { sessionIdOf } from '../../../worker/session-id.ts'
import { KEY, KEY_NAME, startServer, turnsTaken, unitConfig, unitDeps, type UnitDeps } from './helpers.ts'

type Outcome = { accepted: Accepted; error: null } | { accepted: null; error: SluiceError }

interface Rig {
  ledger: Ledger
  deps: UnitDeps
  /** Sends one request; its handler runs accept(deps, req, opts(req)). */
  send (headers: Record<string, string> | string[], opts?: (req: IncomingMessage) => Partial<AcceptOptions>): Promise<Outcome>
}

const AUTH = { authorization: `Bearer ${KEY}` }

async function rig (t: Test, ledgerOptions: Partial<LedgerOptions> = {}, limits: Record<string, unknown> = {}): Promise<Rig> {
  const ledger = makeLedger({ pendingPerSession: 2, laneEntries: 8, ...ledgerOptions })
  const deps = unitDeps(ledger, unitConfig(limits, { maxTurnsPerRun: 2 }))
  let handle: (req: IncomingMessage) => Outcome = () => { throw new Error('no request expected') }
  const server = await startServer((req, res) => {
    const out = handle(req)
    res.writeHead(out.error ? out.error.status : 200).end()
  })
  t.teardown(() => server.close())
  return {
    ledger,
    deps,
    async send (headers, opts = () => ({})) {
      let out: Outcome | null = null
      handle = (req) => {
        try {
          out = { accepted: accept(deps, req, { mode: 'blocking', sessionId: () => sessionIdOf(req), ...opts(req) }), error: null }
        } catch (err) {
          out = { accepted: null, error: SluiceError.from(err) }
        }
        return out
      }
      const res = await request(server.url + '/v1/chat/completions', { method: 'POST', headers, body: '{}' })
      await res.body.dump()
      if (out === null) throw new Error('the handler did not run')
      return out
    },
  }
}

function counted (ledger: Ledger, run: string): { turns: number; entered: number } {
  return { turns: turnsTaken(ledger, KEY_NAME, run), entered: ledger.snapshot().lanes.entered }
}

t.test('an accepted exchange holds its turn and its lane entry in its scope; discard returns both', async (t) => {
  const r = await rig(t)
  const known: AcceptOptions['known'] = {}
  const out = await r.send({ ...AUTH, 'x-session-id': 's-1', 'x-sluice-run-id': 'run-1' }, () => ({ known }))
  t.equal(out.error, null)
  const a = out.accepted!
  t.equal(a.key.name, KEY_NAME)
  t.equal(a.sessionId, 's-1')
  t.equal(a.runId, 'run-1')
  t.equal(a.mode, 'blocking')
  t.match(a.exchangeId, /^[0-9a-f-]{36}$/)
  t.equal(a.lane?.ranAtOnce, true)
  t.same(known, { keyName: KEY_NAME, sessionId: 's-1' })
  t.same(counted(r.ledger, 'run-1'), { turns: 1, entered: 1 })
  t.equal(r.ledger.snapshot().lanes.active, 1)
  t.equal(r.ledger.snapshot().exchange.active, 0, 'the exchange permit is not taken at acceptance')
  a.scope.discard()
  t.same(counted(r.ledger, 'run-1'), { turns: 0, entered: 1 })
  assertIdle(t, r.ledger)
})

t.test('a refused auth counts nothing and reads nothing else', async (t) => {
  const r = await rig(t, { pendingPerSession: 1 })
  r.ledger.setDraining(true) // would refuse, but auth comes first
  const refused: Array<Record<string, string>> = [{}, { authorization: 'Bearer sk-not-a-key' }, { 'x-api-key': 'nope' }]
  for (const headers of refused) {
    let sessionRead = false
    const known: AcceptOptions['known'] = {}
    const out = await r.send({ ...headers, 'x-session-id': 's-auth', 'x-sluice-run-id': 'run-auth' }, () => ({ known, sessionId: () => { sessionRead = true; return 's-auth' } }))
    t.equal(out.error?.code, 'unauthorized')
    t.equal(sessionRead, false, 'the session id is not read for a caller who is not one')
    t.same(known, {})
  }
  t.same(counted(r.ledger, 'run-auth'), { turns: 0, entered: 0 })
  assertIdle(t, r.ledger)
})

t.test('a session header given twice, in any case, is refused; each header name counts alone', async (t) => {
  const r = await rig(t)
  const auth = ['authorization', `Bearer ${KEY}`]
  for (const [name, headers] of [
    ['same case', [...auth, 'x-session-id', 's-a', 'x-session-id', 's-b']],
    ['two cases', [...auth, 'X-Session-Id', 's-a', 'x-session-id', 's-a']],
    ['Codex CLI\'s header', [...auth, 'session-id', 's-a', 'Session-ID', 's-b']],
  ] as const) {
    const out = await r.send([...headers])
    t.equal(out.error?.code, 'invalid_request', `${name}: refused`)
    t.equal(out.error?.details.reason, 'given more than once', name)
  }
  // Two different session headers: the first of the documented order wins, as before.
  const two = await r.send([...auth, 'session-id', 's-codex', 'X-Session-Id', 's-first'])
  t.equal(two.accepted?.sessionId, 's-first')
  two.accepted?.scope.discard()
  // A header that merely ends like one is not one.
  const other = await r.send([...auth, 'x-session-id', 's-one', 'xx-session-id', 's-two'])
  t.equal(other.accepted?.sessionId, 's-one')
  other.accepted?.scope.discard()
  assertIdle(t, r.ledger)
})

t.test('a malformed session id is the caller\'s error whatever the gateway\'s state', async (t) => {
  const r = await rig(t, {}, { workerHeapAdmitFraction: 0.000001 })
  r.ledger.setDraining(true)
  const out = await r.send({ ...AUTH, 'x-session-id': 'x'.repeat(257), 'x-sluice-run-id': 'run-s' })
  t.equal(out.error?.code, 'invalid_request')
  t.equal(out.error?.details.field, 'x-session-id')
  t.same(counted(r.ledger, 'run-s'), { turns: 0, entered: 0 })
  assertIdle(t, r.ledger)
})

t.test('draining refuses before the heap check, touching neither turn nor lane', async (t) => {
  const r = await rig(t, {}, { workerHeapAdmitFraction: 0.000001 })
  r.ledger.setDraining(true)
  const out = await r.send({ ...AUTH, 'x-session-id': 's-d', 'x-sluice-run-id': 'run-d' })
  t.equal(out.error?.code, 'shutting_down')
  t.same(counted(r.ledger, 'run-d'), { turns: 0, entered: 0 })
  assertIdle(t, r.ledger)
})

t.test('a heap above the admission limit refuses, touching neither turn nor lane', async (t) => {
  const r = await rig(t, {}, { workerHeapAdmitFraction: 0.000001 })
  const out = await r.send({ ...AUTH, 'x-session-id': 's-h', 'x-sluice-run-id': 'run-h' })
  t.equal(out.error?.code, 'worker_heap_exhausted')
  t.same(counted(r.ledger, 'run-h'), { turns: 0, entered: 0 })
  assertIdle(t, r.ledger)
})

t.test('a run at its turn limit is refused before it takes a lane entry', async (t) => {
  const r = await rig(t)
  const h = { ...AUTH, 'x-sluice-run-id': 'run-t' }
  const one = await r.send({ ...h, 'x-session-id': 's-t1' })
  const two = await r.send({ ...h, 'x-session-id': 's-t2' })
  t.same(counted(r.ledger, 'run-t'), { turns: 2, entered: 2 })
  const three = await r.send({ ...h, 'x-session-id': 's-t3' })
  t.equal(three.error?.code, 'turn_limit')
  t.same(three.error?.details, { runId: 'run-t', limit: 2, count: 2 })
  t.same(counted(r.ledger, 'run-t'), { turns: 2, entered: 2 }, 'no lane entry for the refused one')
  one.accepted!.scope.discard()
  two.accepted!.scope.discard()
  assertIdle(t, r.ledger)
})

t.test('a session at its pending cap gives the turn back', async (t) => {
  const r = await rig(t, { pendingPerSession: 1 })
  const first = await r.send({ ...AUTH, 'x-session-id': 's-cap', 'x-sluice-run-id': 'run-cap' })
  t.equal(first.error, null)
  const second = await r.send({ ...AUTH, 'x-session-id': 's-cap', 'x-sluice-run-id': 'run-cap' })
  t.equal(second.error?.code, 'prompt_queue_full')
  t.same(counted(r.ledger, 'run-cap'), { turns: 1, entered: 1 }, "only the first exchange's turn and entry")
  t.equal(r.ledger.snapshot().lanes.refusedFull, 1)
  first.accepted!.scope.discard()
  assertIdle(t, r.ledger)
})

t.test('a full lane table gives the turn back (capacity_exhausted)', async (t) => {
  const r = await rig(t, { laneEntries: 1 })
  const first = await r.send({ ...AUTH, 'x-session-id': 's-e1', 'x-sluice-run-id': 'run-e' })
  const second = await r.send({ ...AUTH, 'x-session-id': 's-e2', 'x-sluice-run-id': 'run-e' })
  t.equal(second.error?.code, 'capacity_exhausted')
  t.same(counted(r.ledger, 'run-e'), { turns: 1, entered: 1 })
  first.accepted!.scope.discard()
  assertIdle(t, r.ledger)
})

t.test('an already-aborted request is never counted in its lane, and its turn goes back', async (t) => {
  const r = await rig(t)
  const ac = new AbortController()
  ac.abort()
  const out = await r.send({ ...AUTH, 'x-session-id': 's-ab', 'x-sluice-run-id': 'run-ab' }, () => ({ signal: ac.signal }))
  t.equal(out.error?.code, 'client_closed')
  t.same(counted(r.ledger, 'run-ab'), { turns: 0, entered: 0 })
  const reason = new AbortController()
  reason.abort(new SluiceError('exchange_cancelled'))
  const out2 = await r.send({ ...AUTH, 'x-session-id': 's-ab', 'x-sluice-run-id': 'run-ab' }, () => ({ signal: reason.signal }))
  t.equal(out2.error?.code, 'exchange_cancelled', "the signal's own reason")
  t.same(counted(r.ledger, 'run-ab'), { turns: 0, entered: 0 })
  assertIdle(t, r.ledger)
})

t.test("a refusal leaves the caller's scope holding what it held before, and nothing more", async (t) => {
  const r = await rig(t, { pendingPerSession: 1 })
  const first = await r.send({ ...AUTH, 'x-session-id': 's-env', 'x-sluice-run-id': 'run-env' })
  const scope = new ExchangeScope(r.ledger)
  scope.reserve(25) // an envelope read before acceptance
  const out = await r.send({ ...AUTH, 'x-sluice-run-id': 'run-env' }, () => ({ scope, sessionId: 's-env', key: r.deps.config.keys[0], mode: 'rpc' }))
  t.equal(out.error?.code, 'prompt_queue_full')
  t.equal(scope.isReleased, false)
  t.equal(scope.heldBytes, 25)
  t.same(counted(r.ledger, 'run-env'), { turns: 1, entered: 1 })
  scope.discard()
  t.same(counted(r.ledger, 'run-env'), { turns: 1, entered: 1 }, 'discarding the caller scope gives back no turn it never took')
  first.accepted!.scope.discard()
  assertIdle(t, r.ledger)
})

t.test('accepted into a given scope: the same scope, with the given key and mode, no auth header needed', async (t) => {
  const r = await rig(t)
  const scope = new ExchangeScope(r.ledger)
  scope.reserve(10)
  const out = await r.send({ 'x-sluice-run-id': 'run-given' }, () => ({ scope, sessionId: 's-given', key: r.deps.config.keys[0], mode: 'events', exchangeId: '00000000-0000-4000-8000-000000000001' }))
  t.equal(out.error, null)
  t.equal(out.accepted!.scope, scope)
  t.equal(out.accepted!.mode, 'events')
  t.equal(out.accepted!.exchangeId, '00000000-0000-4000-8000-000000000001')
  t.same(counted(r.ledger, 'run-given'), { turns: 1, entered: 1 })
  scope.discard()
  assertIdle(t, r.ledger)
})

t.test('without a session id, or with lanes off, nothing enters a lane', async (t) => {
  const r = await rig(t)
  const out = await r.send({ ...AUTH, 'x-sluice-run-id': 'run-n' })
  t.equal(out.accepted?.lane, null)
  t.equal(out.accepted?.sessionId, null)
  t.same(counted(r.ledger, 'run-n'), { turns: 1, entered: 0 })
  out.accepted!.scope.discard()
  const off = await rig(t, { laneEntries: 0 })
  const out2 = await off.send({ ...AUTH, 'x-session-id': 's-off' })
  t.equal(out2.accepted?.lane, null)
  t.equal(out2.accepted?.sessionId, 's-off')
  out2.accepted!.scope.discard()
  assertIdle(t, r.ledger)
  assertIdle(t, off.ledger)
})
