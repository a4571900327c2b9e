// Property: waiters that do not cancel are granted in arrival order, across threads, on
// both gates. The primary saturates the gate; waiters in 6 threads join one by one in a
// seeded order (each confirmed queued through the snapshot before the next joins); two of
// them abort (losing their place) and two latecomers join at the back; then the primary
// releases its permits one at a time, waiting for each grant, and the grant order must be
// exactly the join order minus the aborted ones.
//
// This file is also the worker script (isMainThread picks the side).

import { isMainThread } from 'node:worker_threads'
import { createLedger } from '../../src/ledger/ledger.ts'
import type { Gate } from '../../src/ledger/gate.ts'
import { assertIdle } from '../unit/ledger/helpers.ts'
import { Mailbox, Observer, pickSeed, rng, spawn, threadContext } from './harness.ts'

const THREADS = 6
/** Waiters granted per gate (and permits the primary holds at the start). */
const M = 18

type Cmd =
  | { cmd: 'join'; id: number; gate: 0 | 1 }
  | { cmd: 'abort'; id: number }
  | { cmd: 'finish' }

type Msg =
  | { type: 'joined'; id: number; row: number; queued: boolean }
  | { type: 'granted'; id: number; row: number; seq: number }
  | { type: 'rejected'; id: number; row: number; code: string }

if (isMainThread) {
  const { default: t } = await import('tap')
  t.test('grants follow arrival order across threads, on both gates', async (t) => {
    const seed = pickSeed()
    t.comment(`seed ${seed} (rerun with SLUICE_STRESS_SEED=${seed})`)
    const rand = rng(seed)
    const ledger = createLedger({
      maxActive: M, maxQueued: M, queueWaitMs: 60_000,
      parsePermits: M, parseQueue: M, parseWaitMs: 60_000,
      storageBytes: 0, threads: THREADS,
    })
    const obs = new Observer(THREADS + 1)
    const mail = new Mailbox()
    const lives = Array.from({ length: THREADS }, (_, i) => spawn(ledger, obs, new URL(import.meta.url), i + 1, null, { seed }))
    for (const l of lives) l.worker.on('message', (m: { type?: string }) => { if (m.type !== 'done') mail.push(m) })
    const ownerOf = new Map<number, number>() // waiter id -> thread index
    let nextId = 0

    for (const [g, name] of [[0, 'exchange'], [1, 'parse']] as const) {
      const gate: Gate = g === 0 ? ledger.exchange : ledger.parse
      for (let i = 0; i < M; i++) t.ok(gate.tryAcquire(), `${name}: primary holds permit ${i + 1}`)

      const joined: number[] = []
      const join = async (): Promise<void> => {
        const id = nextId++
        const th = Math.floor(rand() * THREADS)
        ownerOf.set(id, th)
        lives[th].send({ cmd: 'join', id, gate: g } satisfies Cmd)
        const m = await mail.next() as Msg
        t.same(m, { type: 'joined', id, row: th + 1, queued: true }, `${name}: waiter ${id} (thread ${th + 1}) is queued`)
        joined.push(id)
        t.equal(gate.snapshot().queued, joined.length, `${name}: the snapshot counts ${joined.length} waiters`)
      }
      for (let i = 0; i < M; i++) await join()

      // Two waiters give up; they lose their places. Two latecomers join at the back.
      const quitters = [joined[2 + Math.floor(rand() * 4)], joined[M - 1 - Math.floor(rand() * 4)]]
      for (const id of quitters) {
        lives[ownerOf.get(id)!].send({ cmd: 'abort', id } satisfies Cmd)
        const m = await mail.next() as Msg
        t.same(m, { type: 'rejected', id, row: ownerOf.get(id)! + 1, code: 'client_closed' }, `${name}: waiter ${id} aborted`)
        joined.splice(joined.indexOf(id), 1)
        t.equal(gate.snapshot().queued, joined.length)
      }
      for (let i = 0; i < 2; i++) await join()
      t.equal(joined.length, M)

      const granted: number[] = []
      for (let k = 0; k < M; k++) {
        gate.release()
        const m = await mail.next() as Msg
        if (m.type !== 'granted') {
          t.fail(`${name}: expected a grant, got ${JSON.stringify(m)}`)
          break
        }
        t.equal(m.seq, granted.length + (g === 0 ? 0 : M), 'one grant per release')
        granted.push(m.id)
        t.equal(gate.snapshot().queued, M - 1 - k, `${name}: one waiter fewer`)
      }
      t.same(granted, joined, `${name}: grant order == join order`)
      t.match(gate.snapshot(), { active: M, queued: 0, cancels: 2, cancelsAfterGrant: 0, timeouts: 0 })
      t.equal(gate.heldByMe, 0, 'the primary gave every permit away')
      t.equal(obs.maxSeen(g), M)
    }

    for (const l of lives) l.send({ cmd: 'finish' } satisfies Cmd)
    for (const end of await Promise.all(lives.map((l) => l.end))) {
      t.equal(end.code, 0)
      t.same(end.violations, [])
      t.same(end.reclaimed, { exchange: 0, parse: 0, bytes: 0, lanes: 0, lockStolen: false })
    }
    t.equal(obs.violations, 0)
    assertIdle(t, ledger)
  })
} else {
  const ctx = threadContext<null>()
  const { ledger, row, obs } = ctx
  const aborters = new Map<number, AbortController>()
  const held: Array<0 | 1> = []
  const gates = [ledger.exchange, ledger.parse]
  for (;;) {
    const c = await ctx.next() as Cmd
    if (c.cmd === 'finish') break
    if (c.cmd === 'abort') { aborters.get(c.id)?.abort(); continue }
    const ac = new AbortController()
    aborters.set(c.id, ac)
    let queued = false
    const gate = gates[c.gate]
    const g = c.gate
    gate.acquire({ signal: ac.signal, onQueued: () => { queued = true } }).then(() => {
      const seq = obs.nextSeq()
      obs.granted(g, row, gate.snapshot().max)
      held.push(g)
      ctx.post({ type: 'granted', id: c.id, row, seq } satisfies Msg)
    }, (err: { code?: string }) => {
      ctx.post({ type: 'rejected', id: c.id, row, code: err.code ?? String(err) } satisfies Msg)
    })
    ctx.post({ type: 'joined', id: c.id, row, queued } satisfies Msg)
  }
  for (const g of held) {
    obs.releasing(g, row)
    gates[g].release()
  }
  ctx.done(held.length)
}
