// Run traces over OTLP/HTTP, received by a real OTLP/HTTP receiver in this test (a node:http
// server decoding what the exporter sends): one trace per exchange with the span tree
// admission / parse / provider.wait / relay under `sluice.exchange`, the run identity, an
// incoming traceparent continued, the "waiting for model capacity" event on a queued
// exchange's admission span, and no secret or content anywhere in what was exported. Also:
// http/protobuf arrives as protobuf, and a bad OTEL_* variable stops the start (exit 2).

import t from 'tap'
import { spawnSync } from 'node:child_process'
import { chatBody, KEY, PROVIDER_KEY, SIGNING_KEY, startRig } from '../helpers/exchange.ts'
import { BIN, NODE, writeConfig } from '../helpers/gateway.ts'
import { attr, receiver, spansOf, type OtlpSpan } from '../helpers/otlp.ts'

const PROMPT = 'the-prompt-text-must-never-be-exported'

t.test('OTLP/HTTP JSON: one trace per exchange, the span tree, the queue event, nothing secret', async (t) => {
  const rx = await receiver()
  t.teardown(() => new Promise<void>((resolve) => rx.server.close(() => resolve())))
  const rig = await startRig({
    limits: { maxActiveExchanges: 1 },
    env: { OTEL_EXPORTER_OTLP_ENDPOINT: rx.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_SERVICE_NAME: 'sluice-under-test', OTEL_BSP_SCHEDULE_DELAY: '100', SLUICE_INSTANCE_ID: 'trace-instance-7' },
  })
  const post = (body: unknown, headers: Record<string, string>) => fetch(`${rig.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...headers }, body: JSON.stringify(body),
  }).then(async (r) => ({ status: r.status, id: r.headers.get('x-sluice-exchange-id'), text: await r.text() }))
  const parentTrace = '4bf92f3577b34da6a3ce929d0e0e4736'
  const parentSpan = '00f067aa0ba902b7'
  const first = post(chatBody(`${PROMPT}\n#sim ttft=300 tokens=5`, { stream: true }), { 'x-sluice-run-id': 'run-42' })
  await new Promise((r) => setTimeout(r, 100))
  const second = post(chatBody(`${PROMPT} two`), { traceparent: `00-${parentTrace}-${parentSpan}-01` })
  const refused = post(chatBody('x'), { authorization: 'Bearer sk-wrong-key-should-not-appear' })
  const [a, b, c] = await Promise.all([first, second, refused])
  t.equal(a.status, 200)
  t.equal(b.status, 200)
  t.equal(c.status, 401)
  const completion = JSON.parse(b.text) as { choices: Array<{ message: { content: string } }> }
  await rig.close() // drain flushes the exporter
  t.ok(rx.got.length > 0, 'the exporter sent something')
  t.ok(rx.got.every((r) => r.path === '/v1/traces' && r.contentType.startsWith('application/json')), 'OTLP/HTTP JSON to /v1/traces')
  const all = Buffer.concat(rx.got.map((r) => r.body)).toString('utf8')
  for (const secret of [KEY, PROVIDER_KEY, SIGNING_KEY, 'sk-wrong-key-should-not-appear', PROMPT, completion.choices[0].message.content]) {
    t.notOk(all.includes(secret), `not exported: ${secret.slice(0, 12)}…`)
  }
  t.ok(all.includes('sluice-under-test'), 'OTEL_SERVICE_NAME is the service name')
  const resources = rx.got.flatMap((r) => (JSON.parse(r.body.toString('utf8')) as { resourceSpans: Array<{ resource: { attributes?: OtlpSpan['attributes'] } }> }).resourceSpans.map((rs) => rs.resource))
  t.ok(resources.length > 0 && resources.every((r) => attr(r, 'service.instance.id') === 'trace-instance-7'), 'every trace names its instance (service.instance.id)')

  const spans = spansOf(rx.got)
  const roots = spans.filter((s) => s.name === 'sluice.exchange')
  t.equal(roots.length, 3, `one root span per exchange: ${JSON.stringify(roots.map((r) => [attr(r, 'sluice.exchange_id'), attr(r, 'sluice.code')]))} ${JSON.stringify([a.id, b.id, c.id])}`)
  const byExchange = (id: string | null) => roots.find((r) => attr(r, 'sluice.exchange_id') === id)!
  const ra = byExchange(a.id)
  const rb = byExchange(b.id)
  t.ok(ra && rb, 'roots found by exchange id')
  t.equal(attr(ra, 'sluice.run_id'), 'run-42', 'the run identity')
  t.equal(attr(ra, 'sluice.code'), 'ok')
  t.equal(attr(ra, 'sluice.model'), 'gpt-4o-mini')
  t.equal(attr(ra, 'sluice.provider'), 'sim-chat')
  t.ok(Number(attr(ra, 'sluice.frames')) > 0, 'frame count')
  t.ok(Number(attr(ra, 'sluice.bytes_out')) > 0, 'byte count')
  t.same(ra.events?.map((e) => e.name), ['exchange permit admitted', 'exchange released'], 'admission and actual release, recorded on the trace')
  t.equal(rb.traceId, parentTrace, 'an incoming traceparent is continued')
  t.equal(rb.parentSpanId, parentSpan)
  for (const root of [ra, rb]) {
    const kids = spans.filter((s) => s.traceId === root.traceId && s.parentSpanId === root.spanId).map((s) => s.name).sort()
    t.same(kids, ['admission', 'parse', 'provider.wait', 'relay'], `span tree of ${attr(root, 'sluice.exchange_id')}`)
  }
  const admissionB = spans.find((s) => s.traceId === rb.traceId && s.name === 'admission')!
  t.same(admissionB.events?.map((e) => e.name), ['waiting for model capacity'], 'the queued exchange says so')
  t.equal(attr(admissionB, 'sluice.queued'), true)
  t.ok(Number(attr(admissionB, 'sluice.wait_ms')) > 50, 'with its wait time')
  const admissionA = spans.find((s) => s.traceId === ra.traceId && s.name === 'admission')!
  t.same(admissionA.events ?? [], [], 'the first did not wait')
  const rc = roots.find((r) => attr(r, 'sluice.code') === 'unauthorized')
  t.ok(rc, 'a refusal is traced too, with its code')
})

t.test('OTLP/HTTP protobuf (the default protocol) arrives as protobuf', async (t) => {
  const rx = await receiver()
  t.teardown(() => new Promise<void>((resolve) => rx.server.close(() => resolve())))
  const rig = await startRig({ env: { OTEL_EXPORTER_OTLP_ENDPOINT: rx.url, OTEL_BSP_SCHEDULE_DELAY: '100' } })
  const r = await fetch(`${rig.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(chatBody(PROMPT)) })
  const id = r.headers.get('x-sluice-exchange-id')!
  await r.text()
  await rig.close()
  t.ok(rx.got.length > 0)
  t.ok(rx.got.every((x) => x.contentType === 'application/x-protobuf'), 'content type')
  const all = Buffer.concat(rx.got.map((x) => x.body))
  t.ok(all.includes(Buffer.from(id)), 'the exchange id is in the exported spans')
  t.ok(all.includes(Buffer.from('sluice.exchange')), 'the root span name')
  for (const secret of [KEY, PROVIDER_KEY, PROMPT]) t.notOk(all.includes(Buffer.from(secret)), 'no secret, no content')
})

t.test('a bad OTEL_* variable stops the start with the variable named', async (t) => {
  const file = writeConfig({ listen: { port: 0, adminPort: 0 } })
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, /OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" is not supported/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_TRACES_SAMPLER: 'sometimes' }, /OTEL_TRACES_SAMPLER: "sometimes" is not a sampler/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '2' }, /OTEL_TRACES_SAMPLER_ARG/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'not a url' }, /OTEL_EXPORTER_OTLP_ENDPOINT: "not a url" is not an http\(s\) URL/],
  ]
  for (const [env, message] of cases) {
    const r = spawnSync(NODE, [BIN, 'serve', '--config', file], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 20_000 })
    t.equal(r.status, 2, `exit 2 for ${JSON.stringify(env)}`)
    t.match(r.stderr, message)
  }
})
