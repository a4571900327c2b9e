// classify() and inspect() on crafted frames: the layouts providers send, the shapes SSE
// allows, and what the byte checks catch and cannot catch.
import t, { type Test } from 'tap'
import { chat, messages, responses, type FrameClass, type ProtocolInspector } from '../../../src/protocols/index.ts'

const f = (s: string): Buffer => Buffer.from(s)
const CHUNK = '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}]'

function classes (p: ProtocolInspector, cases: Array<[string, FrameClass]>, t: Test): void {
  for (const [frame, want] of cases) t.equal(p.classify(f(frame)), want, JSON.stringify(frame.length > 90 ? frame.slice(0, 60) + '…' + frame.slice(-30) : frame))
}

t.test('chat: deltas pass, terminal/usage/error frames are inspected', async t => {
  classes(chat, [
    ['data: ' + CHUNK + '}', 'pass'],
    ['data: ' + CHUNK + ',"usage":null}', 'pass'],
    ['data: ' + CHUNK + ',"usage":null,"obfuscation":"aZ09xQ"}', 'pass'],
    ['data: ' + CHUNK + ',"obfuscation":"aZ09xQ"}', 'pass'],
    ['data: ' + CHUNK.replace('"finish_reason":null}', '"finish_reason":null,"stop_reason":null}') + '}', 'pass'],
    ['data:' + CHUNK + '}', 'pass'],
    ['data: ' + CHUNK.replace('"finish_reason":null', '"finish_reason":"stop"') + '}', 'inspect'],
    ['data: ' + CHUNK.replace('"finish_reason":null', '"finish_reason": "length"') + '}', 'inspect'],
    ['data: {"id":"x","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}', 'inspect'],
    ['data: ' + CHUNK + ',"usage": {"prompt_tokens":1}}', 'inspect'],
    ['data: {"error":{"message":"boom","type":"server_error","code":"x"}}', 'inspect'],
    ['data: {"id":"x","error" : {"message":"boom"},"choices":[]}', 'inspect'],
    ['data: [DONE]', 'inspect'],
    ['data:[DONE]', 'inspect'],
    // pretty-printed JSON (Python-style separators): slower path, same answers
    ['data: {"id": "x", "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": null}]}', 'pass'],
    ['data: {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}', 'inspect'],
    // text that merely mentions the keys is not a key
    ['data: {"id":"x","choices":[{"delta":{"content":"\\"usage\\":{ \\"error\\": 1} finish_reason"},"finish_reason":null}],"x":1}', 'pass'],
    ['data: {"id":"x","choices":[{"delta":{"content":"error"},"finish_reason":null}],"x":1}', 'pass'],
    // SSE shapes: comments, ids, CRLF, several data lines
    [': keep-alive', 'pass'],
    ['retry: 1000', 'pass'],
    ['data:', 'pass'],
    ['data: ', 'pass'],
    ['id: 5\ndata: ' + CHUNK + '}', 'pass'],
    ['data: ' + CHUNK + '}\r\nid: 5', 'pass'],
    ['data: {"id":"x",\ndata: "choices":[],"usage":{"prompt_tokens":1}}', 'inspect'],
    ['data: {"a":\r\ndata: 1}', 'pass'],
  ], t)
})

t.test('chat: what the byte checks call malformed, and what they cannot see', async t => {
  classes(chat, [
    // the sim's malformed-frame fault: a payload cut inside a string
    ['data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"sim-malformed', 'malformed'],
    ['data: not json', 'malformed'],
    ['data:  ', 'malformed'],
    ['data: [1,2]', 'malformed'],
    ['data: {"a":1}\ndata: tail', 'malformed'],
    ['data: "text"', 'malformed'],
  ], t)
  // Damage between a `{` and a `}` is not visible to byte checks in a pass frame ...
  t.equal(chat.classify(f('data: {"id":"x","choices":[{"delta":{"content":"a\\q"},"logprobs":null,"finish_reason":null}]}')), 'pass', 'a bad escape inside a delta passes (the SDK decodes it)')
  // ... but an inspected frame is parsed, and a parse failure is a provider_protocol_error.
  t.throws(() => chat.inspect(f('data: {"id":"x","choices":[{"finish_reason":"stop"}],}')), { code: 'provider_protocol_error' })
})

