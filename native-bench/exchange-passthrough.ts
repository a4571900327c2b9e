// The "price of a bare pass-through" reference for exchange.bench.ts: node:http in, one undici
// Pool out, request and response piped with no features (no auth, limits or inspection).
// A caller that leaves destroys the pipeline, which aborts the upstream request.
//   node native-bench/exchange-passthrough.ts http://127.0.0.1:UPSTREAMPORT
// Prints {"port":N} when listening; exits when its stdin closes (its parent is gone).

import { createServer, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import { pipeline } from 'node:stream'
import { Pool } from 'undici'

const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'te', 'trailer', 'host', 'proxy-connection'])
const strip = (h: IncomingHttpHeaders) =>
  Object.fromEntries(Object.entries(h).filter(([k, v]) => v !== undefined && !HOP.has(k))) as Record<string, string | string[]>
const pool = new Pool(process.argv[2], { pipelining: 1 })

const server = createServer((req, res) => {
  const ac = new AbortController()
  res.on('close', () => { if (!res.writableFinished) ac.abort() })
  pool.request({ method: 'POST', path: req.url ?? '/', headers: strip(req.headers), body: req, signal: ac.signal }).then((up) => {
    res.writeHead(up.statusCode, strip(up.headers))
    pipeline(up.body, res, () => {})
  }, () => { if (!res.headersSent) res.writeHead(502); res.end() })
})
server.listen(0, '127.0.0.1', () => process.stdout.write(JSON.stringify({ port: (server.address() as AddressInfo).port }) + '\n'))
process.stdin.on('end', () => process.exit(0)).resume()
