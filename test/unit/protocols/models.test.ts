// GET /v1/models rendering: the OpenAI list by default, the Anthropic list when the request
// sends anthropic-version, both held to the official SDKs' expectations of the shape.
import t from 'tap'
import { modelListStyle, renderModelList } from '../../../src/protocols/models.ts'

const models = [
  { id: 'gpt-5', ownedBy: 'openai-main' },
  { id: 'claude-sonnet-4-5', ownedBy: 'anthropic-main', created: 1_759_104_000 },
  { id: 'fast', ownedBy: 'sluice' },
]

t.test('the style follows anthropic-version', async t => {
  t.equal(modelListStyle({}), 'openai')
  t.equal(modelListStyle({ authorization: 'Bearer x' }), 'openai')
  t.equal(modelListStyle({ 'anthropic-version': '2023-06-01' }), 'anthropic')
  t.equal(modelListStyle({ 'anthropic-version': ['2023-06-01'] }), 'anthropic')
  t.equal(modelListStyle({ 'anthropic-version': [] }), 'openai')
})

t.test('OpenAI list shape', async t => {
  t.same(renderModelList(models, 'openai'), {
    object: 'list',
    data: [
      { id: 'gpt-5', object: 'model', created: 0, owned_by: 'openai-main' },
      { id: 'claude-sonnet-4-5', object: 'model', created: 1_759_104_000, owned_by: 'anthropic-main' },
      { id: 'fast', object: 'model', created: 0, owned_by: 'sluice' },
    ],
  })
  t.same(renderModelList([], 'openai'), { object: 'list', data: [] })
})

t.test('Anthropic list shape', async t => {
  const out = renderModelList(models, 'anthropic') as { data: Array<Record<string, unknown>>; has_more: boolean; first_id: string | null; last_id: string | null }
  t.same(out, {
    data: [
      { type: 'model', id: 'gpt-5', display_name: 'gpt-5', created_at: '1970-01-01T00:00:00Z' },
      { type: 'model', id: 'claude-sonnet-4-5', display_name: 'claude-sonnet-4-5', created_at: '2025-09-29T00:00:00Z' },
      { type: 'model', id: 'fast', display_name: 'fast', created_at: '1970-01-01T00:00:00Z' },
    ],
    has_more: false,
    first_id: 'gpt-5',
    last_id: 'fast',
  })
  for (const m of out.data) t.ok(!Number.isNaN(Date.parse(m.created_at as string)), 'created_at is an RFC 3339 date')
  t.same(renderModelList([], 'anthropic'), { data: [], has_more: false, first_id: null, last_id: null })
})
