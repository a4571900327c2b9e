// Hosted (server-side) tools across protocols: mapped where the provider runs an equivalent,
// otherwise left out of the provider request and listed in `droppedTools` (never a refusal).
//
//   client tool                                     Responses provider       Anthropic provider                    Chat provider
//   ─────────────────────────────────────────────   ──────────────────────   ───────────────────────────────────   ─────────────
//   Responses web_search / web_search_preview       (same protocol)          web_search_20250305 (allowed_domains) dropped
//   Anthropic web_search_*                          web_search (filters)     (same protocol)                       dropped
//   anything else (file_search, code_interpreter,   dropped                  dropped                               dropped
//   computer, mcp, image_generation, bash_*, text_editor_*, ...)

import type { Protocol, ToolDef } from '../canonical.ts'
import type { Json } from './common.ts'

const RESPONSES_WEB_SEARCH = new Set(['web_search', 'web_search_preview', 'web_search_2025_08_26', 'web_search_preview_2025_03_11'])

function isAnthropicWebSearch (type: string): boolean {
  return type.startsWith('web_search_')
}

function domains (v: unknown): string[] | undefined {
  return Array.isArray(v) && v.every(d => typeof d === 'string') && v.length > 0 ? v as string[] : undefined
}

/** The provider's equivalent of a hosted tool, or null (then the caller lists it as dropped). */
export function mapHosted (tool: ToolDef, client: Protocol, target: Protocol): Json | null {
  const def = tool.hosted ?? {}
  const type = typeof def.type === 'string' ? def.type : ''
  if (client === 'openai-responses' && target === 'anthropic' && RESPONSES_WEB_SEARCH.has(type)) {
    const out: Json = { type: 'web_search_20250305', name: 'web_search' }
    const filters = def.filters as Json | undefined
    const allowed = domains(filters?.allowed_domains)
    if (allowed !== undefined) out.allowed_domains = allowed
    return out
  }
  if (client === 'anthropic' && target === 'openai-responses' && isAnthropicWebSearch(type)) {
    const out: Json = { type: 'web_search' }
    const allowed = domains(def.allowed_domains)
    if (allowed !== undefined) out.filters = { allowed_domains: allowed }
    return out
  }
  return null
}
