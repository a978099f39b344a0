import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { PROJECT_ROOT } from '../../intake/package-layout';

/**
 * Workflow histories recorded from the workflow tests and committed under test/fixtures/histories.
 * test/workflow/replay.test.ts replays every one of them against the current workflow code, so a
 * non-deterministic change fails CI. Record the histories of a new path with
 * `RECORD_HISTORIES=1 npx vitest run <test file>`. An existing history is never overwritten: a workflow
 * change that breaks its replay must be guarded with `patched()` so running rollouts replay, and the new
 * path gets a history of its own beside the old one.
 */
export const HISTORIES_DIR = join(PROJECT_ROOT, 'test', 'fixtures', 'histories');

/**
 * Histories of rollouts the current code no longer supports (docs/architecture.md, "Versioning workflow code"):
 * `archive/<release>/` holds those that took the old branch of a patch retired after that release, kept for the
 * record and replayed by that release's commit (workflows/patches.ts RELEASES), never by the current code.
 */
export const ARCHIVE_DIR = join(HISTORIES_DIR, 'archive');

/** The histories the current code replays: the files directly in `dir` (one level; archive/ is not read). */
export function currentHistories(dir = HISTORIES_DIR): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith('.json'))
    .map((e) => e.name)
    .sort();
}

export async function recordHistory(handle: WorkflowHandle, name: string): Promise<void> {
  if (process.env.RECORD_HISTORIES !== '1') return;
  mkdirSync(HISTORIES_DIR, { recursive: true });
  const path = join(HISTORIES_DIR, `${name}.json`);
  if (existsSync(path)) return;
  const history = await handle.fetchHistory();
  // Protobuf binary (base64): exact, and independent of the JSON mapping of the SDK version at hand.
  const bytes = temporal.api.history.v1.History.encode(history).finish();
  writeFileSync(
    path,
    `${JSON.stringify({ workflowId: handle.workflowId, events: history.events?.length ?? 0, history: Buffer.from(bytes).toString('base64') })}\n`,
  );
}

export function loadHistory(file: string): { workflowId: string; history: temporal.api.history.v1.History } {
  const { workflowId, history } = JSON.parse(readFileSync(join(HISTORIES_DIR, file), 'utf8')) as {
    workflowId: string;
    history: string;
  };
  return { workflowId, history: temporal.api.history.v1.History.decode(Buffer.from(history, 'base64')) };
}

/** A patch marker a history recorded: the SDK's `core_patch` marker, its `patch-data` detail naming the patch id. */
export interface PatchMarker {
  id: string;
  deprecated: boolean;
}

/** The patch markers in a history, in the order recorded. */
export function patchMarkers(history: temporal.api.history.v1.IHistory): PatchMarker[] {
  const markers: PatchMarker[] = [];
  for (const event of history.events ?? []) {
    const marker = event.markerRecordedEventAttributes;
    if (marker?.markerName !== 'core_patch') continue;
    for (const payload of marker.details?.['patch-data']?.payloads ?? []) {
      const { id, deprecated } = JSON.parse(Buffer.from(payload.data ?? []).toString('utf8')) as PatchMarker;
      markers.push({ id, deprecated });
    }
  }
  return markers;
}
