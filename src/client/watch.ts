// The session's one internal subscription to its event stream, alive while any submit() is
// outstanding: it turns `turn_complete` / `turn_error` into the settlement of that submit's
// `result`, and releases that submit's reservation.
//
// Lifetime. A Watch is created by the first submit() of an idle session and opens
// `GET /v1/sessions/:id/events` before that submit POSTs, so no event of the exchange can be
// emitted before someone listens (`ready`). It stops (closes the stream, the session forgets
// it) as soon as nothing is tracked and no POST is in flight (`posting`); the next submit()
// opens a new one.
//
// Races it owns:
//   - A terminal event may arrive before the POST's 202 has been read (the exchange can be
//     that fast). While any POST is in flight, terminal events for exchanges nobody tracks are
//     kept (`early`, at most MAX_EARLY, oldest dropped) and track() looks there first.
//   - The caller's abort after acceptance: untrack, release, ask the server to cancel (fire
//     and forget), reject with the signal's reason. The later `turn_error exchange_cancelled`
//     finds nobody and is ignored.
//
// When the stream ends or fails while something is tracked, the Watch reconnects with
// `Last-Event-ID` (up to `retries` times in a row, backing off 200 ms, 400 ms, ... 2 s; a
// received event resets the count). The id is the last one seen; before any, the lowest
// `lastEventId` of the tracked exchanges' 202 answers (the gateway promises every event of an
// exchange comes after it). With neither, it does not reconnect: a new connection could not
// ask for what it missed. A `stream_error` event is followed by the server ending the
// stream, so it is handled as that end. When it cannot resume, every
// tracked exchange is released and its result rejected with SluiceStreamError
// ('event_stream_ended' | 'event_stream_failed'): the SDK no longer knows how it ends. A
// `replay_gap` (the server evicted events this reader had not seen) does the same for the
// exchanges tracked at that moment whose events may be among the lost ones
// ('event_replay_gap'): all of them, except those whose 202 `lastEventId` shows every one of
// their events is still kept (lastEventId + 1 >= the gap's `oldest`). The stream goes on.
//
// Every settlement path calls the tracked entry's release exactly once (the entry is removed
// from the map before anything else happens, so no second path can find it).

import { SluiceStreamError, SluiceTurnError, type StreamErrorCode } from './errors.ts'
import { readEvents, type TurnCompleteEvent, type TurnErrorEvent, type SessionEvent } from './events.ts'

/** The `turn_complete` event's data. */
export interface TurnResult {
  exchangeId: string
  /** The exchange's HTTP status as the gateway reported it. */
  status: number
  /** The provider's JSON for a non-streaming request; null for a stream (its frames were `turn_progress` events). */
  body: unknown
  /** Token usage as the gateway read it, when it did. */
  usage?: unknown
  [field: string]: unknown
}

export interface WatchHost {
  /** Opens the event stream (a 2xx text/event-stream Response) or throws. */
  connect (lastEventId: string | null, signal: AbortSignal): Promise<Response>
  /** Asks the server to cancel an exchange; must not throw. */
  cancel (exchangeId: string): void
  /** This watch has stopped; the session must not hand it to new submits. */
  detach (watch: Watch): void
  /** Reconnect attempts in a row before giving up. */
  retries: number
}

interface Tracked {
  /** The 202's lastEventId: every event of the exchange has a larger id (null: unknown). */
  after: number | null
  settle (e: TurnCompleteEvent | TurnErrorEvent): void
  fail (err: unknown): void
}

const MAX_EARLY = 1024

function delay (ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer)
      signal.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal.addEventListener('abort', done, { once: true })
  })
}

function outcome (e: TurnCompleteEvent | TurnErrorEvent): { ok: true, value: TurnResult } | { ok: false, error: SluiceTurnError } {
  if (e.type === 'turn_complete') {
    const { type: _type, id: _id, ...value } = e
    return { ok: true, value }
  }
  const { type: _type, id: _id, ...body } = e
  return { ok: false, error: new SluiceTurnError(body) }
}

export class Watch {
  /** Resolves when the first connection is open; rejects with why it could not open. */
  readonly ready: Promise<void>
  /** submit() calls between taking this watch and tracking (or giving up on) their exchange. */
  posting = 0
  #host: WatchHost
  #tracked = new Map<string, Tracked>()
  #early = new Map<string, TurnCompleteEvent | TurnErrorEvent>()
  #lastEventId: string | null = null
  /** Before any event id is seen: the lowest 202 `lastEventId` of what is tracked (a resume point too). */
  #floor: number | null = null
  #done = false
  #failure: { code: StreamErrorCode, message: string, cause: unknown } | null = null
  #ac = new AbortController()
  #opened!: () => void
  #notOpened!: (err: unknown) => void

  constructor (host: WatchHost) {
    this.#host = host
    this.ready = new Promise<void>((resolve, reject) => {
      this.#opened = resolve
      this.#notOpened = reject
    })
    this.ready.catch(() => {})
    void this.#run()
  }

