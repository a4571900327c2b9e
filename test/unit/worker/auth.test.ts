// The Authenticator (worker/auth.ts): a presented key is hashed once and compared with every
// configured hash. The digest is taken as a latin1 string and made a Buffer (cheaper than a
// 'buffer' answer): that must be the digest's exact bytes for every byte value, or a key would
// be refused (or, worse, another accepted).

import t from 'tap'
import { createHash, hash, randomBytes } from 'node:crypto'
import { Authenticator, maskSecret, matchesMasked } from '../../../worker/auth.ts'
import type { KeyConfig } from '../../../src/config/schema.ts'

const sha = (s: string): string => createHash('sha256').update(s).digest('hex')
const key = (name: string, secret: string): KeyConfig => ({ name, sha256: sha(secret), models: ['*'] } as KeyConfig)

t.test('the latin1 digest is the digest, byte for byte, over many keys (every byte value occurs)', async (t) => {
  const seen = new Set<number>()
  let mismatches = 0
  for (let i = 0; i < 2000; i++) {
    const s = randomBytes(24).toString('base64url')
    const viaLatin1 = Buffer.from(hash('sha256', s, 'binary'), 'latin1')
    const direct = createHash('sha256').update(s).digest()
    if (!viaLatin1.equals(direct)) mismatches++
    for (const b of direct) seen.add(b)
  }
  t.equal(mismatches, 0)
  t.equal(seen.size, 256, 'digests with every byte value were compared')
})

t.test('each configured key authenticates as itself; others, and none, are refused', async (t) => {
  const secrets = Array.from({ length: 5 }, () => 'sk-' + randomBytes(18).toString('base64url'))
  const auth = new Authenticator(secrets.map((s, i) => key(`k${i}`, s)))
  for (const [i, s] of secrets.entries()) {
    t.equal(auth.authenticate({ authorization: `Bearer ${s}` }).name, `k${i}`, `Bearer key ${i}`)
    t.equal(auth.authenticate({ 'x-api-key': s }).name, `k${i}`, `x-api-key ${i}`)
  }
  t.throws(() => auth.authenticate({ authorization: `Bearer ${secrets[0]}x` }), { code: 'unauthorized' }, 'a near miss')
  t.throws(() => auth.authenticate({ authorization: 'Bearer sk-nope' }), { code: 'unauthorized' })
  t.throws(() => auth.authenticate({}), { code: 'unauthorized' }, 'no key at all')
})

t.test('a connection remembers the key verified on it, and only that key', async (t) => {
  const [a, b] = ['sk-' + randomBytes(18).toString('base64url'), 'sk-' + randomBytes(18).toString('base64url')]
  const auth = new Authenticator([key('ka', a), key('kb', b)])
  const conn = {}
  const remembers = (): number => Object.getOwnPropertySymbols(conn).length
  t.equal(auth.authenticate({ authorization: `Bearer ${a}` }, conn).name, 'ka')
  t.equal(remembers(), 1, 'the connection remembers the verified key')
  t.equal(auth.authenticate({ authorization: `Bearer ${a}` }, conn).name, 'ka', 'again on the same connection')
  // Near misses of the remembered key are refused, and the refusal forgets it.
  for (const wrong of [a.slice(0, -1), a + 'x', a.slice(0, -1) + (a.endsWith('A') ? 'B' : 'A'), 'x' + a.slice(1), a + a, '']) {
    if (wrong === '') {
      t.throws(() => auth.authenticate({}, conn), { code: 'unauthorized' }, 'no key at all')
      continue
    }
    t.equal(auth.authenticate({ authorization: `Bearer ${a}` }, conn).name, 'ka', 'remembered')
    t.throws(() => auth.authenticate({ authorization: `Bearer ${wrong}` }, conn), { code: 'unauthorized' }, `near miss ${JSON.stringify(wrong.slice(-6))} (${wrong.length} chars)`)
    t.equal(remembers(), 0, 'and the refusal forgot it')
  }
  // Another caller's key on the same connection (a proxy sharing it) is that caller's principal.
  t.equal(auth.authenticate({ 'x-api-key': b }, conn).name, 'kb', 'another key on the same connection')
  t.equal(auth.authenticate({ authorization: `Bearer ${a}` }, conn).name, 'ka', 'and back')
  // The memory is the connection's: another connection, or none, hashes afresh.
  t.equal(auth.authenticate({ authorization: `Bearer ${b}` }, {}).name, 'kb')
  t.equal(auth.authenticate({ authorization: `Bearer ${b}` }).name, 'kb')
})

t.test('a refused key is never remembered, so it is refused every time', async (t) => {
  const good = 'sk-' + randomBytes(18).toString('base64url')
  const auth = new Authenticator([key('k', good)])
  const conn = {}
  for (let i = 0; i < 3; i++) t.throws(() => auth.authenticate({ authorization: 'Bearer sk-nope' }, conn), { code: 'unauthorized' })
  t.equal(auth.authenticate({ authorization: `Bearer ${good}` }, conn).name, 'k')
})

const sameSecret = (presented: string, remembered: string): boolean => matchesMasked(presented, maskSecret(remembered))

t.test('a masked secret matches exactly the string it masks, for any two strings', async (t) => {
  const fc = (await import('fast-check')).default
  fc.assert(fc.property(fc.string({ unit: 'binary', maxLength: 80 }), fc.string({ unit: 'binary', maxLength: 80 }), (x, y) => sameSecret(x, y) === (y.length > 0 && x === y)), { numRuns: 3000 })
  // Pairs that differ in one place only (the property above rarely draws them).
  fc.assert(fc.property(fc.string({ minLength: 1, maxLength: 80 }), fc.nat(), fc.integer({ min: 1, max: 0xffff }), (x, at, d) => {
    const i = at % x.length
    const y = x.slice(0, i) + String.fromCharCode((x.charCodeAt(i) + d) % 0x10000) + x.slice(i + 1)
    return sameSecret(x, x) && !sameSecret(y, x) && !sameSecret(x + x, x) && !sameSecret(x, x + x)
  }), { numRuns: 3000 })
  t.ok(sameSecret('abc', 'abc'))
  t.notOk(sameSecret('abcabc', 'abc'), 'the remembered key repeated is not it')
  t.notOk(sameSecret('', ''), 'an empty remembered key matches nothing')
  const long = 'k'.repeat(700) + 'é€😀'
  t.ok(sameSecret(long, long), 'longer than the pad, and beyond latin1')
  t.notOk(sameSecret(long.slice(0, -1) + 'x', long))
})

t.test('what is remembered is not the key: no unit of it is the key\'s own', async (t) => {
  const secret = 'sk-' + randomBytes(30).toString('base64url')
  const m = maskSecret(secret)
  t.equal(m.length, secret.length)
  let same = 0
  for (let i = 0; i < m.length; i++) if (m[i] === secret.charCodeAt(i)) same++
  // A pad unit of 0 leaves a unit as it is: 1 in 65536 per unit.
  t.ok(same <= 1, `units left as they were: ${same}`)
  t.notOk(Buffer.from(m.buffer).includes(Buffer.from(secret, 'latin1')), 'its bytes do not hold the key as latin1')
  t.notOk(Buffer.from(m.buffer).includes(Buffer.from(secret, 'utf16le')), 'nor as UTF-16')
})
