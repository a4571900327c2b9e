// ops/otel/: the collector config and the compose file parse, and what they wire together
// exists (every pipeline component is defined, sluice points at the collector's OTLP/HTTP
// port, images are pinned, mounted files exist, the example sluice config validates once a
// key hash is in). The YAML parser is the `yaml` package when node_modules has it (tap
// brings it); it is not a dependency of sluice, so without it a structural check runs instead.

import t from 'tap'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { sha256Hex, validateConfig } from '../../src/config/load.ts'
import { ROOT } from '../helpers/gateway.ts'

const DIR = join(ROOT, 'ops/otel')
const collectorText = readFileSync(join(DIR, 'otel-collector.yaml'), 'utf8')
const composeText = readFileSync(join(DIR, 'compose.yaml'), 'utf8')

type Yaml = { parse (s: string): unknown }
const yamlModule = 'yaml' // a variable: no compile-time dependency on it
const YAML = await import(yamlModule).then((m: { default?: Yaml } & Yaml) => m.default ?? m, () => null)

t.test('structure that holds without a parser: spaces only, no duplicate top-level keys', async (t) => {
  for (const [name, text] of [['otel-collector.yaml', collectorText], ['compose.yaml', composeText]]) {
    t.notMatch(text, /^\t/m, `${name}: no tab indentation`)
    const top = text.split('\n').filter((l) => /^[a-z_]+:/.test(l)).map((l) => l.split(':')[0])
    t.same(top, [...new Set(top)], `${name}: top-level keys unique (${top.join(', ')})`)
  }
  t.match(collectorText, /^receivers:\n {2}otlp:\n {4}protocols:\n {6}http:\n {8}endpoint: 0\.0\.0\.0:4318$/m, 'OTLP/HTTP receiver on 4318')
  t.match(collectorText, /^ {2}batch:/m, 'a batch processor')
  t.match(composeText, /OTEL_EXPORTER_OTLP_ENDPOINT: http:\/\/otel-collector:4318/)
})

const noYaml = YAML === null ? 'no yaml package in node_modules: the structural check above stands in' : false
t.test('the collector config: OTLP/HTTP on 4318, batch, every pipeline component defined', { skip: noYaml }, async (t) => {
  if (YAML === null) return
  const c = YAML.parse(collectorText) as Record<string, Record<string, any>>
  t.equal(c.receivers.otlp.protocols.http.endpoint, '0.0.0.0:4318')
  t.ok('batch' in c.processors, 'batch processor')
  const traces = c.service.pipelines.traces as { receivers: string[]; processors: string[]; exporters: string[] }
  t.same(traces.receivers, ['otlp'])
  t.ok(traces.processors.includes('batch'))
  t.equal(traces.processors[0], 'memory_limiter', 'memory_limiter first, as the collector recommends')
  for (const kind of ['receivers', 'processors', 'exporters'] as const) {
    for (const id of traces[kind]) t.ok(id in c[kind], `${kind}: ${id} is defined`)
  }
  t.ok(traces.exporters.some((e) => e.startsWith('otlp_grpc/') || e === 'debug'), 'exports to Jaeger over OTLP or to debug')
  t.equal(c.exporters['otlp_grpc/jaeger'].endpoint, 'jaeger:4317', 'Jaeger by its compose service name')
})

t.test('compose: sluice -> collector -> Jaeger, pinned images, loopback ports, files that exist', { skip: noYaml }, async (t) => {
  if (YAML === null) return
  const c = YAML.parse(composeText) as { services: Record<string, any> }
  t.same(Object.keys(c.services).sort(), ['jaeger', 'otel-collector', 'sluice'])
  const s = c.services.sluice
  t.ok(existsSync(join(DIR, s.build.context, s.build.dockerfile)), `build ${s.build.dockerfile} exists`)
  t.equal(s.environment.OTEL_EXPORTER_OTLP_ENDPOINT, 'http://otel-collector:4318')
  t.ok(['http/json', 'http/protobuf'].includes(s.environment.OTEL_EXPORTER_OTLP_PROTOCOL), 'an HTTP OTLP protocol')
  t.ok(s.environment.OTEL_SERVICE_NAME)
  t.ok(s.environment.OTEL_TRACES_SAMPLER)
  t.match(s.stop_grace_period, /^\d+s$/)
  t.ok(Number.parseInt(s.stop_grace_period) * 1000 > 30_000, 'stop grace period above the default drainMs')
  for (const [name, svc] of Object.entries(c.services)) {
    if (svc.image !== undefined && name !== 'sluice') t.match(svc.image, /^[\w./-]+:\d+\.\d+\.\d+$/, `${name}: ${svc.image} pinned to a version`)
    for (const p of svc.ports ?? []) t.match(p, /^127\.0\.0\.1:/, `${name}: ${p} on loopback only`)
    for (const v of svc.volumes ?? []) {
      const src = String(v).split(':')[0]
      if (src === './sluice.json') continue // created by the operator from sluice.example.json
      t.ok(existsSync(join(DIR, src)), `${name}: ${src} exists`)
    }
  }
  const col = c.services['otel-collector']
  const mount = (col.volumes as string[]).find((v) => v.startsWith('./otel-collector.yaml:'))!.split(':')[1]
  t.ok((col.command as string[]).includes(`--config=${mount}`), 'the collector runs the mounted config')
})

t.test('the compose example sluice config validates once the key hash is in, and serves the embedded sim', async (t) => {
  const text = readFileSync(join(DIR, 'sluice.example.json'), 'utf8')
  t.throws(() => validateConfig(JSON.parse(text)), /keys\.0\.sha256/, 'the placeholder alone is refused')
  const c = validateConfig(JSON.parse(text.replace('REPLACE_WITH_SHA256_OF_YOUR_KEY', sha256Hex('k'.repeat(48)))))
  t.equal(c.listen.host, '0.0.0.0')
  t.equal(c.sim.enabled, true)
  t.match(composeText, /sed "s\/REPLACE_WITH_SHA256_OF_YOUR_KEY\//, 'the compose header shows how to fill it')
})
