// The configuration schema: one JSON file, validated strictly at start.
//
// Every key has a default (DESIGN.md "Fixed limits"); an unknown key, a wrong type, a
// negative number, a fraction where an integer is needed, or NaN stops the process with a
// message naming the key (`limits.maxActiveExchanges: ...`). Secrets never live here: the
// config names the environment variables that hold them.

// A namespace import, not `{ z }`: esbuild then keeps only what is used, and the primary's bundle
// loses zod's ~40 locales (the config chunk: 464 KB -> 107 KB minified; docs/benchmarks.md).
import * as z from 'zod'

const int = (min: number) => z.number().int().min(min)
const MiB = 1024 * 1024

/** 0, null or "Infinity" disable the per-session pending cap (DESIGN.md "Sessions"). */
const pendingCap = z.union([int(0), z.null(), z.literal('Infinity')])

export const limitsSchema = z.strictObject({
  maxActiveExchanges: int(1).max(65535).default(32),
  maxQueuedExchanges: int(0).max(65535).default(128),
  queueWaitMs: int(1).default(30_000),
  parsePermits: int(1).max(1024).default(1),
  parseWaitMs: int(1).default(30_000),
  /** Parses by work that holds no exchange permit (JSON-RPC and non-blocking envelopes),
   *  waiting for or holding the parse permit, across all workers; beyond it refused at once. */
  maxEnvelopeParses: int(1).max(65535).default(32),
  maxPendingPromptsPerSession: pendingCap.default(5),
  maxActivePerSession: int(1).default(1),
  /** Session-lane entries shared by all workers: exchanges pending in any session (queued + active). */
  sessionEntries: int(1).max(65535).default(1024),
  /** The byte-bounded ring of non-blocking session events (replay with Last-Event-ID). */
  sessionEventBytes: int(65536).max(1024 * MiB).multipleOf(4).default(8 * MiB),
  sseFrameBytes: int(1024).default(MiB),
  maxOutputItems: int(1).default(256),
  maxOutputBytes: int(1).default(8 * MiB),
  maxBodyBytes: int(1).default(16 * MiB),
  maxJsonDepth: int(1).max(100_000).default(128),
  maxJsonNodes: int(1).default(1_000_000),
  /**
   * A request body (with a continuation's history and blobs) below this many bytes is parsed
   * and prepared in the HTTP worker itself, under the parse permit, with the same checks;
   * the others in the heap-limited parser pool. 0: every body goes to the pool. null: 64 KiB,
   * or less where the worker heap's headroom asks for it (src/config/limits.ts).
   */
  inWorkerParseBytes: z.union([int(0).max(MiB), z.null()]).default(null),
  storageBytes: int(0).max(Number.MAX_SAFE_INTEGER).default(256 * MiB),
  /**
   * The conversation-state store's whole buffer (src/state/store.ts), carved out of
   * storageBytes. null: a quarter of storageBytes, at most 64 MiB; 0, or a size under 1 MiB: off.
   */
  continuationBytes: z.union([int(0).max(1024 * MiB), z.null()]).default(null),
  continuationEntryBytes: int(1).default(4 * MiB),
  continuationTtlMs: int(1).default(3_600_000),
  continuationBlobThreshold: int(1).default(16 * 1024),
  continuationBlobBytes: int(1).default(4 * MiB),
  /** Blob bytes in the store together; null: half of the store. */
  continuationBlobTotalBytes: z.union([int(0), z.null()]).default(null),
  workerHeapMb: int(16).default(128),
  /** Measured (docs/benchmarks.md): 4 MiB relays with less CPU and ~11 MB less RSS than 16. */
  workerYoungGenMb: int(1).default(4),
  /**
   * An HTTP worker that has started no exchange, had none in flight and stayed under 2 % busy
   * for this long collects its heap once (a full GC), and the process trims malloc: its memory
   * after a burst goes back. Not sooner: a collection with no exchange alive costs the next
   * burst (src/idle-gc.ts). 0: never (the heap stays at what the last burst grew it to).
   */
  workerIdleCollectMs: int(0).default(30_000),
  /**
   * V8's platform threads (concurrent marking and sweeping, the optimizing compilers; shared by
   * every thread of the process) run at this nice value from "sluice ready", so that on one vCPU
   * they use the time the JavaScript threads leave rather than preempt them mid-turn
   * (src/helper-nice.ts: a lower tail at 96 streams; at saturation a higher RSS peak,
   * 15-40 MB; 19 starves them when the core is saturated). Linux only; 0: left at the
   * process's own.
   */
  v8HelperNice: int(0).max(19).default(10),
  /** Admission refuses with worker_heap_exhausted above this fraction of the heap limit. */
  workerHeapAdmitFraction: z.number().gt(0).max(1).default(0.85),
  parserHeapMb: int(16).default(256),
  parserYoungGenMb: int(1).default(16),
  parserThreads: int(1).max(64).default(1),
  /** 0: parser threads always warm. Else a thread is started by the first exchange after an idle
   *  spell (ParserPool.warm, in the background) or the first parse, and retired after this long
   *  without a task (no parser thread at idle; a parse that comes before it is up waits for it). */
  parserIdleMs: int(0).default(30_000),
  healthGuardMs: int(1).default(1000),
  /** A request whose header block is not complete within this is refused (408 http_headers_timeout). */
  headersTimeoutMs: int(1).default(60_000),
  /** Runs tracked for turn pins (LRU beyond this). */
  maxTrackedRuns: int(0).max(1_000_000).default(4096),
  drainMs: int(0).default(30_000),
  /** A caller that reads nothing for this long while the relay waits on it is cut off. */
  clientStallMs: int(1).default(300_000),
  /** A request body (or envelope) that sends no byte for this long is refused (body_timeout, 408). */
  bodyIdleMs: int(1).default(10_000),
  /** A request body (or envelope) not complete this long after its reading began is refused (body_timeout, 408). */
  bodyReadMs: int(1).default(60_000),
})

