// A stand-in for the gateway's session endpoints, written from the contract (the brief and
// DESIGN.md "Sessions"), so the SDK's submit()/events()/cancel() can be tested before the
// real endpoints exist and can be driven into corners the real gateway rarely reaches (a
// terminal event before the 202, a dropped stream, an evicted ring). The end-to-end tests
// run the same SDK against `sluice serve`.
//
//   POST /v1/sessions/:id/exchanges   {route, body} -> 202 {exchangeId, sessionId,
//                                     lastEventId}; the
//                                     exchange follows body.script (see Script)
//   GET  /v1/sessions/:id/events      text/event-stream, `id`/`event`/`data`, Last-Event-ID
//                                     replay from a ring of `ring` events, replay_gap when
//                                     the asked-for events were evicted
//   POST .../exchanges/:eid/cancel    200 {exchangeId, cancelled}; a running exchange ends
//                                     with turn_error exchange_cancelled
import type { ServerResponse } from 'node:http'
import { json, sleep, startServer, type Seen, type TestServer } from './server.ts'

export interface Script {
  /** What happens after acceptance. Default 'complete'. */
  end?: 'complete' | 'error' | 'never'
  /** ms before the terminal event. */
  after?: number
  /** turn_progress frames before the end. */
  progress?: number
  /** Emit the terminal event before answering 202 (the 202 follows `after` ms later). */
  early?: boolean
  /** No turn_started (so a stream can end before the client has seen any id). */
  silent?: boolean
  /** ms before the 202 is written. */
  acceptDelay?: number
  /** Refuse the POST with 503 prompt_queue_full. */
  refuse?: boolean
  /** Leave `lastEventId` out of the 202 (an older server). */
  noLastEventId?: boolean
}

interface Logged { seq: number, type: string, data: unknown }

export interface SessionServer {
  srv: TestServer
  url: string
  /** Events written so far, per session. */
  log (session: string): Logged[]
  /** Open event-stream connections. */
  subscribers (): number
  /** Ends every event stream cleanly (FIN) or by destroying the socket. */
  dropSubscribers (how: 'end' | 'destroy'): void
  /** Refuse new event-stream connections with this status (null: accept). */
  refuseEvents: number | null
  /** Emit an event in a session as the gateway would. */
  emit (session: string, type: string, data: Record<string, unknown>): void
  /** Completes a 'never' exchange. */
  finish (exchangeId: string, body?: unknown): void
  cancels: string[]
  close (): Promise<void>
}

