import { WavegateError } from './errors';

/**
 * Canonical JSON: object keys sorted by UTF-16 code units, no whitespace, strings and numbers as
 * JSON.stringify writes them, `undefined` object members dropped. Non-finite numbers, `undefined` in
 * arrays, functions, symbols and bigints are refused: they have no JSON form, and guessing one would
 * make two different values sign the same. Pure: safe in workflows.
 */
export function canonicalize(value: unknown): string {
  return write(value, '(root)');
}

function write(value: unknown, path: string): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'boolean':
      return value ? 'true' : 'false';
    case 'string':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) {
        throw new WavegateError('INVALID_INPUT', `canonical JSON: ${path}: ${value} is not a finite number`, { path });
      }
      return JSON.stringify(value);
    case 'object': {
      if (Array.isArray(value)) {
        return `[${value
          .map((item, i) => {
            if (item === undefined)
              throw new WavegateError('INVALID_INPUT', `canonical JSON: ${path}[${i}]: undefined has no JSON form`, {
                path,
              });
            return write(item, `${path}[${i}]`);
          })
          .join(',')}]`;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) {
        throw new WavegateError(
          'INVALID_INPUT',
          `canonical JSON: ${path}: only plain objects are allowed (got ${proto?.constructor?.name ?? 'object'})`,
          { path },
        );
      }
      const record = value as Record<string, unknown>;
      const keys = Object.keys(record)
        .filter((k) => record[k] !== undefined)
        .sort(compareUtf16);
      return `{${keys.map((k) => `${JSON.stringify(k)}:${write(record[k], `${path}.${k}`)}`).join(',')}}`;
    }
    default:
      throw new WavegateError('INVALID_INPUT', `canonical JSON: ${path}: a ${typeof value} has no JSON form`, { path });
  }
}

function compareUtf16(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** True when `text` is exactly the canonical JSON of the value it parses to. */
export function isCanonicalJson(text: string): boolean {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return false;
  }
  try {
    return canonicalize(parsed) === text;
  } catch {
    return false;
  }
}
