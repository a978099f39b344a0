import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadInventory as loadInventoryFile } from '../../../intake/inventory';
import { loadRolloutContent } from '../../../intake/prepare';
import { assembleRolloutInput } from '../../../intake/rollout-input';
import { MAX_DOCUMENT_BYTES, readDocument } from '../../../intake/files';
import { WavegateError } from '../../../core/errors';
import { refusal } from '../../support/refusal';
import { parseProfile, parseRevision } from '../../../core/revision';
import { checkSpecAgainstInventory, parseRolloutSpec } from '../../../core/spec';
import type { FieldProblem } from '../../../core/validation';

import { CORPUS_ROOT as ROOT, corpusCases, type CorpusCase } from '../../corpus/load';

// Command cases run the real CLI (test/e2e/bad-input-commands.test.ts); these are parsed in process.
const CASES = corpusCases().filter((c) => c.kind !== 'command');

function load(c: CorpusCase): void {
  const file = join(ROOT, c.file);
  switch (c.kind) {
    case 'spec': {
      const spec = parseRolloutSpec(readDocument(file), file);
      const inventory = loadInventoryFile(join(ROOT, 'valid/inventory.yaml'));
      checkSpecAgainstInventory(spec, inventory, file);
      // Against a profile: the rollout input as start builds it (signed content, health selections).
      if (c.profiles)
        assembleRolloutInput({
          ...loadRolloutContent({ spec, specSource: file, profilesRoot: join(ROOT, c.profiles) }),
          specSource: file,
          inventory,
          inventoryPath: join(ROOT, 'valid/inventory.yaml'),
          startedBy: 'corpus',
        });
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
    case 'signed-command':
      parseRevision({ profile: 'corpus', revision: 2, apply: c.command, verify: 'true' }, c.file);
      return;
    case 'command':
      throw new Error(`${c.file}: command cases run in test/e2e/bad-input-commands.test.ts`);
  }
}

/** The error names the field: one of its problems has exactly this path, or its message mentions it. */
function namesField(err: WavegateError, path: string): boolean {
  const problems = (err.details.problems as FieldProblem[] | undefined) ?? [];
  return problems.some((p) => p.path === path) || err.message.includes(path);
}

describe('malformed-input corpus', () => {
  it('has at least 40 cases, each file present', () => {
    expect(CASES.length).toBeGreaterThanOrEqual(40);
    for (const c of CASES.filter((c) => c.kind !== 'signed-command'))
      expect(() => readFileSync(join(ROOT, c.file))).not.toThrow();
  });

  it('the valid companions are valid', () => {
    const inventory = loadInventoryFile(join(ROOT, 'valid/inventory.yaml'));
    checkSpecAgainstInventory(parseRolloutSpec(readDocument(join(ROOT, 'valid/spec.yaml')), 'spec'), inventory, 'spec');
  });

  it.each(CASES.map((c) => [c.file, c] as const))('%s is refused naming its field', (_file, c) => {
    const err = refusal(() => load(c));
    expect(err, `${c.file} was accepted`).toBeInstanceOf(WavegateError);
    expect(err.code).toBe(c.code);
    expect(err.message).toContain(c.file);
    expect(namesField(err, c.path), `expected ${c.path} in:\n${err.message}`).toBe(true);
    // The message shows what was found there and what is allowed, not only where.
    expect(err.message).toMatch(/\(got |line \d|unknown key|no such|allowed|must|expected/);
    if (c.shows !== undefined) expect(err.message).toContain(c.shows);
    if (c.secret !== undefined) expect(err.message).not.toContain(c.secret);
  });
});

/**
 * The cases that are expensive to refuse naively (a range of ten million hosts, 100,000 levels of
 * nesting) as `wavegate plan` runs them, in a child process with a 200 MB heap: each exits 2 naming its
 * field. A case that used up the heap would die with an out-of-memory error (exit 134), and one that
 * hung is killed at the deadline (no exit code), so both fail here.
 */
describe('malformed-input corpus within bounded memory and time', () => {
  const HEAVY = CASES.filter((c) => c.heavy);
  const DEADLINE_MS = 60_000; // far above what a refusal takes, even on a loaded 2-core machine

  function planUnderLimits(
    c: CorpusCase,
  ): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }> {
    const file = join(ROOT, c.file);
    const valid = (name: string) => join(ROOT, 'valid', name);
    const args =
      c.kind === 'spec'
        ? ['-f', file, '--inventory', valid('inventory.yaml')]
        : ['-f', valid('spec.yaml'), '--inventory', file];
    return new Promise((resolve, reject) => {
      const child = spawn(
        process.execPath,
        [
          '--max-old-space-size=200',
          'bin/wavegate.js',
          'plan',
          '--what-if',
          ...args,
          '--profiles-dir',
          join(ROOT, 'no-profiles'),
        ],
        {
          stdio: ['ignore', 'ignore', 'pipe'],
          timeout: DEADLINE_MS,
        },
      );
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      child.on('error', reject);
      child.on('close', (code, signal) => resolve({ code, signal, stderr }));
    });
  }

  it('marks the expensive cases (huge Ansible ranges, deep nesting) as heavy', () => {
    expect(HEAVY.map((c) => c.file)).toEqual(
      expect.arrayContaining([
        'inventories/ansible-huge-range.ini',
        'specs/deep-nesting.json',
        'specs/deep-nesting-overflow.yaml',
      ]),
    );
  });

  it.each(HEAVY.map((c) => [c.file, c] as const))(
    '%s: plan under a 200 MB heap exits 2 naming its field',
    async (_file, c) => {
      const run = await planUnderLimits(c);
      expect(
        run.signal,
        `ended by ${run.signal} (out of memory, or killed at the ${DEADLINE_MS} ms deadline):\n${run.stderr}`,
      ).toBeNull();
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(c.path);
    },
    90_000,
  );

  it('refuses a document above the size limit before reading it', () => {
    const dir = mkdtempSync(join(tmpdir(), 'wavegate-corpus-'));
    try {
      const big = join(dir, 'spec.yaml');
      writeFileSync(
        big,
        `rollout:\n  profile: corpus\n  phases:\n    - canary: 1 device\n      name: ${'n'.repeat(MAX_DOCUMENT_BYTES)}\n`,
      );
      expect(() => readDocument(big)).toThrow(/spec\.yaml: is \d+ bytes, above the limit of 16777216 bytes/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a FIFO or a device instead of waiting on it or reading it forever', () => {
    const dir = mkdtempSync(join(tmpdir(), 'wavegate-corpus-'));
    try {
      const fifo = join(dir, 'spec.yaml');
      execFileSync('mkfifo', [fifo]);
      expect(() => readDocument(fifo)).toThrow(/spec\.yaml: cannot read file \(not a regular file\)/);
      expect(() => readDocument('/dev/zero')).toThrow(/\/dev\/zero: cannot read file \(not a regular file\)/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