t.test('chat: inspect reads the few fields', async t => {
  t.same(chat.inspect(f('data: [DONE]')), { terminal: 'done' })
  t.same(chat.inspect(f('data: ' + CHUNK.replace('"finish_reason":null', '"finish_reason":"tool_calls"') + ',"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}')), {
    responseId: 'chatcmpl-1', model: 'm', stopReason: 'tool_calls', usage: { inputTokens: 5, outputTokens: 7, totalTokens: 12 },
  })
  t.same(chat.inspect(f('data: {"error":{"message":"boom","type":"server_error","param":null,"code":503}}')).error, { type: 'server_error', message: 'boom', code: '503' })
  t.same(chat.inspect(f('data: {"error":"plain"}')).error, { type: 'error', message: 'plain' })
  t.same(chat.inspect(f('data: {"a":\ndata: 1}')), {}, 'several data lines are joined before parsing')
  t.throws(() => chat.inspect(f('data: [1]')), { code: 'provider_protocol_error' }, 'not an object')
})

const named = (event: string, data: string): string => `event: ${event}\ndata: ${data}`

t.test('responses: by event name', async t => {
  classes(responses, [
    [named('response.created', '{"type":"response.created","sequence_number":0,"response":{"id":"r"}}'), 'inspect'],
    [named('response.in_progress', '{"type":"response.in_progress","sequence_number":1,"response":{"id":"r"}}'), 'pass'],
    [named('response.output_text.delta', '{"type":"response.output_text.delta","sequence_number":2,"delta":"x"}'), 'pass'],
    [named('response.completed', '{"type":"response.completed","response":{}}'), 'inspect'],
    [named('response.incomplete', '{"type":"response.incomplete","response":{}}'), 'inspect'],
    [named('response.failed', '{"type":"response.failed","response":{}}'), 'inspect'],
    [named('error', '{"type":"error","code":"x","message":"y"}'), 'inspect'],
    [named('response.something_new', '{"type":"response.something_new"}'), 'pass'],
    ['event: response.completed\r\ndata: {"type":"response.completed"}', 'inspect'],
    ['event:response.completed\ndata:{"type":"response.completed"}', 'inspect'],
    // no event line: the payload's leading type decides; another layout is inspected
    ['data: {"type":"response.output_text.delta","delta":"x"}', 'pass'],
    ['data: {"type":"response.completed","response":{}}', 'inspect'],
    ['data: {"sequence_number":3,"type":"response.output_text.delta"}', 'inspect'],
    // field lines around it
    ['id: 4\nevent: response.output_text.delta\ndata: {"type":"response.output_text.delta"}', 'pass'],
    [named('response.completed', '{"type":"response.completed"}') + '\nid: 9', 'inspect'],
    [': ping', 'pass'],
    ['data: [DONE]', 'pass'],
    ['event: response.completed\ndata:', 'pass'],
    // malformed
    [named('response.output_text.delta', '{"type":"response.output_text.delta","sequence_number":3,"delta":"sim-malformed'), 'malformed'],
    [named('response.completed', 'nope'), 'malformed'],
    ['event: response.output_text.delta', 'pass'],
  ], t)
})

