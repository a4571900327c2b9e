import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { createInterface } from 'node:readline'
import { request } from 'undici'
const KEY = 'sk-cold-1234567890'
writeFileSync('/tmp/cold-cfg.json', JSON.stringify({ listen: { port: 0, adminPort: 0 }, workers: 1, limits: { parserIdleMs: Number(process.env.IDLE ?? 0) }, sim: { enabled: true, port: 0 },
  keys: [{ name: 'b', sha256: createHash('sha256').update(KEY).digest('hex'), models: ['*'] }], providers: [{ name: 'sim', protocol: 'openai-chat', baseUrl: 'sim', models: ['*'] }] }))
const c = spawn(process.env.TASKSET ? 'taskset' : process.execPath, [...(process.env.TASKSET ? ['-c', '0', process.execPath] : []), 'dist/bin/sluice.js', 'serve', '--config', '/tmp/cold-cfg.json'], { env: { ...process.env, SLUICE_SIGNING_KEY: '0123456789abcdef'.repeat(4) }, stdio: ['pipe', 'pipe', 'inherit'] })
const port: number = await new Promise((res) => createInterface({ input: c.stdout! }).on('line', (l) => { if (l.includes('"sluice ready"')) res(JSON.parse(l).port) }))
await new Promise((r) => setTimeout(r, 1000))
const big = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'system', content: 'x'.repeat(150_000) }, { role: 'user', content: 'hi\n#sim tokens=1' }] })
for (let i = 0; i < 4; i++) {
  const t0 = performance.now()
  const r = await request(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST', body: big, headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` } })
  await r.body.text()
  console.log('request', i, r.statusCode, (performance.now() - t0).toFixed(1), 'ms')
}
c.kill('SIGTERM')
