// An alias changes the bytes of the top-level `model` value and nothing else.

import t from 'tap'
import { replaceTopLevelMember, topLevelMemberValues } from '../../../src/json/splice.ts'

const enc = new TextEncoder()
const dec = new TextDecoder('utf-8', { ignoreBOM: true }) // keep a BOM visible
const splice = (text: string, value: string) => {
  const out = replaceTopLevelMember(enc.encode(text), 'model', JSON.stringify(value))
  return out === null ? null : dec.decode(out)
}

t.test('only the top-level value changes; every other byte stays as sent', async (t) => {
  t.equal(splice('{"model":"a","stream":true}', 'gpt-5'), '{"model":"gpt-5","stream":true}')
  const text = '{\n  "seed": 12345678901234567890,\n  "x": 1.0, "e": "\\u00e9\\/",\r\n  "model" :\t"fast" ,\n  "m": {"model":"inner"}, "l": [{"model":"in array"}]\n}'
  const want = text.replace('"fast"', '"provider-model/v2"')
  t.equal(splice(text, 'provider-model/v2'), want)
  t.equal(JSON.parse(want).m.model, 'inner', 'a nested model member is not the request model')
})

t.test('names are compared decoded; duplicates are all replaced; any value kind is skipped whole', async (t) => {
  t.equal(splice('{"mod\\u0065l":"a"}', 'b'), '{"mod\\u0065l":"b"}')
  t.equal(splice('{"model":"a","x":{"model":[1,{"y":"}"}]},"model":"c"}', 'z'), '{"model":"z","x":{"model":[1,{"y":"}"}]},"model":"z"}')
  t.equal(splice('{"a":[1,[2,"]"],{"b":"\\"}"}],"b":true,"c":null,"d":-1e5,"model":"m"}', 'n'),
    '{"a":[1,[2,"]"],{"b":"\\"}"}],"b":true,"c":null,"d":-1e5,"model":"n"}')
  t.equal(splice('{"model":"a"}', 'quote " and \\ and é'), '{"model":"quote \\" and \\\\ and é"}')
  t.equal(splice('\ufeff {"model":"a"} ', 'b'), '\ufeff {"model":"b"} ')
  t.equal(splice('{"models":"a","mode":"b","\\"model\\"":"c"}', 'x'), null, 'no member called model')
  t.equal(splice('["model","a"]', 'x'), null, 'not an object')
  t.same(topLevelMemberValues(enc.encode('{"model":"ab","model":1}'), 'model'), [[9, 13], [22, 23]])
})
