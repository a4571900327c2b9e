// checkJson: exact counts for every kind of value, strings that hide brackets and quotes,
// caps exactly at and one past the limit, and refusal at the first byte that crosses a cap.

import t from 'tap'
import { checkJson } from '../../../src/json/bounded.ts'
import { SluiceError } from '../../../src/errors.ts'

const enc = new TextEncoder()
const bytes = (s: string) => enc.encode(s)
const WIDE = { maxDepth: 100_000, maxNodes: Number.MAX_SAFE_INTEGER }

/** The counting rule, written the obvious way over a parsed value. */
function reference (v: unknown, level = 0): { depth: number; nodes: number } {
  if (v === null || typeof v !== 'object') return { depth: level, nodes: 1 }
  const children = Array.isArray(v) ? v : Object.values(v)
  let depth = level + 1
  let nodes = 1
  for (const c of children) {
    const r = reference(c, level + 1)
    depth = Math.max(depth, r.depth)
    nodes += r.nodes
  }
  return { depth, nodes }
}

function refusal (fn: () => unknown): SluiceError {
  try { fn() } catch (e) { if (e instanceof SluiceError) return e; throw e }
  throw new Error('expected a refusal')
}

t.test('every kind of value counts once; member names do not; depth counts open containers', async (t) => {
  const cases: Array<[string, number, number]> = [
    ['{"a":[1,"x",{"b":null}]}', 6, 3],
    ['1', 1, 0],
    ['-0.5e+10', 1, 0],
    ['"x"', 1, 0],
    ['true', 1, 0],
    ['false', 1, 0],
    ['null', 1, 0],
    ['[]', 1, 1],
    ['{}', 1, 1],
    ['[[[]]]', 3, 3],
    ['{"a":{"b":{"c":{}}}}', 4, 4],
    ['[1,[2,[3]],{"k":"v","k2":[true,false,null]}]', 12, 3],
    ['{"k":"v","n":12.5E-3,"t":true,"f":false,"z":null,"e":{},"a":[]}', 8, 2],
    [' \n\t{ "a" : [ 1 , 2 ] ,\r\n "b" : "c" }\n', 5, 2],
    ['[{},{},[],[[]],""]', 7, 3],
  ]
  for (const [json, nodes, depth] of cases) {
    t.same(checkJson(bytes(json), WIDE), { depth, nodes }, json)
    t.same(reference(JSON.parse(json)), { depth, nodes }, `reference agrees: ${json}`)
  }
})

t.test('strings: escaped quotes, backslashes, brackets and separators inside strings, UTF-8', async (t) => {
  const cases: Array<[string, number, number]> = [
    ['"a\\"b"', 1, 0],
    ['["a\\\\"]', 2, 1], // ends at the quote after an escaped backslash
    ['["\\\\\\"", 1]', 3, 1], // \\ \" then the real close
    ['{"[{":"]}","\\"]":"\\\\"}', 3, 1],
    ['["{\\"a\\":[1,2]}", ":", ",", "\\u0022", "\\/"]', 6, 1],
    ['{"key with \\" and ]":{"}":"{"}}', 3, 2],
    ['["naïve", "日本語", "emoji 😀 ]", "\\ud83d\\ude00"]', 5, 1],
    ['{"a":"","b":[""]}', 4, 2],
  ]
  for (const [json, nodes, depth] of cases) {
    t.same(reference(JSON.parse(json)), { depth, nodes }, `the case itself is right: ${json}`)
    t.same(checkJson(bytes(json), WIDE), { depth, nodes }, json)
  }
})

t.test('agrees with the reference rule on generated documents (compact and indented)', async (t) => {
  let seed = 0x2545f491
  const rnd = () => { seed ^= seed << 13; seed ^= seed >>> 17; seed ^= seed << 5; return (seed >>> 0) / 2 ** 32 }
  const pick = <T>(xs: T[]) => xs[Math.floor(rnd() * xs.length)]
  const strings = ['', 'x', '"', '\\', '\\"', '[', ']', '{', '}', ',', ':', 'a"b\\c', 'é', '😀', '\n', '\u0000', 'model']
  const gen = (level: number): unknown => {
    const r = rnd()
    if (level > 6 || r < 0.35) return pick<unknown>([0, -1.5, 1e21, 'str', true, false, null, pick(strings), pick(strings) + pick(strings)])
    if (r < 0.7) return Array.from({ length: Math.floor(rnd() * 5) }, () => gen(level + 1))
    const o: Record<string, unknown> = {}
    for (let k = Math.floor(rnd() * 5); k > 0; k--) o[pick(strings) + k] = gen(level + 1)
    return o
  }
  for (let i = 0; i < 500; i++) {
    const v = gen(0)
    const want = reference(v)
    t.same(checkJson(bytes(JSON.stringify(v)), WIDE), want)
    t.same(checkJson(bytes(JSON.stringify(v, null, i % 3 === 0 ? '\t' : 2)), WIDE), want)
  }
})

