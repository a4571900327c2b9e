// The recall-burst isolation check (src/load/recall-wire.ts) against the real sim: a session's
// own stream, whole or cut, passes; another session's stream, or its own stream checked against
// another request's record, is caught (ids, text, the marker in the arguments). Also the
// deterministic draw, the RSS slope fit, the retry checks and the comparison with a baseline.

import t from 'tap'
import { request } from 'undici'
import { startSim } from '../../../src/sim/index.ts'
import type { SimProtocol } from '../../../src/sim/directive.ts'
import { buildBody, checkStream, CLIENT_PATH, CLIENT_WIRE, parseStream, saidFor, TOOLS, type ClientProto, type Said, type ToolAsk } from '../../../src/load/recall-wire.ts'
import { draw } from '../../../src/load/recall.ts'
import { compareRecall, retryReasons, slope, slopeError, type RecallReceipt } from '../../../src/load/recall-receipt.ts'

const sim = await startSim({ port: 0 })
t.teardown(() => sim.close())

async function round (client: ClientProto, marker: string, n: number): Promise<{ bytes: Buffer; said: Said; asks: ToolAsk[] }> {
  const tools = TOOLS[client]
  const asks = Array.from({ length: n }, (_, k) => tools[k % tools.length])
  const user = `Round 1 (${marker}).\n#sim tokens=3 tools=${n} call=${asks.map((a) => a.call).join(',')} parallel stagger args=${encodeURIComponent(JSON.stringify({ input: marker }))}`
  const body = Buffer.from(JSON.stringify(buildBody(client, 'm', [], user, null)))
  const res = await request(sim.url + CLIENT_PATH[client], { method: 'POST', body, headers: { 'content-type': 'application/json' } })
  const bytes = Buffer.from(await res.body.arrayBuffer())
  t.equal(res.statusCode, 200)
  return { bytes, said: saidFor(CLIENT_WIRE[client] as SimProtocol, body, JSON.parse(body.toString()) as Record<string, unknown>), asks }
}

for (const client of ['chat', 'responses', 'messages'] as const) {
  t.test(`${client}: a session's own stream passes, another session's is caught`, async (t) => {
    const a = await round(client, 'rb-w01-s001-r00', 4)
    const b = await round(client, 'rb-w01-s002-r00', 4)
    const got = parseStream(client, a.bytes)
    t.equal(got.calls.length, 4, 'four calls read')
    t.ok(got.terminal, 'terminal read')
    t.ok(got.calls.every((c) => c.complete && c.id !== ''), 'every call whole, with its id')
    if (client === 'responses') t.same(got.calls.map((c) => c.kind), ['function', 'function', 'custom', 'tool_search'], 'function, namespace, custom and tool_search calls')
    if (client === 'responses') t.equal(got.calls[1].namespace, 'mcp_docs')
    t.same(checkStream(got, a.said, a.asks, 'rb-w01-s001-r00', true), [], 'own stream: nothing wrong')

    const other = parseStream(client, b.bytes)
    const bad = checkStream(other, a.said, a.asks, 'rb-w01-s001-r00', true)
    t.ok(bad.some((s) => /response id/.test(s)), 'another stream\'s response id is caught')
    t.ok(bad.some((s) => /call 0 id/.test(s)), 'another stream\'s call ids are caught')
    t.ok(bad.some((s) => /marker/.test(s)), 'another session\'s arguments are caught')
    t.ok(bad.some((s) => /^text/.test(s)), 'another stream\'s text is caught')

    // a cut stream (a client cancel) is checked as far as it went
    const cut = parseStream(client, a.bytes.subarray(0, Math.floor(a.bytes.length / 2)))
    t.notOk(cut.terminal, 'a cut stream has no terminal')
    t.same(checkStream(cut, a.said, a.asks, 'rb-w01-s001-r00', false), [], 'own cut stream: nothing wrong')
    t.ok(checkStream(parseStream(client, b.bytes.subarray(0, Math.floor(b.bytes.length / 2))), a.said, a.asks, 'rb-w01-s001-r00', false).length > 0, 'another cut stream is caught')
  })
}

t.test('the recall body carries the calls and their outputs last, so the sim answers text', async (t) => {
  for (const client of ['chat', 'responses', 'messages'] as const) {
    const a = await round(client, 'rb-w01-s003-r00', 3)
    const calls = parseStream(client, a.bytes).calls
    const outputs = calls.map((c) => `out ${c.id}`)
    const body = Buffer.from(JSON.stringify(buildBody(client, 'm', [], 'Round 1\n#sim tools=3', { calls, outputs })))
    const res = await request(sim.url + CLIENT_PATH[client], { method: 'POST', body, headers: { 'content-type': 'application/json' } })
    t.equal(res.statusCode, 200, client)
    const got = parseStream(client, Buffer.from(await res.body.arrayBuffer()))
    t.equal(got.calls.length, 0, `${client}: no calls in the answer to tool results`)
    t.ok(got.text.length > 0 && got.terminal, `${client}: text and a terminal`)
    t.same(checkStream(got, saidFor(CLIENT_WIRE[client] as SimProtocol, body, JSON.parse(body.toString()) as Record<string, unknown>), [], 'x', true), [])
  }
})

