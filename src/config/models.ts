// Model-name patterns, shared by config validation and routing. Kept free of the schema
// library so the HTTP workers do not load it.

/** `gpt-5*` matches `gpt-5.5`; `*` matches everything; otherwise exact. */
export function matchesAny (model: string, patterns: readonly string[]): boolean {
  for (const p of patterns) {
    if (p.endsWith('*') ? model.startsWith(p.slice(0, -1)) : model === p) return true
  }
  return false
}
