// Property: a stdout nobody reads never stalls an exchange, and loses no line it could hold.
// The gateway's fd 1 is a FIFO (as a container's); this process stops reading it, and two
// workers run 300 streamed exchanges, whose lines are ~4x what the pipe buffers. Every
// exchange completes whole while nobody reads, the ledger goes idle; once reading resumes,
// every exchange's line arrives, once, and no line was dropped (300 lines are well inside each
// writer's queue, src/log-writer.ts QUEUE_MAX_BYTES).

import t from 'tap'
import { Agent, request } from 'undici'
import { KEY, chatBody, startRig, type Rig } from '../helpers/exchange.ts'
import { until, waitIdle } from '../helpers/gateway.ts'

const EXCHANGES = 300
const PARALLEL = 8

let rig: Rig
t.before(async () => { rig = await startRig({ workers: 2, stdout: 'fifo' }) })
t.teardown(async () => { await rig.close() })

t.test('300 exchanges while stdout is not read: all complete, every line arrives afterwards', async (t) => {
  rig.gw.stdout.pause()
  const before = rig.gw.logs.length
  const agent = new Agent({ connections: PARALLEL })
  const ids: string[] = []
  let next = 0
  await Promise.all(Array.from({ length: PARALLEL }, async () => {
    while (next < EXCHANGES) {
      const i = next++
      const res = await request(rig.url + '/v1/chat/completions', {
        method: 'POST',
        dispatcher: agent,
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify(chatBody(`line ${i}\n#sim tokens=3`, { stream: true })),
      })
      const text = await res.body.text()
      if (res.statusCode !== 200 || !text.includes('data: [DONE]')) t.fail(`exchange ${i}: ${res.statusCode} ${text.slice(0, 200)}`)
      ids.push(String(res.headers['x-sluice-exchange-id']))
    }
  }))
  await agent.close()
  t.equal(ids.length, EXCHANGES, 'every exchange completed while nobody read stdout')
  t.same(await waitIdle(rig.gw), {}, 'the ledger is idle')
  t.ok(rig.gw.logs.length - before < EXCHANGES, `fewer lines than exchanges reached this process while paused (${rig.gw.logs.length - before})`)

  rig.gw.stdout.resume()
  /** exchange id -> how many exchange lines name it, in what reached this process since `before` */
  const linesOf = (): Map<string, number> => {
    const n = new Map<string, number>()
    for (const l of rig.gw.logs.slice(before)) {
      try {
        const j = JSON.parse(l) as { msg?: string; exchangeId?: string }
        if (j.msg === 'exchange') n.set(String(j.exchangeId), (n.get(String(j.exchangeId)) ?? 0) + 1)
      } catch {}
    }
    return n
  }
  await until(() => { const n = linesOf(); return ids.every((id) => n.has(id)) }, 'every exchange line', 10_000).catch(() => {})
  const lineOf = linesOf()
  t.same(ids.filter((id) => lineOf.get(id) !== 1), [], 'every exchange has exactly one line')
  const dropped = rig.gw.logs.slice(before).filter((l) => l.includes('droppedLines'))
  t.same(dropped, [], 'no line was dropped')
  const unparseable = rig.gw.logs.slice(before).filter((l) => { if (l.startsWith('stderr: ')) return false; try { JSON.parse(l); return false } catch { return true } })
  t.same(unparseable, [], 'every line is whole')
})
