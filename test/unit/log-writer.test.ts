// src/log-writer.ts, on real descriptors: a child process writes lines through a LineWriter
// whose fd 1 is a FIFO, a regular file, or the socket a Node parent gives its child (written
// with send(2), or through sonic-boom where send cannot be used). A reader
// that stops reading never stops the writer; what is held stays under its cap; what did not
// fit is dropped, counted, and reported by a warning line once fd 1 takes lines again; every
// line that arrives is whole and in order. And a file that runs out of room in the middle of a
// line (RLIMIT_FSIZE) gets the rest of that line, byte for byte, once it has room again.

import t, { type Test } from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { closeSync, mkdtempSync, openSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fifo } from '../helpers/gateway.ts'

const WRITER = new URL('../../src/log-writer.ts', import.meta.url).href
const LINES = 3000
const CAP = 256 * 1024

/**
 * The child: writes LINES lines of ~600 bytes at once, reports on stderr (mode, held bytes,
 * dropped lines) and, once `go` arrives on stdin, drains and reports again before it exits.
 */
const child = (opts = ''): string => `
import { LineWriter } from ${JSON.stringify(WRITER)}
const w = new LineWriter({ fd: 1, maxWrite: 4096, queueMaxBytes: ${CAP}${opts} })
const pad = 'x'.repeat(580)
for (let i = 0; i < ${LINES}; i++) w.write(JSON.stringify({ seq: i, pad }) + '\\n')
process.stderr.write(JSON.stringify({ mode: w.mode, queued: w.queuedBytes, dropped: w.droppedLines }) + '\\n')
process.stdin.once('data', () => {
  const t = setInterval(() => {
    w.flush()
    if (w.queuedBytes === 0 && w.droppedLines === 0) { clearInterval(t); process.stderr.write('drained\\n'); w.end(); process.exit(0) }
  }, 10)
})
`
const CHILD = child()

interface Report { mode: string; queued: number; dropped: number }

/** Runs the child with `stdout` as its fd 1; `read` starts reading only after the first report. */
async function run (t: Test, stdout: number, startReading: () => Promise<string>): Promise<{ report: Report; text: string; stderr: string }> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', CHILD], { stdio: ['pipe', stdout, 'pipe'] })
  let stderr = ''
  child.stderr!.setEncoding('utf8')
  const report = await new Promise<Report>((resolve, reject) => {
    child.stderr!.on('data', (c: string) => {
      stderr += c
      const nl = stderr.indexOf('\n')
      if (nl >= 0 && stderr.startsWith('{')) resolve(JSON.parse(stderr.slice(0, nl)) as Report)
    })
    child.once('exit', (code) => reject(new Error(`child exited ${code} before reporting: ${stderr}`)))
  })
  const reading = startReading()
  child.stdin!.write('go\n')
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve))
  t.equal(code, 0, 'the child exited cleanly')
  return { report, text: await reading, stderr }
}

/** Checks the lines fd 1 received; returns the drop warnings' counts, in order. */
function checkLines (t: Test, text: string, report: Report): number[] {
  const lines = text.split('\n')
  t.equal(lines.pop(), '', 'the output ends with a whole line')
  const parsed = lines.map((l) => { try { return JSON.parse(l) as { seq?: number; droppedLines?: number; msg?: string } } catch { return null } })
  t.same(parsed.flatMap((p, i) => p === null ? [lines[i].slice(0, 60)] : []), [], 'every line is whole JSON')
  const seqs = parsed.flatMap((p) => p?.seq === undefined ? [] : [p.seq])
  t.ok(seqs.every((s, i) => i === 0 || s > seqs[i - 1]), 'lines arrive in the order written')
  const notices = parsed.filter((p) => p?.droppedLines !== undefined).map((n) => n!.droppedLines!)
  if (report.dropped > 0) {
    // Every line that did not arrive was counted, and a warning says so (in fallback mode a
    // warning can squeeze in as soon as the queue has room for it, so there may be several).
    t.ok(notices.length >= 1, 'a warning says lines were dropped')
    t.equal(notices.reduce((a, b) => a + b, 0), LINES - seqs.length, 'the warnings count exactly the lines that did not arrive')
    t.ok(LINES - seqs.length >= report.dropped, 'at least the lines reported dropped are missing')
    t.ok(parsed.every((p) => p?.droppedLines === undefined || /dropped/.test(String((p as { msg?: string }).msg))), 'the warning says what happened')
  } else {
    t.equal(seqs.length, LINES, 'every line arrived')
    t.same(notices, [], 'no drop warning')
  }
  return notices
}

