// Helpers for the session-lane behaviour tests: a rig whose simulated provider records, in
// order, which tagged request reached it and when it ended (every request carries an
// `x-test-tag` header, which the gateway forwards), the lane totals from /metrics, and the
// idle check every lane test ends with.

import type { Test } from 'tap'
import { request, type Dispatcher } from 'undici'
import { KEY, chatBody, type Rig } from './exchange.ts'
import { until, waitIdle } from './gateway.ts'

export const CHAT = '/v1/chat/completions'

export interface Reply { status: number; headers: Record<string, string | string[] | undefined>; json: Record<string, unknown>; text: string }

export interface PostOpts {
  /** Session headers, e.g. { 'x-session-id': 's1' }. */
  session?: Record<string, string>
  key?: string
  path?: string
  body?: unknown
  signal?: AbortSignal
  dispatcher?: Dispatcher
}

export const OUTCOMES = ['entered', 'queued', 'refused_full', 'released', 'cancel', 'cancel_after_promote', 'reclaimed', 'cancel_request'] as const
export type Lanes = Record<(typeof OUTCOMES)[number], number>

export function delta (a: Lanes, b: Lanes): Lanes {
  return Object.fromEntries(OUTCOMES.map((o) => [o, b[o] - a[o]])) as Lanes
}

export class LaneWatch {
  readonly rig: Rig
  /**
   * What reached the sim, in order: a request arriving, a request ending. `at` orders them as
   * the provider saw them: when a request was read, and when an exchange's connection was
   * seen gone (SimEndEvent.goneAt, read before a request that came in the same event-loop turn;
   * its 'end' is emitted after it), else when it ended.
   */
  readonly log: Array<{ kind: 'req' | 'end'; tag: string; outcome?: string; at: number; gone?: boolean }> = []

  constructor (rig: Rig) {
    this.rig = rig
    const tags = new Map<number, string>()
    rig.sim.events.on('request', (e) => {
      const tag = String(e.headers['x-test-tag'] ?? '')
      tags.set(e.id, tag)
      this.log.push({ kind: 'req', tag, at: performance.now() })
    })
    rig.sim.events.on('end', (e) => this.log.push({ kind: 'end', tag: tags.get(e.id) ?? '', outcome: e.outcome, at: e.goneAt ?? e.faultAt ?? performance.now(), gone: e.goneAt !== undefined }))
  }

  /** A blocking exchange tagged `tag`; `sim` is the `#sim` directive for the provider. */
  async post (tag: string, sim: string, o: PostOpts = {}): Promise<Reply> {
    const res = await request(this.rig.url + (o.path ?? CHAT), {
      method: 'POST',
      headers: { authorization: `Bearer ${o.key ?? KEY}`, 'content-type': 'application/json', 'x-test-tag': tag, ...o.session },
      body: JSON.stringify(o.body ?? chatBody(`${tag}\n#sim ${sim}`)),
      signal: o.signal,
      dispatcher: o.dispatcher,
    })
    const text = await res.body.text()
    let json: Record<string, unknown> = {}
    try { json = JSON.parse(text) } catch {}
    return { status: res.statusCode, headers: res.headers, json, text }
  }

  async lanes (): Promise<Lanes> {
    const m = await this.rig.gw.metrics()
    return Object.fromEntries(OUTCOMES.map((o) => [o, m.get(`sluice_session_lane_total{outcome="${o}"}`) ?? NaN])) as Lanes
  }

  async gauge (name: string): Promise<number> {
    return (await this.rig.gw.metrics()).get(name) ?? NaN
  }

  /** Starts `go` and resolves once the gateway has counted it into a lane (defines arrival order). */
  async entered (go: () => Promise<Reply>): Promise<[Promise<Reply>]> {
    const before = (await this.lanes()).entered
    const p = go()
    p.catch(() => {})
    await until(async () => (await this.lanes()).entered > before, 'the request to enter its lane')
    return [p]
  }

  /** Tags (with `prefix`) of the requests the sim saw, in arrival order. */
  seen (prefix: string): string[] {
    return this.log.filter((e) => e.kind === 'req' && e.tag.startsWith(prefix)).map((e) => e.tag)
  }

  /** Whether the sim read the end of `tag`'s connection before the exchange ended (SimEndEvent.goneAt). */
  goneSeen (tag: string): boolean {
    return this.log.find((e) => e.kind === 'end' && e.tag === tag)?.gone === true
  }

  outcomeOf (tag: string): string | undefined {
    return this.log.find((e) => e.kind === 'end' && e.tag === tag)?.outcome
  }

  /** The most requests matching `match` the sim had in flight at one time. */
  maxInFlight (match: (tag: string) => boolean): number {
    let n = 0
    let max = 0
    // Stable: entries of one moment keep their order of arrival.
    for (const e of this.log.toSorted((a, b) => a.at - b.at)) {
      if (!match(e.tag)) continue
      n += e.kind === 'req' ? 1 : -1
      max = Math.max(max, n)
    }
    return max
  }

  /** Every lane test ends here: the ledger idle, and every lane entry accounted exactly once. */
  async settled (t: Test): Promise<void> {
    t.same(await waitIdle(this.rig.gw), {}, 'every permit, byte and lane entry back at idle')
    const m = await this.rig.gw.metrics()
    const l = await this.lanes()
    t.equal(l.entered, l.released + l.cancel + l.cancel_after_promote + l.reclaimed, 'every lane entry left once')
    t.equal(m.get('sluice_sessions'), 0, 'no session has a pending exchange')
    t.equal(m.get('sluice_session_pending_max'), 0, 'no session has a pending exchange')
    t.equal(m.get('sluice_admissions_total'), m.get('sluice_releases_total'), 'every admission released once')
  }
}
