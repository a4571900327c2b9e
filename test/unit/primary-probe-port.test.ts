// primary/main.ts probePort: port 0 is held until the workers listen, so nobody else can take
// the port in between (the first worker then failed with EADDRINUSE, once in a CI run); a
// configured port is only checked and let go.

import t from 'tap'
import { createServer, type Server } from 'node:net'
import { once } from 'node:events'
import { probePort } from '../../primary/main.ts'

async function listen (opts: { port: number; reusePort?: boolean; exclusive?: boolean }): Promise<{ server: Server; error: NodeJS.ErrnoException | null }> {
  const server = createServer()
  server.listen({ host: '127.0.0.1', ...opts })
  try {
    await once(server, 'listening')
    return { server, error: null }
  } catch (err) {
    return { server, error: err as NodeJS.ErrnoException }
  }
}

const closed = (s: Server): Promise<void> => new Promise((resolve) => s.close(() => resolve()))

t.test('port 0: held until released; a worker can join it meanwhile, nobody else can take it', async (t) => {
  const { port, release } = await probePort('127.0.0.1', 0)
  t.ok(port > 0, `port ${port}`)
  const other = await listen({ port, exclusive: true })
  t.equal(other.error?.code, 'EADDRINUSE', 'another bind of the port is refused while it is held')
  const worker = await listen({ port, reusePort: true })
  t.equal(worker.error, null, 'a reusePort bind (what the workers do) joins it')
  await release()
  await release() // once only
  // The worker's socket still serves the port after the probe let go.
  const served = await listen({ port, exclusive: true })
  t.equal(served.error?.code, 'EADDRINUSE', 'the worker still holds the port')
  await closed(worker.server)
  const free = await listen({ port, exclusive: true })
  t.equal(free.error, null, 'once the worker is gone the port is free: the probe let go of it')
  await closed(free.server)
})

t.test('a configured port is checked and let go at once; served already, it refuses', async (t) => {
  const probe = await probePort('127.0.0.1', 0)
  const port = probe.port
  await probe.release()
  const { port: same, release } = await probePort('127.0.0.1', port)
  t.equal(same, port)
  const after = await listen({ port, exclusive: true })
  t.equal(after.error, null, 'free again right after the check')
  await t.rejects(probePort('127.0.0.1', port), /is already served/, 'a port someone serves is refused')
  await closed(after.server)
  await release()
})
