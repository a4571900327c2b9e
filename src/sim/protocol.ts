// What each wire protocol module provides to the server.

import type { FramePlan } from './frames.ts'
import type { SimStreamError } from './scenario.ts'
import type { Script } from './script.ts'

export interface Renderer {
  /**
   * The streaming frames. For the oversize-frame fault the renderer inserts one text delta
   * whose whole frame is `directive.size` bytes, at frame index `directive.at` (clamped into
   * the text deltas; default: the middle text delta).
   */
  stream(script: Script): FramePlan
  /** The non-streaming response body. */
  json(script: Script): string
  /** A frame shaped like this protocol's deltas whose data is not valid JSON. */
  malformed(seq: number): string
  /** This protocol's own in-stream error event. */
  errorEvent(seq: number): string
  /**
   * The in-stream provider error of `error=KIND`, as the provider sends it (Chat error frame,
   * Responses `response.failed`, Anthropic `event: error`).
   */
  streamError(script: Script, kind: SimStreamError, seq: number): string
}

/** Where the oversize delta goes, given the index of the first text-delta frame. */
export function oversizeIndex(script: Script, firstTextFrame: number): number {
  const text = script.text
  if (text === null) return 0
  const at = script.directive.at
  if (at === null) return Math.floor(text.count / 2)
  return Math.max(0, Math.min(at - firstTextFrame, text.count))
}

/** Marker carried by malformed frames, so tests can find them in raw bytes. */
export const MALFORMED_MARK = 'sim-malformed'
export const ERROR_EVENT_MESSAGE = 'sim: provider error event (simulated)'
