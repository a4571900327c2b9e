// Codex CLI, unmodified, through sluice to a simulated provider of each protocol: a shell tool
// round trip and an apply_patch edit. Codex speaks only Responses; on a Chat Completions or
// Anthropic provider every request and stream is translated. What counts is what Codex does
// with it: it runs the command the model asked for, sends the result back under the same call
// id, applies the patch to the file system, and ends the turn cleanly.

import t from 'tap'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { KEY, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { codexItems, runCodex } from './agents.ts'
import { isModelCall, toolResultIds, toolCallIds } from './wire.ts'

const PROTOCOLS = ['openai-responses', 'openai-chat', 'anthropic'] as const

for (const protocol of PROTOCOLS) {
  t.test(`Codex CLI on a ${protocol} provider`, async (t) => {
    const rig: Rig = await startRig({
      workers: 2,
      providers: (url) => [{ name: `sim-${protocol}`, protocol, baseUrl: url, apiKeyEnv: 'SIM_PROVIDER_KEY', models: ['gpt-5*'] }],
    })
    t.teardown(() => rig.close())

    t.test('a shell tool round trip', async (t) => {
      const before = rig.bodies.length
      const r = await runCodex({ baseURL: rig.url, apiKey: KEY, model: 'gpt-5.5', prompt: 'list the folder\n#sim tools=1 call=exec_command' })
      t.equal(r.code, 0, `codex exits 0 (stderr: ${r.stderr.slice(-400)})`)
      const commands = codexItems(r, 'command_execution')
      t.equal(commands.length, 1, 'Codex ran exactly one command')
      t.match(String(commands[0]?.command), /echo sim/, 'the command the model asked for')
      t.match(String(commands[0]?.aggregated_output), /sim/, 'and it ran')
      const messages = codexItems(r, 'agent_message')
      t.ok(messages.length >= 1, 'an answer after the tool result')
      t.ok(r.events.some((e) => e.type === 'turn.completed'), 'the turn completed')
      t.notOk(r.events.some((e) => e.type === 'turn.failed' || e.type === 'error'), 'no failure reported')
      const bodies = rig.bodies.slice(before).filter(isModelCall)
      t.equal(bodies.length, 2, 'two model requests: the call, then the result')
      t.ok(bodies.length > 0 && bodies.every((b) => b.protocol === protocol), `in the provider's protocol (${protocol})`)
      const calls = bodies[1] ? toolCallIds(bodies[1]) : []
      const results = bodies[1] ? toolResultIds(bodies[1]) : []
      t.equal(results.length, 1, 'the second request carries one tool result')
      t.same(results, calls, 'under the id of the call it answers')
      t.same(await waitIdle(rig.gw), {}, 'the gateway is idle afterwards')
    })

    t.test('an apply_patch edit', async (t) => {
      const r = await runCodex({ baseURL: rig.url, apiKey: KEY, model: 'gpt-5.5', prompt: 'add the file\n#sim tools=1 call=apply_patch' })
      t.equal(r.code, 0, `codex exits 0 (stderr: ${r.stderr.slice(-400)})`)
      const file = join(r.cwd, 'sim.txt')
      t.ok(existsSync(file), 'Codex applied the patch')
      t.equal(existsSync(file) ? readFileSync(file, 'utf8') : '', 'hello\n', 'with the patch\'s content')
      const changes = codexItems(r, 'file_change')
      t.equal(changes.length, 1, 'one file change reported')
      t.ok(r.events.some((e) => e.type === 'turn.completed'), 'the turn completed')
      t.same(await waitIdle(rig.gw), {}, 'the gateway is idle afterwards')
    })
  })
}
