// src/load/os.ts: a process's CPU time read thread by thread from schedstat (ns) agrees with
// utime + stime (clock ticks) over a long window, counts a thread started inside the window,
// and is not quantised to the 10 ms tick over a short one.
import t from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { cpuMsSince, threadCpuNs } from '../../../src/load/os.ts'

const TICKS_PER_SECOND = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout?.trim()) || 100

/** The reference: utime + stime of the whole process from /proc/<pid>/stat, in ms (tick resolution). */
function cpuMs (pid: number): number {
  const s = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const f = s.slice(s.lastIndexOf(')') + 2).split(' ')
  // f[0] is field 3 (state): utime is field 14, stime field 15.
  return (Number(f[11]) + Number(f[12])) * 1000 / TICKS_PER_SECOND
}

// The main thread spins 2 ms of every 5; on 'w' a worker thread starts spinning 3 ms of every 7.
const CHILD = `
const { Worker } = require('node:worker_threads')
setInterval(() => { const e = Date.now() + 2; while (Date.now() < e); }, 5)
process.stdin.on('data', () => { new Worker('setInterval(() => { const e = Date.now() + 3; while (Date.now() < e); }, 7)', { eval: true }); process.stdout.write('up\\n') })
`

t.test('schedstat per thread: the process\'s CPU, exact, threads started since included', { skip: process.platform !== 'linux' && 'Linux /proc only' }, async (t) => {
  const child = spawn(process.execPath, ['-e', CHILD], { stdio: ['pipe', 'pipe', 'inherit'] })
  t.teardown(() => { child.kill('SIGKILL') })
  await sleep(300)
  const pid = child.pid!
  t.ok(threadCpuNs(pid).size >= 1, 'the threads are listed')

  // A long window: both readings agree within a few ticks.
  let ticks0 = cpuMs(pid)
  let before = threadCpuNs(pid)
  await sleep(1000)
  let exact = cpuMsSince(pid, before)
  let ticks = cpuMs(pid) - ticks0
  t.ok(exact > 50, `the spinning main thread is counted (${exact.toFixed(1)} ms in 1 s)`)
  t.ok(Math.abs(exact - ticks) <= 40, `schedstat ${exact.toFixed(1)} ms against ticks ${ticks} ms`)

  // A thread started inside the window counts from zero.
  ticks0 = cpuMs(pid)
  before = threadCpuNs(pid)
  child.stdin!.write('w')
  await new Promise((resolve) => child.stdout!.once('data', resolve))
  await sleep(1000)
  const threadsNow = threadCpuNs(pid)
  t.ok([...threadsNow.keys()].some((tid) => !before.has(tid)), 'a new thread is there')
  exact = cpuMsSince(pid, before)
  ticks = cpuMs(pid) - ticks0
  t.ok(exact > 100, `main thread and worker both counted (${exact.toFixed(1)} ms in ~1 s)`)
  t.ok(Math.abs(exact - ticks) <= 60, `schedstat ${exact.toFixed(1)} ms against ticks ${ticks} ms, the new thread included`)

  // A short window is not a multiple of the tick.
  const short: number[] = []
  for (let i = 0; i < 5; i++) {
    const b = threadCpuNs(pid)
    await sleep(25)
    short.push(cpuMsSince(pid, b))
  }
  t.ok(short.some((ms) => Math.abs(ms / 10 - Math.round(ms / 10)) > 0.05), `short windows read finer than 10 ms ticks: ${short.map((x) => x.toFixed(2)).join(', ')}`)

  child.kill('SIGKILL')
  await new Promise((resolve) => child.once('exit', resolve))
  t.ok(Number.isNaN(cpuMsSince(pid, before)), 'NaN once the process is gone')
})
