// One chunk of a chunked response body, written as one buffer on the client's socket.
//
// `res.write(chunk)` on a chunked ServerResponse corks the socket and queues a tick to uncork
// it, keeps the chunk in the response's own list, and on that tick sends the size line, a CRLF,
// the chunk and a CRLF as four socket writes (four buffered-write records, a writev with its
// array, a callback closure). For a stream relayed one provider event at a time (a ~100-300 byte
// chunk every few ms per exchange, nothing to gather within a tick) that was about half of
// everything an HTTP worker allocated at 96 streams (a sampled allocation profile: ~190 KB per
// exchange, 49 % under res.write). Here the size line, the chunk and the CRLF are copied into
// one buffer and written on the socket: one write, the same bytes on the wire.
//
// Only when the response is in the plain state where res.write would do exactly that: chunked,
// its header already on the socket (`_headerSent`: Node sends the header with the first write,
// so the first chunk always goes through res.write), the socket its own and writable, nothing
// of the response's own queued (`res.writableLength` counts the response's queue plus the
// socket's: equal means the response holds nothing), and a chunk small enough that copying it
// is cheaper than the four writes. Anything else goes to res.write. The socket's buffer fills
// the same way res.write would fill it, and its 'drain' is what a waiting writer waits for
// (ClientDrain listens for the socket's 'drain' as well as the response's: the response only
// re-emits it after one of its own writes was refused).

import type { ServerResponse } from 'node:http'

/** Above this many bytes a chunk goes through res.write (a writev of it is cheaper than a copy). */
export const DIRECT_WRITE_MAX = 16 * 1024

const HEX = '0123456789abcdef'

/**
 * Writes `chunk` (non-empty) as the next chunk of `res`'s body. Returns what res.write would:
 * false when the socket's buffer is over its high-water mark (wait for 'drain').
 */
export function writeBody (res: ServerResponse, chunk: Buffer): boolean {
  const n = chunk.length
  const socket = res.socket
  if (
    n === 0 || n > DIRECT_WRITE_MAX || socket === null || socket === undefined ||
    !res.chunkedEncoding || (res as unknown as { _headerSent?: boolean })._headerSent !== true ||
    res.writableEnded || res.destroyed || !socket.writable ||
    res.writableLength !== socket.writableLength
  ) return res.write(chunk)
  let digits = 1
  for (let v = n >>> 4; v > 0; v >>>= 4) digits++
  const frame = Buffer.allocUnsafe(digits + 4 + n)
  for (let i = digits - 1, v = n; i >= 0; i--, v >>>= 4) frame[i] = HEX.charCodeAt(v & 15)
  frame[digits] = 13
  frame[digits + 1] = 10
  chunk.copy(frame, digits + 2)
  frame[digits + 2 + n] = 13
  frame[digits + 3 + n] = 10
  return socket.write(frame)
}