t.test('a FIFO nobody reads: the writer goes on, holds at most its cap, drops and reports the rest', async (t) => {
  const { childFd: wfd, reader } = fifo()
  reader.pause()
  let text = ''
  reader.setEncoding('utf8')
  const { report } = await run(t, wfd, async () => {
    closeSync(wfd)
    reader.on('data', (c: string) => { text += c })
    reader.resume()
    await new Promise((resolve) => reader.once('end', resolve))
    return text
  })
  t.equal(report.mode, 'pipe', 'a FIFO is written through a non-blocking description of its own')
  t.ok(report.queued > 0 && report.queued <= CAP, `held ${report.queued} bytes, at most the cap (${CAP})`)
  t.ok(report.dropped > 0, `${report.dropped} lines dropped while nobody read`)
  // Held lines go first, then one warning: nothing was reported before the queue drained.
  t.same(checkLines(t, text, report), [report.dropped], 'one warning, after the held lines')
})

t.test('a regular file: every line, one write each', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-logw-'))
  const file = join(dir, 'out.log')
  const fd = openSync(file, 'w')
  const { report } = await run(t, fd, async () => { closeSync(fd); return '' })
  t.equal(report.mode, 'direct')
  t.equal(report.queued, 0, 'nothing held')
  checkLines(t, readFileSync(file, 'utf8'), report)
})

t.test('a file that runs out of room mid-line: the rest is held as bytes and goes out when there is room again', async (t) => {
  // RLIMIT_FSIZE, set on the child by prlimit once it is up (its own start-up writes files),
  // makes the file refuse past LIMIT bytes: the second line, UTF-8 throughout, is cut inside a
  // two-byte character, and every retry meets EFBIG (Node ignores SIGXFSZ) until the test
  // raises the limit. Then the rest of that line and the third line follow. The file must hold
  // exactly the three lines: the rest is the line's own bytes (not re-decoded from a cut
  // character), nothing was dropped while the file was full, nothing was written before it.
  const LIMIT = 1000
  const a = JSON.stringify({ seq: 0, pad: 'a'.repeat(589) }) + '\n'
  const b = JSON.stringify({ seq: 1, text: 'é'.repeat(300) }) + '\n'
  const c = JSON.stringify({ seq: 2, text: 'done' }) + '\n'
  const cutAt = LIMIT - Buffer.byteLength(a)
  t.ok(cutAt > 0 && cutAt < Buffer.byteLength(b), 'the limit falls inside the second line')
  t.ok(Buffer.from(b).subarray(0, cutAt).toString().endsWith('\uFFFD'), 'inside one of its characters')
  const script = `
import { LineWriter } from ${JSON.stringify(WRITER)}
const say = (o) => process.stderr.write(JSON.stringify(o) + '\\n')
// Node ignores SIGXFSZ, but under tap a signal-exit handler in the child catches it and raises
// it again once its own hooks ran: a listener of our own keeps the signal ignored, as in sluice.
process.on('SIGXFSZ', () => {})
let step = 0
let w
say({ pid: process.pid })
process.stdin.on('data', () => {
  if (step++ === 0) {
    w = new LineWriter({ fd: 1, maxWrite: 4096 })
    for (const line of ${JSON.stringify([a, b, c])}) w.write(line)
    say({ mode: w.mode, queued: w.queuedBytes, dropped: w.droppedLines })
    return
  }
  const t = setInterval(() => {
    w.flush()
    if (w.queuedBytes === 0) { clearInterval(t); w.end(); process.exit(0) }
  }, 10)
})
`
  const dir = mkdtempSync(join(tmpdir(), 'sluice-logw-'))
  const file = join(dir, 'out.log')
  const fd = openSync(file, 'w')
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['pipe', fd, 'pipe'] })
  closeSync(fd)
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve))
  const said: Array<Record<string, unknown>> = []
  let err = ''
  const waiters: Array<() => void> = []
  child.stderr!.setEncoding('utf8')
  child.stderr!.on('data', (d: string) => {
    err += d
    for (let nl = err.indexOf('\n'); nl >= 0; nl = err.indexOf('\n')) {
      said.push(JSON.parse(err.slice(0, nl)) as Record<string, unknown>)
      err = err.slice(nl + 1)
      waiters.shift()?.()
    }
  })
  const next = async (): Promise<Record<string, unknown>> => {
    if (said.length === 0) await new Promise<void>((resolve) => waiters.push(resolve))
    return said.shift()!
  }
  const prlimit = (fsize: string): void => {
    // The child's own pid (under tap the pid spawn() returns may not be that process's).
    const r = spawnSync('prlimit', ['--pid', String(pid), `--fsize=${fsize}`])
    t.equal(r.status, 0, `prlimit --fsize=${fsize} ${r.stderr.toString()}`)
  }
  const { pid } = await next() as { pid: number }
  prlimit(`${LIMIT}:unlimited`)
  child.stdin!.write('write\n')
  const report = await next() as unknown as Report
  await new Promise((resolve) => setTimeout(resolve, 100)) // retries meet EFBIG meanwhile
  t.equal(readFileSync(file).length, LIMIT, 'the file stopped at the limit')
  prlimit('unlimited:unlimited')
  child.stdin!.write('go\n')
  t.equal(await exited, 0, 'the child exited cleanly')
  t.equal(report.mode, 'direct')
  t.equal(report.queued, Buffer.byteLength(a + b + c) - LIMIT, 'the rest of the cut line and the next line were held')
  t.equal(report.dropped, 0)
  t.ok(readFileSync(file).equals(Buffer.from(a + b + c)), 'the file holds the three lines exactly')
})

