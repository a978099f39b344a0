import type { z } from 'zod';
import { documentProblems, type ShapeProblem } from './document-bounds';
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

/** A key that reads unambiguously in a dotted path; anything else is shown quoted, invisible characters escaped. */
const PLAIN_KEY = /^[\x21-\x7e]+$/;

export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else if (typeof key === 'string' && PLAIN_KEY.test(key)) out += out ? `.${key}` : key;
    else out += `[${escapeInvisible(JSON.stringify(String(key)))}]`;
  }
  return out || '(root)';
}

/**
 * Characters a reader cannot see or that change how the text around them reads (controls, format
 * characters such as zero-width spaces and bidi overrides, line/paragraph separators, unusual spaces,
 * lone surrogates), escaped as \uXXXX so an error message shows exactly what was given.
 */
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Co}\p{Cs}\p{Zl}\p{Zp}\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]/gu;

/** One line of visible text: no control, format (zero-width, bidi) or line-separator characters. */
export const PRINTABLE = /^[^\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}]*$/u;
export const PRINTABLE_RULE = 'must be one line of visible text (no control, zero-width or bidi characters)';

export function escapeInvisible(text: string): string {
  return text.replace(INVISIBLE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

const PREVIEW_LENGTH = 80;

/**
 * A short rendering of a value for an error message: JSON-like, but NaN and ±Infinity as themselves (not
 * `null`), invisible characters escaped, and bounded in depth and length whatever was given.
 */
export function showValue(value: unknown): string {
  if (value === undefined) return 'missing';
  const text = render(value, 0);
  return text.length > PREVIEW_LENGTH ? `${text.slice(0, PREVIEW_LENGTH - 3)}...` : text;
}

function render(value: unknown, depth: number): string {
  if (typeof value === 'number') return Number.isFinite(value) ? JSON.stringify(value) : String(value);
  // Scrubbed: a refused url or command may hold the very password it was refused for.
  if (typeof value === 'string')
    return escapeInvisible(
      JSON.stringify(scrubCredentials(value.length > PREVIEW_LENGTH * 2 ? value.slice(0, PREVIEW_LENGTH * 2) : value)),
    );
  if (typeof value === 'bigint') return `${value}n`;
  if (value === null || typeof value === 'boolean') return String(value);
  if (typeof value !== 'object') return typeof value;
  if (depth >= 3) return Array.isArray(value) ? '[...]' : '{...}';
  // Only as many entries as can show: a 100,000-element array costs no more than a short one.
  if (Array.isArray(value))
    return `[${value
      .slice(0, 10)
      .map((v) => render(v, depth + 1))
      .join(',')}${value.length > 10 ? ',...' : ''}]`;
  const keys = Object.keys(value);
  const shown = keys
    .slice(0, 10)
    .map((k) => `${escapeInvisible(JSON.stringify(k))}:${render((value as Record<string, unknown>)[k], depth + 1)}`);
  return `{${shown.join(',')}${keys.length > 10 ? ',...' : ''}}`;
}

/**
 * Validate `data` against `schema`; on failure throw INVALID_INPUT naming the file, every field path,
 * the value found there and what the schema allows. Nothing downstream sees unvalidated input.
 */
export function parseWith<S extends z.ZodType>(schema: S, data: unknown, source: string): z.output<S> {
  const shape = documentProblems(data);
  if (shape.length) invalidFields(source, shape.map(shapeProblem));
  const result = schema.safeParse(data);
  if (result.success) return result.data;
  const problems = result.error.issues.flatMap((issue) => issueProblems(schema, data, [], issue));
  return invalidFields(source, problems);
}

/** A document-shape problem in the format of the others (a too-deep branch is named by its first levels). */
export function shapeProblem(p: ShapeProblem): FieldProblem {
  return { path: `${formatPath(p.path)}${p.deep ? '...' : ''}`, value: p.value, message: p.message };
}

type Issue = z.core.$ZodIssue;

/** One zod issue as field problems; `base` is where the issue's (relative) path starts. */
function issueProblems(schema: z.ZodType, data: unknown, base: readonly PropertyKey[], issue: Issue): FieldProblem[] {
  const path = [...base, ...issue.path];
  if (issue.code === 'unrecognized_keys') {
    // Name each unknown field by its own path, and list the fields that are allowed there.
    const allowed = allowedKeys(schema, path);
    return issue.keys.map((key) => ({
      path: formatPath([...path, key]),
      value: valueAt(data, [...path, key]),
      message: `unknown field${allowed ? `; allowed: ${allowed.join(', ')}` : ''}`,
    }));
  }
  if (issue.code === 'invalid_union') return unionProblems(schema, data, path, issue.errors, issue.message);
  if (issue.code === 'invalid_key') {
    // A record key that its key schema refused: say why (the key's own rule), not "Invalid key in record".
    const key = path[path.length - 1];
    return [
      { path: formatPath(path), value: key, message: issue.issues.map((i) => i.message).join('; ') || issue.message },
    ];
  }
  const value = valueAt(data, path);
  const message =
    value === undefined && issue.code === 'invalid_type'
      ? `required (${issue.message.replace(/^Invalid input: /, '').replace(/, received undefined$/, '')})`
      : issue.message;
  return [{ path: formatPath(path), value, message }];
}

/** What zod says for a union without a message of its own ("Invalid input" tells the reader nothing). */
const DEFAULT_UNION_MESSAGE = 'Invalid input';

/**
 * A union none of whose alternatives matched: report the alternative the value came closest to (the
 * one whose problems are deepest inside the value, without unknown fields), so `errorRate: { command: 3 }`
 * says `errorRate.command` must be text and `gate: 1e300` gets the duration's range. When the value is
 * of no alternative's kind at all, the union's own message (a field's `error`), else the kinds allowed.
 */
function unionProblems(
  schema: z.ZodType,
  data: unknown,
  path: readonly PropertyKey[],
  branches: Issue[][],
  message: string,
): FieldProblem[] {
  const kindMismatch = (i: Issue) =>
    i.path.length === 0 && (i.code === 'invalid_type' || i.code === 'invalid_value' || i.code === 'invalid_union');
  const score = (branch: Issue[]) =>
    branch.some((i) => i.code === 'unrecognized_keys')
      ? -1
      : branch.every(kindMismatch)
        ? -2
        : Math.min(...branch.map((i) => i.path.length));
  const best = [...branches].filter((b) => b.length).sort((a, b) => score(b) - score(a))[0];
  if (best && score(best) >= 0) return best.flatMap((issue) => issueProblems(schema, data, path, issue));
  const kinds = [...new Set(branches.flatMap(alternatives))];
  const own = message !== DEFAULT_UNION_MESSAGE ? message : undefined;
  return [
    {
      path: formatPath(path),
      value: valueAt(data, path),
      message: own ?? `must be ${kinds.length ? orList(kinds) : 'one of the allowed forms'}`,
    },
  ];
}

/** The kinds of value a union branch accepts, in words (`"manual"`, `a number`). */
function alternatives(branch: Issue[]): string[] {
  return branch.flatMap((i): string[] => {
    if (i.path.length) return [];
    if (i.code === 'invalid_type')
      return [i.expected === 'object' ? 'a mapping' : i.expected === 'array' ? 'a list' : `a ${i.expected}`];
    if (i.code === 'invalid_value') return i.values.map((v) => JSON.stringify(v));
    if (i.code === 'invalid_union') return i.errors.flatMap(alternatives);
    return [];
  });
}

function orList(items: string[]): string {
  return items.length < 2 ? items.join('') : `${items.slice(0, -1).join(', ')} or ${items[items.length - 1]}`;
}

/** Throw INVALID_INPUT for problems found after the schema (cross-field checks), in parseWith's format. */
export function invalidFields(source: string, problems: readonly FieldProblem[]): never {
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
      def.type === 'object' && typeof key === 'string'
        ? def.shape?.[key]
        : def.type === 'array'
          ? def.element
          : def.type === 'record'
            ? def.valueType
            : undefined;
    if (!next) return undefined;
    def = next._zod.def;
  }
  def = unwrap(def);
  return def.type === 'object' && def.shape ? Object.keys(def.shape) : undefined;
}
