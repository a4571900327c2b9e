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
// What res.write's tick is for stays: the writes of one turn of the loop leave together. The
// first write on an uncorked socket corks it, and the socket is uncorked at the end of the turn
// (the next microtask checkpoint: one promise reaction for every socket corked in that turn),
// so chunks that come together (one provider read holding several, at throughput) go out in one
// writev: 9.3 write syscalls per 2000-event exchange, as with res.write, against 23 when each
// went out alone. At 96 streams of 50 events (one worker, 3264 exchanges): V8 scavenges 414
// with res.write, 313 now (257 uncorked); CPU per exchange ~0.88x res.write's (paired cpu-ab,
// two processes of each).
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

/**
 * Above this many bytes a chunk goes through res.write. Up to it the frame (chunk + size line +
 * two CRLFs, at most 16 bytes more) is a slice of Buffer's shared pool (allocUnsafe below half
 * of Buffer.poolSize); a larger one would be an ArrayBuffer of its own, malloc'd and counted as
 * V8 external memory per chunk, and at throughput (2000-event streams, chunks of several KiB)
 * that cost more than the four writes it saves.
 */
export const DIRECT_WRITE_MAX = (Buffer.poolSize >>> 1) - 16

const HEX = '0123456789abcdef'
const RESOLVED = Promise.resolve()

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
  if (socket.writableCorked === 0) {
    socket.cork()
    if (corked.length === 0) void RESOLVED.then(endTurn)
    corked.push(socket)
  }
  return socket.write(frame)
}

type Sock = NonNullable<ServerResponse['socket']>
/** The sockets corked in this turn (the other array is the spare: no allocation per turn). */
let corked: Sock[] = []
let spare: Sock[] = []

function endTurn (): void {
  const list = corked
  corked = spare // a socket corked while these uncork starts the next turn's list
  // Each was corked once here; uncorked once (one that res.end() already uncorked fully, or that
  // was destroyed, only has nothing left to send).
  for (let i = 0; i < list.length; i++) if (list[i].writableCorked > 0) list[i].uncork()
  list.length = 0
  spare = list
}
