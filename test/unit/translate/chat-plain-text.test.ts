// The Chat decoder's plain text delta read from its bytes (ChatDecoder.plainText, used by the
// stream translator's feedFrame instead of JSON.parse): it may only take a frame that parsing
// it whole would read the same way, and the translator's output must be byte for byte what
// it is when every frame is parsed whole (`push` with JSON.parse). The head it keeps is
// charged to the budget and given back at the end, on a failure and on dispose.
import t from 'tap'
import fc from 'fast-check'
import { CountingBudget, type CanonicalEvent, type CanonicalRequest, type Protocol } from '../../../src/translate/canonical.ts'
import { ChatDecoder } from '../../../src/translate/stream/decode-chat.ts'
import { createStreamTranslator } from '../../../src/translate/stream/index.ts'
import { numRuns } from '../../fuzz/runs.ts'

const HEAD = { id: 'chatcmpl-x1', object: 'chat.completion.chunk', created: 1796000000, model: 'gpt-4o-mini', system_fingerprint: 'fp_1' }

type Tail = 'logprobs+usage' | 'logprobs' | 'usage' | 'bare'
function chunk (content: string, tail: Tail = 'logprobs+usage', obfuscation?: string, head: Record<string, unknown> = HEAD): string {
  const choice: Record<string, unknown> = { index: 0, delta: { content } }
  if (tail === 'logprobs+usage' || tail === 'logprobs') choice.logprobs = null
  choice.finish_reason = null
  const o: Record<string, unknown> = { ...head, choices: [choice] }
  if (tail === 'logprobs+usage' || tail === 'usage') o.usage = null
  if (obfuscation !== undefined) o.obfuscation = obfuscation
  return JSON.stringify(o)
}
const ROLE = JSON.stringify({ ...HEAD, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }], usage: null })
const FINISH = JSON.stringify({ ...HEAD, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }], usage: null })
const USAGE = JSON.stringify({ ...HEAD, choices: [], usage: { prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 } })

const frame = (payload: string): Buffer => Buffer.from('data: ' + payload)

function request (to: Protocol): CanonicalRequest {
  return { client: to, model: 'gpt-4o-mini', stream: true, system: [], messages: [], tools: [], droppedTools: [] }
}

/** How many frames plainText() took, over the calls made while `fn` runs. */
function countingPlain<T> (fn: () => T): { result: T; taken: number } {
  const orig = ChatDecoder.prototype.plainText
  let taken = 0
  ChatDecoder.prototype.plainText = function (this: ChatDecoder, d: Buffer) {
    const r = orig.call(this, d)
    if (r) taken++
    return r
  }
  try {
    return { result: fn(), taken }
  } finally {
    ChatDecoder.prototype.plainText = orig
  }
}

interface Run { bytes: Buffer; failure: string | null; finished: boolean; idle: boolean; peakItem: number }

/** Through feedFrame (bytes: the fast path where it applies). */
function viaBytes (to: Protocol, payloads: string[], eof = true): Run {
  const budget = new CountingBudget()
  const tr = createStreamTranslator({ from: 'openai-chat', to, request: request(to), budget, issuer: 'openai-chat:prov' })
  const out: Buffer[] = []
  let peakItem = 0
  for (const p of payloads) {
    out.push(...tr.pushFrame(frame(p)))
    peakItem = Math.max(peakItem, budget.held.item)
  }
  if (eof) out.push(...tr.end())
  return { bytes: Buffer.concat(out), failure: tr.failure?.code ?? null, finished: tr.finished, idle: budget.idle, peakItem }
}

/** Every frame parsed whole (push with JSON.parse: no fast path). */
function viaParse (to: Protocol, payloads: string[], eof = true): Run {
  const budget = new CountingBudget()
  const tr = createStreamTranslator({ from: 'openai-chat', to, request: request(to), budget, issuer: 'openai-chat:prov' })
  const out: Buffer[] = []
  for (const p of payloads) out.push(...tr.push(null, p.trim() === '[DONE]' ? '[DONE]' : JSON.parse(p)))
  if (eof) out.push(...tr.end())
  return { bytes: Buffer.concat(out), failure: tr.failure?.code ?? null, finished: tr.finished, idle: budget.idle, peakItem: 0 }
}

const text = fc.string({ unit: fc.oneof(fc.constantFrom('"', '\\', '\n', '\t', '\u0000', '\u2028', '\ud83d\ude00', '\ud800', 'é', '}', ']', ',', '"choices":[{"index":0,"delta":{"content":"'), fc.string({ maxLength: 1 })), maxLength: 12 })
const tail = fc.constantFrom<Tail>('logprobs+usage', 'logprobs', 'usage', 'bare')
const obf = fc.option(fc.stringMatching(/^[A-Za-z0-9]{0,8}$/), { nil: undefined })

