import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { InventoryInput } from '../../core/inventory';
import { NodeDownFile } from '../../core/node-down';
import { RevocationsContent } from '../../core/revocation';
import { RetireSource, RotationSource } from '../../core/rotation';
import { RootContent } from '../../core/trust-root';
import { Profile, Revision } from '../../core/revision';
import { Envelope, parseTrust, Pin, SecretKeyFile } from '../../core/signing';
import { RolloutBody } from '../../core/spec';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { refusal } from '../support/refusal';

/**
 * docs/formats.md cannot drift from the schemas: every field of every user-written format (walked out
 * of the zod schemas themselves, nested objects, arrays, records and wrappers included) must have a row
 * in the tables of the section that documents that format. A new schema field without a row fails here,
 * naming the field and the section.
 */

type Schema = z.core.$ZodType;
type Path = string[];

/** The schema inside the wrappers that do not change which fields a document has. */
function unwrap(schema: Schema): Schema[] {
  const def = schema._zod.def as unknown as Record<string, unknown> & { type: string };
  switch (def.type) {
    case 'optional':
    case 'nullable':
    case 'default':
    case 'prefault':
    case 'nonoptional':
    case 'readonly':
    case 'catch':
      return unwrap(def.innerType as Schema);
    case 'pipe':
      // A transform's input is what a user writes.
      return unwrap(def.in as Schema);
    case 'lazy':
      return unwrap((def.getter as () => Schema)());
    case 'array':
      return unwrap(def.element as Schema);
    case 'record':
      return unwrap(def.valueType as Schema);
    case 'union':
      return (def.options as Schema[]).flatMap(unwrap);
    case 'intersection':
      return [...unwrap(def.left as Schema), ...unwrap(def.right as Schema)];
    default:
      return [schema];
  }
}

/** Every field path of a schema: `rollback.on`, `payload.sha256` (array items and record values add no segment). */
function fieldPaths(schema: Schema, prefix: Path = [], skip: ReadonlySet<string> = new Set()): Path[] {
  const out: Path[] = [];
  for (const inner of unwrap(schema)) {
    const def = inner._zod.def as unknown as { type: string; shape?: Record<string, Schema> };
    if (def.type !== 'object' || !def.shape) continue;
    for (const [key, child] of Object.entries(def.shape)) {
      const path = [...prefix, key];
      out.push(path);
      if (!skip.has(path.join('.'))) out.push(...fieldPaths(child, path, skip));
    }
  }
  const seen = new Set<string>();
  return out.filter((p) => !seen.has(p.join('.')) && seen.add(p.join('.')));
}

/** The schema at a field path (through the same wrappers). */
function schemaAt(schema: Schema, path: Path): Schema {
  let current = schema;
  for (const key of path) {
    const object = unwrap(current).find((s) => (s._zod.def as unknown as { type: string }).type === 'object');
    const child = (object?._zod.def as unknown as { shape?: Record<string, Schema> } | undefined)?.shape?.[key];
    if (!child) throw new Error(`no field ${path.join('.')}`);
    current = child;
  }
  return current;
}

/**
 * The top-level fields of a strict schema core does not export, as its own refusal lists them
 * ("unknown field; allowed: a, b"): still read from the code, never typed in here.
 */
