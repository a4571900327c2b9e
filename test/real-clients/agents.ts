// The real agent CLIs as test clients: Codex CLI (`@openai/codex`) and Claude Code
// (`@anthropic-ai/claude-code`), unmodified, from node_modules, pointed at a loopback base URL.
// Each run gets its own home and working folder (nothing of the developer's is read), a wall
// clock bound, and its structured output (JSON lines) parsed for the test to check.
//
// Codex: `codex exec --json` with a config.toml provider (`wire_api = "responses"`, `env_key`)
// in a fresh CODEX_HOME. Claude Code: `claude -p --output-format stream-json --verbose` with
// ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY and non-essential traffic off.

import { spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ROOT } from '../helpers/gateway.ts'

export const CODEX = join(ROOT, 'node_modules/.bin/codex')
export const CLAUDE = join(ROOT, 'node_modules/.bin/claude')

export interface AgentRun {
  code: number | null
  /** Every JSON line the agent printed. */
  events: Array<Record<string, unknown>>
  stdout: string
  stderr: string
  /** The working folder the agent ran in (its shell commands and patches land here). */
  cwd: string
}

function run (cmd: string, args: string[], env: Record<string, string>, cwd: string, timeoutMs: number): Promise<AgentRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (c: string) => { stdout += c })
    child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
    const timer = setTimeout(() => { child.kill('SIGKILL') }, timeoutMs)
    child.once('error', (err) => { clearTimeout(timer); reject(err) })
    child.once('exit', (code) => {
      clearTimeout(timer)
      const events: Array<Record<string, unknown>> = []
      for (const line of stdout.split('\n')) {
        if (!line.startsWith('{')) continue
        try { events.push(JSON.parse(line) as Record<string, unknown>) } catch {}
      }
      resolve({ code, events, stdout, stderr, cwd })
    })
  })
}

/** A minimal environment: PATH and locale only, so nothing of the developer's leaks in. */
function baseEnv (home: string): Record<string, string> {
  return { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: home, LANG: 'C.UTF-8', NO_COLOR: '1' }
}

export async function runCodex (opts: { baseURL: string; apiKey: string; model: string; prompt: string; timeoutMs?: number; sessionFiles?: Record<string, string> }): Promise<AgentRun> {
  const home = mkdtempSync(join(tmpdir(), 'sluice-codex-home-'))
  const cwd = mkdtempSync(join(tmpdir(), 'sluice-codex-ws-'))
  for (const [name, text] of Object.entries(opts.sessionFiles ?? {})) writeFileSync(join(cwd, name), text)
  writeFileSync(join(home, 'config.toml'), [
    `model = "${opts.model}"`,
    'model_provider = "sluice"',
    '[model_providers.sluice]',
    'name = "sluice"',
    `base_url = "${opts.baseURL}/v1"`,
    'wire_api = "responses"',
    'env_key = "SLUICE_TEST_KEY"',
    // One attempt: a stream the client rejects must show as a failure, not be retried away.
    'request_max_retries = 0',
    'stream_max_retries = 0',
    '',
  ].join('\n'))
  const env = { ...baseEnv(home), CODEX_HOME: home, SLUICE_TEST_KEY: opts.apiKey }
  return run(CODEX, ['exec', '--json', '--skip-git-repo-check', '--dangerously-bypass-approvals-and-sandbox', opts.prompt], env, cwd, opts.timeoutMs ?? 60_000)
}

export async function runClaude (opts: { baseURL: string; apiKey: string; model?: string; prompt: string; thinkingTokens?: number; timeoutMs?: number }): Promise<AgentRun> {
  const home = mkdtempSync(join(tmpdir(), 'sluice-claude-home-'))
  const cwd = mkdtempSync(join(tmpdir(), 'sluice-claude-ws-'))
  mkdirSync(join(home, '.claude'), { recursive: true })
  const env: Record<string, string> = {
    ...baseEnv(home),
    ANTHROPIC_BASE_URL: opts.baseURL,
    ANTHROPIC_API_KEY: opts.apiKey,
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
  }
  if (opts.thinkingTokens) env.MAX_THINKING_TOKENS = String(opts.thinkingTokens)
  const args = ['-p', opts.prompt, '--allowedTools', 'Bash', '--output-format', 'stream-json', '--verbose']
  if (opts.model) args.push('--model', opts.model)
  return run(CLAUDE, args, env, cwd, opts.timeoutMs ?? 90_000)
}

/** Codex `--json` items of one type that completed. */
export function codexItems (r: AgentRun, type: string): Array<Record<string, unknown>> {
  return r.events
    .filter((e) => e.type === 'item.completed')
    .map((e) => e.item as Record<string, unknown>)
    .filter((i) => i?.type === type)
}

/** Claude Code stream-json content blocks of one type, from assistant or user messages. */
export function claudeBlocks (r: AgentRun, role: 'assistant' | 'user', type: string): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = []
  for (const e of r.events) {
    if (e.type !== role) continue
    const content = (e.message as { content?: unknown } | undefined)?.content
    if (Array.isArray(content)) for (const b of content) if ((b as { type?: unknown }).type === type) out.push(b as Record<string, unknown>)
  }
  return out
}
