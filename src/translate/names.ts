// Tool wire names: the one function name a provider sees for each client tool, and the way back.
//
//   client tool                                   wire name (^[a-zA-Z0-9_-]{1,64}$)
//   ───────────────────────────────────────────   ─────────────────────────────────────────────
//   function `exec_command`                       `exec_command`               (valid: unchanged)
//   namespace `multi_agent_v1` / `close_agent`    `multi_agent_v1__close_agent` (`<ns>__<name>`)
//   custom `apply_patch`                          `apply_patch`                (one `input` parameter)
//   tool_search                                   `tool_search`                (kind stays tool_search)
//   a name with other characters, or too long     sanitised (`[^a-zA-Z0-9_-]` -> `_`), cut to 55
//                                                 characters, + `_` + 8 hex of sha256(<ns>__<name>)
//
// The mapping is a pure function of (namespace, name): a call in the history whose tool is no
// longer declared still gets the same wire name. A name that is already valid is never touched
// (Claude Code's `Bash` stays `Bash`), so only rewritten names carry the hash suffix, which
// keeps `a.b` (-> `a_b_<hash>`) apart from a plain `a_b`. Two tools that still land on one wire
// name (the same tool declared twice, or `ns__x` declared plainly beside namespace `ns` / `x`)
// are refused with a 400 `invalid_request` naming both: guessing which one the model meant would
// run the wrong tool.

import { createHash } from 'node:crypto'
import { SluiceError } from '../errors.ts'
import type { ToolDef, ToolKind } from './canonical.ts'

export const WIRE_NAME = /^[a-zA-Z0-9_-]{1,64}$/
const MAX = 64
const HASH_HEX = 8
/** The separator between a namespace and the tool's own name. */
export const NAMESPACE_SEPARATOR = '__'

/** What a wire name stands for. */
export interface ToolIdentity { kind: ToolKind; name: string; namespace?: string }

/** The wire name of a client tool (or of a call to one). Pure and deterministic. */
export function wireNameOf (name: string, namespace?: string): string {
  const raw = namespace === undefined || namespace === '' ? name : namespace + NAMESPACE_SEPARATOR + name
  if (WIRE_NAME.test(raw)) return raw
  const suffix = '_' + createHash('sha256').update(raw, 'utf8').digest('hex').slice(0, HASH_HEX)
  const base = raw.replace(/[^a-zA-Z0-9_-]/g, '_').slice(0, MAX - suffix.length)
  return base + suffix
}

function describe (t: ToolIdentity): string {
  const label = t.namespace === undefined ? `"${t.name}"` : `"${t.name}" in namespace "${t.namespace}"`
  return `${t.kind} tool ${label}`
}

/**
 * Checks that the request's tools have distinct wire names (hosted tools have none) and
 * returns the lookup from wire name back to the client's tool.
 * Throws invalid_request naming both tools on a collision.
 */
export function toolLookup (tools: readonly ToolDef[]): Map<string, ToolIdentity> {
  const byWire = new Map<string, ToolIdentity>()
  for (const t of tools) {
    if (t.kind === 'hosted') continue
    if (!WIRE_NAME.test(t.wireName)) {
      throw new SluiceError('invalid_request', { field: 'tools', tool: t.name }, `tool ${describe(t)} has no valid wire name ("${t.wireName}")`)
    }
    const seen = byWire.get(t.wireName)
    if (seen !== undefined) {
      throw new SluiceError('invalid_request', { field: 'tools', wireName: t.wireName, first: seen.name, second: t.name },
        `tools collide on the function name "${t.wireName}": ${describe(seen)} and ${describe(t)}; rename one of them`)
    }
    byWire.set(t.wireName, t.namespace === undefined ? { kind: t.kind, name: t.name } : { kind: t.kind, name: t.name, namespace: t.namespace })
  }
  return byWire
}

/**
 * Restores a wire name the provider called: the declared tool, or (for a name not declared in
 * this request) a plain function of that name — the provider invented it or it came from history.
 */
export function restoreName (lookup: ReadonlyMap<string, ToolIdentity>, wireName: string): ToolIdentity {
  return lookup.get(wireName) ?? { kind: 'function', name: wireName }
}
