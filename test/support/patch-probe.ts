import { join } from 'node:path';
import { bundleWorkflowCode, Worker, type InjectedSinks } from '@temporalio/worker';
import { installQuietRuntime, WORKFLOWS_PATH } from '../../workers/worker';
import { loadHistory } from './histories';
import type { PatchProbeSinks } from './patch-probe-workflow';

/** How one recorded history meets one patch on replay: with its marker (new branch) or without (old branch). */
export interface PatchMeeting {
  file: string;
  patchId: string;
  taken: boolean;
}

/**
 * Replays histories with the current workflow code, `wf.patched()` reporting each answer it gives: which
 * histories reach each patch point, and on which branch. A patch point a history never reaches leaves no
 * meeting, so this tells "replays the old branch" apart from "has no marker because it ended earlier".
 */
export async function replayPatchMeetings(
  files: readonly string[],
): Promise<{ errors: string[]; meetings: PatchMeeting[] }> {
  installQuietRuntime();
  const seen = new Map<string, PatchMeeting>();
  const sinks: InjectedSinks<PatchProbeSinks> = {
    patchProbe: {
      asked: {
        fn: (info, patchId, taken) => {
          const file = info.workflowId.slice(info.workflowId.lastIndexOf('#') + 1);
          seen.set(`${file} ${patchId}`, { file, patchId, taken });
        },
        callDuringReplay: true,
      },
    },
  };
  const workflowBundle = await bundleWorkflowCode({
    workflowsPath: WORKFLOWS_PATH,
    logger: { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error: (m: string) => console.error(m) },
    webpackConfigHook: (config) => ({
      ...config,
      resolve: {
        ...config.resolve,
        alias: {
          ...(config.resolve?.alias as Record<string, string | false>),
          '@temporalio/workflow$': join(__dirname, 'patch-probe-workflow.ts'),
        },
      },
    }),
  });
  const histories = files.map((file) => {
    const { workflowId, history } = loadHistory(file);
    return { workflowId: `${workflowId}#${file}`, history };
  });
  const errors: string[] = [];
  for await (const result of Worker.runReplayHistories({ workflowBundle, sinks }, histories)) {
    if (result.error) errors.push(`${result.workflowId}: ${result.error}`);
  }
  return { errors, meetings: [...seen.values()] };
}
