import { existsSync, mkdtempSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { TestSpecification } from 'vitest/node';
import { LongestFirstSequencer } from '../support/sequencer.mjs';
import { readDurations } from '../support/test-durations.mjs';

function specOf(root: string, file: string, project = 'shared', groupOrder = 0): TestSpecification {
  return { moduleId: join(root, file), project: { name: project, config: { sequence: { groupOrder } } } } as never;
}

function sequencerAt(root: string): LongestFirstSequencer {
  return new LongestFirstSequencer({ config: { root } } as never);
}

describe('the test sequencer (longest recorded file first)', () => {
  it('runs unknown files first, then the recorded ones longest first, and keeps the projects in their group order', async () => {
    const root = mkdtempSync(join(tmpdir(), 'wavegate-seq-'));
    mkdirSync(join(root, 'test'));
    writeFileSync(
      join(root, 'test/durations.json'),
      JSON.stringify({ 'test/a.test.ts': 1_000, 'test/b.test.ts': 90_000, 'test/c.test.ts': 30_000 }),
    );
    const sorted = await sequencerAt(root).sort([
      specOf(root, 'test/alone.test.ts', 'alone', 1),
      specOf(root, 'test/a.test.ts'),
      specOf(root, 'test/c.test.ts'),
      specOf(root, 'test/new.test.ts'),
      specOf(root, 'test/b.test.ts'),
    ]);
    expect(sorted.map((s) => s.moduleId.slice(root.length + 1))).toEqual([
      'test/new.test.ts',
      'test/b.test.ts',
      'test/c.test.ts',
      'test/a.test.ts',
      'test/alone.test.ts',
    ]);
  });

  it('orders the files of projects in one group order longest first across them (they share one pool)', async () => {
    const root = mkdtempSync(join(tmpdir(), 'wavegate-seq-'));
    mkdirSync(join(root, 'test'));
    writeFileSync(
      join(root, 'test/durations.json'),
      JSON.stringify({
        'test/e2e/slow.test.ts': 90_000,
        'test/unit/mid.test.ts': 60_000,
        'test/e2e/quick.test.ts': 5_000,
      }),
    );
    const sorted = await sequencerAt(root).sort([
      specOf(root, 'test/e2e/quick.test.ts'),
      specOf(root, 'test/unit/mid.test.ts', 'unit'),
      specOf(root, 'test/e2e/slow.test.ts'),
    ]);
    expect(sorted.map((s) => s.moduleId.slice(root.length + 1))).toEqual([
      'test/e2e/slow.test.ts',
      'test/unit/mid.test.ts',
      'test/e2e/quick.test.ts',
    ]);
  });

  it('reads no durations from a missing or malformed file (every file unknown, in path order) and drops non-numbers', async () => {
    const root = mkdtempSync(join(tmpdir(), 'wavegate-seq-'));
    expect(readDurations(root).size).toBe(0);
    mkdirSync(join(root, 'test'));
    writeFileSync(join(root, 'test/durations.json'), '{not json');
    expect(readDurations(root).size).toBe(0);
    const sorted = await sequencerAt(root).sort([specOf(root, 'test/z.test.ts'), specOf(root, 'test/y.test.ts')]);
    expect(sorted.map((s) => s.moduleId.slice(root.length + 1))).toEqual(['test/y.test.ts', 'test/z.test.ts']);
    writeFileSync(join(root, 'test/durations.json'), JSON.stringify({ 'test/x.test.ts': 'slow', 'test/w.test.ts': 5 }));
    expect([...readDurations(root)]).toEqual([['test/w.test.ts', 5]]);
  });

  it('the recorded durations name only files that exist', () => {
    const root = join(__dirname, '../..');
    const recorded = [...readDurations(root).keys()];
    expect(recorded.length).toBeGreaterThan(100);
    expect(recorded.filter((file) => !existsSync(join(root, file)))).toEqual([]);
  });
});
