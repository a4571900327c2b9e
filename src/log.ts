// Logging: pino, JSON lines, credentials redacted wherever they could appear.

import pino, { type Logger } from 'pino'

/** Paths that may carry a credential; redaction paths are compiled once, here. */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers["x-api-key"]',
  'headers.authorization',
  'headers["x-api-key"]',
  'authorization',
  '["x-api-key"]',
  'apiKey',
  'key',
]

/**
 * A logger for a worker thread. It writes to fd 1 itself, asynchronously: a worker's
 * `process.stdout` would relay every line through the main thread over a MessagePort (one
 * message per exchange log line, on the primary's event loop), and a synchronous write would
 * stall the relay on a slow stdout.
 */
export function createThreadLogger (level: string): Logger {
  return createLogger(level, pino.destination({ dest: 1, sync: false }))
}

export function createLogger (level: string, destination?: pino.DestinationStream): Logger {
  const opts: pino.LoggerOptions = {
    level,
    base: { pid: process.pid, service: 'sluice' },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    timestamp: pino.stdTimeFunctions.isoTime,
  }
  return destination ? pino(opts, destination) : pino(opts)
}
