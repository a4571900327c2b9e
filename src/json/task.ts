// The parser pool's worker entry: piscina loads this file in each pool thread (as .ts, by
// Node's type stripping) and calls the default export once per task. Two kinds of task:
//   prepare  a request body (src/json/prepare.ts), the task without a `kind`;
//   answer   a provider's non-streaming answer (src/json/answer.ts), `kind: 'answer'`;
//   warm     nothing (`kind: 'warm'`): ParserPool.warm() starts a thread with it, ahead of a parse.
//
// The result's body goes back by transfer, not by copy: its ArrayBuffer is moved to the
// calling thread (piscina's movable protocol: an object carrying the transferable under
// `transferableSymbol` and the value to post under `valueSymbol`). When the body was not
// rewritten this is the very ArrayBuffer the caller transferred in, so a body crosses the
// thread boundary twice without a copy; a rewritten or translated body (request or answer) is
// a fresh ArrayBuffer of exactly its bytes, moved the same way. A refusal is plain data, never
// a throw.

import { move, transferableSymbol, valueSymbol } from 'piscina'
import { readAnswer, type AnswerResult, type AnswerTask } from './answer.ts'
import { prepare, type PrepareResult, type PrepareTask } from './prepare.ts'

export interface WarmTask { kind: 'warm' }
export type ParserTask = PrepareTask | AnswerTask | WarmTask

export default function parserTask (task: ParserTask): PrepareResult | AnswerResult | object {
  if ('kind' in task && task.kind === 'warm') return { ok: true }
  const result = 'kind' in task && task.kind === 'answer' ? readAnswer(task as AnswerTask) : prepare(task as PrepareTask)
  if (!result.ok) return result
  const buffer = result.body.buffer
  if (!(buffer instanceof ArrayBuffer)) return result // a SharedArrayBuffer is shared, not moved
  return move({ [transferableSymbol]: buffer, [valueSymbol]: result })
}
