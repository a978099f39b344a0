import type { z } from 'zod';
import { WavegateError } from './errors';

/** One rejected field: where it is, what was there, and what is allowed. */
export interface FieldProblem {
  path: string;
  value: unknown;
  message: string;
}

function valueAt(data: unknown, path: readonly PropertyKey[]): unknown {
  let current: unknown = data;
  for (const key of path) {
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<PropertyKey, unknown>)[key];
  }
  return current;
}

export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) out += typeof key === 'number' ? `[${key}]` : out ? `.${String(key)}` : String(key);
  return out || '(root)';
}

function showValue(value: unknown): string {
  if (value === undefined) return 'missing';
  const text = JSON.stringify(value);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

/**
 * Validate `data` against `schema`; on failure throw INVALID_INPUT naming the file, every field path,
 * the value found there and what the schema allows. Nothing downstream sees unvalidated input.
 */
export function parseWith<S extends z.ZodType>(schema: S, data: unknown, source: string): z.output<S> {
  const result = schema.safeParse(data);
  if (result.success) return result.data;
  const problems: FieldProblem[] = result.error.issues.map((issue) => ({
    path: formatPath(issue.path),
    value: valueAt(data, issue.path),
    message: issue.message,
  }));
  const lines = problems.map((p) => `  ${p.path}: ${p.message} (got ${showValue(p.value)})`);
  throw new WavegateError('INVALID_INPUT', `${source}: invalid\n${lines.join('\n')}`, { source, problems });
}

/** Throw INVALID_INPUT for problems found after the schema (cross-field checks), in parseWith's format. */
export function invalidFields(source: string, problems: FieldProblem[]): never {
  const lines = problems.map((p) => `  ${p.path}: ${p.message} (got ${showValue(p.value)})`);
  throw new WavegateError('INVALID_INPUT', `${source}: invalid\n${lines.join('\n')}`, { source, problems });
}
