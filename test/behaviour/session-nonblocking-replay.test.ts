// Session events survive a reconnect: Last-Event-ID (or ?lastEventId=) resumes exactly after
// the last event seen — nothing twice, nothing missing — whichever worker serves the new
// connection. The ring is byte-bounded: a reader that comes back after its events were
// evicted is told so (replay_gap), then gets the retained tail, never a silent hole.

import t, { type Test } from 'tap'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { blocking, dataOf, dropConnections, endsExchange, openEvents, parseSseText, submit, type SseEvent } from '../helpers/sse.ts'

const RING = 65536

let rig: Rig
// The smallest ring the configuration accepts: one long stream overflows it.
t.before(async () => { rig = await startRig({ workers: 2, limits: { sessionEventBytes: RING } }) })
// Client connections first: see dropConnections.
t.teardown(async () => { await dropConnections(); await rig.close() })

function idsIncrease (t: Test, events: SseEvent[], what: string): void {
  const ids = events.map((e) => Number(e.id))
  const ok = events.every((e) => e.id !== null) && ids.every((id, i) => Number.isInteger(id) && (i === 0 || id > ids[i - 1]))
  t.ok(ok, `${what}: ids strictly increasing, none repeated`, { ids })
}

/** The blocking stream's frames for the same body. */
async function blockingFrames (body: unknown): Promise<string[]> {
  const direct = await blocking(rig.url, KEY, 'chat', body)
  if (direct.status !== 200) throw new Error(`blocking call failed: ${direct.status}`)
  return parseSseText(direct.text).map((f) => f.data)
}

function progressData (events: SseEvent[]): string[] {
  return events.filter((e) => e.event === 'turn_progress').map((e) => dataOf(e).data as string)
}

t.test('reconnecting with Last-Event-ID (header, then query) resumes exactly after the last event seen', async (t) => {
  const session = 'replay'
  const body = chatBody('a slow stream\n#sim tokens=30 interval=20', { stream: true })
  const s = await submit(rig.url, KEY, session, 'chat', body)
  t.equal(s.status, 202)
  const eid = s.json.exchangeId as string
  const done = endsExchange(eid)

  // Part 1: a few events, then hang up mid-stream.
  const first = await openEvents(rig.url, session, { key: KEY, lastEventId: s.json.lastEventId as number })
  const part1: SseEvent[] = []
  while (part1.length < 6) part1.push(await first.next())
  first.close()
  t.notOk(part1.some(done), 'part 1 ended mid-stream')

  // Part 2: resume with the Last-Event-ID header, read a few more, hang up again.
  const second = await openEvents(rig.url, session, { key: KEY, lastEventId: part1[part1.length - 1].id! })
  const part2: SseEvent[] = []
  while (part2.length < 6) {
    const e = await second.next()
    part2.push(e)
    if (done(e)) break
  }
  second.close()

  // Part 3: resume with ?lastEventId= to the end.
  let part3: SseEvent[] = []
  if (!part2.some(done)) {
    const third = await openEvents(rig.url, session, { key: KEY, queryLastEventId: part2[part2.length - 1].id! })
    part3 = await third.until(done)
    third.close()
  }

  const all = [...part1, ...part2, ...part3]
  idsIncrease(t, all, 'across three connections')
  t.ok(all.every((e) => dataOf(e).exchangeId === eid), 'all of this exchange')
  t.same(all.map((e) => e.event).filter((e) => e !== 'turn_progress'), ['turn_started', 'turn_complete'], 'one start, one end, no gap')
  t.strictSame(progressData(all), await blockingFrames(body), 'the frames, complete and in order')

  // After the end, a replay from the 202's lastEventId gives the same events, same ids.
  const again = await openEvents(rig.url, session, { key: KEY, lastEventId: s.json.lastEventId as number })
  const replayed = await again.until(done)
  again.close()
  t.strictSame(replayed, all, 'a full replay is identical, ids included')
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('a malformed Last-Event-ID is refused', async (t) => {
  for (const bad of ['abc', '-1', '1.5']) {
    const es = await openEvents(rig.url, 'replay', { key: KEY, lastEventId: bad })
    t.equal(es.status, 400, `${bad}: 400`)
    t.equal((await es.json()).code, 'invalid_request', `${bad}: invalid_request`)
  }
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('events evicted from a small ring: replay_gap, then the retained tail', async (t) => {
  const session = 'evicted'
  const body = chatBody('a long stream\n#sim tokens=400', { stream: true })
  const evictedBefore = (await rig.gw.metrics()).get('sluice_session_events_total{outcome="evicted"}') ?? 0
  const s = await submit(rig.url, KEY, session, 'chat', body)
  t.equal(s.status, 202)
  const eid = s.json.exchangeId as string
  const live = await openEvents(rig.url, session, { key: KEY, lastEventId: s.json.lastEventId as number })
  await live.until(endsExchange(eid), 30_000)
  live.close()
  const m = await rig.gw.metrics()
  t.ok((m.get('sluice_session_events_total{outcome="evicted"}') ?? 0) > evictedBefore, 'the stream overflowed the ring')
  t.ok((m.get('sluice_session_events_bytes') ?? Infinity) <= RING, 'the ring stays inside its capacity')

  const es = await openEvents(rig.url, session, { key: KEY, lastEventId: 1 })
  const events = await es.until(endsExchange(eid))
  es.close()
  const [gap, ...tail] = events
  t.equal(gap.event, 'replay_gap', 'the first event says events were lost')
  const g = dataOf(gap)
  t.equal(g.after, 1, 'replay_gap.after is the requested id')
  t.ok(typeof g.oldest === 'number' && (g.oldest as number) > 2, 'replay_gap.oldest is past it', { gap: g })
  t.equal(Number(tail[0].id), g.oldest, 'the tail starts at the oldest retained event: no further hole')
  idsIncrease(t, tail, 'the tail')
  t.ok(tail.every((e) => e.event === 'turn_progress' || e === tail[tail.length - 1]), 'the tail is progress, then the end')
  t.equal(tail[tail.length - 1].event, 'turn_complete', 'the end is retained')
  t.notOk(tail.some((e) => e.event === 'replay_gap'), 'one gap report')
  const frames = await blockingFrames(body)
  const got = progressData(tail)
  t.ok(got.length > 0 && got.length < frames.length, `a strict tail (${got.length} of ${frames.length} frames)`)
  t.strictSame(got, frames.slice(frames.length - got.length), 'the retained frames are the stream\'s last ones, in order')

  // Last-Event-ID: 0 is what the 202 hands out for the first exchange after start: it asks
  // for every event, so the eviction of events 1.. must be reported too, never a silent hole.
  const fromZero = await openEvents(rig.url, session, { key: KEY, lastEventId: 0 })
  const zero = await fromZero.until(endsExchange(eid))
  fromZero.close()
  t.equal(zero[0].event, 'replay_gap', 'Last-Event-ID 0 after eviction: replay_gap first')
  t.match(zero[0].event === 'replay_gap' ? dataOf(zero[0]) : {}, { after: 0, oldest: g.oldest })
  t.strictSame(zero.slice(1), tail, 'then the same retained tail')
  t.same(await waitIdle(rig.gw), {}, 'idle')
})
