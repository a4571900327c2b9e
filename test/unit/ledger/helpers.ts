// Shared helpers for the ledger tests (unit and stress).
//
// `idleProblems(ledger)` lists everything that keeps a ledger from being idle, read from the
// truth cells (rows, raw waiter slots, the lock word) as well as from the derived counters,
// so a test that "cleans up" through a buggy path cannot hide the leak. `assertIdle` turns
// that list into one assertion. Run directly (tap runs every file under test/), this file
// checks its own helpers: each kind of non-idleness must be reported.

import { isMainThread } from 'node:worker_threads'
import { attachLedger, createLedger, type Ledger, type LedgerOptions } from '../../../src/ledger/ledger.ts'
import { AC_INFLIGHT, AC_ROW_INFLIGHT, E_STATE, ENTRY_FIELDS, FREE, GATES, H_LOCK, LANE32_FIELDS, LANE_FREE, LN_HWM, S_STATE, SLOT_FIELDS } from '../../../src/ledger/layout.ts'

export const unitOptions: LedgerOptions = {
  maxActive: 2,
  maxQueued: 4,
  queueWaitMs: 5_000,
  parsePermits: 1,
  parseQueue: 3,
  parseWaitMs: 5_000,
  storageBytes: 1_000,
  threads: 3,
}

export function makeLedger (over: Partial<LedgerOptions> = {}): Ledger {
  return createLedger({ ...unitOptions, ...over })
}

/** A second handle on the same buffer for row `row`, in this thread (simulates a worker). */
export function rowHandle (primary: Ledger, row: number): Ledger {
  primary.assignRow(row)
  return attachLedger(primary.init, row)
}

/** Raw slot states of gate g, straight from the buffer. */
export function slotStates (ledger: Ledger, g: number): number[] {
  const { i32, layout } = ledger.core
  const n = layout.dims.gates[g].maxPermits + layout.dims.gates[g].maxQueued
  const out: number[] = []
  for (let s = 0; s < n; s++) out.push(Atomics.load(i32, layout.slot32[g] + s * SLOT_FIELDS + S_STATE))
  return out
}

export interface IdleOptions {
  /** Also require admitted == released + reclaimed on both gates (true unless a repair ran). */
  exactTotals?: boolean
}