t.test('a stream of text deltas: the same bytes as parsing every frame whole, the deltas read from their bytes', async t => {
  for (const to of ['openai-responses', 'anthropic'] as const) {
    await fc.assert(fc.property(fc.array(fc.tuple(text, tail, obf), { minLength: 1, maxLength: 20 }), (deltas) => {
      const payloads = [ROLE, ...deltas.map(([c, tl, o]) => chunk(c, tl, o)), FINISH, USAGE, '[DONE]']
      const { result: a, taken } = countingPlain(() => viaBytes(to, payloads))
      const b = viaParse(to, payloads)
      if (!a.bytes.equals(b.bytes)) throw new Error(`${to}: the bytes differ`)
      if (a.failure !== null || b.failure !== null || !a.finished) throw new Error(`${to}: failed ${a.failure} / ${b.failure}`)
      if (!a.idle || !b.idle) throw new Error(`${to}: the budget is not idle`)
      // ROLE (a role field) and the first text delta are parsed whole, the head learned from
      // the latter; every delta after it is read from its bytes.
      if (taken !== deltas.length - 1) throw new Error(`${to}: ${taken} of ${deltas.length} deltas read from their bytes`)
      if (a.peakItem < Buffer.byteLength(JSON.stringify(HEAD)) - 1) throw new Error(`${to}: the head was not charged (${a.peakItem})`)
      return true
    }), { numRuns: numRuns(150) })
  }
  t.pass('checked')
})

t.test('plainText takes a frame only when JSON.parse reads it as that text delta', async t => {
  // A decoder that has begun and learned the head; then any bytes: accepted only if they parse
  // to the template with that content, and then exactly that delta is emitted.
  const mutated = fc.tuple(text, tail, obf, fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 }), fc.constantFrom('set', 'drop', 'insert')), { maxLength: 3 }))
  let accepted = 0
  await fc.assert(fc.property(mutated, ([c, tl, o, edits]) => {
    const events: CanonicalEvent[] = []
    const budget = new CountingBudget()
    const d = new ChatDecoder({ sink: { event: e => events.push(e) }, budget, issuer: 'openai-chat:prov', lookup: () => undefined })
    const first = chunk('x')
    d.frame(null, JSON.parse(first))
    d.learnHead(Buffer.from(first))
    const before = events.length
    const bytes = [...Buffer.from(chunk(c, tl, o))]
    for (const [at, v, op] of edits) {
      const i = at % (bytes.length + 1)
      if (op === 'set' && i < bytes.length) bytes[i] = v
      else if (op === 'drop' && i < bytes.length) bytes.splice(i, 1)
      else if (op === 'insert') bytes.splice(i, 0, v)
    }
    const buf = Buffer.from(bytes)
    if (!d.plainText(buf)) return true
    accepted++
    const v = JSON.parse(buf.toString('utf8')) // throws (fails the property) if it is not JSON
    const keys = Object.keys(v).filter(k => !(k in HEAD))
    if (!keys.every(k => k === 'choices' || k === 'usage' || k === 'obfuscation')) throw new Error(`extra keys ${keys}`)
    if (v.usage !== undefined && v.usage !== null) throw new Error('usage')
    if (v.obfuscation !== undefined && typeof v.obfuscation !== 'string') throw new Error('obfuscation')
    for (const k of Object.keys(HEAD)) if (JSON.stringify(v[k]) !== JSON.stringify((HEAD as Record<string, unknown>)[k])) throw new Error(`head ${k}`)
    if (!Array.isArray(v.choices) || v.choices.length !== 1) throw new Error('choices')
    const ch = v.choices[0]
    if (ch.index !== 0 || ch.finish_reason !== null || Object.keys(ch).some((k: string) => !['index', 'delta', 'logprobs', 'finish_reason'].includes(k))) throw new Error('choice')
    if (ch.logprobs !== undefined && ch.logprobs !== null) throw new Error('logprobs')
    if (Object.keys(ch.delta).join() !== 'content' || typeof ch.delta.content !== 'string') throw new Error('delta')
    const got = events.slice(before).filter(e => e.type === 'delta').map(e => (e as { text: string }).text).join('')
    if (got !== ch.delta.content) throw new Error(`text ${JSON.stringify(got)} against ${JSON.stringify(ch.delta.content)}`)
    return true
  }), { numRuns: numRuns(2000) })
  t.ok(accepted > 0, `some mutated frames were still plain deltas and taken (${accepted})`)
})

