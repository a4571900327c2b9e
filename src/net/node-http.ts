// node:http, loaded the CommonJS way. An ES `import … from 'node:http'` builds the module's ESM
// facade, which reads every export once, and three of them (WebSocket, CloseEvent,
// MessageEvent) are lazy getters that load Node's own bundled undici: 770 KB of source, with
// tls, http2, zlib, dns and the web streams behind it. Measured in a bare process: +13.5 MB of
// RSS and +2.4 MB of heap, in every thread that imports it (the primary and each HTTP worker;
// docs/benchmarks.md). require() returns the same module without the facade. Type imports
// (`import type … from 'node:http'`) cost nothing and stay as they are.

import { createRequire } from 'node:module'

export const nodeHttp: typeof import('node:http') = createRequire(import.meta.url)('node:http')
