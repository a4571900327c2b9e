// Model -> provider routing, and the key's model pin. Built once per worker at start.

import type { KeyConfig, Protocol, ProviderConfig } from './config/schema.ts'
import { matchesAny } from './config/models.ts'
import { SluiceError } from './errors.ts'
import { Scrubber } from './protocols/scrub.ts'

export type RouteProtocol = Protocol

export interface ResolvedAccount {
  /** Global index in the ledger's account table (providerSlots). */
  readonly index: number
  readonly name: string
  readonly apiKey: string | null
  readonly maxConcurrent: number | null
}

export interface ResolvedProvider {
  readonly config: ProviderConfig
  readonly baseUrl: string
  /** The first account's key (the provider's key when it has one account). */
  readonly apiKey: string | null
  /** At least one: `accounts`, or the implicit "default" account of `apiKeyEnv`. */
  readonly accounts: readonly ResolvedAccount[]
  /** Global index of the breaker of `config.models[0]`; model pattern i is breakerBase + i. */
  readonly breakerBase: number
}

export interface ProviderSlots {
  /** Every account, in global index order, with its provider's name. */
  accounts: Array<{ provider: string; name: string; apiKeyEnv: string | null; maxConcurrent: number | null }>
  /** Every breaker (provider x configured model pattern), in global index order. */
  breakers: Array<{ provider: string; model: string }>
}

/** The accounts of a provider: its `accounts`, or one implicit account for `apiKeyEnv`. */
export function accountsOf (p: ProviderConfig): Array<{ name: string; apiKeyEnv: string | null; maxConcurrent: number | null }> {
  return p.accounts ?? [{ name: 'default', apiKeyEnv: p.apiKeyEnv, maxConcurrent: null }]
}

/** The ledger's account and breaker tables, in config order: the same in every thread. */
export function providerSlots (providers: readonly ProviderConfig[]): ProviderSlots {
  const out: ProviderSlots = { accounts: [], breakers: [] }
  for (const p of providers) {
    for (const a of accountsOf(p)) out.accounts.push({ provider: p.name, ...a })
    for (const m of p.models) out.breakers.push({ provider: p.name, model: m })
  }
  return out
}

export class Router {
  readonly providers: readonly ResolvedProvider[]
  /** alias -> target model, over every provider (the parser rewrites aliases). */
  readonly aliases: Readonly<Record<string, string>>
  /** Scrubs provider text of credentials, these providers' keys among them (src/protocols/scrub.ts). */
  readonly scrubber: Scrubber

  constructor (providers: readonly ProviderConfig[], simUrl: string | null, env: NodeJS.ProcessEnv) {
    let account = 0
    let breaker = 0
    this.providers = providers.map((p) => {
      const accounts = accountsOf(p).map((a) => ({
        index: account++,
        name: a.name,
        apiKey: a.apiKeyEnv ? env[a.apiKeyEnv] ?? null : null,
        maxConcurrent: a.maxConcurrent,
      }))
      const breakerBase = breaker
      breaker += p.models.length
      return {
        config: p,
        baseUrl: (p.baseUrl === 'sim' ? simUrl ?? '' : p.baseUrl).replace(/\/+$/, ''),
        apiKey: accounts[0].apiKey,
        accounts,
        breakerBase,
      }
    })
    const aliases: Record<string, string> = {}
    for (const p of providers) Object.assign(aliases, p.aliases)
    this.aliases = aliases
    this.scrubber = new Scrubber(this.providers.flatMap((p) => p.accounts.map((a) => a.apiKey)))
  }

  /** The provider serving `model` (first match in config order), or throws model_not_found. */
  resolve (model: string): ResolvedProvider {
    for (const p of this.providers) if (matchesAny(model, p.config.models)) return p
    throw new SluiceError('model_not_found', { model })
  }

  /** The breaker of `model` on `provider`: its first matching model pattern's. */
  static breakerOf (provider: ResolvedProvider, model: string): { index: number; model: string } {
    const i = provider.config.models.findIndex((m) => matchesAny(model, [m]))
    return { index: provider.breakerBase + Math.max(0, i), model: provider.config.models[Math.max(0, i)] }
  }

  /** The key's model pin: the name the caller asked for, or the alias target, must be listed. */
  static checkPin (key: KeyConfig, requested: string, target: string = requested): void {
    if (!matchesAny(requested, key.models) && !matchesAny(target, key.models)) throw new SluiceError('model_not_allowed', { model: requested, key: key.name })
  }

  /** Same-protocol only for now: a route whose provider speaks another protocol is refused. */
  /** A client of another protocol: translated, unless the provider is configured `translate: false`. */
  static checkProtocol (route: RouteProtocol, provider: ResolvedProvider, model: string): void {
    if (provider.config.protocol !== route && !provider.config.translate) {
      throw new SluiceError('protocol_mismatch', {
        model,
        route,
        providerProtocol: provider.config.protocol,
        supported: `same protocol only: this provider is configured with translate: false; send ${provider.config.protocol} requests for this model`,
      })
    }
  }

  /** Every model id a caller may name (for GET /v1/models): exact names and aliases. */
  listModels (key: KeyConfig): string[] {
    const out = new Set<string>()
    for (const p of this.providers) {
      for (const m of [...p.config.models, ...Object.keys(p.config.aliases)]) {
        if (!m.endsWith('*') && matchesAny(m, key.models)) out.add(m)
      }
    }
    return [...out]
  }
}
