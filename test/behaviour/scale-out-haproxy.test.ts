// Several sluice instances behind HAProxy (DESIGN.md "Beyond one host", ops/haproxy/): three
// real `sluice serve` processes, each with its own ports, instance id and embedded simulated
// provider, and HAProxy run from ops/haproxy/haproxy.cfg rendered for their ports (shorter
// check intervals; nothing else changed). Through the balancer:
//
// - every session sticks to one instance, whichever of the three session headers (or the
//   /v1/sessions/<id>/ path) carries it — proved by the instances' own exchange log lines,
//   which carry their instanceId — and requests without a session spread by least connections;
// - the per-session pending cap holds (prompt_queue_full at the cap, passed through, not
//   retried elsewhere);
// - one signing key: the failure records of all three instances verify with it;
// - a client that hangs up (waiting for a first byte, or on an event stream) is gone for the
//   instance at once (option abortonclose);
// - SIGTERM on one instance: its /readyz turns 503, HAProxy marks it down, its sessions' new
//   exchanges go to the others while its running stream finishes byte for byte, and it exits 0;
// - SIGKILL on one: only its exchanges are lost, and their clients (a blocking stream and an
//   event stream) see them end at once, no hang; the survivor's exchanges are untouched;
// - the surviving instance is back at idle afterwards, and every line every instance wrote
//   names it.
//
// HAProxy is required (CI installs it, .ci/run): when it is missing this test fails.
// Bounded: every wait has a limit, and the processes are stopped in teardown.

import t from 'tap'
import { request } from 'undici'
import { sha256Hex } from '../../src/config/load.ts'
import { verifyRecord, type FailureRecord } from '../../src/sse/sign.ts'
import { KEY, SIGNING_KEY, chatBody } from '../helpers/exchange.ts'
import { startGateway, until, waitIdle, type Gateway } from '../helpers/gateway.ts'
import { startHaproxy, type Haproxy } from '../helpers/haproxy.ts'
import { dataOf, dropConnections, endsExchange, openEvents, submit } from '../helpers/sse.ts'

const IDS = ['lb-test-a', 'lb-test-b', 'lb-test-c']
const CAP = 2

const config = {
  workers: 1,
  limits: { maxPendingPromptsPerSession: CAP, drainMs: 20_000 },
  keys: [{ name: 'team', sha256: sha256Hex(KEY), models: ['*'] }],
  providers: [{ name: 'sim-chat', protocol: 'openai-chat', baseUrl: 'sim', models: ['gpt-4o*'] }],
  sim: { enabled: true, port: 0 },
}

let gws: Gateway[] = []
let lb: Haproxy

t.before(async () => {
  // Instance ids from the config file for one instance, from the environment for the others;
  // one signing key for all (ops/README.md "Keys shared by every instance").
  const started = await Promise.allSettled(IDS.map((id, i) => i === 0
    ? startGateway({ ...config, instanceId: id }, { env: { SLUICE_SIGNING_KEY: SIGNING_KEY } })
    : startGateway(config, { env: { SLUICE_SIGNING_KEY: SIGNING_KEY, SLUICE_INSTANCE_ID: id } })))
  for (const r of started) if (r.status === 'fulfilled') gws.push(r.value)
  const failed = started.find((r) => r.status === 'rejected')
  if (failed) throw (failed as PromiseRejectedResult).reason
  lb = await startHaproxy(gws.map((g) => ({ port: g.port, adminPort: g.adminPort })))
})

t.teardown(async () => {
  await dropConnections()
  await lb?.stop()
  // The survivors drain and exit; anything that does not is killed.
  for (const g of gws) if (g.proc.exitCode === null && g.proc.signalCode === null) g.proc.kill('SIGTERM')
  await Promise.all(gws.map((g) => within(g.exited, 10_000, 'an instance exits').catch(() => { g.proc.kill('SIGKILL'); return g.exited })))
})

