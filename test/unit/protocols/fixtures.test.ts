// Real client streams (../shared/fixtures/clients, copied into ops/load/fixtures): every
// frame is classified
// without a false malformed, the terminal and usage are found, in any chunking.
import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { feed } from './feed.ts'
import type { Protocol } from '../../../src/protocols/index.ts'

const dir = new URL('../../../ops/load/fixtures/', import.meta.url)
const files = readdirSync(dir).filter(f => f.endsWith('.response.sse')).sort()

function protocolOf (file: string): Protocol {
  const request = JSON.parse(readFileSync(new URL(file.slice(0, -'.response.sse'.length) + '.request.json', dir), 'utf8')) as { url: string }
  if (request.url.startsWith('/v1/chat/completions')) return 'openai-chat'
  if (request.url.startsWith('/v1/responses')) return 'openai-responses'
  return 'anthropic'
}

t.ok(files.length >= 12, `${files.length} fixture streams`)

for (const file of files) {
  t.test(file, async t => {
    const protocol = protocolOf(file)
    const bytes = readFileSync(new URL(file, dir))
    const whole = feed(protocol, bytes)
    t.notOk(whole.classes.includes('malformed'), `${protocol}: no frame misclassified as malformed`)
    t.equal(whole.verdict.ok, true, 'validated terminal, clean end')
    t.equal(whole.verdict.terminal, 'completed')
    t.equal(whole.verdict.failure, null)
    t.equal(whole.verdict.framesAdmitted, whole.frames.length, 'every frame admitted')
    const inspected = whole.classes.filter(c => c === 'inspect').length
    t.ok(inspected <= 3, `only ${inspected} of ${whole.frames.length} frames decoded`)
    // Usage: every fixture but the Chat one without stream_options reports 42 in / 12 out.
    const hasUsage = bytes.includes('"usage":{') || bytes.includes('"output_tokens"')
    if (hasUsage) t.same(whole.verdict.usage, { inputTokens: 42, outputTokens: 12, totalTokens: 54 })
    else t.equal(whole.verdict.usage, null)
    t.ok(whole.tracker.responseId, `response id ${whole.tracker.responseId}`)
    if (protocol === 'openai-responses') t.equal(whole.tracker.lastSequenceNumber, whole.frames.length - 1, 'sequence numbers read without decoding')
    // The same in other chunkings.
    for (const chunk of [1, 7, 'random'] as const) {
      const r = feed(protocol, bytes, { chunk })
      t.same(r.classes, whole.classes, `chunk ${chunk}: same classes`)
      t.same(r.verdict, whole.verdict, `chunk ${chunk}: same verdict`)
    }
  })
}