t.test('responses: inspect and sequence numbers', async t => {
  t.same(responses.inspect(f(named('response.created', '{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","model":"gpt-5.5","created_at":17,"status":"in_progress"}}'))), {
    event: 'response.created', sequenceNumber: 0, responseId: 'resp_1', model: 'gpt-5.5', createdAt: 17,
  })
  const done = responses.inspect(f(named('response.completed', '{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","usage":{"input_tokens":3,"output_tokens":4,"total_tokens":7}}}')))
  t.equal(done.terminal, 'completed')
  t.same(done.usage, { inputTokens: 3, outputTokens: 4, totalTokens: 7 })
  const failed = responses.inspect(f(named('response.failed', '{"type":"response.failed","sequence_number":9,"response":{"id":"resp_1","status":"failed","error":{"code":"server_error","message":"bad"}}}')))
  t.equal(failed.terminal, 'failed')
  t.same(failed.error, { type: 'response.failed', message: 'bad', code: 'server_error' })
  t.same(responses.inspect(f(named('error', '{"type":"error","sequence_number":4,"code":"server_error","message":"m","param":null}'))).error, { type: 'error', message: 'm', code: 'server_error' })
  t.same(responses.inspect(f(named('error', '{"type":"error","error":{"type":"invalid_request_error","code":"c","message":"m"}}'))).error, { type: 'invalid_request_error', message: 'm', code: 'c' })
  t.equal(responses.inspect(f('data: {"type":"response.incomplete","response":{}}')).terminal, 'incomplete', 'type from the payload')
  const peek = responses.peekSequenceNumber as (b: Uint8Array) => number
  t.equal(peek(f(named('response.output_text.delta', '{"type":"response.output_text.delta","sequence_number":1234,"delta":"x"}'))), 1234)
  t.equal(peek(f('data: {"type":"response.output_text.delta","sequence_number":56,"delta":"x"}')), 56)
  t.equal(peek(f(named('response.output_text.delta', '{"type":"response.output_text.delta","delta":"x","sequence_number":5}'))), -1, 'another layout: unknown, not misread')
  t.equal(peek(f(': c')), -1)
})

t.test('messages: by event name', async t => {
  classes(messages, [
    [named('message_start', '{"type":"message_start","message":{}}'), 'inspect'],
    [named('content_block_start', '{"type":"content_block_start","index":0}'), 'pass'],
    [named('content_block_delta', '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"message_stop"}}'), 'pass'],
    [named('ping', '{"type":"ping"}'), 'pass'],
    [named('message_delta', '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}'), 'inspect'],
    [named('message_stop', '{"type":"message_stop"}'), 'inspect'],
    [named('error', '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'), 'inspect'],
    ['data: {"type":"message_stop"}', 'inspect'],
    [named('content_block_delta', '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"sim-malformed'), 'malformed'],
  ], t)
  const start = messages.inspect(f(named('message_start', '{"type":"message_start","message":{"id":"msg_1","model":"claude","usage":{"input_tokens":10,"cache_creation_input_tokens":5,"cache_read_input_tokens":100,"output_tokens":1}}}')))
  t.same(start, { event: 'message_start', responseId: 'msg_1', model: 'claude', usage: { inputTokens: 115, outputTokens: 1 } })
  t.same(messages.inspect(f(named('message_delta', '{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":30}}'))), {
    event: 'message_delta', stopReason: 'max_tokens', usage: { outputTokens: 30 },
  })
  t.same(messages.inspect(f(named('message_stop', '{"type":"message_stop"}'))), { event: 'message_stop', terminal: 'completed' })
  t.same(messages.inspect(f(named('error', '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'))).error, { type: 'overloaded_error', message: 'Overloaded' })
  t.throws(() => messages.inspect(f(named('message_stop', '{"type":"message_stop",}'))), { code: 'provider_protocol_error' })
})

t.test('a plain Uint8Array frame is accepted everywhere', async t => {
  const u8 = new Uint8Array(f('data: [DONE]'))
  t.equal(chat.classify(u8), 'inspect')
  t.same(chat.inspect(u8), { terminal: 'done' })
  t.equal(messages.classify(new Uint8Array(f(named('ping', '{"type":"ping"}')))), 'pass')
})