interface Line { msg?: string; instanceId?: string; sessionId?: string | null; code?: string; exchangeId?: string | null; [k: string]: unknown }

function lines (g: Gateway): Line[] {
  const out: Line[] = []
  for (const l of g.logs) { try { out.push(JSON.parse(l) as Line) } catch {} }
  return out
}

/** A place in every instance's log: what is written after it is `since(mark)`. */
type Mark = number[]
const mark = (): Mark => gws.map((g) => g.logs.length)

/** Exchange log lines of every instance (after `from`), each with the instance whose log it is in. */
function exchangeLines (from?: Mark): Array<Line & { at: number }> {
  return gws.flatMap((g, at) => {
    const own: Line[] = []
    for (const l of g.logs.slice(from?.[at] ?? 0)) { try { own.push(JSON.parse(l) as Line) } catch {} }
    return own.filter((l) => l.msg === 'exchange').map((l) => ({ ...l, at }))
  })
}

/** Which instances (by index) logged an exchange of `sessionId`. */
function instancesOf (sessionId: string): number[] {
  return [...new Set(exchangeLines().filter((l) => l.sessionId === sessionId).map((l) => l.at))].sort()
}

interface Answer { status: number; headers: Record<string, unknown>; text: string; json: Record<string, unknown> }

async function post (headers: Record<string, string>, text: string, opts: { stream?: boolean; path?: string; body?: unknown } = {}): Promise<Answer> {
  const res = await request(`${lb.url}${opts.path ?? '/v1/chat/completions'}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(opts.body ?? chatBody(text, opts.stream ? { stream: true } : {})),
  })
  const body = await res.body.text()
  let json: Record<string, unknown> = {}
  try { json = JSON.parse(body) as Record<string, unknown> } catch {}
  return { status: res.statusCode, headers: res.headers, text: body, json }
}

/** A streaming exchange read chunk by chunk: resolves `first` at the first bytes, `done` at the end. */
function stream (headers: Record<string, string>, text: string) {
  let gotFirst!: () => void
  const first = new Promise<void>((resolve) => { gotFirst = resolve })
  const done = (async () => {
    const res = await request(`${lb.url}/v1/chat/completions`, {
      method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(chatBody(text, { stream: true })),
    })
    let body = ''
    let error: string | null = null
    try {
      for await (const chunk of res.body) { body += String(chunk); gotFirst() }
    } catch (err) {
      error = (err as Error).message
    }
    return { status: res.statusCode, body, error, endedAt: Date.now() }
  })()
  done.catch(() => {})
  return { first, done }
}

/** Resolves with `p`, or rejects when it takes longer than `ms` (a hang is a failure). */
function within<T> (p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_resolve, reject) => { timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms) }),
  ])
}

const SESSIONS = Array.from({ length: 12 }, (_v, i) => `sess-${i}`)
const HEADERS = ['x-session-id', 'session-id', 'x-claude-code-session-id'] as const
/** Session index -> instance index, learned in the first test. */
const owner = new Map<string, number>()

t.test('each instance names itself on /capabilities and on every log line', async (t) => {
  for (const [i, g] of gws.entries()) {
    const caps = await (await request(`http://127.0.0.1:${g.adminPort}/capabilities`)).body.json() as { instanceId: string }
    t.equal(caps.instanceId, IDS[i], `instance ${i}: /capabilities`)
    const ls = lines(g)
    t.ok(ls.length >= 3 && ls.every((l) => l.instanceId === IDS[i]), `instance ${i}: all ${ls.length} log lines carry instanceId ${IDS[i]}`)
  }
})

