// The admin plane's /metrics: every metric DESIGN.md names (the interface list and the
// Observability list) is exported, the text is valid Prometheus exposition (HELP and TYPE
// before samples, one TYPE per family, numbers that parse), histograms are cumulative with
// +Inf = count, and the figures follow the traffic (admissions, refusals by code, histogram
// counts per admitted exchange).

import t from 'tap'
import { chatBody, KEY, startRig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'

const DESIGN_NAMES = [
  // DESIGN.md "Interfaces others rely on"
  'sluice_exchanges_active', 'sluice_exchanges_queued', 'sluice_parse_permits_in_use', 'sluice_storage_bytes_reserved',
  'sluice_admissions_total', 'sluice_releases_total', 'sluice_refusals_total', 'sluice_session_pending', 'sluice_worker_heap_bytes',
  // DESIGN.md "Observability": permit waits, active stream readers, pending stream bytes, inspector bytes, tool argument
  // bytes, continuation bytes; issue 6: latency histograms
  'sluice_permit_waits_total', 'sluice_stream_readers', 'sluice_stream_pending_bytes', 'sluice_stream_inspector_bytes',
  'sluice_tool_argument_bytes', 'sluice_continuation_bytes',
  'sluice_queue_wait_seconds', 'sluice_first_byte_seconds', 'sluice_exchange_seconds',
]

t.test('every named metric, valid exposition, figures that follow the traffic', async (t) => {
  const rig = await startRig({})
  t.teardown(() => rig.close())
  const post = async (headers: Record<string, string>, body: unknown): Promise<number> => {
    const r = await fetch(`${rig.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })
    await r.text()
    return r.status
  }
  t.equal(await post({ authorization: `Bearer ${KEY}` }, chatBody('one')), 200)
  t.equal(await post({ authorization: `Bearer ${KEY}` }, chatBody('two', { stream: true })), 200)
  t.equal(await post({ authorization: 'Bearer nope' }, chatBody('three')), 401)
  t.same(await waitIdle(rig.gw), {})
  const text = await (await fetch(`http://127.0.0.1:${rig.gw.adminPort}/metrics`)).text()

  const types = new Map<string, string>()
  const helped = new Set<string>()
  const problems: string[] = []
  for (const line of text.split('\n')) {
    if (line === '') continue
    let m = /^# HELP (sluice_[a-z0-9_]+) \S/.exec(line)
    if (m) { helped.add(m[1]); continue }
    m = /^# TYPE (sluice_[a-z0-9_]+) (gauge|counter|histogram)$/.exec(line)
    if (m) {
      if (types.has(m[1])) problems.push(`two TYPE lines for ${m[1]}`)
      types.set(m[1], m[2])
      continue
    }
    m = /^(sluice_[a-z0-9_]+)(\{[a-z_]+="[^"\n]*"(,[a-z_]+="[^"\n]*")*\})? (-?[0-9.e+]+)$/.exec(line)
    if (!m) { problems.push(`not a sample line: ${line}`); continue }
    const family = m[1].replace(/_(bucket|sum|count)$/, (s) => (types.get(m![1].slice(0, -s.length)) === 'histogram' ? '' : s))
    if (!types.has(family)) problems.push(`sample before its TYPE: ${line}`)
    if (!helped.has(family)) problems.push(`sample without HELP: ${line}`)
    if (!Number.isFinite(Number(m[4]))) problems.push(`not a number: ${line}`)
  }
  t.same(problems, [], 'valid Prometheus text exposition')
  for (const name of DESIGN_NAMES) t.ok(types.has(name), `exported: ${name}`)

  const m = await rig.gw.metrics()
  t.equal(m.get('sluice_admissions_total'), 2, 'two admitted')
  t.equal(m.get('sluice_refusals_total{code="unauthorized"}'), 1, 'the refusal, by code')
  for (const h of ['sluice_queue_wait_seconds', 'sluice_first_byte_seconds', 'sluice_exchange_seconds']) {
    t.equal(types.get(h), 'histogram')
    const buckets = [...m].filter(([k]) => k.startsWith(`${h}_bucket{`)).map(([, v]) => v)
    t.ok(buckets.length > 5, `${h}: buckets`)
    t.ok(buckets.every((v, i) => i === 0 || v >= buckets[i - 1]), `${h}: cumulative`)
    t.equal(m.get(`${h}_bucket{le="+Inf"}`), m.get(`${h}_count`), `${h}: +Inf = count`)
    t.equal(m.get(`${h}_count`), 2, `${h}: one observation per admitted exchange`)
    t.ok(m.get(`${h}_sum`)! >= 0, `${h}: sum`)
  }
  t.ok(m.get('sluice_first_byte_seconds_sum')! > 0, 'the provider wait is measured')
})
