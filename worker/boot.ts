// The HTTP worker thread's entry: the compile cache first (src/modules.ts), then the worker
// itself, whose static imports (fastify, undici, pino, ...) are compiled only now.

import { useCompileCache } from '../src/modules.ts'

useCompileCache()
await import('./main.ts')
