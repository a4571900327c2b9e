// The wire text of one session event, as stored in the event ring: `event:` and one `data:`
// line per line of the data (an SSE reader joins them back with \n). The reader adds `id:`.

/** The SSE text of one event, without its id line: `event:` and one `data:` per line. */
export function eventText (type: string, data: string): Buffer {
  let out = `event: ${type}\n`
  for (const line of data.split(/\r\n|\r|\n/)) out += `data: ${line}\n`
  return Buffer.from(out)
}

