import { readFileSync } from 'node:fs'
import { ROOT_URL } from './modules.ts'

/** The package version, read once at load. */
export const VERSION: string = (JSON.parse(readFileSync(new URL('package.json', ROOT_URL), 'utf8')) as { version: string }).version
