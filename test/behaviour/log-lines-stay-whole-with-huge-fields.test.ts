// Property: whatever size a logged field has, stdout stays one whole JSON line per write.
// Two HTTP workers log 60 exchanges at once whose model names are 300,000 characters long
// (each refused model_not_found): every line of stdout parses, each exchange has exactly one
// exchange line with its own exchangeId and its own model (cut to its first characters and a
// visible truncation marker), no line is longer than the documented line cap, both workers
// wrote, and the ledger is idle afterwards. Run twice: stdout the socket a Node parent gives
// its child (the writers go through sonic-boom), and a FIFO, as a container's (each writer
// writes its lines itself, through a non-blocking description of the pipe: src/log-writer.ts).

import t from 'tap'
import { request } from 'undici'
import { KEY, chatBody, messagesBody, responsesBody, startRig, type Rig } from '../helpers/exchange.ts'
import { waitIdle } from '../helpers/gateway.ts'
import { FIELD_MAX_CHARS, LINE_MAX_BYTES } from '../../src/log.ts'

const EXCHANGES = 60
const MODEL_CHARS = 300_000

for (const kind of ['socket', 'fifo'] as const) {
  t.test(`60 exchanges with huge model names on two workers, stdout a ${kind}: one whole line each`, async (t) => {
    const rig: Rig = await startRig({ workers: 2, stdout: kind })
    t.teardown(() => rig.close())
    const ROUTES = [['/v1/chat/completions', chatBody], ['/v1/responses', responsesBody], ['/v1/messages', messagesBody]] as const
    /** exchange id -> the model it sent */
    const sent = new Map<string, string>()
    await Promise.all(Array.from({ length: EXCHANGES }, async (_, i) => {
      const [path, body] = ROUTES[i % ROUTES.length]
      // Unique per exchange from the first character on, so a truncated line still says whose it is.
      const model = `m${String(i).padStart(3, '0')}-` + String.fromCharCode(97 + (i % 26)).repeat(MODEL_CHARS - 5)
      const res = await request(rig.url + path, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify(body('hi', { model })),
        reset: true, // a fresh connection each: reusePort spreads them over both workers
      })
      const json = await res.body.json() as { code?: string; exchangeId?: string }
      t.equal(res.statusCode, 404, `exchange ${i}: refused`)
      t.equal(json.code, 'model_not_found')
      t.equal(res.headers['x-sluice-exchange-id'], json.exchangeId)
      sent.set(String(json.exchangeId), model)
    }))
    t.equal(sent.size, EXCHANGES, 'every exchange got its own id')
    t.same(await waitIdle(rig.gw), {}, 'the ledger is idle')
    // Drain and exit: every worker's last buffered line is written before the process ends.
    t.equal(await rig.gw.stop(), 0)

    const stdout = rig.gw.logs.filter((l) => !l.startsWith('stderr: '))
    const unparseable = stdout.filter((l) => { try { return typeof JSON.parse(l) !== 'object' } catch { return true } })
    t.same(unparseable.map((l) => `${l.length} chars: ${l.slice(0, 80)}…`), [], 'every stdout line is one JSON object')
    const tooLong = stdout.filter((l) => Buffer.byteLength(l) + 1 > LINE_MAX_BYTES)
    t.same(tooLong.map((l) => l.length), [], `no line is longer than ${LINE_MAX_BYTES} bytes`)

    const lines = stdout.flatMap((l) => { try { return [JSON.parse(l) as Record<string, unknown>] } catch { return [] } })
    const exchangeLines = lines.filter((l) => l.msg === 'exchange')
    const byId = new Map<string, Array<Record<string, unknown>>>()
    for (const l of exchangeLines) byId.set(String(l.exchangeId), [...(byId.get(String(l.exchangeId)) ?? []), l])
    const missing = [...sent.keys()].filter((id) => !byId.has(id))
    t.same(missing, [], 'every exchange has its line')
    t.equal(exchangeLines.length, EXCHANGES, 'one line per exchange, no more')
    const marker = `…[truncated ${MODEL_CHARS - FIELD_MAX_CHARS} chars]`
    for (const [id, model] of sent) {
      const own = byId.get(id) ?? []
      if (own.length !== 1) { t.fail(`${id}: ${own.length} lines`); continue }
      const l = own[0]
      t.equal(l.code, 'model_not_found', `${id}: its own code`)
      t.equal(l.model, model.slice(0, FIELD_MAX_CHARS) + marker, `${id}: its own model, cut with the marker`)
    }
    const workers = new Set(exchangeLines.map((l) => l.worker))
    t.equal(workers.size, 2, 'both workers logged exchanges (two writers on one stdout)')
  })
}
