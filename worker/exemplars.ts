// Exemplars: the last finished exchange's objects, kept reachable so that an idle full
// collection does not take the JIT's hidden classes with it.
//
// Why: V8 gives an object the hidden class ("map") it reaches by adding its properties one by
// one, along a transition tree whose branches are held weakly. When a full GC finds no live
// object of a map, it may clear that branch. The next object built the same way then gets a
// new map, and every inline cache and optimized function that checked the old one misses
// ("wrong map" deopts), re-optimizes, and stays polymorphic while older objects with the old map
// are still about.
//
// That is what happens when this worker goes idle. Every exchange's sockets, streams, requests
// and responses are gone. The idle collection (src/idle-gc.ts) then runs one full GC, which it
// needs to give the heap back (~25 MB of RSS).
//
// Measured (docs/benchmarks.md, "The idle collection and the JIT"), one HTTP worker, rounds of
// 96 streams after a 12 s idle:
// - with the full GC: ~25 % more user CPU in the worker and in V8's helper threads, for the
//   whole of the next 12 rounds; 50-60 deopts against 9;
// - in the exchange bench, relay CPU 1.16 ms against 0.96 ms without the GC, per 1000 events.
//
// Keeping one exchange's objects alive keeps their maps, and the transitions to them, alive.
// It costs one exchange's objects (a few KB), never its bytes: the request has been read and the
// response ended, so no body chunk is held. What could be sensitive is scrubbed first: every
// credential header of the request and of the provider's answer (src/log.ts SECRET_HEADERS) is
// overwritten with '[redacted]' in place. That is a store to a field the object already has, so
// it changes no map. So a heap snapshot of an idle worker shows no caller's key.

import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { CENSOR, SECRET_HEADERS } from '../src/log.ts'
import { nodeHttp } from '../src/net/node-http.ts'

const SECRET: ReadonlySet<string> = new Set<string>(SECRET_HEADERS)
/** Their lengths: a raw header name of another length is not lower-cased to be looked up. */
const SECRET_LENGTHS: ReadonlySet<number> = new Set<number>(SECRET_HEADERS.map((h) => h.length))

/** What one finished exchange leaves: its request, response and, if it got one, the provider's answer. */
export interface ExchangeObjects {
  req: IncomingMessage
  res: ServerResponse
  /** undici's ResponseData (headers, body stream), null when the exchange never got one. */
  upstream: { headers: Record<string, string | string[] | undefined>; body: unknown } | null
  /** Anything else of the exchange's own (its record, its scope). */
  own: readonly unknown[]
}

export class Exemplars {
  #exchange: ExchangeObjects | null = null
  /** The provider's answer of the last exchange that had one (a refused exchange keeps it). */
  #upstream: ExchangeObjects['upstream'] = null
  #upstreamSocket: Socket | null = null

  /** The exchange is over (its response closed, its line written): keep it, scrubbed. */
  keepExchange (x: ExchangeObjects): void {
    scrubRequest(x.req)
    if (x.upstream !== null) {
      scrubHeaders(x.upstream.headers)
      this.#upstream = x.upstream
    }
    this.#exchange = x
  }

  /** A connection to a provider was made (undici's `undici:client:connected` channel). */
  keepUpstreamSocket (socket: Socket): void {
    this.#upstreamSocket = socket
  }

  /** What is kept (tests). */
  get kept (): { exchange: ExchangeObjects | null; upstream: ExchangeObjects['upstream']; upstreamSocket: Socket | null } {
    return { exchange: this.#exchange, upstream: this.#upstream, upstreamSocket: this.#upstreamSocket }
  }
}

/**
 * The symbols under which Node caches a request's headersDistinct and trailersDistinct once
 * they are read: found once, on a request made for it, so that a scrub reads two properties
 * instead of listing every symbol of every request (~12 µs of each exchange at 96 streams,
 * profiled, with the trailers getter below). null where this Node has no such symbols: then
 * every request's own symbols are searched, as before.
 */
const DISTINCT: readonly symbol[] | null = (() => {
  try {
    const probe = new nodeHttp.IncomingMessage(null as unknown as Socket)
    void probe.headersDistinct
    void probe.trailersDistinct
    const found = Object.getOwnPropertySymbols(probe).filter((s) => s.description === 'kHeadersDistinct' || s.description === 'kTrailersDistinct')
    return found.length === 2 ? found : null
  } catch {
    return null
  }
})()

/** Overwrites every credential header value of a finished request in place: headers, trailers, their raw and distinct forms. */
export function scrubRequest (req: IncomingMessage): void {
  scrubHeaders(req.headers)
  // `trailers` is a getter that builds its object from rawTrailers on first read: a request
  // without trailers has nothing there to scrub (and nothing is built for it).
  if (req.rawTrailers.length > 0) scrubHeaders(req.trailers)
  scrubRaw(req.rawHeaders)
  scrubRaw(req.rawTrailers)
  // Node caches headersDistinct (and trailersDistinct) under its own symbols once they are read.
  const own = req as unknown as Record<symbol, unknown>
  for (const sym of DISTINCT ?? Object.getOwnPropertySymbols(req)) {
    if (sym.description !== 'kHeadersDistinct' && sym.description !== 'kTrailersDistinct') continue
    const distinct = own[sym]
    if (distinct !== null && typeof distinct === 'object') scrubHeaders(distinct as Record<string, string | string[] | undefined>)
  }
}

/** Whether scrubRequest found Node's distinct-header symbols once (tests). */
export const distinctSymbolsFound = DISTINCT !== null

function scrubRaw (raw: string[]): void {
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]
    if (SECRET_LENGTHS.has(name.length) && SECRET.has(name.toLowerCase())) raw[i + 1] = CENSOR
  }
}

function scrubHeaders (headers: Record<string, string | string[] | undefined>): void {
  for (const name of SECRET_HEADERS) {
    const v = headers[name]
    if (typeof v === 'string') headers[name] = CENSOR
    else if (Array.isArray(v)) v.fill(CENSOR)
  }
}