/** The child on the socket a Node parent gives (not read until the child reported: the socket fills). */
async function onSocket (code: string): Promise<{ report: Report; text: string }> {
  return await new Promise<{ report: Report; text: string }>((resolve, reject) => {
    let stdoutText = ''
    let stderr = ''
    const child = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['pipe', 'pipe', 'pipe'] })
    child.stdout!.pause()
    child.stdout!.setEncoding('utf8')
    child.stderr!.setEncoding('utf8')
    let rep: Report | null = null
    child.stderr!.on('data', (c: string) => {
      stderr += c
      const nl = stderr.indexOf('\n')
      if (rep === null && nl >= 0) {
        rep = JSON.parse(stderr.slice(0, nl)) as Report
        child.stdout!.on('data', (d: string) => { stdoutText += d })
        child.stdout!.resume()
        child.stdin!.write('go\n')
      }
    })
    child.once('close', (code) => {
      if (rep === null || code !== 0) reject(new Error(`child exited ${code}: ${stderr}`))
      else resolve({ report: rep, text: stdoutText })
    })
  })
}

t.test('the socket a Node parent gives: one send(2) per line, the writer goes on, holds at most its cap, drops and reports the rest', async (t) => {
  const { report, text } = await onSocket(CHILD)
  t.equal(report.mode, 'socket', 'a socket is written with send(2) in the thread itself')
  t.ok(report.queued > 0 && report.queued <= CAP, `held ${report.queued} bytes, at most the cap (${CAP})`)
  t.ok(report.dropped > 0, `${report.dropped} lines dropped while nobody read`)
  t.same(checkLines(t, text, report), [report.dropped], 'one warning, after the held lines')
})

t.test('a socket where send(2) is not used: sonic-boom, its queue bounded too', async (t) => {
  const { report, text } = await onSocket(child(', socketSend: false'))
  t.equal(report.mode, 'fallback')
  t.ok(report.queued <= CAP, `held ${report.queued} bytes, at most the cap (${CAP})`)
  t.ok(report.dropped > 0, `${report.dropped} lines dropped while nobody read`)
  checkLines(t, text, report)
})

