// GET /v1/models in the caller's protocol: the models a key may use (Router.listModels), as the
// OpenAI list or, when the request sends `anthropic-version` (every Anthropic SDK and Claude
// Code do), as Anthropic's list. Pure: the route (worker/routes.ts) authenticates, lists and
// sends what this returns.
//
//   openai     { object: 'list', data: [{ id, object: 'model', created, owned_by }] }
//   anthropic  { data: [{ type: 'model', id, display_name, created_at }], has_more: false,
//                first_id, last_id }   (first_id / last_id null for an empty list)
//
// The gateway knows no release dates: `created` is 0 and `created_at` its RFC 3339 form
// (1970-01-01T00:00:00Z) unless the caller passes one. `display_name` is the id (the config
// has no other name). The whole list is one page: has_more is always false.

export interface ModelEntry {
  id: string
  /** The provider's name from the config ('sluice' when no provider matches). */
  ownedBy: string
  /** Seconds since the epoch; 0 when unknown. */
  created?: number
}

export type ModelListStyle = 'openai' | 'anthropic'

/** 'anthropic' when the request carries an `anthropic-version` header, else 'openai'. */
export function modelListStyle (headers: Readonly<Record<string, string | string[] | undefined>>): ModelListStyle {
  const v = headers['anthropic-version']
  return v === undefined || (Array.isArray(v) && v.length === 0) ? 'openai' : 'anthropic'
}

export function renderModelList (models: readonly ModelEntry[], style: ModelListStyle): Record<string, unknown> {
  if (style === 'openai') {
    return { object: 'list', data: models.map(m => ({ id: m.id, object: 'model', created: m.created ?? 0, owned_by: m.ownedBy })) }
  }
  const data = models.map(m => ({ type: 'model', id: m.id, display_name: m.id, created_at: new Date((m.created ?? 0) * 1000).toISOString().replace('.000Z', 'Z') }))
  return { data, has_more: false, first_id: data.length > 0 ? data[0].id : null, last_id: data.length > 0 ? data[data.length - 1].id : null }
}
