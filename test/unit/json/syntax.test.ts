// The invalid_json position finder must agree with what it explains: JSON.parse over a fatal
// UTF-8 decode. Checked on hand-picked faults and on many mutated bodies.

import t from 'tap'
import { readFileSync, readdirSync } from 'node:fs'
import { findSyntaxError, lineColumn, utf8ErrorAt } from '../../../src/json/syntax.ts'

const enc = new TextEncoder()
const fatal = new TextDecoder('utf-8', { fatal: true })
const parses = (b: Uint8Array) => { try { JSON.parse(fatal.decode(b)); return true } catch { return false } }

t.test('offsets and fixed reasons for typical faults', async (t) => {
  const cases: Array<[string, number, string]> = [
    ['{"a":1,}', 7, 'expected a double-quoted member name'],
    ['{"a" 1}', 5, "expected ':' after a member name"],
    ['[1,2', 4, 'unexpected end of input'],
    ['', 0, 'unexpected end of input'],
    ['abc', 0, 'expected a value'],
    ['{"x":1} x', 8, 'unexpected content after the JSON value'],
    ['{"a":01}', 6, "expected ',' or '}' after a member"],
    ['[1 2]', 3, "expected ',' or ']' after an element"],
    ['"\\x"', 2, 'bad escape in a string'],
    ['"\\u12G4"', 5, 'bad \\u escape in a string'],
    ['["a\u0001"]', 3, 'control character in a string'],
    ['{"k":NaN}', 5, 'expected a value'],
    ['[tru]', 4, 'expected true, false or null'],
    ['[-]', 2, 'bad number'],
    ['[1.]', 3, 'bad number'],
    ['[1e+]', 4, 'bad number'],
    ['{"model":"sk-secret', 19, 'unexpected end of input'],
  ]
  for (const [text, offset, reason] of cases) {
    const b = enc.encode(text)
    t.equal(parses(b), false, `JSON.parse refuses ${JSON.stringify(text)}`)
    t.same(findSyntaxError(b), { offset, reason }, JSON.stringify(text))
  }
  for (const ok of ['{}', ' [1, -0.5e-3, "a\\u00e9\\n", true, false, null] ', '\ufeff{"bom":1}', '"\\ud800"']) {
    t.equal(findSyntaxError(enc.encode(ok)), null, JSON.stringify(ok))
  }
})

/** A fixture body made small and still valid: long strings cut, arrays cut to 3 items. */
function shrink (v: unknown): unknown {
  if (typeof v === 'string') return v.slice(0, 12)
  if (Array.isArray(v)) return v.slice(0, 3).map(shrink)
  if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).slice(0, 6).map(([k, x]) => [k, shrink(x)]))
  return v
}

t.test('agrees with JSON.parse (validity, and the position V8 reports) on mutated request bodies', async (t) => {
  const dir = new URL('../../../../shared/fixtures/clients/', import.meta.url)
  const seeds = readdirSync(dir).filter((f) => f.includes('-POST-'))
    .map((f) => JSON.stringify(shrink(JSON.parse(readFileSync(new URL(f, dir), 'utf8')).body)))
  seeds.push('{"a":[1,-2.5e3,true,false,null,{"b":"c\\"\\\\\\u00e9"}],"d":{}}')
  for (const s of seeds) t.equal(findSyntaxError(enc.encode(s)), null, 'every seed is valid')
  let seed = 12345
  const rnd = (n: number) => { seed = (seed * 1103515245 + 12345) >>> 0; return (seed >>> 8) % n }
  const alphabet = '{}[]:,"\\0123456789.eE+-tfnrlu aAx\n\u0001'
  let disagreements = 0
  let invalid = 0
  let positioned = 0
  for (let i = 0; i < 4000; i++) {
    const chars = [...seeds[rnd(seeds.length)]]
    for (let m = 1 + rnd(2); m > 0; m--) {
      const at = rnd(chars.length + 1)
      const op = rnd(3)
      const c = alphabet[rnd(alphabet.length)]
      if (op === 0) chars.splice(at, 1)
      else if (op === 1) chars.splice(at, 0, c)
      else chars[at] = c
    }
    const text = chars.join('')
    const b = enc.encode(text)
    const fault = findSyntaxError(b)
    let v8: string | null = null
    try { JSON.parse(fatal.decode(b)) } catch (e) { v8 = (e as Error).message }
    if ((v8 === null) !== (fault === null)) { disagreements++; continue }
    if (fault === null || v8 === null) continue
    invalid++
    const at = /at position (\d+)/.exec(v8)
    // V8 counts UTF-16 units; compare where bytes and units coincide (ASCII before the fault)
    if (at && /^[\x00-\x7f]*$/.test(text.slice(0, Number(at[1])))) {
      positioned++
      if (Number(at[1]) !== fault.offset) disagreements++
    }
  }
  t.equal(disagreements, 0, 'valid exactly when JSON.parse accepts, and at the same position')
  t.ok(invalid > 1000, `most mutations break the grammar (${invalid})`)
  t.ok(positioned > 1000, `positions compared (${positioned})`)
})

t.test('utf8ErrorAt agrees with the fatal decoder and points at the bad sequence', async (t) => {
  const cases: Array<[number[], number]> = [
    [[0x61, 0x62], -1],
    [[0x61, 0xff], 1],
    [[0xc3, 0xa9, 0x80], 2], // a stray continuation byte
    [[0xc0, 0xaf], 0], // overlong
    [[0xe0, 0x80, 0xaf], 0], // overlong, 3 bytes
    [[0xed, 0xa0, 0x80], 0], // a UTF-16 surrogate
    [[0xf4, 0x90, 0x80, 0x80], 0], // above U+10FFFF
    [[0x61, 0xe6, 0x97], 1], // truncated
    [[0xf0, 0x9f, 0x98, 0x80, 0x22], -1], // 😀"
  ]
  for (const [bytes, at] of cases) t.equal(utf8ErrorAt(new Uint8Array(bytes)), at, bytes.map((x) => x.toString(16)).join(' '))
  let seed = 99
  const rnd = () => { seed = (seed * 1664525 + 1013904223) >>> 0; return seed >>> 24 }
  let disagreements = 0
  for (let i = 0; i < 5000; i++) {
    const b = new Uint8Array(1 + (i % 7))
    for (let k = 0; k < b.length; k++) b[k] = i % 3 === 0 ? 0x80 | rnd() : rnd()
    let ok = true
    try { fatal.decode(b) } catch { ok = false }
    if (ok !== (utf8ErrorAt(b) === -1)) disagreements++
  }
  t.equal(disagreements, 0)
})

t.test('lineColumn counts lines and byte columns from 1', async (t) => {
  const b = enc.encode('{\n  "a": 1,\n  x\n}')
  t.same(lineColumn(b, 0), { line: 1, column: 1 })
  t.same(lineColumn(b, 14), { line: 3, column: 3 })
})
