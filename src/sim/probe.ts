// A raw HTTP probe and SSE splitter for tests: sees exact bytes, resets and stalls that an
// SDK would hide or retry. Used by the sim's own tests; usable against the gateway too.

import type { IncomingHttpHeaders } from 'node:http'
import { nodeHttp } from '../net/node-http.ts'
import type { Sim, SimBodyEvent, SimEndEvent, SimRequestEvent } from './server.ts'

export interface RawResponse {
  /** 0 when no response head arrived. */
  status: number
  headers: IncomingHttpHeaders
  body: Buffer
  /** The transport error that ended the exchange, if any (e.g. ECONNRESET). */
  error: NodeJS.ErrnoException | null
  /** True when the probe gave up after `idleMs` without a byte (and closed the connection). */
  idle: boolean
  /** True when the probe closed the connection itself (abortAfterBytes / abortAfterMs). */
  aborted: boolean
  /** ms from sending the request to the response head. */
  headMs: number | null
}

export interface RawRequestOptions {
  method?: string
  /** Path with optional query, e.g. /v1/messages?beta=true */
  path: string
  /** Serialised with JSON.stringify unless a string or Buffer. */
  body?: unknown
  headers?: Record<string, string>
  /** Give up (and close the connection) after this long without a byte. */
  idleMs?: number
  /** Close the connection after this many body bytes. */
  abortAfterBytes?: number
  /** Close the connection this long after sending the request. */
  abortAfterMs?: number
}

export function rawRequest(baseUrl: string, opts: RawRequestOptions): Promise<RawResponse> {
  const url = new URL(opts.path, baseUrl)
  const payload =
    opts.body === undefined ? undefined : typeof opts.body === 'string' || Buffer.isBuffer(opts.body) ? opts.body : JSON.stringify(opts.body)
  const headers: Record<string, string> = { ...opts.headers }
  if (payload !== undefined) {
    headers['content-type'] ??= 'application/json'
    headers['content-length'] = String(Buffer.byteLength(payload))
  }
  const start = performance.now()
  return new Promise(resolve => {
    const out: RawResponse = { status: 0, headers: {}, body: Buffer.alloc(0), error: null, idle: false, aborted: false, headMs: null }
    const chunks: Buffer[] = []
    let size = 0
    let timer: NodeJS.Timeout | undefined
    let abortTimer: NodeJS.Timeout | undefined
    let settled = false
    const done = (): void => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      clearTimeout(abortTimer)
      out.body = Buffer.concat(chunks, size)
      resolve(out)
    }
    const arm = (): void => {
      if (opts.idleMs === undefined) return
      clearTimeout(timer)
      timer = setTimeout(() => {
        out.idle = true
        req.destroy()
        done()
      }, opts.idleMs)
    }
    const req = nodeHttp.request(url, { method: opts.method ?? (payload === undefined ? 'GET' : 'POST'), headers, agent: false }, res => {
      out.status = res.statusCode ?? 0
      out.headers = res.headers
      out.headMs = performance.now() - start
      arm()
      res.on('data', (chunk: Buffer) => {
        chunks.push(chunk)
        size += chunk.length
        arm()
        if (opts.abortAfterBytes !== undefined && size >= opts.abortAfterBytes) {
          out.aborted = true
          req.destroy()
          done()
        }
      })
      res.on('end', done)
      res.on('error', (err: NodeJS.ErrnoException) => {
        out.error = err
        done()
      })
      res.on('close', done)
    })
    req.on('error', (err: NodeJS.ErrnoException) => {
      out.error = err
      done()
    })
    arm()
    if (opts.abortAfterMs !== undefined) {
      abortTimer = setTimeout(() => {
        out.aborted = true
        req.destroy()
        done()
      }, opts.abortAfterMs)
    }
    req.end(payload)
  })
}

export interface SseFrame {
  event: string | null
  data: string
  /** The frame's bytes, without the blank line that ends it. */
  raw: string
}

/** Splits an SSE body into frames (blank-line separated; `data:` lines joined with \n). */
export function parseSse(body: string | Buffer): SseFrame[] {
  const text = typeof body === 'string' ? body : body.toString('utf8')
  const frames: SseFrame[] = []
  for (const raw of text.split('\n\n')) {
    if (raw === '') continue
    let event: string | null = null
    const data: string[] = []
    for (const line of raw.split('\n')) {
      if (line.startsWith('event:')) event = line.slice(6).trim()
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''))
    }
    frames.push({ event, data: data.join('\n'), raw })
  }
  return frames
}

/**
 * The next exchange the sim sees (optionally the next matching one): its 'request' event and
 * its 'end' event. Register before sending the request.
 */
export function nextExchange(
  sim: Pick<Sim, 'events'>,
  match: (e: SimRequestEvent) => boolean = () => true,
): { request: Promise<SimRequestEvent>; body: Promise<SimBodyEvent | null>; end: Promise<SimEndEvent> } {
  let resolveEnd!: (e: SimEndEvent) => void
  let resolveBody!: (e: SimBodyEvent | null) => void
  const end = new Promise<SimEndEvent>(resolve => {
    resolveEnd = resolve
  })
  const body = new Promise<SimBodyEvent | null>(resolve => {
    resolveBody = resolve
  })
  const request = new Promise<SimRequestEvent>(resolve => {
    const onRequest = (e: SimRequestEvent): void => {
      if (!match(e)) return
      sim.events.off('request', onRequest)
      resolve(e)
      const onBody = (b: SimBodyEvent): void => {
        if (b.id !== e.id) return
        sim.events.off('body', onBody)
        resolveBody(b)
      }
      const onEnd = (x: SimEndEvent): void => {
        if (x.id !== e.id) return
        sim.events.off('end', onEnd)
        sim.events.off('body', onBody)
        resolveBody(null) // no-op when the body was seen
        resolveEnd(x)
      }
      sim.events.on('body', onBody)
      sim.events.on('end', onEnd)
    }
    sim.events.on('request', onRequest)
  })
  return { request, body, end }
}