export function idleProblems (ledger: Ledger, opts: IdleOptions = {}): string[] {
  const problems: string[] = []
  const s = ledger.snapshot()
  for (const [name, g] of [['exchange', s.exchange], ['parse', s.parse]] as const) {
    if (g.active !== 0) problems.push(`${name}.active = ${g.active}`)
    if (g.queued !== 0) problems.push(`${name}.queued = ${g.queued}`)
    if (opts.exactTotals !== false && g.admitted !== g.released + g.reclaimed) {
      problems.push(`${name}: admitted ${g.admitted} != released ${g.released} + reclaimed ${g.reclaimed}`)
    }
  }
  for (let g = 0; g < GATES; g++) {
    const busy = slotStates(ledger, g).map((st, i) => [i, st]).filter(([, st]) => st !== FREE)
    if (busy.length > 0) problems.push(`gate ${g} slots not FREE: ${JSON.stringify(busy)}`)
  }
  if (s.storage.reserved !== 0) problems.push(`storage.reserved = ${s.storage.reserved}`)
  if (s.storage.peak > s.storage.limit) problems.push(`storage.peak ${s.storage.peak} > limit ${s.storage.limit}`)
  for (const r of s.rows) {
    if (r.exchangeHeld !== 0) problems.push(`row ${r.row} exchangeHeld = ${r.exchangeHeld}`)
    if (r.parseHeld !== 0) problems.push(`row ${r.row} parseHeld = ${r.parseHeld}`)
    if (r.bytes !== 0) problems.push(`row ${r.row} bytes = ${r.bytes}`)
    if (r.envelopesHeld !== 0) problems.push(`row ${r.row} envelopesHeld = ${r.envelopesHeld}`)
  }
  if (s.envelopes.inUse !== 0) problems.push(`envelopes.inUse = ${s.envelopes.inUse}`)
  const ln = s.lanes
  if (ln.pending !== 0) problems.push(`lanes.pending = ${ln.pending}`)
  if (ln.active !== 0) problems.push(`lanes.active = ${ln.active}`)
  if (opts.exactTotals !== false && ln.entered !== ln.released + ln.cancels + ln.cancelsAfterPromote + ln.reclaimed) {
    problems.push(`lanes: entered ${ln.entered} != released ${ln.released} + cancels ${ln.cancels} + cancelsAfterPromote ${ln.cancelsAfterPromote} + reclaimed ${ln.reclaimed}`)
  }
  const { i32, layout } = ledger.core
  const busyEntries: number[] = []
  for (let e = 0; e < layout.dims.lanes; e++) {
    if (Atomics.load(i32, layout.lanes32 + LANE32_FIELDS + e * ENTRY_FIELDS + E_STATE) !== LANE_FREE) busyEntries.push(e)
  }
  if (busyEntries.length > 0) problems.push(`lane entries not FREE: ${JSON.stringify(busyEntries)}`)
  if (Atomics.load(i32, layout.lanes32 + LN_HWM) !== 0) problems.push(`lanes.hwm = ${Atomics.load(i32, layout.lanes32 + LN_HWM)}`)
  // Provider accounts: no claim in flight, neither in the totals nor in any row's share.
  for (let a = 0; a < (layout.dims.accounts ?? 0); a++) {
    const at = layout.accounts32 + a * layout.accountFields
    const n = Atomics.load(i32, at + AC_INFLIGHT)
    if (n !== 0) problems.push(`account ${a} inflight = ${n}`)
    for (let r = 0; r < layout.dims.rows; r++) {
      const share = Atomics.load(i32, at + AC_ROW_INFLIGHT + r)
      if (share !== 0) problems.push(`account ${a} row ${r} share = ${share}`)
    }
  }
  const lock = Atomics.load(ledger.core.i32, H_LOCK)
  if (lock !== 0) problems.push(`lock held by token ${lock}`)
  return problems
}

/** The part of a tap Test that assertIdle needs (so the self-test can pass a recorder). */
export interface Asserts { same (found: unknown, wanted: unknown, ...message: [] | [string]): boolean }

/** One assertion: the ledger is idle (active 0, queued 0, reserved 0, every row and slot zero). */
export function assertIdle (t: Asserts, ledger: Ledger, opts: IdleOptions = {}): boolean {
  return t.same(idleProblems(ledger, opts), [], 'ledger is back at idle')
}

/** Resolves on the next turn of the event loop (after pending Atomics.waitAsync wake-ups). */
export function turn (): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve))
}

/** Settles with the value or the error code of `p`, never rejects. */
export async function outcome (p: Promise<unknown>): Promise<string> {
  try {
    await p
    return 'granted'
  } catch (err) {
    const code = (err as { code?: unknown }).code
    return typeof code === 'string' ? code : `error: ${(err as Error).message}`
  }
}

/**
 * Tracks a set of labelled acquires and reports the order in which they settle, so FIFO
 * tests can ask "which one settled next" without awaiting one that may never settle.
 */
export class Settlements {
  readonly order: string[] = []
  readonly results = new Map<string, string>()
  private readonly pending = new Map<string, Promise<string>>()
  private consumed = 0

  add (label: string, p: Promise<unknown>): void {
    this.pending.set(label, outcome(p).then((r) => {
      this.order.push(label)
      this.results.set(label, r)
      this.pending.delete(label)
      return label
    }))
  }

  /**
   * Returns the next settlement not yet returned, in settlement order, as `label:result`;
   * waits for one when none is left over.
   */
  async next (): Promise<string> {
    while (this.consumed >= this.order.length) {
      if (this.pending.size === 0) throw new Error('Settlements.next: nothing left to settle')
      await Promise.race(this.pending.values())
    }
    const label = this.order[this.consumed++]
    return `${label}:${this.results.get(label)}`
  }

