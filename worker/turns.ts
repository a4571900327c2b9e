// Turn pins: a run identity may take at most its key's `maxTurnsPerRun` exchanges. The count
// lives in the ledger's run table, so every worker sees one count per run.

import type { KeyConfig } from '../src/config/schema.ts'
import { SluiceError } from '../src/errors.ts'
import type { Ledger } from '../src/ledger/ledger.ts'

export interface TurnTicket { giveBack (): void }

const NONE: TurnTicket = { giveBack () {} }

export class TurnPins {
  private readonly ledger: Ledger
  constructor (ledger: Ledger) { this.ledger = ledger }

  /** Takes a turn for the run, or throws turn_limit. Runs without an identity are not pinned. */
  take (key: KeyConfig, runId: string | null): TurnTicket {
    if (runId === null || key.maxTurnsPerRun === null) return NONE
    const r = this.ledger.runs.take(key.name, runId, key.maxTurnsPerRun)
    if (!r.ok) throw new SluiceError('turn_limit', { runId, limit: key.maxTurnsPerRun, count: r.count })
    let given = false
    return {
      giveBack: () => {
        if (given) return
        given = true
        this.ledger.runs.giveBack(key.name, runId)
      },
    }
  }
}
