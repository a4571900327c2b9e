// The parser pool's worker entry: piscina loads this file in each pool thread (as .ts, by
// Node's type stripping) and calls the default export once per task.
//
// The result's body goes back by transfer, not by copy: its ArrayBuffer is moved to the
// calling thread (piscina's movable protocol: an object carrying the transferable under
// `transferableSymbol` and the value to post under `valueSymbol`). When the body was not
// rewritten this is the very ArrayBuffer the caller transferred in, so a request body
// crosses the thread boundary twice without a copy. A refusal is plain data, never a throw.

import { move, transferableSymbol, valueSymbol } from 'piscina'
import { prepare, type PrepareResult, type PrepareTask } from './prepare.ts'

export default function parserTask (task: PrepareTask): PrepareResult | object {
  const result = prepare(task)
  if (!result.ok) return result
  const buffer = result.body.buffer
  if (!(buffer instanceof ArrayBuffer)) return result // a SharedArrayBuffer is shared, not moved
  return move({ [transferableSymbol]: buffer, [valueSymbol]: result })
}