function allowedFields(parse: (data: unknown) => unknown): Path[] {
  const refused = refusal(() => parse({ formatsDocProbe: 1 }), Error);
  const allowed = /formatsDocProbe: unknown field; allowed: ([^(\n]+)/.exec(refused.message)?.[1];
  if (!allowed) throw new Error('the schema did not name its allowed fields');
  return allowed
    .trim()
    .split(/,\s*/)
    .map((k) => [k]);
}

const DOC = readFileSync(join(PROJECT_ROOT, 'docs', 'formats.md'), 'utf8');

/** The text of a `## <n>. ...` section, up to the next `## `. */
function section(heading: string): string {
  const lines = DOC.split('\n');
  const start = lines.findIndex((l) => l.startsWith(`## ${heading}`));
  if (start < 0) throw new Error(`docs/formats.md has no section "## ${heading}"`);
  const end = lines.findIndex((l, i) => i > start && l.startsWith('## '));
  return lines.slice(start, end < 0 ? undefined : end).join('\n');
}

/** The field paths the tables of a section document: the backticked names in each row's first cell. */
function documentedPaths(text: string): Path[] {
  const out: Path[] = [];
  for (const line of text.split('\n')) {
    const first = /^\s*\|([^|]*)\|/.exec(line)?.[1];
    if (!first) continue;
    for (const [, code] of first.matchAll(/`([^`]+)`/g)) {
      // `payload[].sha256`, `pools.<name>.disruptionBudget`, `…name` → segments of field names.
      out.push(
        code!
          .replace(/^…\.?/, '')
          .replace(/\[\]/g, '')
          .split('.')
          .filter((s) => s && !/^<.*>$/.test(s)),
      );
    }
  }
  return out;
}

/**
 * Documented when some row names the field with as much of its parents as the row gives: the row's
 * first segments up to the field's name are the end of the field's path (`jumpHost.host` documents
 * `devices.ssh.jumpHost.host`; `rollback.on` documents `rollback` and `rollback.on`). When the section
 * qualifies a parent's fields (`jumpHost.host`), a bare row (`user`, the device's) does not document
 * that parent's field of the same name (`jumpHost.user`).
 */
function isDocumented(path: Path, rows: Path[]): boolean {
  const last = path.at(-1)!;
  const qualifiers = new Set(rows.flatMap((row) => row.slice(0, -1)));
  return rows.some((row) =>
    row.some((segment, i) => {
      if (segment !== last || i + 1 > path.length) return false;
      const head = row.slice(0, i + 1);
      const before = path[path.length - head.length - 1];
      return (
        head.every((s, j) => s === path[path.length - head.length + j]) &&
        !(before !== undefined && qualifiers.has(before))
      );
    }),
  );
}

interface Format {
  name: string;
  section: string;
  fields: Path[];
  /** Fields the schema keeps only to refuse them with a message saying where they went: named in the section's text. */
  refused?: string[];
}

const rolloutFields = fieldPaths(RolloutBody, [], new Set(['window']));
const FORMATS: Format[] = [
  {
    name: 'profile.yaml (core/revision.ts Profile)',
    section: '4. profile.yaml',
    fields: fieldPaths(Profile),
    refused: ['runtimes', 'metrics.errorRate.command'],
  },
  {
    name: 'revision (core/revision.ts Revision, PayloadFile, RevisionHealth)',
    section: '5. Revisions',
    fields: fieldPaths(Revision),
  },
  {
    name: 'trust.yaml (core/signing.ts parseTrust, Pin)',
    section: '6. Envelopes, keys and trust.yaml',
    fields: [...allowedFields((d) => parseTrust(d, 'trust.yaml')), ...fieldPaths(Pin, ['pins'])],
  },
  {
    name: 'envelope (core/signing.ts Envelope)',
    section: '6. Envelopes, keys and trust.yaml',
    fields: fieldPaths(Envelope),
  },
  {
    name: 'key file (core/signing.ts SecretKeyFile)',
    section: '6. Envelopes, keys and trust.yaml',
    fields: fieldPaths(SecretKeyFile),
  },
  {
    name: 'inventory (core/inventory.ts InventoryInput, DeviceInput, SshSettings, pools)',
    section: '7. Inventory',
    fields: fieldPaths(InventoryInput),
  },
  {
    name: 'node-down verdicts (core/node-down.ts NodeDownFile)',
    section: '7. Inventory',
    fields: fieldPaths(NodeDownFile),
  },
  { name: 'rollout spec (core/spec.ts RolloutBody, Phase)', section: '8. Rollout spec', fields: rolloutFields },
  {
    name: 'maintenance window (core/spec.ts RolloutBody.window)',
    section: '11. Maintenance windows',
    fields: fieldPaths(schemaAt(RolloutBody, ['window'])),
  },
  {
    name: 'rotation schedule (core/rotation.ts RotationSource)',
    section: '18. Rotation schedules',
    fields: fieldPaths(RotationSource),
  },
  {
    name: 'rotation retire statement (core/rotation.ts RetireSource)',
    section: '18. Rotation schedules',
    fields: fieldPaths(RetireSource),
  },
  { name: 'trust root (core/trust-root.ts RootContent)', section: '19. Trust roots', fields: fieldPaths(RootContent) },
  {
    name: 'revocation list (core/revocation.ts RevocationsContent)',
    section: '20. Revocation lists',
    fields: fieldPaths(RevocationsContent),
  },
];

/** Every schema field the section's tables leave out, as `<format>: <field> (section "<s>")`. */
function undocumented(format: Format): string[] {
  const text = section(format.section);
  const rows = documentedPaths(text);
  const missing: string[] = [];
  for (const path of format.fields) {
    const field = path.join('.');
    if (format.refused?.includes(field)) {
      if (!text.includes(`\`${field}\``))
        missing.push(`${format.name}: ${field} (refused field, not named in section "${format.section}")`);
    } else if (!isDocumented(path, rows))
      missing.push(`${format.name}: ${field} (no table row in section "${format.section}")`);
  }
  return missing;
}

