import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** Each test file's duration in CI (ms), refreshed by `scripts/test-durations.ts` from a JSON report. */
export const DURATIONS_FILE = 'test/durations.json';

/** The recorded durations; none (every file unknown, in path order) if the file is missing or malformed. */
export function readDurations(root: string): Map<string, number> {
  try {
    const parsed: unknown = JSON.parse(readFileSync(join(root, DURATIONS_FILE), 'utf8'));
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return new Map();
    return new Map(
      Object.entries(parsed).filter((e): e is [string, number] => typeof e[1] === 'number' && Number.isFinite(e[1])),
    );
  } catch {
    return new Map();
  }
}
