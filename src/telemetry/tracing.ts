// Run traces (DESIGN.md "Observability"): one OpenTelemetry trace per exchange, exported over
// OTLP/HTTP, off unless configured.
//
// ## Configuration: the standard environment variables
//
//   OTEL_EXPORTER_OTLP_TRACES_ENDPOINT | OTEL_EXPORTER_OTLP_ENDPOINT   enables export
//   OTEL_EXPORTER_OTLP_TRACES_PROTOCOL | OTEL_EXPORTER_OTLP_PROTOCOL   http/protobuf (default) | http/json
//   OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT, ...        read by the exporter itself
//   OTEL_SERVICE_NAME                                                   else telemetry.serviceName
//   OTEL_TRACES_SAMPLER (+ OTEL_TRACES_SAMPLER_ARG)                     always_on | always_off |
//                                                                       traceidratio | parentbased_*
//   OTEL_TRACES_EXPORTER                                                none disables; only otlp
//   OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE
//
// With no endpoint set nothing is loaded and every trace call is a no-op (NO_TRACE). A bad
// value (grpc, an unknown sampler, a ratio outside [0, 1]) stops the process at start with
// the variable named, like any invalid configuration (`tracingFromEnv`, called by the primary
// before anything starts).
//
// ## What a trace holds
//
// Each HTTP worker has its own TracerProvider with a bounded BatchSpanProcessor (the queue
// drops spans beyond OTEL_BSP_MAX_QUEUE_SIZE rather than grow). The root span
// `sluice.exchange` (SERVER) continues an incoming W3C `traceparent` when there is one;
// children: `session.lane` (only when queued behind the session), `admission` (with the event
// "waiting for model capacity" when queued), `parse`, `provider.wait` (request -> first
// byte), `relay`. The root span ends at the exchange's actual release, with the events
// "exchange permit admitted" and "exchange released" carrying the run identity.
// Attributes are an allow-list of scalars the exchange record already holds (ids, route,
// model, provider, outcome code, status, byte/frame/token counts, waits): never a header,
// never a key, never prompt or completion content.

import type { Attributes, Span, Tracer } from '@opentelemetry/api'

export type AttrValue = string | number | boolean | null | undefined
export type Attrs = Record<string, AttrValue>

export interface PhaseSpan {
  event (name: string, attrs?: Attrs): void
  end (attrs?: Attrs): void
}

export interface ExchangeTrace {
  /** The trace id (32 hex) when recording, else null. */
  readonly traceId: string | null
  phase (name: string, attrs?: Attrs): PhaseSpan
  event (name: string, attrs?: Attrs): void
  set (attrs: Attrs): void
  end (attrs?: Attrs): void
}

const NO_PHASE: PhaseSpan = { event () {}, end () {} }
export const NO_TRACE: ExchangeTrace = { traceId: null, phase: () => NO_PHASE, event () {}, set () {}, end () {} }

export interface TracingConfig {
  protocol: 'http/protobuf' | 'http/json'
  sampler: { kind: 'always_on' | 'always_off' | 'traceidratio'; parentBased: boolean; ratio: number }
  serviceName: string
  bsp: { scheduledDelayMillis: number; maxQueueSize: number; maxExportBatchSize: number }
}

export class TracingConfigError extends Error {
  readonly variable: string
  constructor (variable: string, message: string) {
    super(`${variable}: ${message}`)
    this.variable = variable
  }
}

