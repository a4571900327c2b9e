// A real node:http server for the client tests: every request is logged (method, path,
// headers) and handed to the test's handler, and its close is observable. It stands in for
// the network, not for sluice code.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface Seen {
  method: string
  path: string
  headers: IncomingMessage['headers']
  body: string
  /** Resolves when the request's connection or response closes. */
  closed: Promise<void>
}

export type Handler = (req: IncomingMessage, res: ServerResponse, seen: Seen) => void | Promise<void>

export interface TestServer {
  url: string
  requests: Seen[]
  /** Requests whose path starts with `prefix`. */
  count (prefix?: string): number
  /** Resolves with the next request to arrive (optionally matching a path prefix). */
  next (prefix?: string): Promise<Seen>
  close (): Promise<void>
}

export async function startServer (handler: Handler): Promise<TestServer> {
  const requests: Seen[] = []
  const waiting: Array<{ prefix: string, resolve: (s: Seen) => void }> = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const seen: Seen = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        closed: new Promise((resolve) => res.once('close', () => resolve())),
      }
      requests.push(seen)
      for (const w of [...waiting]) {
        if (seen.path.startsWith(w.prefix)) {
          waiting.splice(waiting.indexOf(w), 1)
          w.resolve(seen)
        }
      }
      Promise.resolve(handler(req, res, seen)).catch((err) => {
        res.destroy(err as Error)
      })
    })
  })
  server.keepAliveTimeout = 100
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    count: (prefix = '') => requests.filter((r) => r.path.startsWith(prefix)).length,
    next: (prefix = '') => new Promise((resolve) => waiting.push({ prefix, resolve })),
    async close () {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

export function json (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers })
  res.end(text)
}

export function sleep (ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** Polls `check` until true (or fails after `ms`). */
export async function until (check: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for: ${what}`)
    await sleep(5)
  }
}