t.test('a session sticks to one instance, whichever header or path names it', async (t) => {
  for (const s of SESSIONS) {
    for (const h of HEADERS) {
      const r = await post({ [h]: s }, `${s} via ${h}`)
      t.equal(r.status, 200, `${s} via ${h}: 200 ${r.text.slice(0, 120)}`)
    }
    // The non-blocking route carries the session in its path; its events come from the
    // instance that ran it, so they can only arrive if the path hashes like the headers.
    const accepted = await submit(lb.url, KEY, s, 'chat', chatBody(`${s} non-blocking`))
    t.equal(accepted.status, 202, `${s}: accepted`)
    const es = await openEvents(lb.url, s, { key: KEY, lastEventId: accepted.json.lastEventId as number })
    const events = await es.until(endsExchange(accepted.json.exchangeId as string), 10_000)
    es.close()
    t.equal(events.at(-1)?.event, 'turn_complete', `${s}: its events came from the instance that ran it`)
    t.equal(dataOf(events.at(-1)!).status, 200)
  }
  // Precedence as sluice's: x-session-id wins over session-id.
  const both = await post({ 'x-session-id': SESSIONS[0], 'session-id': 'some-other-session' }, 'precedence')
  t.equal(both.status, 200)

  await until(() => exchangeLines().filter((l) => l.sessionId !== null && l.sessionId !== undefined).length >= SESSIONS.length * 4 + 1, 'every exchange line written', 5000)
  for (const s of SESSIONS) {
    const at = instancesOf(s)
    t.equal(at.length, 1, `${s}: one instance (${at.map((i) => IDS[i])})`)
    const n = exchangeLines().filter((l) => l.sessionId === s).length
    t.equal(n, s === SESSIONS[0] ? 5 : 4, `${s}: every exchange logged once, on that instance`)
    owner.set(s, at[0])
  }
  t.equal(instancesOf('some-other-session').length, 0, 'the losing header named no session')
  t.ok(exchangeLines().every((l) => l.instanceId === IDS[l.at]), 'each exchange line names the instance that wrote it')
  t.same(lb.logs.filter((l) => / is DOWN/.test(l)), [], 'no instance was marked down meanwhile (a flap would move sessions)')
  const used = new Set(owner.values())
  t.ok(used.size >= 2, `sessions are spread over instances (${[...used].map((i) => IDS[i])})`)
})

t.test('requests without a session spread by least connections', async (t) => {
  const before = mark()
  const slow = [0, 1, 2].map((i) => stream({}, `no session ${i}\n#sim tokens=6 interval=150`))
  for (const s of slow) await within(s.first, 10_000, 'first bytes')
  const ends = await Promise.all(slow.map((s) => s.done))
  t.ok(ends.every((e) => e.status === 200 && e.error === null && e.body.includes('data: [DONE]')), 'all complete')
  await until(() => exchangeLines(before).length >= 3, 'their log lines')
  const at = exchangeLines(before).filter((l) => l.sessionId === null).map((l) => l.at)
  t.same([...new Set(at)].sort(), [0, 1, 2], `three simultaneous exchanges, three instances (${at})`)
})

t.test('the per-session pending cap holds through the balancer', async (t) => {
  const s = 'capped'
  const running = [0, 1].map((i) => post({ 'x-session-id': s }, `${s} ${i}\n#sim ttft=1500`))
  // Both counted in one instance's lane (one active, one queued behind it).
  await until(async () => {
    const pend = await Promise.all(gws.map(async (g) => (await g.metrics()).get('sluice_session_pending_max') ?? 0))
    return pend.some((p) => p === CAP)
  }, 'the session at its cap', 5000)
  // A third, named by another header: the same session, the same instance, refused at once.
  const third = await post({ 'session-id': s }, `${s} 2`)
  t.equal(third.status, 503)
  t.match(third.json, { code: 'prompt_queue_full', sessionId: s, limit: CAP, pendingCount: CAP })
  t.equal(third.headers['retry-after'], '5', 'Retry-After passed through')
  const done = await Promise.all(running)
  t.same(done.map((r) => r.status), [200, 200], 'the two admitted complete')
  await until(() => exchangeLines().filter((l) => l.sessionId === s).length >= 3, 'their log lines')
  const ls = exchangeLines().filter((l) => l.sessionId === s)
  t.equal(new Set(ls.map((l) => l.at)).size, 1, 'all three reached the same instance (not retried elsewhere)')
  t.same(ls.map((l) => l.code).sort(), ['ok', 'ok', 'prompt_queue_full'])
})