export async function startSessionServer (opts: { key: string, ring?: number }): Promise<SessionServer> {
  const ring = opts.ring ?? 1000
  let seq = 0
  let nextExchange = 0
  const logs = new Map<string, Logged[]>()
  const subs = new Map<string, Set<ServerResponse>>()
  const running = new Map<string, string>() // exchangeId -> session
  const evicted = new Map<string, number>() // session -> the newest seq evicted from its log

  const logOf = (s: string): Logged[] => { let l = logs.get(s); if (!l) logs.set(s, l = []); return l }
  const subsOf = (s: string): Set<ServerResponse> => { let l = subs.get(s); if (!l) subs.set(s, l = new Set()); return l }
  const frame = (e: Logged): string => `id: ${e.seq}\nevent: ${e.type}\ndata: ${JSON.stringify(e.data)}\n\n`

  function emit (session: string, type: string, data: Record<string, unknown>): void {
    const e = { seq: ++seq, type, data }
    const log = logOf(session)
    log.push(e)
    if (log.length > ring) evicted.set(session, log.shift()!.seq)
    if (type === 'turn_complete' || type === 'turn_error') running.delete(data.exchangeId as string)
    for (const res of subsOf(session)) res.write(frame(e))
  }

  function refuse (res: ServerResponse, status: number, code: string): void {
    json(res, status, { code, error: `refused: ${code}` }, status === 503 ? { 'retry-after': '5' } : {})
  }

  const authorized = (seen: Seen): boolean => seen.headers.authorization === `Bearer ${opts.key}` || seen.headers['x-api-key'] === opts.key

  const srv = await startServer(async (req, res, seen) => {
    const url = new URL(seen.path, 'http://x')
    const m = /^\/v1\/sessions\/([^/]+)(\/events|\/exchanges(?:\/([^/]+)\/cancel)?)$/.exec(url.pathname)
    if (!m) return refuse(res, 404, 'not_found')
    if (!authorized(seen)) return refuse(res, 401, 'unauthorized')
    const session = decodeURIComponent(m[1])

    if (m[2] === '/events' && seen.method === 'GET') {
      if (server.refuseEvents !== null) return refuse(res, server.refuseEvents, 'events_refused')
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store' })
      res.write(': connected\n\n')
      const last = seen.headers['last-event-id']
      if (typeof last === 'string') {
        const after = Number(last)
        const log = logOf(session)
        const oldest = log[0]?.seq ?? seq + 1
        if ((evicted.get(session) ?? 0) > after) res.write(`event: replay_gap\ndata: ${JSON.stringify({ after: last, oldest: String(oldest) })}\n\n`)
        for (const e of log) if (e.seq > after) res.write(frame(e))
      }
      const set = subsOf(session)
      set.add(res)
      res.on('close', () => set.delete(res))
      return
    }

    if (m[3] !== undefined && seen.method === 'POST') {
      const eid = decodeURIComponent(m[3])
      const was = running.get(eid) === session
      server.cancels.push(eid)
      if (was) emit(session, 'turn_error', { exchangeId: eid, code: 'exchange_cancelled', error: 'the exchange was cancelled' })
      return json(res, 200, { exchangeId: eid, cancelled: was })
    }

    if (seen.method !== 'POST') return refuse(res, 405, 'method_not_allowed')
    const { route, body } = JSON.parse(seen.body) as { route: string, body: { script?: Script } }
    const script: Script = body.script ?? {}
    if (script.refuse) {
      return json(res, 503, { code: 'prompt_queue_full', error: 'this session already has the maximum number of pending exchanges', sessionId: session, limit: 1, pendingCount: 1 }, { 'retry-after': '5' })
    }
    const exchangeId = `ex-${++nextExchange}`
    running.set(exchangeId, session)
    // Every event of this exchange comes after this id (as the gateway's 202 says).
    const accepted = script.noLastEventId ? { exchangeId, sessionId: session } : { exchangeId, sessionId: session, lastEventId: seq }
    const end = async (): Promise<void> => {
      for (let i = 0; i < (script.progress ?? 0); i++) emit(session, 'turn_progress', { exchangeId, event: null, data: `{"i":${i}}` })
      if (script.end === 'error') emit(session, 'turn_error', { exchangeId, code: 'provider_unavailable', error: 'the provider is unavailable', retryAfterSeconds: 1 })
      else if (script.end !== 'never') emit(session, 'turn_complete', { exchangeId, status: 200, body: { route, echo: body } })
    }
    if (!script.silent) emit(session, 'turn_started', { exchangeId })
    if (script.early) {
      await end()
      await sleep(script.after ?? 30)
      json(res, 202, accepted)
      return
    }
    if (script.acceptDelay) await sleep(script.acceptDelay)
    json(res, 202, accepted)
    if (script.after) await sleep(script.after)
    await end()
  })

  const server: SessionServer = {
    srv,
    url: srv.url,
    log: (s) => logOf(s),
    subscribers: () => [...subs.values()].reduce((n, s) => n + s.size, 0),
    dropSubscribers (how) {
      for (const set of subs.values()) {
        for (const res of set) {
          if (how === 'end') res.end()
          else res.socket?.destroy()
        }
      }
    },
    refuseEvents: null,
    emit,
    finish (exchangeId, body = { finished: true }) {
      const session = running.get(exchangeId)
      if (session === undefined) throw new Error(`${exchangeId} is not running`)
      emit(session, 'turn_complete', { exchangeId, status: 200, body })
    },
    cancels: [],
    close: () => srv.close(),
  }
  return server
}
