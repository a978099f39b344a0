import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { WavegateError } from '../core/errors';

/**
 * Read a YAML or JSON document from disk (JSON by the `.json` extension unless `format` says so); a
 * missing or unparsable file is INVALID_INPUT naming it.
 */
export function readDocument(path: string, format: 'json' | 'yaml' = path.endsWith('.json') ? 'json' : 'yaml'): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new WavegateError('INVALID_INPUT', `${path}: cannot read file (${(err as NodeJS.ErrnoException).code ?? String(err)})`, { source: path });
  }
  try {
    return format === 'json' ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    throw new WavegateError('INVALID_INPUT', `${path}: not valid ${format === 'json' ? 'JSON' : 'YAML'}: ${(err as Error).message}`, { source: path });
  }
}