  get stopped (): boolean { return this.#done }

  /**
   * Follows an accepted exchange until its terminal event, the caller's abort or the loss of
   * the stream. `release` runs exactly once, before the returned promise settles.
   */
  track (exchangeId: string, release: () => void, signal: AbortSignal | undefined, acceptedAfter: string | null = null): Promise<TurnResult> {
    const early = this.#early.get(exchangeId)
    if (early !== undefined) {
      this.#early.delete(exchangeId)
      release()
      const o = outcome(early)
      return o.ok ? Promise.resolve(o.value) : Promise.reject(o.error)
    }
    if (this.#failure !== null) {
      release()
      const f = this.#failure
      return Promise.reject(new SluiceStreamError(f.code, `${f.message}; the outcome of exchange ${exchangeId} is unknown`, exchangeId, f.cause))
    }
    if (signal?.aborted === true) {
      release()
      this.#host.cancel(exchangeId)
      return Promise.reject(signal.reason)
    }
    const after = acceptedAfter === null ? null : Number(acceptedAfter)
    if (this.#lastEventId === null && after !== null && (this.#floor === null || after < this.#floor)) this.#floor = after
    return new Promise<TurnResult>((resolve, reject) => {
      const finish = (): boolean => {
        if (this.#tracked.get(exchangeId) !== entry) return false
        this.#tracked.delete(exchangeId)
        signal?.removeEventListener('abort', onAbort)
        release()
        return true
      }
      const onAbort = (): void => {
        if (!finish()) return
        this.#host.cancel(exchangeId)
        reject(signal?.reason)
        this.maybeStop()
      }
      const entry: Tracked = {
        after,
        settle: (e) => {
          if (!finish()) return
          const o = outcome(e)
          if (o.ok) resolve(o.value)
          else reject(o.error)
        },
        fail: (err) => {
          if (finish()) reject(err)
        },
      }
      this.#tracked.set(exchangeId, entry)
      signal?.addEventListener('abort', onAbort, { once: true })
    })
  }

  /** Stops when nothing is tracked and no POST is in flight. */
  maybeStop (): void {
    if (this.#done || this.#tracked.size > 0 || this.posting > 0) return
    this.#done = true
    this.#early.clear()
    this.#ac.abort()
    this.#host.detach(this)
  }

  #fail (code: StreamErrorCode, message: string, cause: unknown): void {
    if (this.#done) return
    this.#done = true
    this.#failure = { code, message, cause }
    this.#early.clear()
    this.#ac.abort()
    this.#host.detach(this)
    for (const [id, t] of [...this.#tracked]) {
      t.fail(new SluiceStreamError(code, `${message}; the outcome of exchange ${id} is unknown`, id, cause))
    }
  }

  #dispatch (e: SessionEvent): void {
    if (e.id !== null) this.#lastEventId = e.id
    if (e.type === 'turn_complete' || e.type === 'turn_error') {
      const t = this.#tracked.get(e.exchangeId)
      if (t !== undefined) {
        t.settle(e)
      } else if (this.posting > 0) {
        this.#early.set(e.exchangeId, e)
        if (this.#early.size > MAX_EARLY) this.#early.delete(this.#early.keys().next().value as string)
      }
    } else if (e.type === 'replay_gap') {
      // Events before `oldest` are gone. An exchange accepted at or after oldest - 1 lost none.
      const oldest = Number(e.oldest)
      for (const [id, t] of [...this.#tracked]) {
        if (Number.isFinite(oldest) && t.after !== null && t.after + 1 >= oldest) continue
        t.fail(new SluiceStreamError('event_replay_gap', `the server evicted session events after ${String(e.after)} before they were read; the outcome of exchange ${id} is unknown`, id))
      }
    }
    this.maybeStop()
  }

  /** The Last-Event-ID for a (re)connect: the last id seen, else the 202s' floor, else none. */
  #resumeFrom (): string | null {
    return this.#lastEventId ?? (this.#floor === null ? null : String(this.#floor))
  }

  async #run (): Promise<void> {
    let opened = false
    let attempt = 0
    for (;;) {
      let cause: unknown = null
      try {
        const res = await this.#host.connect(this.#resumeFrom(), this.#ac.signal)
        if (this.#done) {
          res.body?.cancel().catch(() => {})
          return
        }
        if (!opened) {
          opened = true
          this.#opened()
        }
        for await (const e of readEvents(res)) {
          attempt = 0
          this.#dispatch(e)
          if (this.#done) return
        }
      } catch (err) {
        cause = err
      }
      this.maybeStop()
      if (this.#done) return
      if (!opened) {
        this.#notOpened(cause)
        this.#fail('event_stream_failed', 'could not open the session event stream', cause)
        return
      }
      const code = cause === null ? 'event_stream_ended' : 'event_stream_failed'
      if (this.#resumeFrom() === null || attempt >= this.#host.retries) {
        const why = cause === null ? 'the session event stream ended' : 'the session event stream failed'
        const resume = this.#resumeFrom() === null ? ' before any event id (nothing to resume from)' : ` (${attempt} reconnects)`
        this.#fail(code, why + resume, cause)
        return
      }
      attempt++
      await delay(Math.min(2000, 100 * 2 ** attempt), this.#ac.signal)
      if (this.#done) return
    }
  }
}
