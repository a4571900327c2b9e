// Claude Code, unmodified, through sluice to a simulated provider of each protocol: a Bash tool
// round trip with thinking on. Claude Code speaks only Messages; on a Chat Completions or
// Responses provider every request and stream is translated. What counts is what Claude Code
// does with it: it runs the command, sends the result back under the tool_use id, keeps its
// thinking (with a signature it can replay) and ends the turn cleanly, streaming all the way
// (it falls back to a non-streaming request when a stream does not parse: counted here).

import t from 'tap'
import { KEY, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { claudeBlocks, runClaude } from './agents.ts'
import { bodyOf, isModelCall, reasoningReplays, toolCallIds, toolResultIds } from './wire.ts'

const PROTOCOLS = ['anthropic', 'openai-chat', 'openai-responses'] as const

for (const protocol of PROTOCOLS) {
  t.test(`Claude Code on a ${protocol} provider`, async (t) => {
    const rig: Rig = await startRig({
      workers: 2,
      providers: (url) => [{ name: `sim-${protocol}`, protocol, baseUrl: url, apiKeyEnv: 'SIM_PROVIDER_KEY', models: ['claude-*'] }],
    })
    t.teardown(() => rig.close())

    t.test('a Bash tool round trip with thinking on', async (t) => {
      const before = rig.bodies.length
      // A Chat provider has no signed reasoning: its reasoning comes as reasoning_content deltas.
      const reasoning = protocol === 'openai-chat' ? ' reasoning_content' : ''
      const r = await runClaude({ baseURL: rig.url, apiKey: KEY, model: 'claude-sonnet-4-5', thinkingTokens: 2048, prompt: `list the folder\n#sim tools=1 call=Bash thinking=2${reasoning}` })
      t.equal(r.code, 0, `claude exits 0 (stderr: ${r.stderr.slice(-400)})`)
      const uses = claudeBlocks(r, 'assistant', 'tool_use')
      t.equal(uses.length, 1, 'one tool call')
      t.equal(uses[0]?.name, 'Bash', 'to Bash')
      const results = claudeBlocks(r, 'user', 'tool_result')
      t.equal(results.length, 1, 'one tool result')
      t.equal(results[0]?.tool_use_id, uses[0]?.id, 'for that call')
      t.match(JSON.stringify(results[0]?.content), /sim/, 'the command ran')
      const thinking = claudeBlocks(r, 'assistant', 'thinking')
      t.ok(thinking.length >= 1, 'Claude Code received thinking')
      if (protocol === 'openai-chat') {
        // Nothing is faked: a Chat provider issued no signature, so the thinking carries none.
        t.ok(thinking.every((b) => b.signature === ''), 'with no signature (the provider issued none)')
      } else {
        t.ok(thinking.every((b) => typeof b.signature === 'string' && b.signature.length > 0), 'each with a signature')
      }
      const final = r.events.find((e) => e.type === 'result') as Record<string, unknown> | undefined
      t.equal(final?.subtype, 'success', 'the run ends in success')
      t.equal(final?.is_error, false, 'not an error')

      // What reached the provider: the main loop's two requests, streaming, in its protocol.
      const bodies = rig.bodies.slice(before).filter((b) => isModelCall(b) && JSON.stringify(bodyOf(b)).includes('#sim tools=1 call=Bash'))
      t.equal(bodies.length, 2, 'the call and the result: two model requests (no fallback retry)')
      t.ok(bodies.length > 0 && bodies.every((b) => b.protocol === protocol), `in the provider's protocol (${protocol})`)
      t.ok(bodies.length > 0 && bodies.every((b) => bodyOf(b).stream === true), 'both streaming (no non-streaming fallback)')
      const second = bodies[1]
      if (second) {
        t.same(toolResultIds(second), toolCallIds(second), 'the result travels under its call\'s id')
        t.equal(toolResultIds(second).length, 1)
        if (protocol !== 'openai-chat') t.ok(reasoningReplays(second).length >= 1, 'the thinking is replayed to the provider that issued it')
      }
      t.same(await waitIdle(rig.gw), {}, 'the gateway is idle afterwards')
    })
  })
}
