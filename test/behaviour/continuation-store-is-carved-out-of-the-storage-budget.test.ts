// The conversation store's buffer is reserved out of limits.storageBytes at start: the ledger's
// budget is what is left, and /metrics shows the store's figures (idle: nothing pinned).

import t from 'tap'
import { startGateway } from '../helpers/gateway.ts'

const MiB = 1024 * 1024

const metric = (text: string, name: string): number | null => {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text)
  return m ? Number(m[1]) : null
}

t.test('the store takes its share of storageBytes; the figures are on /metrics', async (t) => {
  const gw = await startGateway({ workers: 1, limits: { storageBytes: 32 * MiB } })
  t.teardown(async () => { await gw.stop() })
  const text = await (await fetch(`http://127.0.0.1:${gw.adminPort}/metrics`)).text()
  t.equal(metric(text, 'sluice_continuation_capacity_bytes'), 8 * MiB, 'a quarter of storageBytes by default')
  t.equal(metric(text, 'sluice_storage_bytes_limit'), 24 * MiB, 'the ledger gets the rest')
  for (const name of ['sluice_continuation_bytes', 'sluice_continuation_entries', 'sluice_continuation_tombstones', 'sluice_continuation_blob_bytes', 'sluice_continuation_blob_bytes_pinned', 'sluice_continuation_pins']) {
    t.equal(metric(text, name), 0, name)
  }
  t.match(text, /^sluice_continuation_evictions_total\{reason="entry_too_large"\} 0$/m)
})

t.test('continuationBytes 0 turns the store off and leaves the whole budget to the ledger', async (t) => {
  const gw = await startGateway({ workers: 1, limits: { storageBytes: 32 * MiB, continuationBytes: 0 } })
  t.teardown(async () => { await gw.stop() })
  const text = await (await fetch(`http://127.0.0.1:${gw.adminPort}/metrics`)).text()
  t.equal(metric(text, 'sluice_continuation_capacity_bytes'), 0)
  t.equal(metric(text, 'sluice_storage_bytes_limit'), 32 * MiB)
})
