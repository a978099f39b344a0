import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The folders of the project's own TypeScript that the structure tests read (the architecture rules,
 * function length): every product room, the benchmarks and the scripts. A new room is added here and
 * in docs/architecture.md's layers.
 */
export const SOURCE_DIRS = [
  'activities',
  'agent',
  'audit',
  'bench',
  'cli',
  'clients',
  'contracts',
  'core',
  'device',
  'gateway',
  'http',
  'intake',
  'scripts',
  'sim',
  'workers',
  'workflows',
];

/** The rooms the package runs (SOURCE_DIRS but the benchmarks and scripts). */
export const PRODUCT_DIRS = SOURCE_DIRS.filter((d) => d !== 'bench' && d !== 'scripts');

/** Every `.ts` file under `dir`, at any depth (absolute paths). */
export function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...sourceFiles(path));
    else if (name.endsWith('.ts')) out.push(path);
  }
  return out;
}
