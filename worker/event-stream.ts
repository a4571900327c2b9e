// The session event stream (DESIGN.md "Sessions", non-blocking mode):
//
//   GET /v1/sessions/:id/events    SSE: turn_started, turn_progress, turn_complete, turn_error,
//                                  replay_gap; Last-Event-ID (or ?lastEventId=) replay
//
// Events live in the shared, byte-bounded event ring (src/events/ring.ts): any worker serves
// any session's stream, a reader resumes from its position without walking the ring, and a
// reader with nothing new costs nothing per append (it sleeps on its own session's slot).
// The copies out of the ring are held until the socket takes them: reserved through the
// stream's own scope, returned as the socket drains.

import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyInstance } from 'fastify'
import { catalogue, SluiceError } from '../src/errors.ts'
import type { EventRing } from '../src/events/ring.ts'
import { eventText } from '../src/events/text.ts'
import { Lanes, type Key64 } from '../src/ledger/lanes.ts'
import { RG_EVENT_STREAMS } from '../src/ledger/layout.ts'
import type { ExchangeDeps } from './deps.ts'
import { refuse } from './reply.ts'
import { ExchangeScope } from './scope.ts'
import { checkSessionId } from './session-id.ts'

/** Appends this worker's exchanges' events to the shared ring. */
export class SessionEvents {
  private readonly ring: EventRing
  constructor (ring: EventRing) { this.ring = ring }

  /** Appends one event; false when it is larger than the ring accepts. */
  publish (session: Key64, type: string, data: unknown): boolean {
    return this.ring.append(session, eventText(type, typeof data === 'string' ? data : JSON.stringify(data))) !== 0
  }
}

export function registerEventStream (fastify: FastifyInstance, deps: ExchangeDeps): void {
  fastify.get<{ Params: { id: string }; Querystring: { lastEventId?: string } }>('/v1/sessions/:id/events', (request, reply) => {
    reply.hijack()
    return streamEvents(deps, request.params.id, request.query.lastEventId, request.raw, reply.raw)
  })
}

const HEARTBEAT_MS = 15_000
const NEWLINE = Buffer.from('\n')

async function streamEvents (deps: ExchangeDeps, rawId: string, queryLast: string | undefined, req: IncomingMessage, res: ServerResponse): Promise<void> {
  let session: Key64
  let cursor = -1
  try {
    const key = deps.auth.authenticate(req.headers, req.socket)
    const sessionId = checkSessionId(rawId, 'path')
    session = Lanes.key(key.name, sessionId)
    const header = req.headers['last-event-id']
    const last = typeof header === 'string' && header.length > 0 ? header : queryLast
    if (last !== undefined && last !== '') {
      if (!/^\d{1,15}$/.test(last)) throw new SluiceError('invalid_request', { field: 'Last-Event-ID', reason: 'must be an event id (a decimal integer)' })
      cursor = Number(last)
    }
  } catch (err) {
    refuse(deps.ledger, res, SluiceError.from(err))
    return
  }
  const ring = deps.ring
  // Without Last-Event-ID a subscriber starts after the newest event: history is for replay.
  if (cursor < 0) cursor = ring.nextSeq - 1
  // Where the event after `cursor` is in the ring (RingRead.at): a read resumes there.
  let at = -1
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', 'x-accel-buffering': 'no' })
  // HEAD (fastify's automatic sibling of this GET): the same checks and headers, no stream.
  if (req.method === 'HEAD') { res.end(); return }
  res.write(': sluice session events\n\n')
  let open = true
  let wake: (() => void) | null = null
  const ended = new AbortController()
  const end = (): void => { open = false; ended.abort(); wake?.() }
  res.once('close', end)
  deps.background.streams.add(end)
  deps.ledger.gauge(RG_EVENT_STREAMS, 1)
  // The stream's one owner of what it reserves (it holds no permit: it is not an exchange).
  const holds = new ExchangeScope(deps.ledger, ['processing'])
  try {
    // One last read after the end is requested: a drain ends streams only once every
    // background exchange has settled, and its final event must still go out.
    for (let last = false; !last;) {
      last = !open || res.destroyed
      const token = ring.sessionToken(session)
      const r = ring.read(session, cursor, undefined, at)
      if (r.gap) res.write(Buffer.concat([eventText('replay_gap', JSON.stringify({ after: cursor, oldest: r.oldest })), NEWLINE]))
      let bytes = 0
      for (const e of r.events) bytes += e.payload.length
      // The copies out of the ring are held until the socket takes them: reserved bytes.
      if (bytes > 0 && !holds.tryReserve(bytes)) {
        res.write(Buffer.concat([eventText('stream_error', JSON.stringify({ code: 'storage_budget_exhausted', error: catalogue.storage_budget_exhausted.message, lastEventId: cursor })), NEWLINE]))
        break
      }
      let ok = true
      for (const e of r.events) ok = res.write(Buffer.concat([Buffer.from(`id: ${e.seq}\n`), e.payload, NEWLINE])) && ok
      cursor = r.cursor
      at = r.at
      if (!ok && open) await new Promise<void>((resolve) => { wake = resolve; res.once('drain', resolve) })
      if (bytes > 0) holds.unreserve(bytes)
      if (r.more) { last = false; continue }
      if (last || !open) continue
      // Sleep until an append to this session, the heartbeat, or the end.
      await ring.sessionChanged(session, token, HEARTBEAT_MS, ended.signal)
      wake = null
      if (open && ring.sessionToken(session) === token) res.write(': ping\n\n')
    }
  } finally {
    holds.settle('processing')
    deps.ledger.gauge(RG_EVENT_STREAMS, -1)
    deps.background.streams.delete(end)
    res.off('close', end)
    if (!res.destroyed) res.end()
  }
}
