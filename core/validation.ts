import type { z } from 'zod';
import { WavegateError } from './errors';
import { scrubCredentials } from './health';

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
  // Scrubbed: a refused url or command may hold the very password it was refused for.
  const text = typeof value === 'string' ? JSON.stringify(scrubCredentials(value.slice(0, 4096))) : JSON.stringify(value);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

/**
 * Validate `data` against `schema`; on failure throw INVALID_INPUT naming the file, every field path,
 * the value found there and what the schema allows. Nothing downstream sees unvalidated input.
 */
export function parseWith<S extends z.ZodType>(schema: S, data: unknown, source: string): z.output<S> {
  const result = schema.safeParse(data);
  if (result.success) return result.data;
  const problems: FieldProblem[] = result.error.issues.flatMap((issue): FieldProblem[] => {
    if (issue.code === 'unrecognized_keys') {
      // Name each unknown field by its own path, and list the fields that are allowed there.
      const allowed = allowedKeys(schema, issue.path);
      return issue.keys.map((key) => ({
        path: formatPath([...issue.path, key]),
        value: valueAt(data, [...issue.path, key]),
        message: `unknown field${allowed ? `; allowed: ${allowed.join(', ')}` : ''}`,
      }));
    }
    const value = valueAt(data, issue.path);
    const message = value === undefined && issue.code === 'invalid_type' ? `required (${issue.message.replace(/^Invalid input: /, '').replace(/, received undefined$/, '')})` : issue.message;
    return [{ path: formatPath(issue.path), value, message }];
  });
  const lines = problems.map((p) => `  ${p.path}: ${p.message} (got ${showValue(p.value)})`);
  throw new WavegateError('INVALID_INPUT', `${source}: invalid\n${lines.join('\n')}`, { source, problems });
}

/** Throw INVALID_INPUT for problems found after the schema (cross-field checks), in parseWith's format. */
export function invalidFields(source: string, problems: FieldProblem[]): never {
  const lines = problems.map((p) => `  ${p.path}: ${p.message} (got ${showValue(p.value)})`);
  throw new WavegateError('INVALID_INPUT', `${source}: invalid\n${lines.join('\n')}`, { source, problems });
}

interface SchemaDef {
  type: string;
  shape?: Record<string, { _zod: { def: SchemaDef } }>;
  innerType?: { _zod: { def: SchemaDef } };
  in?: { _zod: { def: SchemaDef } };
  element?: { _zod: { def: SchemaDef } };
  valueType?: { _zod: { def: SchemaDef } };
}

/** The field names an object schema allows at `path` (through optional/default/pipe/array/record). */
function allowedKeys(schema: z.ZodType, path: readonly PropertyKey[]): string[] | undefined {
  let def = (schema as unknown as { _zod: { def: SchemaDef } })._zod.def;
  const unwrap = (d: SchemaDef): SchemaDef => {
    for (let i = 0; i < 20; i++) {
      const next = d.innerType ?? (d.type === 'pipe' ? d.in : undefined);
      if (!next) return d;
      d = next._zod.def;
    }
    return d;
  };
  for (const key of path) {
    def = unwrap(def);
    const next =
      def.type === 'object' && typeof key === 'string' ? def.shape?.[key] : def.type === 'array' ? def.element : def.type === 'record' ? def.valueType : undefined;
    if (!next) return undefined;
    def = next._zod.def;
  }
  def = unwrap(def);
  return def.type === 'object' && def.shape ? Object.keys(def.shape) : undefined;
}
