// A provider stream captured as the chunks it arrived in (from the simulated provider), for the
// in-memory benchmarks that replay it: relay-frames.bench.ts and translate.bench.ts.

import { request } from 'node:http'

export function fetchChunks (url: string, path: string, body: unknown): Promise<Buffer[]> {
  const payload = JSON.stringify(body)
  return new Promise((resolve, reject) => {
    const req = request(url + path, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } }, res => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve(chunks))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(payload)
  })
}