t.test('three threads on one socket, a reader that stalls: every line whole, each thread in order, every line there or counted', async (t) => {
  const THREADS = 3
  const PER = 1500
  // Each worker thread has its own LineWriter on fd 1 (as sluice's primary and HTTP workers do).
  const code = `
import { Worker, isMainThread, workerData } from 'node:worker_threads'
import { LineWriter } from ${JSON.stringify(WRITER)}
if (isMainThread) {
  const ws = Array.from({ length: ${THREADS} }, (_, i) => new Worker(new URL(import.meta.url), { workerData: i }))
  const modes = ws.map((w) => new Promise((r) => w.once('message', r)))
  const exits = ws.map((w) => new Promise((r) => w.once('exit', r)))
  await Promise.all(exits)
  process.stderr.write(JSON.stringify({ modes: await Promise.all(modes) }) + '\\n')
} else {
  const w = new LineWriter({ fd: 1, maxWrite: 4096, queueMaxBytes: ${CAP} })
  const pad = 'y'.repeat(1500 + workerData * 300)
  for (let i = 0; i < ${PER}; i++) { w.write(JSON.stringify({ thread: workerData, seq: i, pad }) + '\\n'); if (i % 100 === 0) await new Promise((r) => setTimeout(r, 1)) }
  const { parentPort } = await import('node:worker_threads')
  parentPort.postMessage(w.mode)
  await new Promise((resolve) => { const t = setInterval(() => { w.flush(); if (w.queuedBytes === 0 && w.droppedLines === 0) { clearInterval(t); w.end(); resolve() } }, 5) })
}
`
  // A file, not -e: the worker threads load the same module.
  const file = join(mkdtempSync(join(tmpdir(), 'sluice-logw-')), 'threads.mjs')
  writeFileSync(file, code)
  const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'pipe'] })
  let text = ''
  let stderr = ''
  child.stdout!.setEncoding('utf8')
  child.stderr!.setEncoding('utf8')
  child.stderr!.on('data', (c: string) => { stderr += c })
  // The reader stalls now and then: the socket fills, each writer holds, drops and recovers.
  child.stdout!.on('data', (c: string) => {
    text += c
    child.stdout!.pause()
    setTimeout(() => child.stdout!.resume(), 2)
  })
  const exit = await new Promise<number | null>((resolve) => child.once('close', resolve))
  t.equal(exit, 0, `the child exited cleanly ${stderr}`)
  t.same((JSON.parse(stderr.trim().split('\n').pop()!) as { modes: string[] }).modes, Array(THREADS).fill('socket'), 'every thread writes with send(2)')
  const lines = text.split('\n')
  t.equal(lines.pop(), '', 'the output ends with a whole line')
  const parsed = lines.map((l) => { try { return JSON.parse(l) as { thread?: number; seq?: number; droppedLines?: number } } catch { return null } })
  t.same(parsed.flatMap((p, i) => p === null ? [lines[i].slice(0, 60)] : []), [], 'every line is whole JSON: no two threads\' lines interleaved')
  const arrived = parsed.filter((p) => p?.seq !== undefined)
  for (let th = 0; th < THREADS; th++) {
    const seqs = arrived.filter((p) => p!.thread === th).map((p) => p!.seq!)
    t.ok(seqs.every((s, i) => i === 0 || s > seqs[i - 1]), `thread ${th}: its lines in the order written`)
  }
  const dropped = parsed.reduce((n, p) => n + (p?.droppedLines ?? 0), 0)
  t.equal(arrived.length + dropped, THREADS * PER, `every line arrived (${arrived.length}) or was counted in a warning (${dropped})`)
})

t.test('a socket whose reader is gone: the writer neither throws nor holds, the thread goes on', async (t) => {
  const code = `
import { LineWriter } from ${JSON.stringify(WRITER)}
const w = new LineWriter({ fd: 1, maxWrite: 4096, queueMaxBytes: ${CAP} })
process.stdin.once('data', () => {
  for (let i = 0; i < 100; i++) w.write(JSON.stringify({ seq: i }) + '\\n')
  process.stderr.write(JSON.stringify({ mode: w.mode, queued: w.queuedBytes, dropped: w.droppedLines }) + '\\n')
  process.exit(0)
})
`
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['pipe', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr!.setEncoding('utf8')
  child.stderr!.on('data', (c: string) => { stderr += c })
  child.stdout!.destroy() // the reading end closed: a send is EPIPE
  await new Promise((r) => setTimeout(r, 50))
  child.stdin!.write('go\n')
  const exit = await new Promise<number | null>((resolve) => child.once('close', resolve))
  t.equal(exit, 0, `no SIGPIPE, no throw: the child exited cleanly ${stderr}`)
  t.same(JSON.parse(stderr.trim()), { mode: 'socket', queued: 0, dropped: 0 }, 'nothing held for a reader that is gone (EPIPE is not retried)')
})
