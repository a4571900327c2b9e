// Protocol rules an encoded provider body must keep, each returned as a list of violations (an
// empty list is a pass) so a failing test says which rule broke and where.
import type { CanonicalRequest, Protocol } from '../../../src/translate/canonical.ts'
import { translateRequest, type TranslateRequestInput } from '../../../src/translate/request/index.ts'

type Json = Record<string, any>

/** Every call id of a provider body, in order, and every result id. */
export function callIds (protocol: Protocol, body: Json): { calls: string[]; results: string[] } {
  const calls: string[] = []
  const results: string[] = []
  if (protocol === 'openai-chat') {
    for (const m of body.messages) {
      for (const c of m.tool_calls ?? []) calls.push(c.id)
      if (m.role === 'tool') results.push(m.tool_call_id)
    }
  } else if (protocol === 'openai-responses') {
    for (const it of body.input) {
      if (it.type === 'function_call' || it.type === 'custom_tool_call') calls.push(it.call_id)
      if (it.type === 'function_call_output' || it.type === 'custom_tool_call_output') results.push(it.call_id)
    }
  } else {
    for (const m of body.messages) {
      if (!Array.isArray(m.content)) continue
      for (const b of m.content) {
        if (b.type === 'tool_use') calls.push(b.id)
        if (b.type === 'tool_result') results.push(b.tool_use_id)
      }
    }
  }
  return { calls, results }
}

/** Chat: each assistant message with tool_calls is followed at once by one tool message per call. */
export function chatToolOrder (body: Json): string[] {
  const bad: string[] = []
  const msgs: Json[] = body.messages
  msgs.forEach((m, i) => {
    if (m.role === 'tool' && !(i > 0 && (msgs[i - 1].role === 'tool' || msgs[i - 1].tool_calls !== undefined))) bad.push(`messages[${i}]: tool message not right after an assistant tool_calls message`)
    if (m.role !== 'assistant' || m.tool_calls === undefined) return
    const want = m.tool_calls.map((c: Json) => c.id).sort()
    const got: string[] = []
    for (let j = i + 1; j < msgs.length && msgs[j].role === 'tool'; j++) got.push(msgs[j].tool_call_id)
    if (JSON.stringify(got.sort()) !== JSON.stringify(want)) bad.push(`messages[${i}]: calls ${want.join(',')} answered by ${got.join(',')}`)
  })
  return bad
}

/**
 * Anthropic: user/assistant alternate (system messages aside), the first non-system message is
 * user, each assistant tool_use turn is answered in the very next user message with the
 * tool_result blocks first and one per call.
 */
export function anthropicTurns (body: Json): string[] {
  const bad: string[] = []
  const msgs: Json[] = body.messages.filter((m: Json) => m.role !== 'system')
  if (msgs.length > 0 && msgs[0].role !== 'user') bad.push('first message is not user')
  msgs.forEach((m, i) => {
    if (i > 0 && msgs[i - 1].role === m.role) bad.push(`messages ${i - 1} and ${i} are both ${m.role}`)
    const content: Json[] = m.content
    if (m.role === 'user') {
      const firstOther = content.findIndex(b => b.type !== 'tool_result')
      if (firstOther !== -1 && content.slice(firstOther).some(b => b.type === 'tool_result')) bad.push(`message ${i}: tool_result after other content`)
      return
    }
    const uses = content.filter(b => b.type === 'tool_use').map(b => b.id).sort()
    if (uses.length === 0) return
    const next = msgs[i + 1]
    const got = next === undefined ? [] : (next.content as Json[]).filter(b => b.type === 'tool_result').map(b => b.tool_use_id).sort()
    if (JSON.stringify(got) !== JSON.stringify(uses)) bad.push(`message ${i}: tool_use ${uses.join(',')} answered next by ${got.join(',')}`)
  })
  return bad
}

/** Responses: every call has exactly one output after it and every output a call before it. */
export function responsesPairs (body: Json): string[] {
  const bad: string[] = []
  const seen = new Set<string>()
  const answered = new Set<string>()
  for (const it of body.input) {
    if (it.type === 'function_call' || it.type === 'custom_tool_call') seen.add(it.call_id)
    if (it.type === 'function_call_output' || it.type === 'custom_tool_call_output') {
      if (!seen.has(it.call_id)) bad.push(`output ${it.call_id} before its call`)
      if (answered.has(it.call_id)) bad.push(`output ${it.call_id} twice`)
      answered.add(it.call_id)
    }
  }
  for (const id of seen) if (!answered.has(id)) bad.push(`call ${id} has no output`)
  return bad
}

export function turnRules (protocol: Protocol, body: Json): string[] {
  return protocol === 'openai-chat' ? chatToolOrder(body) : protocol === 'anthropic' ? anthropicTurns(body) : responsesPairs(body)
}

/** The function names a provider body declares. */
export function declaredNames (protocol: Protocol, body: Json): string[] {
  const tools: Json[] = body.tools ?? []
  if (protocol === 'openai-chat') return tools.map(t => t.function.name)
  if (protocol === 'openai-responses') return tools.filter(t => t.type === 'function' || t.type === 'custom').map(t => t.name)
  return tools.filter(t => t.type === undefined).map(t => t.name)
}

/** The names a provider body calls in its history. */
export function calledNames (protocol: Protocol, body: Json): string[] {
  const names: string[] = []
  if (protocol === 'openai-chat') for (const m of body.messages) for (const c of m.tool_calls ?? []) names.push(c.function.name)
  else if (protocol === 'openai-responses') for (const it of body.input) { if (it.type === 'function_call' || it.type === 'custom_tool_call') names.push(it.name) }
  else for (const m of body.messages) for (const b of m.content) { if (b.type === 'tool_use') names.push(b.name) }
  return names
}

/** The error `fn` throws (a test fails when it throws nothing). */
export function thrown (fn: () => unknown): { code?: string; status?: number; message: string; details?: Record<string, unknown> } {
  try {
    fn()
  } catch (err) {
    return err as { code?: string; status?: number; message: string; details?: Record<string, unknown> }
  }
  return { message: 'nothing was thrown' }
}

/** translateRequest with the body typed loosely, for reading it in assertions. */
export function translate (input: TranslateRequestInput): { body: Json; request: CanonicalRequest } {
  return translateRequest(input)
}
