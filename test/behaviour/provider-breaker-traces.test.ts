// The circuit breaker on the exchange's trace (a real OTLP/HTTP JSON receiver): the exchange
// whose failure opens the breaker carries the state change, the one refused by the open
// breaker carries "refused by an open circuit breaker" on its provider span, and the
// refusal is provider_unavailable with reason circuit_open. The ledger is idle after.

import t from 'tap'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { chatBody, KEY, startRig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'

interface OtlpSpan {
  name: string
  attributes?: Array<{ key: string; value: Record<string, unknown> }>
  events?: Array<{ name: string; attributes?: Array<{ key: string; value: Record<string, unknown> }> }>
}

t.test('a breaker refusal and its opening are events on the exchanges\' traces', async (t) => {
  const got: Buffer[] = []
  const rx = createServer((req, res) => {
    const parts: Buffer[] = []
    req.on('data', (c: Buffer) => parts.push(c))
    req.on('end', () => { got.push(Buffer.concat(parts)); res.writeHead(200, { 'content-type': 'application/json' }); res.end('{}') })
  })
  await new Promise<void>((resolve) => rx.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => rx.close(() => resolve())))
  const rig = await startRig({
    upstream: { breaker: { failureThreshold: 2, openMs: 60_000 } },
    env: { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(rx.address() as AddressInfo).port}`, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '100' },
  })
  const post = (text: string, run: string) => fetch(`${rig.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-sluice-run-id': run }, body: JSON.stringify(chatBody(text)),
  }).then(async (r) => ({ status: r.status, retryAfter: r.headers.get('retry-after'), json: await r.json() as { code: string; reason?: string } }))
  const sent = rig.requests.length
  t.equal((await post('x\n#sim fault=status-503', 'br-1')).status, 502)
  t.equal((await post('x\n#sim fault=status-503', 'br-2')).status, 502, 'the second failure opens the breaker')
  const refused = await post('x', 'br-3')
  t.equal(refused.status, 502)
  t.equal(refused.json.code, 'provider_unavailable')
  t.equal(refused.json.reason, 'circuit_open')
  t.ok(Number(refused.retryAfter) > 50 && Number(refused.retryAfter) <= 60, `Retry-After is the time left open: ${refused.retryAfter}`)
  t.equal(rig.requests.length - sent, 2, 'the refused exchange never reached the provider')
  t.same(await waitIdle(rig.gw), {}, 'idle')
  await rig.close() // drain flushes the exporter

  const spans: OtlpSpan[] = []
  for (const b of got) {
    const j = JSON.parse(b.toString('utf8')) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: OtlpSpan[] }> }> }
    for (const rs of j.resourceSpans) for (const ss of rs.scopeSpans) spans.push(...ss.spans)
  }
  const runOf = (s: OtlpSpan): unknown => s.attributes?.find((a) => a.key === 'sluice.run_id')?.value.stringValue
  const roots = spans.filter((s) => s.name === 'sluice.exchange')
  t.equal(roots.length, 3, 'three exchanges traced')
  const waits = spans.filter((s) => s.name === 'provider.wait')
  const events = (name: string) => waits.flatMap((s) => (s.events ?? []).filter((e) => e.name === name))
  t.equal(events('refused by an open circuit breaker').length, 1, 'one exchange refused by the open breaker, on its provider span')
  const change = events('circuit breaker state change')
  t.equal(change.length, 1, 'the opening is on the trace of the exchange that opened it')
  t.same(change[0].attributes?.filter((a) => a.key.startsWith('sluice.breaker_')).map((a) => [a.key, a.value.stringValue]), [['sluice.breaker_from', 'closed'], ['sluice.breaker_to', 'open']])
  t.ok(roots.some((s) => runOf(s) === 'br-3'), 'the refused exchange has its trace')
})
