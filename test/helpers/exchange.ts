// A gateway in front of a simulated provider that lives in the test process, so tests can
// watch exactly what reaches the upstream (sim.events) and compare with direct calls.

import { request } from 'undici'
import { startSim, type Sim, type SimBodyEvent, type SimEndEvent, type SimRequestEvent } from '../../src/sim/index.ts'
import { sha256Hex } from '../../src/config/load.ts'
import { startGateway, type Gateway } from './gateway.ts'

export const KEY = 'sk-test-gateway-key-0123456789'
export const PROVIDER_KEY = 'sk-provider-secret-abcdef'

export interface Rig {
  sim: Sim
  gw: Gateway
  /** Base URL of the gateway, e.g. http://127.0.0.1:PORT */
  url: string
  requests: SimRequestEvent[]
  /** The parsed body of every model request the sim received, in order. */
  bodies: SimBodyEvent[]
  ends: SimEndEvent[]
  close (): Promise<void>
}

export async function startRig (opts: { limits?: Record<string, unknown>; upstream?: Record<string, unknown>; keys?: unknown[]; workers?: number; providers?: (simUrl: string) => unknown[]; env?: Record<string, string>; strict?: boolean; telemetry?: Record<string, unknown>; stdout?: 'socket' | 'fifo' } = {}): Promise<Rig> {
  // strict: the sim refuses replayed reasoning it did not issue (src/sim/strict.ts).
  const sim = await startSim({ apiKey: PROVIDER_KEY, strict: opts.strict === true })
  const requests: SimRequestEvent[] = []
  const ends: SimEndEvent[] = []
  const bodies: SimBodyEvent[] = []
  sim.events.on('request', (e) => requests.push(e))
  sim.events.on('body', (e) => bodies.push(e))
  sim.events.on('end', (e) => ends.push(e))
  const providers = opts.providers?.(sim.url) ?? simProviders(sim.url)
  // A gateway that fails to start must not leave the sim serving: the test file would never end.
  const gw = await startGateway({
    workers: opts.workers ?? 1,
    limits: opts.limits ?? {},
    // Tests tag requests to follow them to the sim; providers get only allowlisted headers.
    upstream: { forwardHeaders: ['x-test-tag', 'x-test-seq'], ...opts.upstream },
    keys: opts.keys ?? [{ name: 'test', sha256: sha256Hex(KEY), models: ['*'] }],
    providers,
    ...(opts.telemetry ? { telemetry: opts.telemetry } : {}),
  }, { env: { SIM_PROVIDER_KEY: PROVIDER_KEY, SLUICE_SIGNING_KEY: SIGNING_KEY, ...opts.env }, stdout: opts.stdout })
    .catch(async (err: unknown) => { await sim.close(); throw err })
  return {
    sim,
    gw,
    url: `http://127.0.0.1:${gw.port}`,
    requests,
    bodies,
    ends,
    async close () {
      await gw.stop()
      await sim.close()
    },
  }
}

export const SIGNING_KEY = 'test-signing-key-for-failure-tails'

/** The rig's default providers: one per protocol, each model family on its own. */
export function simProviders (url: string): Array<Record<string, unknown>> {
  return [
    { name: 'sim-chat', protocol: 'openai-chat', baseUrl: url, apiKeyEnv: 'SIM_PROVIDER_KEY', models: ['gpt-4o*', 'sim-chat'], aliases: { 'fast-chat': 'gpt-4o-mini' } },
    { name: 'sim-responses', protocol: 'openai-responses', baseUrl: url, apiKeyEnv: 'SIM_PROVIDER_KEY', models: ['gpt-5*', 'sim-responses'] },
    { name: 'sim-messages', protocol: 'anthropic', baseUrl: url, apiKeyEnv: 'SIM_PROVIDER_KEY', models: ['claude-*'] },
  ]
}

/** The default providers with translation switched off for the Messages one (protocol_mismatch). */
export function simProvidersNoTranslation (url: string): Array<Record<string, unknown>> {
  return simProviders(url).map((p) => (p.name === 'sim-messages' ? { ...p, translate: false } : p))
}

export function chatBody (text: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: 'gpt-4o-mini', messages: [{ role: 'user', content: text }], ...extra }
}
export function responsesBody (text: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: 'gpt-5.5', input: text, ...extra }
}
export function messagesBody (text: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: 'claude-opus-5-5', max_tokens: 256, messages: [{ role: 'user', content: text }], ...extra }
}

/** POSTs `body` as JSON to the rig's gateway at `path` with the gateway key: the status, headers and whole body. */
export async function postToRig (rig: Rig, path: string, body: unknown) {
  const res = await request(rig.url + path, { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })
  return { status: res.statusCode, headers: res.headers, body: Buffer.from(await res.body.arrayBuffer()) }
}

/** The exchange's log line from the rig's gateway (written at its release, so it may come a moment after the reply). */
export async function exchangeLogLine (rig: Rig, exchangeId: string): Promise<Record<string, unknown>> {
  for (let i = 0; i < 200; i++) {
    for (const l of rig.gw.logs) {
      if (!l.includes(exchangeId)) continue
      try {
        const j = JSON.parse(l) as Record<string, unknown>
        if (j.msg === 'exchange' && j.exchangeId === exchangeId) return j
      } catch {}
    }
    await new Promise((r) => setTimeout(r, 20))
  }
  throw new Error(`no log line for ${exchangeId}`)
}
