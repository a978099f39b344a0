import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { loadInventory as loadInventoryFile } from '../../../intake/inventory';
import { readDocument } from '../../../intake/files';
import { WavegateError } from '../../../core/errors';
import { parseProfile, parseRevision } from '../../../core/revision';
import { checkSpecAgainstInventory, parseRolloutSpec } from '../../../core/spec';
import type { FieldProblem } from '../../../core/validation';

export interface CorpusCase {
  file: string;
  kind: 'spec' | 'inventory' | 'revision' | 'profile';
  code: string;
  path: string;
  why?: string;
}

const ROOT = 'test/corpus';
const CASES = parseYaml(readFileSync(join(ROOT, 'cases.yaml'), 'utf8')) as CorpusCase[];

function load(c: CorpusCase): void {
  const file = join(ROOT, c.file);
  switch (c.kind) {
    case 'spec': {
      const spec = parseRolloutSpec(readDocument(file), file);
      checkSpecAgainstInventory(spec, loadInventoryFile(join(ROOT, 'valid/inventory.yaml')), file);
      return;
    }
    case 'inventory':
      loadInventoryFile(file);
      return;
    case 'revision':
      parseRevision(readDocument(file), file);
      return;
    case 'profile':
      parseProfile(readDocument(file), file);
      return;
  }
}

/** The error names the field: one of its problems has exactly this path, or its message mentions it. */
export function namesField(err: WavegateError, path: string): boolean {
  const problems = (err.details.problems as FieldProblem[] | undefined) ?? [];
  return problems.some((p) => p.path === path) || err.message.includes(path);
}

describe('malformed-input corpus', () => {
  it('has at least 40 cases, each file present', () => {
    expect(CASES.length).toBeGreaterThanOrEqual(40);
    for (const c of CASES) expect(() => readFileSync(join(ROOT, c.file))).not.toThrow();
  });

  it('the valid companions are valid', () => {
    const inventory = loadInventoryFile(join(ROOT, 'valid/inventory.yaml'));
    checkSpecAgainstInventory(parseRolloutSpec(readDocument(join(ROOT, 'valid/spec.yaml')), 'spec'), inventory, 'spec');
  });

  it.each(CASES.map((c) => [c.file, c] as const))('%s is refused naming its field', (_file, c) => {
    let caught: unknown;
    try {
      load(c);
    } catch (err) {
      caught = err;
    }
    expect(caught, `${c.file} was accepted`).toBeInstanceOf(WavegateError);
    const err = caught as WavegateError;
    expect(err.code).toBe(c.code);
    expect(err.message).toContain(c.file);
    expect(namesField(err, c.path), `expected ${c.path} in:\n${err.message}`).toBe(true);
    // The message shows what was found there and what is allowed, not only where.
    expect(err.message).toMatch(/\(got |line \d|unknown key|no such|allowed|must|expected/);
  });
});