/** Reads the OTEL_* variables: null when export is off; throws TracingConfigError when invalid. */
export function tracingFromEnv (env: NodeJS.ProcessEnv, fallbackServiceName: string): TracingConfig | null {
  const exporter = env.OTEL_TRACES_EXPORTER?.trim()
  if (exporter === 'none') return null
  if (exporter !== undefined && exporter !== '' && exporter !== 'otlp') throw new TracingConfigError('OTEL_TRACES_EXPORTER', `"${exporter}" is not supported (otlp or none)`)
  const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? env.OTEL_EXPORTER_OTLP_ENDPOINT
  if (endpoint === undefined || endpoint.trim() === '') return null
  try {
    const u = new URL(endpoint)
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('scheme')
  } catch {
    throw new TracingConfigError(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT', `"${endpoint}" is not an http(s) URL`)
  }
  const protoVar = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL' : 'OTEL_EXPORTER_OTLP_PROTOCOL'
  const protocol = (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL ?? 'http/protobuf').trim()
  if (protocol !== 'http/protobuf' && protocol !== 'http/json') {
    throw new TracingConfigError(protoVar, `"${protocol}" is not supported: use http/protobuf or http/json (OTLP over HTTP)`)
  }
  const samplerName = (env.OTEL_TRACES_SAMPLER ?? 'parentbased_always_on').trim()
  const m = /^(parentbased_)?(always_on|always_off|traceidratio)$/.exec(samplerName)
  if (!m) throw new TracingConfigError('OTEL_TRACES_SAMPLER', `"${samplerName}" is not a sampler (always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio)`)
  let ratio = 1
  if (m[2] === 'traceidratio' && env.OTEL_TRACES_SAMPLER_ARG !== undefined && env.OTEL_TRACES_SAMPLER_ARG !== '') {
    ratio = Number(env.OTEL_TRACES_SAMPLER_ARG)
    if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1) throw new TracingConfigError('OTEL_TRACES_SAMPLER_ARG', `"${env.OTEL_TRACES_SAMPLER_ARG}" is not a ratio in [0, 1]`)
  }
  const int = (name: string, def: number): number => {
    const v = env[name]
    if (v === undefined || v === '') return def
    const n = Number(v)
    if (!Number.isInteger(n) || n < 1) throw new TracingConfigError(name, `"${v}" is not a positive integer`)
    return n
  }
  const maxQueueSize = int('OTEL_BSP_MAX_QUEUE_SIZE', 2048)
  return {
    protocol,
    sampler: { kind: m[2] as TracingConfig['sampler']['kind'], parentBased: m[1] !== undefined, ratio },
    serviceName: env.OTEL_SERVICE_NAME?.trim() || fallbackServiceName,
    bsp: {
      scheduledDelayMillis: int('OTEL_BSP_SCHEDULE_DELAY', 5000),
      maxQueueSize,
      maxExportBatchSize: Math.min(int('OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 512), maxQueueSize),
    },
  }
}

export interface Tracing {
  start (traceparent: string | undefined, attrs: Attrs): ExchangeTrace
  /** Flushes what is queued and stops the exporter. */
  shutdown (): Promise<void>
}

/** Loads the SDK (only now: it costs memory) and builds this thread's tracer. */
export async function startTracing (config: TracingConfig, resourceAttrs: Attrs): Promise<Tracing> {
  const api = await import('@opentelemetry/api')
  const sdk = await import('@opentelemetry/sdk-trace')
  const { resourceFromAttributes } = await import('@opentelemetry/resources')
  const { W3CTraceContextPropagator } = await import('@opentelemetry/core')
  const { OTLPTraceExporter } = config.protocol === 'http/json'
    ? await import('@opentelemetry/exporter-trace-otlp-http')
    : await import('@opentelemetry/exporter-trace-otlp-proto')
  const s = config.sampler
  const base = s.kind === 'always_on' ? new sdk.AlwaysOnSampler() : s.kind === 'always_off' ? new sdk.AlwaysOffSampler() : new sdk.TraceIdRatioBasedSampler(s.ratio)
  const sampler = s.parentBased ? new sdk.ParentBasedSampler({ root: base }) : base
  const provider = new sdk.TracerProvider({
    sampler,
    resource: resourceFromAttributes(clean({ 'service.name': config.serviceName, ...resourceAttrs })),
    spanProcessors: [new sdk.BatchSpanProcessor({ exporter: new OTLPTraceExporter(), ...config.bsp })],
  })
  const tracer: Tracer = provider.getTracer('sluice')
  const propagator = new W3CTraceContextPropagator()
  const getter = { keys: (c: Record<string, string>) => Object.keys(c), get: (c: Record<string, string>, k: string) => c[k] }

  return {
    start (traceparent, attrs) {
      const parent = traceparent
        ? propagator.extract(api.ROOT_CONTEXT, { traceparent }, getter)
        : api.ROOT_CONTEXT
      const root = tracer.startSpan('sluice.exchange', { kind: api.SpanKind.SERVER, attributes: clean(attrs) }, parent)
      const rootCtx = api.trace.setSpan(api.ROOT_CONTEXT, root)
      const recording = root.isRecording()
      let ended = false
      return {
        traceId: recording ? root.spanContext().traceId : null,
        phase (name, a) {
          if (!recording || ended) return NO_PHASE
          const span: Span = tracer.startSpan(name, { attributes: clean(a ?? {}) }, rootCtx)
          let done = false
          return {
            event: (n, ea) => { if (!done) span.addEvent(n, clean(ea ?? {})) },
            end: (ea) => {
              if (done) return
              done = true
              if (ea) span.setAttributes(clean(ea))
              span.end()
            },
          }
        },
        event (n, a) { if (!ended) root.addEvent(n, clean(a ?? {})) },
        set (a) { if (!ended) root.setAttributes(clean(a)) },
        end (a) {
          if (ended) return
          ended = true
          if (a) root.setAttributes(clean(a))
          const code = a?.['sluice.code']
          if (typeof code === 'string' && code !== 'ok') root.setStatus({ code: api.SpanStatusCode.ERROR, message: code })
          root.end()
        },
      }
    },
    async shutdown () {
      await provider.shutdown()
    },
  }
}

/** Drops null/undefined values (OTel attributes are scalars). */
function clean (a: Attrs): Attributes {
  const out: Attributes = {}
  for (const [k, v] of Object.entries(a)) if (v !== null && v !== undefined) out[k] = v
  return out
}