t.test('frames it leaves to the whole parse', async t => {
  const d = () => {
    const events: CanonicalEvent[] = []
    const budget = new CountingBudget()
    const dec = new ChatDecoder({ sink: { event: e => events.push(e) }, budget, issuer: 'openai-chat:prov', lookup: () => undefined })
    return { dec, events, budget }
  }
  const { dec, budget } = d()
  t.notOk(dec.plainText(Buffer.from(chunk('a'))), 'nothing learned yet (the first frame begins the stream)')
  const first = chunk('a')
  dec.frame(null, JSON.parse(first))
  dec.learnHead(Buffer.from(first))
  t.equal(budget.held.item, first.indexOf('"choices"') + 1 /* the text 'a' */, 'the head is charged while kept')
  t.ok(dec.plainText(Buffer.from(chunk('b'))), 'a delta with the same head')
  t.notOk(dec.plainText(Buffer.from(chunk('b', 'logprobs', undefined, { ...HEAD, id: 'chatcmpl-other' }))), 'another head')
  t.notOk(dec.plainText(Buffer.from(chunk('b').replace('"finish_reason":null', '"finish_reason":"stop"'))), 'a finish')
  t.notOk(dec.plainText(Buffer.from(chunk('b').replace('"usage":null', '"usage":{"prompt_tokens":1}'))), 'usage')
  t.notOk(dec.plainText(Buffer.from(chunk('b').replace('{"content":"b"}', '{"content":"b","refusal":"no"}'))), 'another delta field')
  t.notOk(dec.plainText(Buffer.from(chunk('b').replace('"content":"b"', '"content":"b\u0001"'))), 'a control character (not JSON)')
  t.notOk(dec.plainText(Buffer.from(chunk('b').replace('"content":"b"', '"content":"\\x"'))), 'a bad escape (not JSON)')
  t.notOk(dec.plainText(Buffer.from(chunk('b') + ' ')), 'anything after the object')
  t.notOk(dec.plainText(Buffer.from(chunk('b', 'logprobs+usage', 'a\\"b'))), 'an escape in obfuscation')
  dec.frame(null, JSON.parse(FINISH))
  t.notOk(dec.plainText(Buffer.from(chunk('c'))), 'after the finish_reason')
  dec.frame(null, '[DONE]')
  t.ok(budget.idle, 'the head went back at the end')

  // A head with a key the decoder reads is never kept.
  for (const key of ['error', 'usage', 'choices']) {
    const x = d()
    // Before the real `choices`: a duplicate key, which JSON.parse reads as the last one.
    const p = chunk('a', 'logprobs').replace('"system_fingerprint"', `"${key}":null,"system_fingerprint"`)
    x.dec.frame(null, JSON.parse(p))
    x.dec.learnHead(Buffer.from(p))
    t.equal(x.budget.held.item, 1, `a head with "${key}" is not kept`)
    // Judged once per stream: a later clean head is not parsed and kept either.
    const clean = chunk('b')
    x.dec.frame(null, JSON.parse(clean))
    x.dec.learnHead(Buffer.from(clean))
    t.equal(x.budget.held.item, 2, `after "${key}", a later head is not looked at`)
    t.notOk(x.dec.plainText(Buffer.from(chunk('c'))), 'and no frame is read from its bytes')
  }
  // No room for the head: nothing kept, every frame parsed whole.
  const tight = new CountingBudget(20)
  const y = new ChatDecoder({ sink: { event: () => {} }, budget: tight, issuer: 'openai-chat:prov', lookup: () => undefined })
  y.frame(null, JSON.parse(first))
  y.learnHead(Buffer.from(first))
  t.equal(tight.held.item, 1, 'over the budget the head is not kept')
  t.notOk(y.plainText(Buffer.from(chunk('b'))))
})

t.test('the head goes back on a failure and on dispose', async t => {
  for (const to of ['openai-responses', 'anthropic'] as const) {
    const cut = viaBytes(to, [ROLE, chunk('a'), chunk('b'), chunk('c')])
    t.equal(cut.failure, 'provider_protocol_error', `${to}: a stream cut without its terminal fails`)
    t.ok(cut.idle, `${to}: idle after the failure`)
    t.ok(cut.peakItem > 0, `${to}: the head was held`)
    const bad = viaBytes(to, [ROLE, chunk('a'), chunk('b'), '{"id":'], false)
    t.equal(bad.failure, 'provider_protocol_error', `${to}: a frame that is not JSON fails the stream`)
    t.ok(bad.idle, `${to}: idle after it`)
    const budget = new CountingBudget()
    const tr = createStreamTranslator({ from: 'openai-chat', to, request: request(to), budget, issuer: 'openai-chat:prov' })
    for (const p of [ROLE, chunk('a'), chunk('b')]) tr.pushFrame(frame(p))
    t.ok(budget.held.item > 0, `${to}: held mid-stream`)
    tr.dispose()
    t.ok(budget.idle, `${to}: idle after dispose`)
  }
})
