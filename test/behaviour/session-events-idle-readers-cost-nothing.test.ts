// Property: an event reader with nothing new costs nothing per append, and a reader that has
// something new reads only what is new. With the event ring full (a long stream evicted its
// oldest records) and 1,000 idle event streams open on other sessions, one non-blocking
// exchange on session A appends its events: no idle reader is woken (the ring's count of woken
// readers grows by at most one per append, A's own reader), and every read together examines
// about as many records as were appended (not the ring's whole content per read). Counted by
// the gateway itself (/metrics), not timed. Afterwards every stream closes and the ledger is idle.

import t from 'tap'
import http from 'node:http'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle, until } from '../helpers/gateway.ts'
import { dropConnections, endsExchange, openEvents, submit, type SseEvent } from '../helpers/sse.ts'
import { Lanes } from '../../src/ledger/lanes.ts'
import { sessionSlot } from '../../src/events/ring.ts'

const IDLE = 1000
const RING = 65536

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 2, limits: { sessionEventBytes: RING } }) })
t.teardown(async () => { await dropConnections(); await rig.close() })

/** An open event stream that has received its first bytes (so its reader is waiting). */
function idleStream (session: string): Promise<http.ClientRequest> {
  return new Promise((resolve, reject) => {
    const req = http.get({
      host: '127.0.0.1',
      port: rig.gw.port,
      path: `/v1/sessions/${session}/events`,
      headers: { authorization: `Bearer ${KEY}` },
      agent: false,
    }, (res) => {
      if (res.statusCode !== 200) { reject(new Error(`${session}: ${res.statusCode}`)); return }
      res.once('data', () => resolve(req))
      res.on('error', () => {})
    })
    req.on('error', reject)
  })
}

async function readUntil (stream: Awaited<ReturnType<typeof openEvents>>, end: (e: SseEvent) => boolean): Promise<SseEvent[]> {
  const got: SseEvent[] = []
  for (;;) {
    const e = await stream.next()
    got.push(e)
    if (end(e)) return got
  }
}

t.test('a full ring, 1,000 idle readers on other sessions: an append wakes none of them and reads only what is new', async (t) => {
  // Fill the ring past its capacity: one long stream on another session.
  const filler = await submit(rig.url, KEY, 'filler', 'chat', chatBody('fill\n#sim tokens=400', { stream: true }))
  t.equal(filler.status, 202)
  const fillerEvents = await openEvents(rig.url, 'filler', { key: KEY, lastEventId: filler.json.lastEventId as number })
  await readUntil(fillerEvents, endsExchange(filler.json.exchangeId as string)).catch(() => [])
  fillerEvents.close()
  const full = await rig.gw.metrics()
  t.ok((full.get('sluice_session_events_total{outcome="evicted"}') ?? 0) > 0, 'the ring is full: it has evicted')
  const records = full.get('sluice_session_events_records') ?? 0
  t.ok(records > 100, `${records} records retained`)

  // 1,000 idle readers on sessions whose change slot is not A's (a shared slot would be woken
  // by design: the table is per session hash).
  const a = 'session-a'
  const slotA = sessionSlot(Lanes.key('test', a))
  const idleIds: string[] = []
  for (let i = 0; idleIds.length < IDLE; i++) if (sessionSlot(Lanes.key('test', `idle-${i}`)) !== slotA) idleIds.push(`idle-${i}`)
  const idle: http.ClientRequest[] = []
  for (let i = 0; i < IDLE; i += 100) idle.push(...await Promise.all(idleIds.slice(i, i + 100).map(idleStream)))
  const streamA = await openEvents(rig.url, a, { key: KEY })
  await until(async () => (await rig.gw.metrics()).get('sluice_session_event_streams') === IDLE + 1, 'every stream open', 20_000)

  const before = await rig.gw.metrics()
  const s = await submit(rig.url, KEY, a, 'chat', chatBody('hello\n#sim tokens=20', { stream: true }))
  t.equal(s.status, 202)
  const got = await readUntil(streamA, endsExchange(s.json.exchangeId as string))
  t.equal(got.filter((e) => e.event === 'turn_progress').length > 10, true, 'A\'s reader got its progress')
  t.equal(got.at(-1)?.event, 'turn_complete')
  const after = await rig.gw.metrics()
  const delta = (name: string): number => (after.get(name) ?? 0) - (before.get(name) ?? 0)
  const appended = delta('sluice_session_events_total{outcome="appended"}')
  const woken = delta('sluice_session_event_reader_wakeups_total')
  const scanned = delta('sluice_session_event_records_scanned_total')
  t.comment(`${appended} appends, ${woken} readers woken, ${scanned} records examined (ring: ${records} records, ${IDLE} idle readers)`)
  t.ok(appended >= got.length, `${appended} events appended`)
  t.ok(woken <= appended, `readers woken (${woken}) at most one per append (${appended}): A's own reader, no idle one`)
  t.ok(scanned <= 2 * appended, `records examined (${scanned}) about as many as appended (${appended}), not the ring per read`)

  streamA.close()
  for (const req of idle) req.destroy()
  await until(async () => (await rig.gw.metrics()).get('sluice_session_event_streams') === 0, 'every stream closed', 20_000)
  t.same(await waitIdle(rig.gw), {}, 'the ledger is idle')
})
