import type { SearchAttributeType } from '@temporalio/common';

/**
 * Which of the search attributes wavegate needs a namespace lacks or holds with another type, and what a
 * person runs to fix it. Pure: the worker (workers/search-attributes.ts) asks the server, this decides.
 */

/** One search attribute wavegate needs: contracts/search-attributes.ts's keys have this shape. */
export interface NeededAttribute {
  name: string;
  type: SearchAttributeType;
}

export interface AttributeMismatch {
  name: string;
  needed: SearchAttributeType;
  registered: SearchAttributeType | 'UNKNOWN';
}

export interface SearchAttributeCheck {
  missing: NeededAttribute[];
  mismatched: AttributeMismatch[];
}

/** The type names the Temporal CLI and tcld take (`--type Keyword`, `--sa "X=Int"`). */
const CLI_TYPE_NAME: Record<SearchAttributeType, string> = {
  TEXT: 'Text',
  KEYWORD: 'Keyword',
  INT: 'Int',
  DOUBLE: 'Double',
  BOOL: 'Bool',
  DATETIME: 'Datetime',
  KEYWORD_LIST: 'KeywordList',
};

/** temporal.api.enums.v1.IndexedValueType, as the operator API's listSearchAttributes reports it. */
const INDEXED_VALUE_TYPES: Record<number, SearchAttributeType> = {
  1: 'TEXT',
  2: 'KEYWORD',
  3: 'INT',
  4: 'DOUBLE',
  5: 'BOOL',
  6: 'DATETIME',
  7: 'KEYWORD_LIST',
};
const INDEXED_VALUE_TYPE_OF: Record<SearchAttributeType, number> = Object.fromEntries(
  Object.entries(INDEXED_VALUE_TYPES).map(([n, t]) => [t, Number(n)]),
) as Record<SearchAttributeType, number>;

export function cliTypeName(type: SearchAttributeType | 'UNKNOWN'): string {
  return type === 'UNKNOWN' ? 'an unknown type' : CLI_TYPE_NAME[type];
}

/** The operator API's enum number as a type (0 / unknown numbers: UNKNOWN, so a mismatch is reported, not hidden). */
export function typeOfIndexedValue(n: number): SearchAttributeType | 'UNKNOWN' {
  return INDEXED_VALUE_TYPES[n] ?? 'UNKNOWN';
}

/** The enum number the operator API's addSearchAttributes takes for a type. */
export function indexedValueTypeOf(type: SearchAttributeType): number {
  return INDEXED_VALUE_TYPE_OF[type];
}

/** Compare what wavegate needs with what the namespace has (name → the operator API's enum number). */
export function checkSearchAttributes(
  needed: readonly NeededAttribute[],
  registered: Readonly<Record<string, number>>,
): SearchAttributeCheck {
  const missing: NeededAttribute[] = [];
  const mismatched: AttributeMismatch[] = [];
  for (const attr of needed) {
    if (!Object.hasOwn(registered, attr.name)) {
      missing.push({ name: attr.name, type: attr.type });
      continue;
    }
    const actual = typeOfIndexedValue(registered[attr.name]!);
    if (actual !== attr.type) mismatched.push({ name: attr.name, needed: attr.type, registered: actual });
  }
  return { missing, mismatched };
}

export function searchAttributesOk(check: SearchAttributeCheck): boolean {
  return check.missing.length === 0 && check.mismatched.length === 0;
}

/**
 * Temporal Cloud namespaces are managed with tcld, not the operator API: their endpoints are
 * `<ns>.<account>.tmprl.cloud` (mTLS) and `<region>.<cloud>.api.temporal.io` (API keys).
 */
export function isTemporalCloudAddress(address: string): boolean {
  const host = address
    .replace(/:\d+$/, '')
    .replace(/^\[|\]$/g, '')
    .toLowerCase();
  return /\.tmprl\.cloud$/.test(host) || /(^|\.)api\.temporal\.io$/.test(host);
}

