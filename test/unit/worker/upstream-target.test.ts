// targetOf (worker/upstream.ts): a provider's origin and request path, parsed once per provider
// and route, must read exactly as a fresh WHATWG URL parse of baseUrl + path does, every time.

import t from 'tap'
import fc from 'fast-check'
import { targetOf } from '../../../worker/upstream.ts'

t.test('targetOf reads as new URL(baseUrl + path), cached or not', async (t) => {
  let ran = 0
  const base = fc.webUrl({ withQueryParameters: false, withFragments: false }).map((u) => u.replace(/\/$/, ''))
  const path = fc.constantFrom('/v1/chat/completions', '/chat/completions', '/v1/responses', '/v1/messages', '/v1/messages?beta=true', '/x%20y')
  fc.assert(fc.property(base, path, (b, p) => {
    ran++
    const url = new URL(b + p)
    const want = { origin: url.origin, path: url.pathname + url.search }
    t.same(targetOf(b, p), want)
    t.same(targetOf(b, p), want, 'again, from the cache')
  }), { numRuns: 200 })
  t.equal(ran, 200)
  t.same(targetOf('http://127.0.0.1:8089/v1', '/chat/completions'), { origin: 'http://127.0.0.1:8089', path: '/v1/chat/completions' })
  t.same(targetOf('https://api.example.com', '/v1/messages'), { origin: 'https://api.example.com', path: '/v1/messages' })
})

t.test('the cache stays bounded and keeps answering after it is cleared', async (t) => {
  for (let i = 0; i < 600; i++) targetOf(`http://h${i}.example:80`, '/v1/x')
  t.same(targetOf('http://h1.example:80', '/v1/x'), { origin: 'http://h1.example', path: '/v1/x' })
})