t.test('caps: exactly at the limit passes, one past refuses with the catalogue code', async (t) => {
  const doc = bytes('{"a":[1,"x",{"b":null}]}') // 6 nodes, depth 3
  t.same(checkJson(doc, { maxDepth: 3, maxNodes: 6 }), { depth: 3, nodes: 6 })

  const deep = refusal(() => checkJson(doc, { maxDepth: 2, maxNodes: 6 }))
  t.equal(deep.code, 'json_too_deep')
  t.same(deep.details, { limit: 2, depth: 3 })
  t.equal(deep.status, 400)

  const many = refusal(() => checkJson(doc, { maxDepth: 3, maxNodes: 5 }))
  t.equal(many.code, 'json_too_many_nodes')
  t.same(many.details, { limit: 5 })

  // member names never count toward the node cap
  t.same(checkJson(bytes('{"a":1,"b":2,"c":3}'), { maxDepth: 1, maxNodes: 4 }), { depth: 1, nodes: 4 })
  t.equal(refusal(() => checkJson(bytes('{"a":1,"b":2,"c":3}'), { maxDepth: 1, maxNodes: 3 })).code, 'json_too_many_nodes')
  // a scalar at the top needs no depth at all
  t.same(checkJson(bytes('"only"'), { maxDepth: 0, maxNodes: 1 }), { depth: 0, nodes: 1 })
  t.equal(refusal(() => checkJson(bytes('[]'), { maxDepth: 0, maxNodes: 1 })).code, 'json_too_deep')
  // depth is the deepest point, not the last one
  t.same(checkJson(bytes('[[[[]]],[]]'), { maxDepth: 4, maxNodes: 10 }), { depth: 4, nodes: 5 })
})

/** A read-only view that records the furthest index checkJson reads (no strings in these bodies). */
function watched (b: Uint8Array): { view: Uint8Array; furthest: () => number } {
  let furthest = -1
  const view = new Proxy(b, {
    get (target, key) {
      if (typeof key === 'string' && /^\d+$/.test(key)) furthest = Math.max(furthest, Number(key))
      const v = Reflect.get(target, key, target)
      return typeof v === 'function' ? v.bind(target) : v
    },
  })
  return { view, furthest: () => furthest }
}

t.test('1e6 nested [ is refused at the first [ past the cap, with no recursion', async (t) => {
  const body = new Uint8Array(1_000_000).fill(0x5b)
  const started = performance.now()
  const e = refusal(() => checkJson(body, { maxDepth: 128, maxNodes: 1_000_000 }))
  const ms = performance.now() - started
  t.equal(e.code, 'json_too_deep')
  t.same(e.details, { limit: 128, depth: 129 })
  t.ok(ms < 250, `refused in ${ms.toFixed(2)} ms`)

  const w = watched(body.subarray(0, 10_000))
  refusal(() => checkJson(w.view, { maxDepth: 128, maxNodes: 1_000_000 }))
  t.equal(w.furthest(), 128, 'read up to the 129th [ and not one byte further')

  // the cap may be high: 100k levels deep (the schema maximum) still passes without a stack
  const n = 100_000
  const nested = new Uint8Array(2 * n)
  nested.fill(0x5b, 0, n)
  nested.fill(0x5d, n)
  t.same(checkJson(nested, { maxDepth: n, maxNodes: n }), { depth: n, nodes: n })
})

t.test('huge node counts are refused at the first node past the cap', async (t) => {
  const count = 5_000_000
  const body = bytes('[' + '0,'.repeat(count - 1) + '0]') // 10 MB, 5e6 + 1 nodes
  const started = performance.now()
  const e = refusal(() => checkJson(body, { maxDepth: 128, maxNodes: 1_000_000 }))
  t.equal(e.code, 'json_too_many_nodes')
  t.same(e.details, { limit: 1_000_000 })
  t.ok(performance.now() - started < 1000, 'refused quickly')
  t.same(checkJson(body, { maxDepth: 1, maxNodes: count + 1 }), { depth: 1, nodes: count + 1 }, 'exactly at the cap passes')

  const w = watched(bytes('[' + 'true,'.repeat(100) + 'true]'))
  refusal(() => checkJson(w.view, { maxDepth: 1, maxNodes: 11 }))
  // node 12 is the 11th `true`, at 1 + 10 * 5 = 51: refused on its first byte
  t.equal(w.furthest(), 51, 'stopped at the node that crossed the cap')
})

t.test('malformed input is not refused here (JSON.parse decides) and never throws', async (t) => {
  for (const s of ['', '   ', '"unterminated', '"ends in backslash\\', ']]]}}}', '{"a":', '[1,,2]', 'tru', '\u00ff\u00fe', '{"a"}', '[1 2 3]']) {
    t.doesNotThrow(() => checkJson(bytes(s), WIDE), JSON.stringify(s))
  }
  // an unterminated string hides everything after it: nothing more to count
  t.same(checkJson(bytes('["a", "b'), WIDE), { depth: 1, nodes: 3 })
  // stray closers never drive the depth negative
  t.same(checkJson(bytes(']]][1]'), WIDE), { depth: 1, nodes: 2 })
})

t.test('works on a view into a larger buffer (byteOffset) and on a Buffer', async (t) => {
  const whole = bytes('xxxx{"a":[1,2]}yyyy')
  t.same(checkJson(whole.subarray(4, 15), WIDE), { depth: 2, nodes: 4 })
  t.same(checkJson(Buffer.from('{"a":[1,2]}'), WIDE), { depth: 2, nodes: 4 })
})
