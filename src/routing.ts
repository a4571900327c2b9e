// Model -> provider routing, and the key's model pin. Built once per worker at start.

import type { KeyConfig, Protocol, ProviderConfig } from './config/schema.ts'
import { matchesAny } from './config/models.ts'
import { SluiceError } from './errors.ts'
import { Scrubber } from './protocols/scrub.ts'

export type RouteProtocol = Protocol

export interface ResolvedProvider {
  readonly config: ProviderConfig
  readonly baseUrl: string
  readonly apiKey: string | null
}

export class Router {
  readonly providers: readonly ResolvedProvider[]
  /** alias -> target model, over every provider (the parser rewrites aliases). */
  readonly aliases: Readonly<Record<string, string>>
  /** Scrubs provider text of credentials, these providers' keys among them (src/protocols/scrub.ts). */
  readonly scrubber: Scrubber

  constructor (providers: readonly ProviderConfig[], simUrl: string | null, env: NodeJS.ProcessEnv) {
    this.providers = providers.map((p) => ({
      config: p,
      baseUrl: (p.baseUrl === 'sim' ? simUrl ?? '' : p.baseUrl).replace(/\/+$/, ''),
      apiKey: p.apiKeyEnv ? env[p.apiKeyEnv] ?? null : null,
    }))
    const aliases: Record<string, string> = {}
    for (const p of providers) Object.assign(aliases, p.aliases)
    this.aliases = aliases
    this.scrubber = new Scrubber(this.providers.map((p) => p.apiKey))
  }

  /** The provider serving `model` (first match in config order), or throws model_not_found. */
  resolve (model: string): ResolvedProvider {
    for (const p of this.providers) if (matchesAny(model, p.config.models)) return p
    throw new SluiceError('model_not_found', { model })
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
