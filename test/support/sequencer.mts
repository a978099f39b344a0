import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { readDurations } from './test-durations.mjs';

/**
 * Longest files first, by their recorded CI durations. A fresh clone has no vitest cache, so vitest's
 * own order falls back to the largest file first, and the three conformance files (a few hundred bytes
 * each, 70-95 s each) started last and ran alone at the end: the suite's tail. Longest-first keeps
 * the workers busy to the end. Files not recorded yet go first (as vitest runs unknown files first),
 * and the projects keep their group order (`sequence.groupOrder`).
 */
export class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const root = this.ctx.config.root;
    const durations = readDurations(root);
    const durationOf = (spec: TestSpecification) =>
      durations.get(relative(root, spec.moduleId).split('\\').join('/')) ?? Number.POSITIVE_INFINITY;
    return [...files].sort((a, b) => {
      const group = a.project.config.sequence.groupOrder - b.project.config.sequence.groupOrder;
      if (group !== 0) return group;
      // Projects of one group order share one pool (the unit files and the shared ones): longest first across them.
      const da = durationOf(a);
      const db = durationOf(b);
      if (da === db) return a.moduleId < b.moduleId ? -1 : a.moduleId > b.moduleId ? 1 : 0;
      return da < db ? 1 : -1;
    });
  }
}
