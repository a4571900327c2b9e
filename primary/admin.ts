// The admin plane, on the primary thread and its own port: /healthz, /readyz, /metrics,
// /capabilities. It reads the ledger directly (lock-free snapshots), so it answers while
// every HTTP worker is saturated, stuck or dead. Plain node:http: four fixed routes do not
// need a framework, and the primary stays small.

import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import { nodeHttp } from '../src/net/node-http.ts'
import type { Config } from '../src/config/schema.ts'
import { SluiceError } from '../src/errors.ts'
import { capabilities } from '../src/capabilities.ts'
import type { Ledger } from '../src/ledger/ledger.ts'
import { renderMetrics, type PrimaryCounters } from './metrics.ts'
import type { Supervisor } from './supervisor.ts'

export interface AdminDeps {
  config: Config
  ledger: Ledger
  supervisor: Supervisor
  counters: PrimaryCounters
  startedAt: number
  version: string
}

export function startAdmin (deps: AdminDeps, host: string, port: number): Promise<Server> {
  const caps = JSON.stringify(capabilities(deps.config, deps.version))
  const server = nodeHttp.createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0]
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      return send(res, 405, 'application/json', JSON.stringify(new SluiceError('method_not_allowed', { allow: 'GET, HEAD' }, 'admin routes are GET (or HEAD) only').toBody()), { allow: 'GET, HEAD' })
    }
    switch (path) {
      case '/healthz':
        return send(res, 200, 'application/json', `{"status":"ok","uptimeMs":${Date.now() - deps.startedAt}}`)
      case '/readyz': {
        const draining = deps.ledger.draining
        const listening = deps.supervisor.workers.filter((w) => w.listening).length
        const ready = !draining && listening === deps.supervisor.workers.length
        return send(res, ready ? 200 : 503, 'application/json', JSON.stringify({
          ready,
          draining,
          workersListening: listening,
          workers: deps.supervisor.workers.length,
        }))
      }
      case '/metrics':
        return send(res, 200, 'text/plain; version=0.0.4; charset=utf-8', renderMetrics(deps.ledger.snapshot(), deps.supervisor, deps.counters, deps.config))
      case '/capabilities':
        return send(res, 200, 'application/json', caps)
      default:
        return send(res, 404, 'application/json', JSON.stringify(new SluiceError('not_found', {}, 'no such admin route').toBody()))
    }
  })
  server.keepAliveTimeout = 5_000
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen({ host, port }, () => {
      server.off('error', reject)
      resolve(server)
    })
  })
}

function send (res: ServerResponse, status: number, type: string, body: string, extra: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body), 'cache-control': 'no-store', ...extra })
  res.end(body)
}