t.test('draws are deterministic and spread', async (t) => {
  t.equal(draw(3, 1, 2, 3), draw(3, 1, 2, 3))
  t.not(draw(3, 1, 2, 3), draw(3, 1, 2, 4))
  const xs = Array.from({ length: 1000 }, (_, i) => draw(3, i, 7))
  t.ok(xs.every((x) => x >= 0 && x < 1))
  const low = xs.filter((x) => x < 0.25).length
  t.ok(low > 180 && low < 320, `${low} of 1000 below 0.25`)
})

t.test('the RSS slope is the least-squares fit per wave', async (t) => {
  t.equal(slope([100, 100, 100]), 0)
  t.equal(slope([100, 102, 104, 106]), 2)
  t.equal(slope([100, 99]), -1)
  t.ok(Number.isNaN(slope([100])))
})

t.test('the slope\'s standard error comes from the scatter about the fit', async (t) => {
  t.equal(slopeError([100, 102, 104, 106]), 0, 'on a line: no error')
  t.ok(slopeError([211.4, 213.9, 230.6, 220, 220.2]) > 2, 'one outlier among five: an error of about its size over sqrt(10)')
  t.ok(Number.isNaN(slopeError([1, 2])))
})

t.test('a recall-burst receipt is compared with its baseline: settings, hardware, or a regression', async (t) => {
  const P = { n: 10, p50: 100, p90: 150, p99: 200, max: 250 }
  const base = {
    test: 'recall-burst', settings: { a: 1 }, settingsHash: 'h1',
    hardware: { cpuModel: 'cpu', cores: 2, memoryMb: 1000, quotaMethod: 'cgroup-v1', quotaValue: 'q' },
    latencyMs: { openingFirstByte: P, recallFirstByte: P, recallTotal: P, refusal: P },
    rss: { peakMb: 200 }, passed: true,
  } as unknown as RecallReceipt
  const tol = { latencyFactor: 1.5, latencySlackMs: 50, rssFactor: 1.25 }
  t.equal(compareRecall(base, base, tol).attribution, 'neither (within tolerance)')
  const slow = { ...base, latencyMs: { ...base.latencyMs, recallTotal: { ...P, p99: 400 } } } as RecallReceipt
  const c = compareRecall(base, slow, tol)
  t.equal(c.attribution, 'regression')
  t.ok(c.regression)
  t.match(c.worse[0], /recallTotal p99 200 -> 400/)
  t.equal(compareRecall(base, { ...slow, settingsHash: 'h2', settings: { a: 2 } } as RecallReceipt, tol).attribution, 'changed settings')
  t.equal(compareRecall(base, { ...slow, hardware: { ...base.hardware, cores: 4 } } as RecallReceipt, tol).attribution, 'changed hardware')
  t.equal(compareRecall(base, { ...base, passed: false } as RecallReceipt, tol).attribution, 'regression', 'pass -> fail is a regression')
  t.match(compareRecall(base, { ...base, rss: { peakMb: 300 } } as RecallReceipt, tol).worse.join(), /peak RSS 200 -> 300/)
})

t.test('the retry checks: after-commit read from the gateway, retries by reason = the faults fired, = the repeats the provider saw', async (t) => {
  const ok = { byReason: { connect: 0, reset: 3, timeout: 0, status: 2, rate_limited: 1 }, afterCommit: 0, faultsHit: { 'reset-before-first-byte': 3, 'status-503': 2, 'status-429': 1 }, upstreamRepeats: 6 }
  t.same(retryReasons(ok), [], 'every fault fired was retried once, and nothing else')
  t.match(retryReasons({ ...ok, afterCommit: null }), [/sluice_retries_after_commit_total is missing/], 'a missing metric is a failure, never taken as 0')
  t.match(retryReasons({ ...ok, afterCommit: 1 }), [/retries after commit: sluice_retries_after_commit_total = 1/])
  t.match(retryReasons({ ...ok, byReason: {}, upstreamRepeats: 0 }).join('\n'), /sluice_retries_total\{reason\} is missing/)
  t.match(retryReasons({ ...ok, upstreamRepeats: 7 }), [/counted 6 retries but the provider saw 7 repeated requests/])
  const r = retryReasons({ ...ok, byReason: { ...ok.byReason, reset: 2, timeout: 1 } })
  t.match(r.join('\n'), /retries for reset: the gateway counted 2, the faults fired call for 3/)
  t.match(r.join('\n'), /retries for timeout: the gateway counted 1, the faults fired call for 0/)
  t.match(retryReasons({ ...ok, faultsHit: { ...ok.faultsHit, 'status-429': 2 }, upstreamRepeats: 6 }).join('\n'), /rate_limited: the gateway counted 1, the faults fired call for 2/, 'a 429 fired and not retried')
})