  get pendingLabels (): string[] { return [...this.pending.keys()] }
}

// ---- self-test: run when tap executes this file directly ----
if (isMainThread && import.meta.main) {
  const { default: t } = await import('tap')

  t.test('idleProblems is empty for a fresh ledger', async (t) => {
    t.same(idleProblems(makeLedger()), [])
  })

  t.test('idleProblems reports each kind of leftover', async (t) => {
    const a = makeLedger()
    t.ok(a.exchange.tryAcquire())
    t.same(idleProblems(a), ['exchange.active = 1', 'exchange: admitted 1 != released 0 + reclaimed 0', 'row 0 exchangeHeld = 1'])
    a.exchange.release()
    t.same(idleProblems(a), [])

    const b = makeLedger()
    t.ok(b.parse.tryAcquire())
    const ac = new AbortController()
    const p = outcome(b.parse.acquire({ signal: ac.signal }))
    t.same(idleProblems(b), [
      'parse.active = 1', 'parse.queued = 1', 'parse: admitted 1 != released 0 + reclaimed 0',
      'gate 1 slots not FREE: [[0,1]]', 'row 0 parseHeld = 1',
    ])
    ac.abort()
    t.equal(await p, 'client_closed')
    b.parse.release()
    t.same(idleProblems(b), [])

    const c = makeLedger()
    c.storage.reserve(10)
    t.same(idleProblems(c), ['storage.reserved = 10', 'row 0 bytes = 10'])
    c.storage.release(10)
    c.core.lock()
    t.same(idleProblems(c), ['lock held by token 1'])
    c.core.unlock()
    t.same(idleProblems(c), [])

    const d = makeLedger()
    const r = d.lanes.enter([1, 2], [3, 4, 5, 6])
    t.ok(r.ok)
    t.same(idleProblems(d), [
      'lanes.pending = 1', 'lanes.active = 1',
      'lanes: entered 1 != released 0 + cancels 0 + cancelsAfterPromote 0 + reclaimed 0',
      'lane entries not FREE: [0]', 'lanes.hwm = 1',
    ])
    if (r.ok) d.lanes.release(r.entry)
    t.same(idleProblems(d), [])

    const e = makeLedger({ accounts: 2, breakers: 1 })
    const s = e.providers.select([{ index: 1, maxConcurrent: null }])
    t.ok(s.ok)
    t.same(idleProblems(e), ['account 1 inflight = 1', 'account 1 row 0 share = 1'])
    if (s.ok) e.providers.release(s.account)
    t.same(idleProblems(e), [])
  })

  t.test('assertIdle fails on a busy ledger', async (t) => {
    const calls: unknown[][] = []
    const recorder: Asserts = { same: (found, wanted, ...message) => { calls.push([found, wanted, ...message]); return false } }
    const l = makeLedger()
    l.storage.reserve(3)
    assertIdle(recorder, l)
    t.same(calls, [[['storage.reserved = 3', 'row 0 bytes = 3'], [], 'ledger is back at idle']])
    l.storage.release(3)
  })

  t.test('Settlements reports settlement order and outcomes', async (t) => {
    const s = new Settlements()
    let resolveA!: () => void
    s.add('a', new Promise<void>((resolve) => { resolveA = resolve }))
    s.add('b', Promise.reject(Object.assign(new Error('x'), { code: 'capacity_timeout' })))
    t.equal(await s.next(), 'b:capacity_timeout')
    resolveA()
    t.equal(await s.next(), 'a:granted')
    t.same(s.order, ['b', 'a'])
    t.same(s.pendingLabels, [])
    await t.rejects(s.next(), /nothing left/)
  })

  t.test('Settlements keeps settlements that happen between two next() calls', async (t) => {
    const s = new Settlements()
    s.add('x', Promise.resolve())
    s.add('y', Promise.resolve())
    s.add('z', new Promise(() => {}))
    t.equal(await s.next(), 'x:granted')
    t.equal(await s.next(), 'y:granted', 'y settled together with x and is not lost')
    t.same(s.pendingLabels, ['z'])
  })
}
