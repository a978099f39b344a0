import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { PROJECT_ROOT } from '../../workers/toolchain';

/**
 * Workflow histories recorded from the workflow tests and committed under test/fixtures/histories.
 * test/workflow/replay.test.ts replays every one of them against the current workflow code, so a
 * non-deterministic change fails CI. Record the histories of a new path with
 * `RECORD_HISTORIES=1 npx vitest run <test file>`. An existing history is never overwritten: a workflow
 * change that breaks its replay must be guarded with `patched()` so running rollouts replay, and the new
 * path gets a history of its own beside the old one.
 */
export const HISTORIES_DIR = join(PROJECT_ROOT, 'test', 'fixtures', 'histories');

export async function recordHistory(handle: WorkflowHandle, name: string): Promise<void> {
  if (process.env.RECORD_HISTORIES !== '1') return;
  mkdirSync(HISTORIES_DIR, { recursive: true });
  const path = join(HISTORIES_DIR, `${name}.json`);
  if (existsSync(path)) return;
  const history = await handle.fetchHistory();
  // Protobuf binary (base64): exact, and independent of the JSON mapping of the SDK version at hand.
  const bytes = temporal.api.history.v1.History.encode(history).finish();
  writeFileSync(path, `${JSON.stringify({ workflowId: handle.workflowId, events: history.events?.length ?? 0, history: Buffer.from(bytes).toString('base64') })}\n`);
}

export function loadHistory(file: string): { workflowId: string; history: temporal.api.history.v1.History } {
  const { workflowId, history } = JSON.parse(readFileSync(join(HISTORIES_DIR, file), 'utf8')) as { workflowId: string; history: string };
  return { workflowId, history: temporal.api.history.v1.History.decode(Buffer.from(history, 'base64')) };
}
