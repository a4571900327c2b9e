import { readFileSync } from 'node:fs'

/** The package version, read once at load. */
export const VERSION: string = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version
