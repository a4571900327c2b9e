// Provider answers that are not what the protocol promises, from a real node:http upstream
// in this test (configured as the providers' baseUrl):
//   - a streaming request answered with something that is not text/event-stream (a 200
//     text/html page, a JSON body) is a provider protocol failure: the signed refusal before
//     any byte, never relayed as evidence;
//   - a non-streaming answer that is not JSON is the same;
//   - a non-streaming answer of ~2.5 million `{}` values in 7.5 MB (under maxOutputBytes)
//     does not end the HTTP worker (it is never JSON.parse'd in the worker's 128 MiB heap:
//     only the heap-limited parser pool reads it, within the JSON caps), and the caller gets
//     an honest refusal;
//   - an answer without a content-length that grows past maxOutputBytes is output_too_large.
// The ledger is back at idle after each.

import t, { type Test } from 'tap'
import type { Server } from 'node:http'
import { verifyRecord } from '../../src/sse/sign.ts'
import { SIGNING_KEY, chatBody, messagesBody, responsesBody, exchangeLogLine, postToRig, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { startUpstream } from '../helpers/upstream.ts'

const key = Buffer.from(SIGNING_KEY, 'utf8')
const MANY = 2_500_000
const FEW = 200_000

/** What the upstream answers, chosen by the requested model's last dash-separated word. */
function answer (model: string): { status: number; headers: Record<string, string>; body: Buffer | (() => AsyncGenerator<Buffer>) } {
  const mode = model.slice(model.lastIndexOf('-') + 1)
  const json = (text: string) => ({ status: 200, headers: { 'content-type': 'application/json' }, body: Buffer.from(text) })
  switch (mode) {
    case 'html':
      return { status: 200, headers: { 'content-type': 'text/html; charset=utf-8' }, body: Buffer.from('<!doctype html><html><body>Sign in to continue</body></html>') }
    case 'json':
      return json('{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}')
    case 'many': // ~2.5 M values in 7.5 MB
      return json('{"id":"chatcmpl-1","object":"chat.completion","choices":[],"junk":[' + new Array(MANY).fill('{}').join(',') + ']}')
    case 'few': // 200 k values: within the JSON caps
      return json('{"id":"chatcmpl-1","object":"chat.completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8},"junk":[' + new Array(FEW).fill('{}').join(',') + ']}')
    case 'endless': // chunked, no content-length, 9 MiB: past maxOutputBytes (8 MiB)
      return {
        status: 200,
        headers: { 'content-type': 'application/json' },
        body: async function * () {
          yield Buffer.from('{"id":"x","pad":"')
          for (let i = 0; i < 9 * 16; i++) yield Buffer.alloc(64 * 1024, 0x61)
          yield Buffer.from('"}')
        },
      }
    default:
      return { status: 500, headers: { 'content-type': 'text/plain' }, body: Buffer.from(`unknown mode ${mode}`) }
  }
}

let upstream: Server
let rig: Rig
t.before(async () => {
  const up = await startUpstream((_req, body, res) => {
    void (async () => {
      const model = String((JSON.parse(body.toString()) as { model?: unknown }).model)
      const a = answer(model)
      if (Buffer.isBuffer(a.body)) {
        res.writeHead(a.status, { ...a.headers, 'content-length': String(a.body.length) })
        res.end(a.body)
        return
      }
      res.writeHead(a.status, a.headers)
      for await (const chunk of a.body()) {
        if (res.destroyed) return
        if (!res.write(chunk)) await new Promise((r) => { res.once('drain', r); res.once('close', r) })
      }
      res.end()
    })().catch(() => res.destroy())
  })
  upstream = up.server
  const url = up.url
  rig = await startRig({
    workers: 1,
    providers: () => [
      { name: 'odd-chat', protocol: 'openai-chat', baseUrl: url, apiKeyEnv: 'SIM_PROVIDER_KEY', models: ['odd-chat-*'] },
      { name: 'odd-responses', protocol: 'openai-responses', baseUrl: url, apiKeyEnv: 'SIM_PROVIDER_KEY', models: ['odd-responses-*'] },
      { name: 'odd-messages', protocol: 'anthropic', baseUrl: url, apiKeyEnv: 'SIM_PROVIDER_KEY', models: ['odd-messages-*'] },
    ],
  })
})
t.teardown(async () => {
  await rig.close()
  upstream.closeAllConnections()
  await new Promise((resolve) => upstream.close(resolve))
})

const ROUTES = [
  ['/v1/chat/completions', 'odd-chat', (model: string, stream: boolean) => chatBody('hi', { model, stream })],
  ['/v1/responses', 'odd-responses', (model: string, stream: boolean) => responsesBody('hi', { model, stream })],
  ['/v1/messages', 'odd-messages', (model: string, stream: boolean) => messagesBody('hi', { model, stream })],
] as const

const post = (path: string, body: unknown) => postToRig(rig, path, body)

const logLine = (exchangeId: string): Promise<Record<string, unknown>> => exchangeLogLine(rig, exchangeId)

function workerExits (): string[] {
  return rig.gw.logs.filter((l) => l.includes('"worker exited"'))
}

interface Refusal { code: string; exchangeId: string; record?: Parameters<typeof verifyRecord>[0] & { side: string; code: string }; signature?: string; [k: string]: unknown }

async function expectProtocolError (t: Test, path: string, body: unknown, what: string): Promise<void> {
  const r = await post(path, body)
  t.equal(r.status, 502, `${what}: status`)
  t.match(String(r.headers['content-type']), /^application\/json/, `${what}: our JSON, not the provider's body`)
  const j = JSON.parse(r.body.toString()) as Refusal
  t.equal(j.code, 'provider_protocol_error', `${what}: code`)
  t.equal(j.record?.side, 'provider', `${what}: the provider's failure`)
  t.ok(j.record && j.signature && verifyRecord(j.record, j.signature, key), `${what}: signed`)
  const line = await logLine(j.exchangeId)
  t.equal(line.code, 'provider_protocol_error', `${what}: logged code`)
  t.equal(line.status, 502, `${what}: logged status`)
  t.equal(line.evidence, false, `${what}: never evidence`)
  t.same(await waitIdle(rig.gw), {}, `${what}: idle`)
}

t.test('a streaming request answered with something that is not text/event-stream is a provider protocol failure', async (t) => {
  for (const [path, prefix, mk] of ROUTES) {
    await expectProtocolError(t, path, mk(`${prefix}-html`, true), `${path} stream, 200 text/html`)
    await expectProtocolError(t, path, mk(`${prefix}-json`, true), `${path} stream, 200 application/json`)
  }
})

t.test('a non-streaming answer that is not JSON is a provider protocol failure', async (t) => {
  for (const [path, prefix, mk] of ROUTES) {
    await expectProtocolError(t, path, mk(`${prefix}-html`, false), `${path} json, 200 text/html`)
  }
})

t.test('an answer of 2.5 million {} values does not end the worker: an honest refusal', async (t) => {
  for (const [path, prefix, mk] of ROUTES) {
    const r = await post(path, mk(`${prefix}-many`, false))
    t.equal(r.status, 502, `${path}: status`)
    const j = JSON.parse(r.body.toString()) as Refusal
    t.equal(j.code, 'output_too_large', `${path}: code`)
    t.equal(j.reason, 'nodes', `${path}: too many JSON values`)
    t.equal(j.limit, 1_000_000, `${path}: names the node cap`)
    const line = await logLine(j.exchangeId)
    t.equal(line.code, 'output_too_large')
    t.equal(line.status, 502)
    t.same(workerExits(), [], `${path}: no worker ended`)
    t.same(await waitIdle(rig.gw), {}, `${path}: idle`)
  }
  // The same worker still answers, and a large answer within the caps is read in the pool.
  const r = await post('/v1/chat/completions', chatBody('hi', { model: 'odd-chat-few' }))
  t.equal(r.status, 200, 'an answer of 200 k values within the caps is delivered')
  t.ok(r.body.equals(answer('odd-chat-few').body as Buffer), 'exactly')
  const line = await logLine(String(r.headers['x-sluice-exchange-id']))
  t.same(line.usage, { inputTokens: 3, outputTokens: 5, totalTokens: 8 }, 'its usage read by the parser pool')
  t.same(workerExits(), [], 'no worker ended')
  const restarts = [...(await rig.gw.metrics())].filter(([k]) => k.startsWith('sluice_worker_restarts_total'))
  t.ok(restarts.length > 0 && restarts.every(([, v]) => v === 0), 'no restart')
  t.same(await waitIdle(rig.gw), {}, 'idle')
})

t.test('an answer without content-length that grows past maxOutputBytes is output_too_large', async (t) => {
  const r = await post('/v1/chat/completions', chatBody('hi', { model: 'odd-chat-endless' }))
  t.equal(r.status, 502)
  const j = JSON.parse(r.body.toString()) as Refusal
  t.equal(j.code, 'output_too_large')
  t.equal(j.limit, 8 * 1024 * 1024)
  t.same(await waitIdle(rig.gw), {}, 'idle')
})
