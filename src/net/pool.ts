// undici's Pool (and the request API on it) without the rest of undici. `import { Pool } from
// 'undici'` loads all of undici — fetch, WebSocket, EventSource, the cache and cookie APIs,
// the mock agents, every interceptor — which costs an HTTP worker ~12 MB of RSS (6 MB of it
// heap) for code it never runs (measured: an empty worker 63.4 MB, + `undici` 86.1 MB, +
// `undici/lib/dispatcher/pool.js` 73.9 MB). This loads only the dispatcher and attaches the
// request API to it exactly as undici's own index.js does (`Object.assign(Dispatcher
// .prototype, api)`; doing it twice is harmless). undici has no "exports" map, so these paths
// are reachable; test/unit/net-pool.test.ts pins that they are the very classes and functions
// the package exports, so an undici upgrade that moves them fails there, not in production.
// The bundled build (scripts/build.ts) makes this `require` the bundle's own, so these files
// are bundled rather than read from node_modules.

import { createRequire } from 'node:module'
import type { Pool as UndiciPool } from 'undici'

const require = createRequire(import.meta.url)
const Dispatcher = require('undici/lib/dispatcher/dispatcher.js') as { prototype: object }
Object.assign(Dispatcher.prototype, require('undici/lib/api/index.js') as object)

export const Pool = require('undici/lib/dispatcher/pool.js') as typeof UndiciPool
export type Pool = UndiciPool