/** Quote a shell word only when it needs it (namespaces and addresses rarely do). */
function shellWord(word: string): string {
  return /^[A-Za-z0-9_.:/@%+=,-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/**
 * The exact commands that add the missing attributes: one `temporal operator search-attribute create`
 * per attribute on a self-hosted server (its --type takes one type per command), one
 * `tcld namespace search-attributes add` with every attribute on Temporal Cloud.
 */
export function addCommands(
  missing: readonly NeededAttribute[],
  target: { namespace: string; address: string },
): string[] {
  if (missing.length === 0) return [];
  const ns = shellWord(target.namespace);
  if (isTemporalCloudAddress(target.address)) {
    return [
      `tcld namespace search-attributes add --namespace ${ns} ${missing.map((a) => `--search-attribute ${shellWord(`${a.name}=${CLI_TYPE_NAME[a.type]}`)}`).join(' ')}`,
    ];
  }
  return missing.map(
    (a) =>
      `temporal operator search-attribute create --address ${shellWord(target.address)} --namespace ${ns} --name ${a.name} --type ${CLI_TYPE_NAME[a.type]}`,
  );
}

/**
 * What a person reads when the namespace is not ready: each missing attribute with its type and the
 * command that adds it, each mismatched one with both types and what to do (a type cannot be changed in
 * place). `reason` says why the worker did not add them itself (a refusal, a flag), `preface` what failed.
 */
export function describeSearchAttributeProblem(
  check: SearchAttributeCheck,
  target: { namespace: string; address: string },
  opts: { preface?: string; reason?: string } = {},
): string {
  const lines: string[] = [];
  const cloud = isTemporalCloudAddress(target.address);
  const head = opts.preface ? `${opts.preface}: ` : '';
  lines.push(
    `${head}namespace "${target.namespace}" on ${target.address} does not have the search attributes wavegate needs${opts.reason ? ` (${opts.reason})` : ''}; nothing was started.`,
  );
  if (check.missing.length > 0) {
    lines.push(`missing: ${check.missing.map((a) => `${a.name} (${CLI_TYPE_NAME[a.type]})`).join(', ')}`);
    lines.push(
      cloud
        ? 'add them with tcld (Temporal Cloud; needs the namespace admin role):'
        : 'add them (needs the operator API; `wavegate worker` does this itself where it may):',
    );
    for (const command of addCommands(check.missing, target)) lines.push(`  ${command}`);
  }
  for (const m of check.mismatched) {
    lines.push(
      `wrong type: ${m.name} is registered as ${cliTypeName(m.registered)}, wavegate needs ${CLI_TYPE_NAME[m.needed]}; a search attribute's type cannot be changed in place:`,
    );
    lines.push(
      cloud
        ? `  rename it out of the way (tcld namespace search-attributes rename --namespace ${shellWord(target.namespace)} --existing-name ${m.name} --new-name ${m.name}Old) and add it again with the right type, or use another namespace`
        : `  temporal operator search-attribute remove --address ${shellWord(target.address)} --namespace ${shellWord(target.namespace)} --name ${m.name}   (then start \`wavegate worker\` again, which adds it), or use another namespace`,
    );
  }
  return lines.join('\n');
}

/**
 * A visibility query that tells whether the namespace has `attr`, and with which type, using read access
 * only: Temporal Cloud refuses the operator API (listSearchAttributes) but answers queries. The server
 * answers `invalid search attribute: X` for a missing one and `... search attribute X of type Keyword`
 * for a value of the wrong type.
 */
export function probeQuery(attr: NeededAttribute): string {
  const sample: Record<SearchAttributeType, string> = {
    TEXT: "''",
    KEYWORD: "''",
    KEYWORD_LIST: "''",
    INT: '0',
    DOUBLE: '0.5',
    BOOL: 'true',
    DATETIME: "'2000-01-01T00:00:00Z'",
  };
  return `${attr.name} = ${sample[attr.type]}`;
}

const TYPE_BY_CLI_NAME: Record<string, SearchAttributeType> = Object.fromEntries(
  Object.entries(CLI_TYPE_NAME).map(([t, n]) => [n.toLowerCase(), t as SearchAttributeType]),
);

/**
 * What the server's answer to probeQuery(attr) says: `present` when it answered (no error text),
 * `missing`, the registered type when it named another, or `unknown` for any other refusal.
 */
export function classifyProbeAnswer(
  attr: NeededAttribute,
  errorText: string | undefined,
):
  | { kind: 'present' }
  | { kind: 'missing' }
  | { kind: 'mismatched'; registered: SearchAttributeType | 'UNKNOWN' }
  | { kind: 'unknown' } {
  if (errorText === undefined) return { kind: 'present' };
  if (searchAttributeNamedIn(errorText, [attr.name]) === undefined) return { kind: 'unknown' };
  const typed = new RegExp(`search attribute ${attr.name} of type (\\w+)`, 'i').exec(errorText);
  if (typed) return { kind: 'mismatched', registered: TYPE_BY_CLI_NAME[typed[1]!.toLowerCase()] ?? 'UNKNOWN' };
  return { kind: 'missing' };
}

/**
 * The needed attribute a server's refusal is about, if it is about one: the SQL visibility store says
 * `invalid search attribute: X` (queries), `no mapping defined for search attribute X` (starts) or
 * `invalid value type for search attribute X of type T`; Elasticsearch says `X is not a valid search
 * attribute`. Only names wavegate needs count, so an unrelated refusal keeps its own message.
 */
export function searchAttributeNamedIn(errorText: string, names: readonly string[]): string | undefined {
  if (!/search attribute/i.test(errorText)) return undefined;
  for (const name of names) {
    if (new RegExp(`\\b${name}\\b`).test(errorText)) return name;
  }
  return undefined;
}
