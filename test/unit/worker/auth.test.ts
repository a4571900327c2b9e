// The Authenticator (worker/auth.ts): a presented key is hashed once and compared with every
// configured hash. The digest is taken as a latin1 string and made a Buffer (cheaper than a
// 'buffer' answer): that must be the digest's exact bytes for every byte value, or a key would
// be refused (or, worse, another accepted).

import t from 'tap'
import { createHash, hash, randomBytes } from 'node:crypto'
import { Authenticator } from '../../../worker/auth.ts'
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
