// The exchange gate of one exchange, before its body is read: drain check, heap check, permit.
//
// The heap check reads this worker's own V8 heap against its fixed limit (resourceLimits):
// above `workerHeapAdmitFraction` of the limit the exchange is refused with
// `worker_heap_exhausted` instead of being admitted into a heap that may not hold it.

import { getHeapStatistics } from 'node:v8'
import { SluiceError } from '../src/errors.ts'
import type { Ledger } from '../src/ledger/ledger.ts'
import type { Limits } from '../src/config/schema.ts'
import type { ExchangeScope } from './scope.ts'

/** A settled promise: a reaction on it runs at the end of the synchronous turn (a microtask,
 *  without the AsyncResource Node's queueMicrotask makes for each call). */
const TURN_END = Promise.resolve()

export interface HeapFigures { used: number; limit: number; external: number }

export function heapFigures (): HeapFigures {
  const h = getHeapStatistics()
  return { used: h.used_heap_size, limit: h.heap_size_limit, external: h.external_memory }
}

export class Admission {
  private readonly ledger: Ledger
  private readonly limits: Limits

  constructor (ledger: Ledger, limits: Limits) {
    this.ledger = ledger
    this.limits = limits
  }

  /** The figures read in this synchronous turn; cleared by a microtask at its end. */
  private heapThisTurn: HeapFigures | null = null
  private readonly endTurn = (): void => { this.heapThisTurn = null }

  /**
   * Throws worker_heap_exhausted when this worker's heap is above its admission limit. The heap
   * is read once per synchronous turn: accept() and admit() both check it, and without a
   * session-lane wait they run in the same turn, where a second read (~2 us of
   * getHeapStatistics) could only see that turn's few allocations. After any await (a lane
   * wait) the turn is over and the heap is read again, so a waiter is still checked afresh.
   * The reading goes to the ledger (sluice_worker_heap_bytes) with a refusal; otherwise the
   * worker's once-a-second report keeps it (worker/main.ts): four shared-memory stores of
   * BigInts per exchange bought nothing the metric's one-second resolution shows.
   */
  checkHeap (): void {
    let h = this.heapThisTurn
    if (h === null) {
      h = heapFigures()
      this.heapThisTurn = h
      void TURN_END.then(this.endTurn)
    }
    const admitLimit = Math.floor(h.limit * this.limits.workerHeapAdmitFraction)
    if (h.used > admitLimit) {
      this.ledger.reportHeap(h.used, h.limit, h.external)
      throw new SluiceError('worker_heap_exhausted', { heapUsed: h.used, heapLimit: h.limit, admitLimit })
    }
  }

  /** The refusals before any permit: the gateway draining, then this worker's heap. */
  private checkOpen (): void {
    if (this.ledger.draining) throw new SluiceError('shutting_down')
    this.checkHeap()
  }

  /**
   * admit() without a wait or a promise: takes a permit that is free now (none queued before
   * it) and returns true; returns false, nothing taken, when admit() must queue (or settle an
   * aborted signal). Drain and heap refusals throw as in admit().
   */
  tryAdmit (scope: ExchangeScope, signal: AbortSignal): boolean {
    this.checkOpen()
    if (signal.aborted || !this.ledger.exchange.tryAcquire()) return false
    scope.tookExchange()
    return true
  }

  /**
   * Takes an exchange permit (FIFO, body unread) into `scope`, or throws the refusal. Drain and
   * heap are checked again here: an exchange may have waited in its session lane since it was
   * accepted.
   */
  async admit (scope: ExchangeScope, signal: AbortSignal, onQueued?: () => void): Promise<void> {
    this.checkOpen()
    await this.ledger.exchange.acquire({ signal, onQueued, deadline: Date.now() + this.limits.queueWaitMs })
    scope.tookExchange()
  }
}
