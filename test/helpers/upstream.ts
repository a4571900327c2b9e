// A stand-in provider for the behaviour tests that need answers the simulated provider does not
// give: a node:http server on 127.0.0.1 (an ephemeral port) that reads each request's whole body
// and hands it to the test's handler. The test closes `server` itself.

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface LocalUpstream { server: Server; url: string }

/** Listens on 127.0.0.1:0; `handler` runs once a request's body has been read whole. */
export async function startUpstream (handler: (req: IncomingMessage, body: Buffer, res: ServerResponse) => void): Promise<LocalUpstream> {
  const server = createServer((req, res) => {
    const parts: Buffer[] = []
    req.on('data', (c: Buffer) => parts.push(c))
    req.on('end', () => handler(req, Buffer.concat(parts), res))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }
}
