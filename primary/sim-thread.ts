// The embedded simulated provider's thread (npm start's default upstream). Its own event
// loop, so simulated provider work never competes with the primary's admin plane.

import { parentPort, workerData } from 'node:worker_threads'
import { startSim } from '../src/sim/index.ts'

const { host, port } = workerData as { host: string; port: number }
const sim = await startSim({ host, port })
parentPort!.postMessage({ url: sim.url })
