// ops/nginx/sluice.conf: `nginx -t` accepts it as it is (and refuses a broken copy, so its
// silence means something), and nginx run unprivileged from a temporary folder with that file
// (only its ports changed) in front of two real sluice instances routes like the HAProxy
// config: a session sticks to one instance whichever header or path names it (the instances'
// exchange log lines, which carry their instanceId, prove it), requests without one spread,
// a client that hangs up is gone for sluice at once, and a client that stops reading stops the
// stream at sluice (no buffering in nginx).
//
// nginx is required (CI installs it, .ci/run): when it is missing this test fails.

import t from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { socketBufferBytes } from '../helpers/platform.ts'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { request } from 'undici'
import { sha256Hex } from '../../src/config/load.ts'
import { KEY, chatBody } from '../helpers/exchange.ts'
import { ROOT, startGateway, until, waitIdle, type Gateway } from '../helpers/gateway.ts'
import { freePort } from '../helpers/haproxy.ts'
import { dataOf, dropConnections, endsExchange, openEvents, submit } from '../helpers/sse.ts'

const CONF = join(ROOT, 'ops/nginx/sluice.conf')

function nginxBin (): string {
  for (const p of ['/usr/sbin/nginx', '/usr/local/sbin/nginx', '/usr/bin/nginx']) if (existsSync(p)) return p
  const which = spawnSync('sh', ['-c', 'command -v nginx'], { encoding: 'utf8' })
  if (which.status === 0 && which.stdout.trim()) return which.stdout.trim()
  throw new Error('nginx is not installed: apt-get install -y nginx (.ci/run installs it)')
}

/** A main config in `dir` (pid, logs, temp paths inside it) that includes `include`. */
function mainConf (dir: string, include: string): string {
  for (const d of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(dir, d), { recursive: true })
  const file = join(dir, 'nginx.conf')
  writeFileSync(file, [
    `pid ${join(dir, 'nginx.pid')};`,
    `error_log ${join(dir, 'error.log')} info;`,
    'events { worker_connections 256; }',
    'http {',
    `  access_log ${join(dir, 'access.log')};`,
    ...['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((d) => `  ${d === 'body' ? 'client_body' : d}_temp_path ${join(dir, d)};`),
    `  include ${include};`,
    '}',
    '',
  ].join('\n'))
  return file
}

function nginxTest (conf: string, dir: string) {
  return spawnSync(nginxBin(), ['-t', '-p', dir, '-e', join(dir, 'error.log'), '-c', conf], { encoding: 'utf8' })
}

t.test('nginx -t accepts ops/nginx/sluice.conf, and refuses a broken copy', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-nginx-t-'))
  const ok = nginxTest(mainConf(dir, CONF), dir)
  t.equal(ok.status, 0, `nginx -t: ${ok.stderr}`)
  t.match(ok.stderr, /test is successful/)

  const broken = join(dir, 'broken.conf')
  writeFileSync(broken, readFileSync(CONF, 'utf8').replace('hash $sluice_sid consistent;', 'hash $sluice_sid consistently;'))
  const bad = nginxTest(mainConf(dir, broken), dir)
  t.not(bad.status, 0, 'a broken copy is refused')
  t.match(bad.stderr, /consistently/, 'naming what is wrong')
})