t.test('one signing key: every instance\'s failure records verify with it', async (t) => {
  const signers = new Set<number>()
  for (const s of SESSIONS) {
    const n = mark()
    const r = await post({ 'x-session-id': s }, `${s} provider fault\n#sim fault=status-503`)
    t.equal(r.status, 502, `${s}: the provider's failure`)
    const { record, signature } = r.json as { record: FailureRecord; signature: string }
    t.ok(verifyRecord(record, signature, Buffer.from(SIGNING_KEY)), `${s}: its record verifies with the shared key`)
    await until(() => exchangeLines(n).length > 0, 'its line')
    signers.add(exchangeLines(n)[0].at)
  }
  t.equal(signers.size, 3, 'records signed by all three instances')
})

t.test('a client that hangs up is gone at once for the instance too (option abortonclose)', async (t) => {
  const s = 'hangup'
  const active = async (): Promise<number[]> => Promise.all(gws.map(async (g) => (await g.metrics()).get('sluice_exchanges_active') ?? 0))
  const ac = new AbortController()
  const waiting = request(`${lb.url}/v1/chat/completions`, {
    method: 'POST',
    signal: ac.signal,
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-session-id': s },
    body: JSON.stringify(chatBody(`${s}\n#sim ttft=30000`, { stream: true })),
  }).then(() => 'answered', (err: Error) => err.name)
  await until(async () => (await active()).some((n) => n === 1), 'the exchange waiting for its first byte', 5000)
  const at = (await active()).findIndex((n) => n === 1)
  ac.abort()
  t.equal(await waiting, 'AbortError')
  // Bounded well below the provider's 30 s: released because the client left.
  await until(async () => (await active())[at] === 0, 'the instance to release the exchange', 3000)
  t.same(await waitIdle(gws[at]), {}, 'that instance is idle: permit, bytes and lane slot back')
  // The line is written at the release; it may reach this process's pipe a moment later.
  const hangUp = (): Line | undefined => lines(gws[at]).filter((l) => l.sessionId === s && l.msg === 'exchange').at(-1)
  await until(() => hangUp() !== undefined, 'the exchange\'s log line', 3000)
  t.match(hangUp(), { code: 'client_closed' }, 'logged as the client\'s hang-up')

  const streams = async (): Promise<number> => (await gws[at].metrics()).get('sluice_session_event_streams') ?? NaN
  const es = await openEvents(lb.url, s, { key: KEY })
  t.equal(es.status, 200)
  await until(async () => (await streams()) === 1, 'the event stream open on the same instance', 3000)
  es.close()
  await until(async () => (await streams()) === 0, 'the instance to end the event stream', 3000)
})

