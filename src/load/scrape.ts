// Reading the admin plane's /metrics: used by load qualification and by the tests.

import { request } from 'undici'

/** Prometheus text -> map of "name{labels}" -> value. */
export async function scrape (adminPort: number): Promise<Map<string, number>> {
  const res = await request(`http://127.0.0.1:${adminPort}/metrics`)
  const text = await res.body.text()
  const out = new Map<string, number>()
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue
    const sp = line.lastIndexOf(' ')
    out.set(line.slice(0, sp), Number(line.slice(sp + 1)))
  }
  return out
}

/** The ledger's application-owned gauges that must return to zero when idle. */
export const IDLE_GAUGES = [
  'sluice_exchanges_active',
  'sluice_exchanges_queued',
  'sluice_parse_permits_in_use',
  'sluice_parse_permits_queued',
  'sluice_parse_envelopes_in_use',
  'sluice_storage_bytes_reserved',
  'sluice_session_pending',
  'sluice_session_active',
  'sluice_session_queued',
  'sluice_stream_readers',
  'sluice_stream_pending_bytes',
  'sluice_stream_inspector_bytes',
  'sluice_tool_argument_bytes',
  'sluice_translation_item_bytes',
  'sluice_translation_output_bytes',
  'sluice_translations_active',
  // The conversation store (issue 13): pins are held only by exchanges in flight.
  'sluice_continuation_pins',
  'sluice_continuation_blob_bytes_pinned',
  'sluice_provider_in_flight',
]

/** What is not at idle (a gauge that is missing is not proof of idle either). */
export function notIdle (m: Map<string, number>): Record<string, number> {
  const bad: Record<string, number> = {}
  for (const k of IDLE_GAUGES) if (m.get(k) !== 0) bad[k] = m.get(k) ?? NaN
  for (const [k, v] of m) {
    if ((k.startsWith('sluice_worker_exchanges_held') || k.startsWith('sluice_worker_bytes_held')) && v !== 0) bad[k] = v
  }
  return bad
}