t.test('nginx in front of two instances: affinity, spread, no buffering', async (t) => {
  const config = {
    workers: 1,
    keys: [{ name: 'team', sha256: sha256Hex(KEY), models: ['*'] }],
    providers: [{ name: 'sim-chat', protocol: 'openai-chat', baseUrl: 'sim', models: ['gpt-4o*'] }],
    sim: { enabled: true, port: 0 },
  }
  const ids = ['nginx-a', 'nginx-b']
  const gws: Gateway[] = await Promise.all(ids.map((id) => startGateway(config, { env: { SLUICE_INSTANCE_ID: id } })))
  const dir = mkdtempSync(join(tmpdir(), 'sluice-nginx-'))
  const port = await freePort()
  // Only the ports change: the frontend's, and one server line per instance in each upstream.
  let text = readFileSync(CONF, 'utf8')
  t.equal(text.match(/^\s*listen 127\.0\.0\.1:8080;$/gm)?.length, 1, 'one listen line')
  text = text.replace(/^(\s*listen )127\.0\.0\.1:8080;$/m, (_m, p: string) => `${p}127.0.0.1:${port};`)
  for (const up of ['sluice_sessions', 'sluice_spread']) {
    const re = new RegExp(`(upstream ${up} \\{\\n(?:.*\\n)*?)((?:\\s*server 127\\.0\\.0\\.1:\\d+ .*\\n)+)`)
    const m = re.exec(text)
    t.ok(m, `upstream ${up} has server lines`)
    const model = m![2].split('\n')[0]
    const lines = gws.map((g) => model.replace(/127\.0\.0\.1:\d+/, `127.0.0.1:${g.port}`)).join('\n') + '\n'
    text = text.replace(re, (_all, head: string) => head + lines)
  }
  const rendered = join(dir, 'sluice.conf')
  writeFileSync(rendered, text)
  const conf = mainConf(dir, rendered)
  t.equal(nginxTest(conf, dir).status, 0, 'the rendered copy passes nginx -t')
  const proc = spawn(nginxBin(), ['-p', dir, '-e', join(dir, 'error.log'), '-c', conf, '-g', 'daemon off; master_process off;'], { stdio: ['ignore', 'pipe', 'pipe'] })
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()))
  t.teardown(async () => {
    await dropConnections()
    proc.kill('SIGTERM')
    await exited
    await Promise.all(gws.map((g) => g.stop()))
  })
  const url = `http://127.0.0.1:${port}`
  await until(async () => (await request(`${url}/v1/models`, { headers: { authorization: `Bearer ${KEY}` } }).then((r) => r.body.text().then(() => r.statusCode), () => 0)) === 200, 'nginx answers', 10_000)

  const post = async (headers: Record<string, string>, body: unknown) => {
    const r = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })
    await r.body.text()
    return r.statusCode
  }
  const sessions = Array.from({ length: 8 }, (_v, i) => `ngx-${i}`)
  for (const s of sessions) {
    for (const h of ['x-session-id', 'session-id', 'x-claude-code-session-id']) t.equal(await post({ [h]: s }, chatBody(`${s} ${h}`)), 200)
    const accepted = await submit(url, KEY, s, 'chat', chatBody(`${s} non-blocking`))
    t.equal(accepted.status, 202)
    const es = await openEvents(url, s, { key: KEY, lastEventId: accepted.json.lastEventId as number })
    const events = await es.until(endsExchange(accepted.json.exchangeId as string), 10_000)
    es.close()
    t.equal(dataOf(events.at(-1)!).status, 200, `${s}: its events came from the instance that ran it`)
  }
  const exchanges = (from: number[] = []) => gws.flatMap((g, at) => g.logs.slice(from[at] ?? 0).flatMap((l) => { try { return [{ ...JSON.parse(l), at }] } catch { return [] } })
    .filter((l: { msg?: string }) => l.msg === 'exchange')) as Array<{ sessionId: string | null; instanceId: string; at: number }>
  await until(() => exchanges().length >= sessions.length * 4, 'every exchange line')
  const owners = new Set<number>()
  for (const s of sessions) {
    const at = new Set(exchanges().filter((l) => l.sessionId === s).map((l) => l.at))
    t.equal(at.size, 1, `${s}: one instance`)
    owners.add([...at][0])
  }
  // Where ketama places 8 session ids depends on the instances' (random) ports: all 8 can land
  // on one instance. More sessions, one exchange each, until one lands on the other (each
  // instance owns a fair share of the ring, so 64 more leave no real chance of a miss).
  for (let i = 0; owners.size < 2 && i < 64; i++) {
    const s = `ngx-more-${i}`
    const from = gws.map((g) => g.logs.length)
    t.equal(await post({ 'x-session-id': s }, chatBody(s)), 200)
    await until(() => exchanges(from).some((l) => l.sessionId === s), `the exchange line of ${s}`)
    for (const l of exchanges(from)) if (l.sessionId === s) owners.add(l.at)
  }
  t.equal(owners.size, 2, 'sessions spread over both instances')
  t.ok(exchanges().every((l) => l.instanceId === ids[l.at]), 'each line names its instance')

  // No session: two at once go to two instances (least_conn).
  const before = gws.map((g) => g.logs.length)
  t.same(await Promise.all([0, 1].map((i) => post({}, chatBody(`spread ${i}\n#sim ttft=600`)))), [200, 200])
  await until(() => exchanges(before).length >= 2, 'their lines')
  t.equal(new Set(exchanges(before).map((l) => l.at)).size, 2, 'one on each instance')

  // A client that hangs up while its exchange waits for the provider: released at once.
  const ac = new AbortController()
  const waiting = request(`${url}/v1/chat/completions`, {
    method: 'POST',
    signal: ac.signal,
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-session-id': 'ngx-hangup' },
    body: JSON.stringify(chatBody('hang up\n#sim ttft=30000', { stream: true })),
  }).then(() => 'answered', (err: Error) => err.name)
  const activeNow = async (): Promise<number[]> => Promise.all(gws.map(async (g) => (await g.metrics()).get('sluice_exchanges_active') ?? 0))
  await until(async () => (await activeNow()).some((n) => n === 1), 'the exchange waiting', 5000)
  ac.abort()
  t.equal(await waiting, 'AbortError')
  await until(async () => (await activeNow()).every((n) => n === 0), 'the instance to release the hung-up exchange (well before the provider\'s 30 s)', 3000)

  // Unbuffered: a client that stops reading stops the stream at sluice (nginx does not read
  // the provider's stream ahead into its buffers or a temp file, as proxy_buffering on would).
  // More events than every buffer on the way can take: the kernel's on two TCP connections
  // (client to nginx, nginx to sluice; a 24 MB stream was once absorbed whole and the exchange
  // ended while the client was paused), plus 8 MiB for nginx's own.
  const tokens = Math.max(24_000, Math.ceil((socketBufferBytes(2) + 8 * 2 ** 20) / 1000))
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-session-id': sessions[0] },
    body: JSON.stringify(chatBody(`unbuffered\n#sim tokens=${tokens} bytes=1000`, { stream: true })),
    highWaterMark: 16 * 1024,
  })
  res.body.pause()
  const owner = gws[exchanges().find((l) => l.sessionId === sessions[0])!.at]
  await until(async () => ((await owner.metrics()).get('sluice_stream_pending_bytes') ?? 0) > 0, 'sluice to hold bytes back for the paused client', 15_000)
  // And it stays stopped: read ahead by a buffering proxy, the stream would flow on.
  const held: number[] = []
  for (let i = 0; i < 10; i++) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    const m = await owner.metrics()
    held.push(m.get('sluice_exchanges_active') === 1 ? m.get('sluice_stream_pending_bytes') ?? 0 : -1)
  }
  t.ok(held.every((b) => b > 0), `the exchange waits on the client, its bytes held back (${held})`)
  let size = 0
  let tail = ''
  res.body.on('data', (c: Buffer) => { size += c.length; tail = (tail + c.toString('latin1')).slice(-64) })
  res.body.resume()
  await new Promise((resolve) => res.body.once('end', resolve))
  t.ok(size > tokens * 1000 && tail.trimEnd().endsWith('data: [DONE]'), `and the stream completed once read (${size} bytes)`)
  for (const g of gws) t.same(await waitIdle(g), {}, 'each instance idle')
})