describe('docs/formats.md documents every schema field', () => {
  it('walks nested objects, arrays, records, unions and pipes of the schemas (the walk itself finds deep fields)', () => {
    const joined = (paths: Path[]) => paths.map((p) => p.join('.'));
    expect(joined(rolloutFields)).toEqual(
      expect.arrayContaining(['rollback.on', 'phases.healthGate', 'phases.gateMs', 'revertWindow', 'window']),
    );
    expect(joined(rolloutFields)).not.toContain('window.days');
    expect(joined(fieldPaths(InventoryInput))).toEqual(
      expect.arrayContaining(['pools.disruptionBudget', 'devices.ssh.jumpHost.hostKey', 'defaults.labels']),
    );
    expect(joined(fieldPaths(Revision))).toEqual(
      expect.arrayContaining([
        'payload.sha256',
        'health.runtimes.command',
        'health.errorRate.command',
        'escapes.reason',
      ]),
    );
    expect(joined(fieldPaths(Profile))).toEqual(
      expect.arrayContaining(['metrics.errorRate.prometheus.query', 'metrics.errorRate.tokenFile']),
    );
    expect(joined(allowedFields((d) => parseTrust(d, 'trust.yaml')))).toEqual(['threshold', 'pins']);
  });

  it('a field with no table row is reported by name; a parent row documents neither an unrelated field nor one of another parent', () => {
    const rows = documentedPaths(
      '| Field | Type |\n|---|---|\n| `rollback.on` | x |\n| `payload[].sha256` | x |\n| `…name` | x |\n| `pools.<name>.disruptionBudget` | x |',
    );
    expect(isDocumented(['rollback'], rows)).toBe(true);
    expect(isDocumented(['rollback', 'on'], rows)).toBe(true);
    expect(isDocumented(['payload', 'sha256'], rows)).toBe(true);
    expect(isDocumented(['health', 'checks', 'name'], rows)).toBe(true);
    expect(isDocumented(['pools', 'disruptionBudget'], rows)).toBe(true);
    expect(isDocumented(['revertWindow'], rows)).toBe(false);
    expect(isDocumented(['other', 'on'], rows)).toBe(false);
    expect(isDocumented(['payload', 'size'], rows)).toBe(false);
    // `payload[].…` rows qualify payload's fields: the bare `…name` row is another parent's.
    expect(isDocumented(['payload', 'name'], rows)).toBe(false);
  });

  it.each(FORMATS.map((f) => [f.name, f] as const))('%s: every field has a row in its section', (_name, format) => {
    expect(undocumented(format)).toEqual([]);
  });
});
