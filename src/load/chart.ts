// An SVG chart of a load run, written next to its receipt: each exchange's total time (a dot
// at its end time: green ok, red refused or failed, orange capacity refusals) and, on a
// second panel, the /healthz probe latency with the guard as a line.

import type { Profile } from './profile.ts'
import type { RunOutput } from './run.ts'

export function chartSvg (o: RunOutput, p: Profile): string {
  const W = 960
  const H1 = 260
  const H2 = 140
  const pad = 50
  const endT = Math.max(1, ...o.results.map((r) => r.startMs + (Number.isFinite(r.totalMs) ? r.totalMs : 0)), ...o.health.map((h) => h.t + h.ms))
  const maxLat = Math.max(1, ...o.results.map((r) => Number.isFinite(r.totalMs) ? r.totalMs : 0))
  const maxH = Math.max(p.health.guardMs * 1.1, ...o.health.map((h) => h.ms))
  const x = (t: number) => pad + (t / endT) * (W - 2 * pad)
  const y1 = (ms: number) => 20 + H1 - (ms / maxLat) * H1
  const y2 = (ms: number) => H1 + 60 + H2 - (ms / maxH) * H2
  const colour = (k: string) => k === 'ok' ? '#2a9d2a' : k.startsWith('capacity_') ? '#e08a00' : '#d22'
  const dots = o.results.filter((r) => Number.isFinite(r.totalMs)).map((r) =>
    `<circle cx="${x(r.startMs + r.totalMs).toFixed(1)}" cy="${y1(r.totalMs).toFixed(1)}" r="2" fill="${colour(r.kind)}"><title>${r.phase} ${r.role} ${r.kind} ${r.totalMs.toFixed(0)} ms</title></circle>`)
  const hs = [...o.health].sort((a, b) => a.t - b.t)
  const line = hs.map((h, i) => `${i === 0 ? 'M' : 'L'}${x(h.t).toFixed(1)},${y2(h.ms).toFixed(1)}`).join(' ')
  const bad = hs.filter((h) => !h.ok || h.ms > p.health.guardMs).map((h) => `<circle cx="${x(h.t).toFixed(1)}" cy="${y2(Math.min(h.ms, maxH)).toFixed(1)}" r="3" fill="#d22"/>`)
  const H = H1 + H2 + 100
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">
<rect width="100%" height="100%" fill="white"/>
<text x="${pad}" y="14">${p.name}: exchange total time (ms) by end time — max ${maxLat.toFixed(0)} ms; green ok, orange capacity refusal, red other</text>
<line x1="${pad}" y1="${y1(0)}" x2="${W - pad}" y2="${y1(0)}" stroke="#999"/>
${dots.join('\n')}
<text x="${pad}" y="${H1 + 52}">/healthz latency (ms), guard ${p.health.guardMs} ms (dashed); ${o.health.length} probes</text>
<line x1="${pad}" y1="${y2(p.health.guardMs)}" x2="${W - pad}" y2="${y2(p.health.guardMs)}" stroke="#d22" stroke-dasharray="4 3"/>
<line x1="${pad}" y1="${y2(0)}" x2="${W - pad}" y2="${y2(0)}" stroke="#999"/>
<path d="${line}" fill="none" stroke="#2060c0" stroke-width="1"/>
${bad.join('\n')}
<text x="${pad}" y="${H - 8}">0 s</text><text x="${W - pad - 30}" y="${H - 8}">${(endT / 1000).toFixed(1)} s</text>
</svg>
`
}
