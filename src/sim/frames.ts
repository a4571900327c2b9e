// A stream as a list of segments, each rendering its frames by index.
//
// Renderers describe a response as segments (e.g. "1 head frame", "N text deltas",
// "3 closing frames"); the total frame count is known before the first byte, so faults can be
// placed at "half the stream" and events can be generated lazily: a million-delta stream holds
// no frame array. `seq` is the frame's global index (the Responses `sequence_number`).

export interface Segment {
  readonly n: number
  render(j: number, seq: number): string
}

export class FramePlan {
  readonly #segments: Segment[] = []
  #total = 0

  get total(): number {
    return this.#total
  }

  /** Index the next added frame will have. */
  get next(): number {
    return this.#total
  }

  add(n: number, render: (j: number, seq: number) => string): this {
    if (n > 0) {
      this.#segments.push({ n, render })
      this.#total += n
    }
    return this
  }

  one(render: (seq: number) => string): this {
    return this.add(1, (_j, seq) => render(seq))
  }

  *frames(): Generator<string, void, undefined> {
    let seq = 0
    for (const s of this.#segments) {
      for (let j = 0; j < s.n; j++) yield s.render(j, seq++)
    }
  }
}

/** `event: <name>` + `data:` frame, as Responses and Anthropic send them. */
export function named(event: string, json: string): string {
  return 'event: ' + event + '\ndata: ' + json + '\n\n'
}

/** Bare `data:` frame, as Chat Completions sends them. */
export function data(json: string): string {
  return 'data: ' + json + '\n\n'
}
