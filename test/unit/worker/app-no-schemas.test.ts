// An HTTP worker's fastify is built without schema compilers (worker/app.ts NO_SCHEMAS): no
// route of sluice has a fastify schema, and fastify's defaults would build ajv and
// fast-json-stringify at creation for nothing. This pins both halves: the compilers are not
// loaded, and a route that is given a schema fails at registration, naming itself, instead of
// being served unvalidated.

import t from 'tap'
import { createRequire } from 'node:module'
import Fastify from 'fastify'
import { NO_SCHEMAS } from '../../../worker/app.ts'

const require = createRequire(import.meta.url)
const loaded = (file: string): boolean => Object.keys(require.cache).some((k) => k.endsWith(`/node_modules/${file}`))

t.test('fastify with NO_SCHEMAS serves schema-less routes and loads neither ajv nor fast-json-stringify', async (t) => {
  const f = Fastify({ schemaController: NO_SCHEMAS })
  f.get('/x', async () => ({ ok: true }))
  f.post('/y', async (req) => ({ got: req.body }))
  await f.ready()
  t.teardown(() => f.close())
  const a = await f.inject('/x')
  t.equal(a.statusCode, 200)
  t.same(a.json(), { ok: true })
  const b = await f.inject({ method: 'POST', url: '/y', payload: { n: 1 } })
  t.same(b.json(), { got: { n: 1 } }, "a JSON body still parses (fastify's content-type parser, no schema)")
  t.notOk(loaded('ajv/dist/ajv.js'), 'ajv is not loaded')
  // (its serializer runtime, lib/serializer.js, is fastify's precompiled error serializer's)
  t.notOk(loaded('fast-json-stringify/index.js'), 'fast-json-stringify\'s compiler is not loaded')
})

t.test('the check has teeth: fastify with its default compilers loads ajv', async (t) => {
  const f = Fastify()
  f.get('/x', async () => ({ ok: true }))
  await f.ready()
  t.teardown(() => f.close())
  t.ok(loaded('ajv/dist/ajv.js') && loaded('fast-json-stringify/index.js'), 'the default schema controller loads ajv and fast-json-stringify')
})

t.test('a route given a schema fails at registration, naming the route', async (t) => {
  for (const schema of [{ body: { type: 'object' } }, { response: { 200: { type: 'object' } } }]) {
    const f = Fastify({ schemaController: NO_SCHEMAS })
    f.post('/with-schema', { schema }, async () => ({}))
    await t.rejects(async () => { await f.ready() }, /POST \/with-schema: sluice's routes carry no fastify schema/, Object.keys(schema)[0])
    await f.close()
  }
})
