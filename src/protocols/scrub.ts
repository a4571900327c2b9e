// Credentials out of provider text: anything relayed from a provider's error (its message,
// type and code, in a refusal body, a failure record or a turn_error event) goes through here
// first. A provider, or a proxy in front of it, may quote the request's API key back ("invalid
// key sk-...") or its own tokens; the caller must never receive them.
//
// What is replaced by `[redacted]`, in this order:
//   1. the configured provider keys' values, verbatim (those of 8 characters or more);
//   2. `Bearer ...` / `Basic ...` credentials;
//   3. key-shaped strings: `sk-...` (OpenAI, `sk-ant-...` Anthropic, `sk-proj-...`), Google
//      `AIza...`, GitHub `ghp_...`, Slack `xox?-...`, AWS `AKIA...`;
//   4. `api_key=...`, `token: ...`, `secret=...`, `password=...` values;
//   5. long tokens: 32 or more hex digits, or 32 or more base64/base64url characters that mix
//      letters and digits (ids of that shape go too: a lost request id is the lesser harm).
// Then the text is capped (PROVIDER_MESSAGE_CAP, PROVIDER_FIELD_CAP characters, with `…`):
// scrubbing first, so a cap can never cut a key into a piece the patterns miss.
//
// Built once per worker (the Router owns one); the patterns are compiled once.

export const REDACTED = '[redacted]'

/** Longest provider message relayed (characters, before the `…`). */
export const PROVIDER_MESSAGE_CAP = 300
/** Longest provider type or code relayed. */
export const PROVIDER_FIELD_CAP = 100

/** Shortest configured key value scrubbed verbatim (shorter would hit ordinary words). */
const MIN_SECRET = 8

const PATTERNS: Array<[RegExp, string | ((m: string, ...groups: string[]) => string)]> = [
  [/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+/gi, (_m, scheme) => `${scheme} ${REDACTED}`],
  [/\bsk-[A-Za-z0-9_-]{6,}/g, REDACTED],
  [/\bAIza[0-9A-Za-z_-]{20,}/g, REDACTED],
  [/\bgh[pousr]_[A-Za-z0-9]{20,}/g, REDACTED],
  [/\bxox[abprs]-[A-Za-z0-9-]{10,}/g, REDACTED],
  [/\bAKIA[0-9A-Z]{16}\b/g, REDACTED],
  [/\b(api[_-]?key|access[_-]?token|token|secret|password)(["']?\s*[:=]\s*["']?)([^\s"',;}]+)/gi, (_m, name, sep) => `${name}${sep}${REDACTED}`],
  [/\b[0-9a-fA-F]{32,}\b/g, REDACTED],
  [/[A-Za-z0-9+/_-]{32,}={0,2}/g, (m) => /\d/.test(m) && /[A-Za-z]/.test(m) ? REDACTED : m],
]

export class Scrubber {
  private readonly secrets: readonly string[]
  private readonly secretBytes: readonly Buffer[]

  constructor (secrets: Iterable<string | null | undefined> = []) {
    const list = [...new Set([...secrets].filter((s): s is string => typeof s === 'string' && s.length >= MIN_SECRET))]
    // Longest first: a key that contains another is replaced whole.
    list.sort((a, b) => b.length - a.length)
    this.secrets = list
    this.secretBytes = list.map((s) => Buffer.from(s))
  }

  /** `text` without credentials, capped at `cap` characters (null stays null). */
  text (text: string | null, cap: number = PROVIDER_MESSAGE_CAP): string | null {
    if (text === null) return null
    let out = text
    for (const s of this.secrets) out = out.split(s).join(REDACTED)
    for (const [re, by] of PATTERNS) out = out.replace(re, by as (m: string, ...g: string[]) => string)
    return capText(out, cap)
  }

  /** True when `bytes` carry a configured key verbatim (a frame that must not be relayed). */
  carriesSecret (bytes: Uint8Array): boolean {
    const b = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    return this.secretBytes.some((s) => b.includes(s))
  }
}

/** Caps at `cap` UTF-16 units with `…`, never splitting a surrogate pair. */
export function capText (text: string, cap: number): string {
  if (text.length <= cap) return text
  let end = cap
  const last = text.charCodeAt(end - 1)
  if (last >= 0xd800 && last <= 0xdbff) end--
  return text.slice(0, end) + '…'
}

/** The patterns alone (no configured keys): for callers without a Router. */
export const DEFAULT_SCRUBBER = new Scrubber()