export const upstreamSchema = z.strictObject({
  connectTimeoutMs: int(1).default(10_000),
  firstByteTimeoutMs: int(1).default(120_000),
  idleTimeoutMs: int(1).default(120_000),
  keepAliveTimeoutMs: int(1).default(30_000),
  connections: int(1).default(64),
  /** Client headers forwarded to providers besides the built-in allowlist (worker/upstream.ts). */
  forwardHeaders: z.array(z.string().regex(/^[a-z0-9!#$%&'*+.^_`|~-]+$/, 'a lower-case header name')).default([]),
  /**
   * Retry before the first downstream byte only (worker/retry.ts): at most `attempts` more
   * attempts after the first, each after a full-jitter delay of up to min(maxMs, baseMs x 2^n),
   * none started later than totalMs after the first. `sameAccount`: also retry on the account
   * that failed when the provider has no other (default false: one account fails fast).
   */
  retry: z.strictObject({
    attempts: int(0).max(2).default(2),
    baseMs: int(0).max(60_000).default(100),
    maxMs: int(0).max(60_000).default(2000),
    totalMs: int(0).max(600_000).default(10_000),
    sameAccount: z.boolean().default(false),
  }).refine((r) => r.maxMs >= r.baseMs, { message: 'maxMs must be at least baseMs', path: ['maxMs'] })
    .default({ attempts: 2, baseMs: 100, maxMs: 2000, totalMs: 10_000, sameAccount: false }),
  /**
   * Circuit breaker per provider + model pattern (src/ledger/providers.ts): opens after
   * `failureThreshold` consecutive transient provider failures, refuses fast for `openMs`,
   * then lets exactly one probe through (half-open); a success closes it. Every attempt
   * counts (a retried exchange up to three), so the default 20 is about seven exchanges.
   */
  breaker: z.strictObject({
    failureThreshold: int(1).max(1_000_000).default(20),
    openMs: int(100).max(3_600_000).default(30_000),
  }).default({ failureThreshold: 20, openMs: 30_000 }),
})

const modelPattern = z.string().min(1).regex(/^[^*]*\*?$/, 'a model name, optionally ending in one *')

export const keySchema = z.strictObject({
  name: z.string().min(1),
  /** Hex SHA-256 of the gateway key. The key itself is never stored. */
  sha256: z.string().regex(/^[0-9a-f]{64}$/, 'a lowercase hex SHA-256 (64 characters)'),
  models: z.array(modelPattern).min(1).default(['*']),
  /** Maximum exchanges per run identity (x-sluice-run-id); null = no cap. */
  maxTurnsPerRun: z.union([int(1), z.null()]).default(null),
})

export const protocols = ['openai-chat', 'openai-responses', 'anthropic'] as const
export type Protocol = typeof protocols[number]

const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name')

/** One account (key) of a provider: its own key and optional concurrency cap across all workers. */
export const accountSchema = z.strictObject({
  name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/, 'an account name: 1 to 64 letters, digits or ._:-'),
  /** Environment variable holding this account's key; null for none. */
  apiKeyEnv: z.union([envName, z.null()]).default(null),
  /** Exchanges in flight on this account across all workers; null = no cap. */
  maxConcurrent: z.union([int(1).max(65535), z.null()]).default(null),
})

export const providerSchema = z.strictObject({
  name: z.string().min(1),
  protocol: z.enum(protocols),
  /** Base URL without the /v1 suffix, or "sim" for the embedded simulated provider. */
  baseUrl: z.union([z.literal('sim'), z.url({ protocol: /^https?$/ })]),
  /** Environment variable holding the provider's API key; null for none (e.g. the sim). */
  apiKeyEnv: z.union([z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/), z.null()]).default(null),
  models: z.array(modelPattern).min(1),
  aliases: z.record(z.string().min(1), z.string().min(1)).default({}),
  /** Clients of another protocol are translated (src/translate/); false: refused with protocol_mismatch. */
  translate: z.boolean().default(true),
  /** Several accounts (keys); without it, `apiKeyEnv` is the provider's one account ("default"). */
  accounts: z.array(accountSchema).min(1).max(64).optional(),
}).superRefine((p, ctx) => {
  if (p.accounts === undefined) return
  if (p.apiKeyEnv !== null) ctx.addIssue({ code: 'custom', path: ['apiKeyEnv'], message: 'give the key per account (accounts[].apiKeyEnv), not both' })
  const seen = new Set<string>()
  p.accounts.forEach((a, i) => {
    if (seen.has(a.name)) ctx.addIssue({ code: 'custom', path: ['accounts', i, 'name'], message: `duplicate account name "${a.name}"` })
    seen.add(a.name)
  })
})

/**
 * One instance's name in a fleet (ops/README.md "Several instances"): on /capabilities, on
 * every log line (`instanceId`) and on every trace (`service.instance.id`). Letters, digits
 * and `._:-`, so it is safe in a log query, a metric label and a load balancer's server name.
 */
export const INSTANCE_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/

export const configSchema = z.strictObject({
  /** Default (filled in by validateConfig): `<hostname>:<listen.port>`. */
  instanceId: z.string().regex(INSTANCE_ID, 'an instance id: 1 to 128 letters, digits or ._:- (starting with a letter or digit)').optional(),
  listen: z.strictObject({
    host: z.string().min(1).default('127.0.0.1'),
    port: int(0).max(65535).default(8080),
    adminHost: z.string().min(1).default('127.0.0.1'),
    adminPort: int(0).max(65535).default(9090),
  }).default({ host: '127.0.0.1', port: 8080, adminHost: '127.0.0.1', adminPort: 9090 }),
  workers: int(1).max(64).default(1),
  limits: limitsSchema.default(limitsSchema.parse({})),
  upstream: upstreamSchema.default(upstreamSchema.parse({})),
  keys: z.array(keySchema).default([]),
  providers: z.array(providerSchema).default([]),
  signing: z.strictObject({
    keyEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/).default('SLUICE_SIGNING_KEY'),
  }).default({ keyEnv: 'SLUICE_SIGNING_KEY' }),
  telemetry: z.strictObject({
    serviceName: z.string().min(1).default('sluice'),
    logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  }).default({ serviceName: 'sluice', logLevel: 'info' }),
  /** The embedded simulated provider (providers with baseUrl "sim"). */
  sim: z.strictObject({
    enabled: z.boolean().default(false),
    port: int(0).max(65535).default(0),
  }).default({ enabled: false, port: 0 }),
})

export type ConfigInput = z.input<typeof configSchema>
/** The validated config; `instanceId` is always set (validateConfig fills the default). */
export type Config = Omit<z.output<typeof configSchema>, 'instanceId'> & { instanceId: string }
export type Limits = Config['limits']
export type ProviderConfig = Config['providers'][number]
export type KeyConfig = Config['keys'][number]
