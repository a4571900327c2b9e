// What every failure tail says, whatever the protocol's envelope.

import type { FailureRecord } from '../sse/sign.ts'

/**
 * The human message of a tail: `sluice <code>: <message>`. SDKs put the provider error's
 * message into the exception they raise, so the catalogue code reaches the caller's logs.
 */
export function tailMessage (record: FailureRecord): string {
  return 'sluice ' + record.code + ': ' + record.message
}
