// worker/retry.ts: which failures are transient, the full-jitter bounds, the abortable sleep.

import t from 'tap'
import { retryDelayMs, sleep, transientReason, transientStatus } from '../../worker/retry.ts'
import { RETRY_CONNECT, RETRY_RESET, RETRY_STATUS, RETRY_TIMEOUT } from '../../src/ledger/layout.ts'
import { SluiceError } from '../../src/errors.ts'

const cfg = { attempts: 2, baseMs: 100, maxMs: 250, totalMs: 1000, sameAccount: false }

t.test('transient transport failures and statuses', async (t) => {
  t.equal(transientReason({ code: 'ECONNREFUSED' }), RETRY_CONNECT)
  t.equal(transientReason({ code: 'UND_ERR_CONNECT_TIMEOUT' }), RETRY_CONNECT)
  t.equal(transientReason({ code: 'UND_ERR_SOCKET' }), RETRY_RESET)
  t.equal(transientReason({ code: 'ECONNRESET' }), RETRY_RESET)
  t.equal(transientReason({ code: 'UND_ERR_HEADERS_TIMEOUT' }), RETRY_TIMEOUT)
  t.equal(transientReason({ code: 'UND_ERR_ABORTED' }), null, 'an abort is never transient')
  t.equal(transientReason(new SluiceError('client_closed')), null, 'nor a caller\'s failure')
  t.equal(transientReason(null), null)
  t.same([502, 503, 504].map(transientStatus), [RETRY_STATUS, RETRY_STATUS, RETRY_STATUS])
  t.same([400, 401, 429, 500, 529].map(transientStatus), [null, null, null, null, null], 'a 429 is handled by cooldown, a 500 is the provider\'s answer')
})

t.test('full jitter: 0 .. min(maxMs, baseMs x 2^n), inclusive', async (t) => {
  t.equal(retryDelayMs(0, cfg, () => 0), 0)
  t.equal(retryDelayMs(0, cfg, () => 0.999999), 100)
  t.equal(retryDelayMs(1, cfg, () => 0.999999), 200)
  t.equal(retryDelayMs(2, cfg, () => 0.999999), 250, 'capped at maxMs')
  t.equal(retryDelayMs(1, cfg, () => 0.5), 100)
  t.equal(retryDelayMs(3, { ...cfg, baseMs: 0, maxMs: 0 }, () => 0.7), 0)
})

t.test('sleep ends early with the abort\'s cause', async (t) => {
  const ac = new AbortController()
  const p = sleep(60_000, ac.signal)
  ac.abort(new SluiceError('exchange_cancelled'))
  await t.rejects(p, { code: 'exchange_cancelled' })
  await t.rejects(sleep(10, AbortSignal.abort()), { code: 'client_closed' }, 'an aborted signal rejects at once')
  await sleep(0, new AbortController().signal)
})