t.test('SIGTERM: the draining instance gets no new session while its stream finishes', async (t) => {
  // The instance with the most sessions drains.
  const count = (i: number): number => [...owner.values()].filter((o) => o === i).length
  const victim = [0, 1, 2].sort((a, b) => count(b) - count(a))[0]
  const mine = SESSIONS.filter((s) => owner.get(s) === victim)
  const g = gws[victim]
  const longOne = stream({ 'x-session-id': mine[0] }, `${mine[0]} long\n#sim tokens=25 interval=120`)
  await within(longOne.first, 10_000, 'the long stream\'s first bytes')
  const before = mark()

  g.proc.kill('SIGTERM')
  await until(async () => (await request(`http://127.0.0.1:${g.adminPort}/readyz`)).statusCode === 503, 'readyz 503', 5000)
  await until(async () => (await lb.servers()).get(`sluice${victim + 1}`)?.startsWith('DOWN') === true, 'haproxy marks it down', 5000)
  const downAt = Date.now()

  // Its sessions' new exchanges (two each) go elsewhere, and stay together.
  for (const s of mine) {
    for (const h of ['x-session-id', 'session-id'] as const) {
      const r = await post({ [h]: s }, `${s} after the drain began`)
      t.equal(r.status, 200, `${s} via ${h}: served (${r.text.slice(0, 100)})`)
    }
  }
  const none = await post({}, 'no session, during the drain')
  t.equal(none.status, 200)

  const long = await within(longOne.done, 15_000, 'the draining instance\'s stream')
  t.equal(long.status, 200)
  t.equal(long.error, null, 'the stream was not cut')
  t.ok(long.body.trimEnd().endsWith('data: [DONE]'), 'the stream completed')
  t.notOk(long.body.includes('"error"'), 'no error frame')
  t.ok(long.endedAt > downAt, 'it was still running when the instance was marked down')
  t.equal(await within(g.exited, 20_000, 'the drained instance exits'), 0, 'exit 0')

  const after = exchangeLines(before)
  const moved = after.filter((l) => mine.includes(String(l.sessionId)))
  t.ok(after.filter((l) => l.at === victim).every((l) => l.sessionId === mine[0]), 'the draining instance logged only its running stream')
  t.notOk(lines(g).some((l) => l.code === 'shutting_down'), 'no request reached it to be refused')
  for (const s of mine) {
    const at = new Set(moved.filter((l) => l.sessionId === s && l.at !== victim).map((l) => l.at))
    t.equal(at.size, 1, `${s}: moved to one other instance (${[...at].map((i) => IDS[i])})`)
    owner.set(s, [...at][0])
  }
  const stopped = lines(g).find((l) => l.msg === 'stopped')
  t.match(stopped, { abandonedActive: 0, abandonedQueued: 0 }, 'nothing abandoned')
  // Sessions of the others did not move (consistent hashing moves only the down server's).
  for (const s of SESSIONS.filter((x) => !mine.includes(x)).slice(0, 3)) {
    const n = mark()
    t.equal((await post({ 'x-session-id': s }, `${s} unmoved`)).status, 200)
    await until(() => exchangeLines(n).length > 0, 'its line')
    t.same(exchangeLines(n).map((l) => [l.sessionId, l.at]), [[s, owner.get(s)]], `${s} stayed where it was`)
  }
})

