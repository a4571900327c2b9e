// A real OTLP/HTTP receiver for tests (a node:http server keeping what the exporter sends) and
// readers for the OTLP/JSON spans it received.

import { createServer, type Server } from 'node:http'

export interface Received { path: string; contentType: string; body: Buffer }

export interface OtlpAttribute { key: string; value: Record<string, unknown> }

export interface OtlpSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
  attributes?: OtlpAttribute[]
  events?: Array<{ name: string; timeUnixNano?: string; attributes?: OtlpAttribute[] }>
}

/** Listens on a loopback port; `got` fills as exports arrive; each is answered 200. */
export async function receiver (): Promise<{ server: Server; url: string; got: Received[] }> {
  const got: Received[] = []
  const server = createServer((req, res) => {
    const parts: Buffer[] = []
    req.on('data', (c: Buffer) => parts.push(c))
    req.on('end', () => {
      got.push({ path: req.url ?? '', contentType: String(req.headers['content-type']), body: Buffer.concat(parts) })
      res.writeHead(200, { 'content-type': req.headers['content-type'] ?? 'application/json' })
      res.end(req.headers['content-type']?.includes('json') ? '{}' : '')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const addr = server.address() as { port: number }
  return { server, url: `http://127.0.0.1:${addr.port}`, got }
}

/** Every span of OTLP/JSON exports (http/json). */
export function spansOf (got: Received[]): OtlpSpan[] {
  const out: OtlpSpan[] = []
  for (const r of got) {
    const j = JSON.parse(r.body.toString('utf8')) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: OtlpSpan[] }> }> }
    for (const rs of j.resourceSpans) for (const ss of rs.scopeSpans) out.push(...ss.spans)
  }
  return out
}

/** An attribute's value, whatever its OTLP type. */
export function attr (s: { attributes?: OtlpAttribute[] }, key: string): unknown {
  const a = s.attributes?.find((x) => x.key === key)
  if (!a) return undefined
  const v = a.value
  return v.stringValue ?? v.intValue ?? v.doubleValue ?? v.boolValue
}