t.test('SIGKILL: only that instance\'s exchanges are lost, and their clients see them end', async (t) => {
  const alive = [0, 1, 2].filter((i) => gws[i].proc.exitCode === null && gws[i].proc.signalCode === null)
  t.equal(alive.length, 2, 'two instances left')
  // The one with more sessions is killed (at least 6 of 12: two sessions for two streams).
  const held = (i: number): string[] => SESSIONS.filter((s) => owner.get(s) === i)
  const [victim, survivor] = alive.sort((a, b) => held(b).length - held(a).length)
  const onVictim = held(victim)
  const onSurvivor = held(survivor)
  t.ok(onVictim.length >= 2 && onSurvivor.length >= 1, 'both hold sessions')

  const lost = stream({ 'x-session-id': onVictim[0] }, `${onVictim[0]} to be lost\n#sim tokens=40 interval=100`)
  const kept = stream({ 'x-session-id': onSurvivor[0] }, `${onSurvivor[0]} kept\n#sim tokens=20 interval=100`)
  // A non-blocking exchange on the victim (another session: not queued behind the stream),
  // watched through its event stream.
  const accepted = await submit(lb.url, KEY, onVictim[1], 'chat', chatBody(`${onVictim[1]} nb\n#sim tokens=40 interval=100`, { stream: true }))
  t.equal(accepted.status, 202)
  const es = await openEvents(lb.url, onVictim[1], { key: KEY, lastEventId: accepted.json.lastEventId as number })
  await within(Promise.all([lost.first, kept.first, es.next(10_000)]), 10_000, 'every stream under way')

  gws[victim].proc.kill('SIGKILL')
  const killedAt = Date.now()
  // At once, before any health check could have run: a refused connection is redispatched.
  // Right after the kill (before a health check): served by the survivor (a refused
  // connection is redispatched) or, when HAProxy had reused an idle connection to the dead
  // instance, a closed connection — never a hang, never another answer.
  const right = await within(post({ 'x-session-id': onVictim[2] ?? onVictim[0] }, 'right after the kill').then((r) => String(r.status), (err: Error) => err.message), 5000, 'a request right after the kill')
  t.match(right, /^(200|other side closed)$/, `a request right after the kill: ${right}`)
  const l = await within(lost.done, 5000, 'the lost stream ends for its client')
  t.ok(l.error !== null && !l.body.includes('data: [DONE]'), `the lost stream ended with an error for its client, incomplete (${l.error}; ${l.body.length} bytes in ${l.endedAt - killedAt} ms: …${l.body.slice(-300)})`)
  t.ok(l.endedAt - killedAt < 5000, 'promptly')
  // The event stream ends too (it may still deliver what was buffered, but never the result).
  const tail = await within((async () => {
    const seen: string[] = []
    for (;;) {
      try { seen.push(String((await es.next(5000)).event)) } catch (err) { return { seen, end: (err as Error).message } }
    }
  })(), 6000, 'the event stream ends for its client')
  t.notOk(tail.seen.includes('turn_complete'), 'no result arrives for the lost exchange')
  t.notMatch(tail.end, /no session event within/, `the event stream closed (${tail.end}), it did not just go quiet`)

  const k = await within(kept.done, 15_000, 'the survivor\'s stream')
  t.equal(k.error, null, 'the survivor\'s stream was untouched')
  t.ok(k.body.trimEnd().endsWith('data: [DONE]'), 'and completed')
  t.equal(await within(gws[victim].exited, 5000, 'the killed instance is gone'), null, 'killed')
  t.equal(gws[victim].proc.signalCode, 'SIGKILL')

  // Its sessions continue on the survivor (redispatched at once, then marked down).
  await until(async () => (await lb.servers()).get(`sluice${victim + 1}`)?.startsWith('DOWN') === true, 'haproxy marks it down', 5000)
  // Followed by exchange id: a line of an earlier exchange (the request right after the kill
  // shares a session with these) may still be on its way from the survivor's stdout.
  const ids: string[] = []
  for (const s of onVictim) {
    const r = await post({ 'x-session-id': s }, `${s} after the kill`)
    t.equal(r.status, 200, `${s}: served by the survivor`)
    ids.push(String(r.headers['x-sluice-exchange-id']))
  }
  const theirs = (): Array<Line & { at: number }> => exchangeLines().filter((l) => ids.includes(String(l.exchangeId)))
  await until(() => theirs().length >= ids.length, 'their lines')
  t.same(theirs().map((line) => line.at), ids.map(() => survivor), 'all on the survivor, each logged once')

  await dropConnections()
  t.same(await waitIdle(gws[survivor]), {}, 'the survivor is back at idle: no exchange active or queued, no byte reserved')
  const m = await gws[survivor].metrics()
  t.equal(m.get('sluice_storage_bytes_reserved'), 0)
  t.equal(m.get('sluice_session_pending_max'), 0, 'no session pending')
  t.equal(m.get('sluice_admissions_total'), m.get('sluice_releases_total'), 'every admission released once')
})

t.test('every line every instance wrote, start to drain, names that instance', async (t) => {
  for (const [i, g] of gws.entries()) {
    const ls = lines(g)
    const wrong = ls.filter((l) => l.instanceId !== IDS[i])
    t.same(wrong, [], `instance ${i}: all ${ls.length} lines carry instanceId ${IDS[i]}`)
  }
  t.ok(lines(gws.find((g) => g.proc.exitCode === 0)!).some((l) => l.msg === 'stopped'), 'the drain\'s lines included')
})
