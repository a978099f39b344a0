import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { deviceRecords } from '../../clients/rollout-records';
import { decodeFromPayloadsAtIndex } from '@temporalio/common/lib/internal-non-workflow';
import type { Command } from 'commander';
import { WavegateError } from '../../core/errors';
import type { RolloutInput } from '../../core/rollout/input';
import {
  changedDevices,
  revertStateRefusal,
  revertWindowRefusal,
  rollForwardCommands,
  type FinishedRollout,
} from '../../core/rollout/revert';
import { statusQuery } from '../../contracts/rollout';
import type { RolloutStatus } from '../../core/rollout/status';
import { profileDir, revisionNumbers } from '../../intake/profile-dir';
import { profilesOptionHelp, resolveProfilesRoot } from '../../intake/profiles-root';
import { revertRolloutInput } from '../../intake/revert';
import { resolveConnectionSettings, type TemporalFlags } from '../../workers/connection';
import { runningRolloutsOf, startOrJoinRollout, withClient, withTemporalOptions, workflowUrl } from '../client';
import { preflightRollout } from '../preflight';
import { refuseWhileFrozen } from '../../clients/freeze';
import {
  checkInventoryFlags,
  readInventoryFlags,
  withInventoryOptions,
  withMembership,
  type InventoryFlags,
} from '../membership-client';
import { action, EXIT_OK } from '../run';
import { closingLine, watchRollout } from '../watch';
import { isFinalState } from '../../core/controls';
import { isLegacyRolloutId } from '../../core/rollout-id';
import { operatorName, parseInterval, printOutcome, waitOptions } from './rollout';

/**
 * `wavegate revert <rollout-id> [--fast]`: undo a completed rollout inside its revert window, as a new
 * rollout from its toRevision back to its fromRevision over exactly the devices it changed. The rollout
 * is read from Temporal (its input from the first history event, its result, its close time); the
 * decisions are core/rollout/revert.ts; the input is built by intake/revert.ts like a start's.
 */

interface RevertFlags extends TemporalFlags, InventoryFlags {
  run?: string;
  fast?: boolean;
  profiles?: string;
  registry?: boolean;
  wait?: boolean;
  exitOnPause?: boolean;
  interval: number;
  json?: boolean;
}

const HELP = `
The revert window: a completed rollout raises a floor at its toRevision on every device it changed;
nothing below it is applied there again, except going back to its fromRevision for the spec's
revertWindow (default 24h) after it completed. Inside that window, revert starts a new rollout (an id
of its own, rollout:<profile>:<UTC yyyymmdd-hhmmss>) from toRevision back to fromRevision over exactly the devices the rollout changed (not the ones it
skipped, failed or left alone), with the rollout's phases, gates and health checks; --fast runs one
phase over all of them with no gate timer, health still checked. Its audit and status name the
rollout it undoes. A rollout still running is aborted instead (wavegate abort puts back what it
changed); a rolled-back, aborted or cancelled one has nothing to revert.

The rollout id alone names the rollout. --run is for ids started before each rollout had its own
(rollout:<profile>, every rollout of the profile one run after another): without it, the latest run;
\`wavegate list --profile <profile> --json\` shows each run's runId.

After the window (or with revertWindow 0) the revert is refused (exit 2) and the roll-forward is
printed: copy revisions/<from>.yaml as a new revision above every one the profile has, sign and
cosign it, and start a rollout up to it (going up is always allowed).
`;

/** The run's input, from its first history event (one event fetched, however long the history is). */
export async function inputOfRun(client: Client, workflowId: string, runId: string): Promise<RolloutInput> {
  const { history } = await client.workflowService.getWorkflowExecutionHistory({
    namespace: client.options.namespace,
    execution: { workflowId, runId },
    maximumPageSize: 1,
  });
  const payloads = history?.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads;
  if (!payloads?.length)
    throw new WavegateError('FAILED', `${workflowId} run ${runId}: its history has no start input to revert from`);
  return decodeFromPayloadsAtIndex<RolloutInput>(client.options.loadedDataConverter, 0, payloads);
}

/** The rollout to revert as Temporal knows it: NOT_FOUND for an unknown id or run. */
async function readRollout(
  client: Client,
  id: string,
  run?: string,
): Promise<{ finished: FinishedRollout; input: RolloutInput; closing?: string }> {
  const handle = client.workflow.getHandle(id, run);
  let described: Awaited<ReturnType<typeof handle.describe>>;
  try {
    described = await handle.describe();
  } catch (err) {
    if (err instanceof WorkflowNotFoundError)
      throw new WavegateError(
        'NOT_FOUND',
        `no rollout with id "${id}"${run ? ` and run ${run}` : ''}; \`wavegate list\` shows the rollouts Temporal knows`,
      );
    throw err;
  }
  if (described.type !== 'rolloutWorkflow')
    throw new WavegateError(
      'INVALID_INPUT',
      `${id} is a ${described.type}, not a rollout; only a rollout can be reverted`,
      { field: '<rollout-id>', value: id },
    );
  const runId = described.runId;
  const input = await inputOfRun(client, id, runId);
  const execution = described.status.name;
  const exact = client.workflow.getHandle(id, runId);
  let status: RolloutStatus | undefined;
  if (execution === 'RUNNING') status = await exact.query(statusQuery).catch(() => undefined);
  else if (execution === 'COMPLETED') status = (await exact.result()) as RolloutStatus;
  return {
    input,
    // A final status on a run still open: the end is decided, the run is delivering its last webhook events.
    ...(execution === 'RUNNING' && status && isFinalState(status.state) ? { closing: closingLine(status) } : {}),
    finished: {
      rolloutId: id,
      runId,
      execution,
      ...(status ? { state: status.state } : {}),
      ...(described.closeTime ? { closedAt: described.closeTime.getTime() } : {}),
      spec: input.spec,
      ...(input.reverts ? { reverts: input.reverts } : {}),
      ...(input.canary ? { canary: true } : {}),
      // A large rollout keeps its devices' records in its slices (clients/rollout-records.ts).
      changed: status ? changedDevices({ devices: await deviceRecords(client, status) }) : [],
    },
  };
}

/** The roll-forward commands for this profile: the next revision above every one it has. */
function rollForward(input: RolloutInput, profilesRoot: string, inventoryPath: string): string {
  const { spec } = input;
  const layout = profileDir(profilesRoot, spec.profile);
  const next =
    Math.max(
      spec.fromRevision,
      spec.toRevision,
      ...revisionNumbers(layout, 'revisions'),
      ...revisionNumbers(layout, 'envelopes'),
    ) + 1;
  return rollForwardCommands({
    profile: spec.profile,
    profileDir: layout.dir,
    profilesRoot,
    from: spec.fromRevision,
    to: spec.toRevision,
    next,
    inventoryPath,
  }).join('\n');
}

/**
 * A refused revert of an id started before each rollout had its own (`rollout:<profile>`, re-used by
 * every rollout of the profile): its latest run was read, and the rollout meant may be an earlier run.
 */
export function earlierRunsHint(id: string, profile: string, run: string | undefined): string {
  if (run !== undefined || !isLegacyRolloutId(id)) return '';
  return `\n${id} is an id every rollout of "${profile}" re-used before each rollout had its own; this was its latest run. To revert an earlier one, find its runId with \`wavegate list --profile ${profile} --json\` and run \`wavegate revert ${id} --run <runId>\``;
}

/** A revert checked, not started: the rollout it undoes, its input, and where the revert reads its inventory. */
export interface RevertPlan {
  id: string;
  finished: FinishedRollout;
  original: RolloutInput;
  inventoryPath: string;
  profilesRoot: string;
}

/**
 * Every refusal of a revert, in the command's order and words, before anything is read from the
 * inventory or started: an unknown id, a run still closing, a state with nothing to revert, a closed
 * window (with the roll-forward), another rollout of the profile running. What is left is what a revert
 * would touch: exactly `finished.changed`. The board shows it before an operator confirms.
 */
export async function checkRevert(
  client: Client,
  id: string,
  opts: Pick<RevertFlags, 'run' | 'inventory' | 'inventoryUrl'>,
  profilesRoot: string,
): Promise<RevertPlan> {
  const { finished, input: original, closing } = await readRollout(client, id, opts.run);
  // Not "is completed: only a completed rollout can be reverted": it is completed, and its run has not closed yet.
  if (closing) {
    throw new WavegateError(
      'INVALID_STATE',
      `${id} is ${finished.state} but its run ${finished.runId} is still open (${closing}): revert it once the run has closed; \`wavegate watch ${id}\` returns when it has. Nothing was started`,
      { state: 'closing' },
    );
  }
  // Where the revert reads its inventory: a flag, else the file the rollout read (a URL is read again
  // only when given: its query, which may have said which fleet, is not kept).
  const inventoryPath = opts.inventoryUrl ?? opts.inventory ?? original.inventoryPath;
  const refused = revertStateRefusal(finished);
  if (refused) {
    const forward =
      finished.state === 'aborted' && finished.changed.length
        ? `\n${rollForward(original, profilesRoot, inventoryPath)}`
        : '';
    throw new WavegateError(
      'INVALID_STATE',
      `${refused}${forward}${earlierRunsHint(id, original.spec.profile, opts.run)}`,
      { state: finished.state ?? finished.execution },
    );
  }
  const closed = revertWindowRefusal(finished, Date.now());
  if (closed)
    throw new WavegateError('INVALID_STATE', `${closed}\n${rollForward(original, profilesRoot, inventoryPath)}`, {
      state: 'revert-window-closed',
    });
  await refuseWhileFrozen(client, 'revert', {
    profile: original.spec.profile,
    pools: Object.keys(original.poolBudgets),
  });
  const running = await runningRolloutsOf(client, original.spec.profile);
  if (running.length)
    throw new WavegateError(
      'CONFLICT',
      `a rollout of profile "${original.spec.profile}" is running (${running.join(', ')}); wait for it, or abort it, before reverting ${id}`,
    );
  return { id, finished, original, inventoryPath, profilesRoot };
}

/** Start a checked revert (checkRevert): its inventory read, its input built and preflighted as a start's. */
export async function startRevert(
  client: Client,
  taskQueue: string,
  plan: RevertPlan,
  opts: Pick<RevertFlags, 'fast' | 'registry' | 'inventory' | 'inventoryUrl'>,
  startedBy: string,
) {
  const { id, finished, original, profilesRoot } = plan;
  // The membership as start stores it: the inventory read here, from a file or over HTTP.
  const read = await readInventoryFlags(opts, opts.inventoryUrl ? undefined : original.inventoryPath);
  const request = {
    original,
    reverts: {
      rolloutId: id,
      runId: finished.runId,
      ...(finished.closedAt !== undefined ? { closedAt: finished.closedAt } : {}),
    },
    devices: finished.changed,
    fast: !!opts.fast,
    profilesRoot: profilesRoot,
    inventoryPath: read.inventoryPath,
    inventory: read.inventory,
    startedBy,
  };
  const input = opts.registry ? await revertRolloutInput({ ...request, client }) : revertRolloutInput(request);
  // The same check as a start: a worker that would refuse the content is found before any device is contacted (exit 2).
  await preflightRollout(client, taskQueue, input);
  const { handle, runId } = await startOrJoinRollout(
    client,
    taskQueue,
    await withMembership(client, taskQueue, input, read, input.startedBy),
    { newId: true },
  );
  return { handle, runId, input };
}

export function register(program: Command): void {
  withTemporalOptions(
    withInventoryOptions(
      program.command('revert <rollout-id>'),
      'inventory file (default: the file the rollout read; one it read over HTTP needs --inventory-url again); read here and stored in a membership entity for the workers',
    )
      .description(
        'Undo a completed rollout inside its revert window: a new rollout from its toRevision back to its fromRevision over exactly the devices it changed. After the window it is refused (exit 2) and the roll-forward commands are printed',
      )
      .option(
        '--fast',
        "one phase over every device, no gate timer; the health checks of all the rollout's phases still run",
      )
      .option(
        '--run <runId>',
        'an earlier run of an id started before ids were per rollout (`rollout:<profile>`; default: its latest run; `wavegate list --json` shows the runs)',
      )
      .option('--profiles <dir>', profilesOptionHelp())
      .option(
        '--registry',
        'take the revisions from the profile registry (registry:<profile>) instead of the signed files',
      )
      .option('--wait', 'wait for the revert to finish; exit 0 only if every device it was for is back')
      .option('--exit-on-pause', 'with --wait: stop waiting and exit 1 when the revert pauses')
      .option('--interval <ms>', 'with --wait: poll interval', parseInterval, 1000)
      .option('--json', 'print {rolloutId, runId, reverts, devices} as JSON')
      .addHelpText('after', HELP),
  ).action(
    action(async (id: string, opts: RevertFlags) => {
      // Bad inventory flags are refused before Temporal is asked for the rollout (exit 2, nothing read).
      checkInventoryFlags(opts);
      const profilesRoot = resolveProfilesRoot({ flag: opts.profiles }).dir;
      const settings = resolveConnectionSettings(opts);
      return withClient(settings, async (client) => {
        const plan = await checkRevert(client, id, opts, profilesRoot);
        const { finished } = plan;
        const { handle, runId, input } = await startRevert(client, settings.taskQueue, plan, opts, operatorName());
        const { spec } = input;
        if (opts.json)
          console.log(
            JSON.stringify({ rolloutId: handle.workflowId, runId, reverts: input.reverts, devices: input.onlyDevices }),
          );
        else {
          console.log(
            `revert ${handle.workflowId} started: r${spec.fromRevision} → r${spec.toRevision} over the ${finished.changed.length} device(s) ${id} (run ${finished.runId}) changed, ${opts.fast ? 'one phase, no gate (--fast)' : `${spec.phases.length} phase(s) as it ran`}`,
          );
          console.log(`  devices: ${finished.changed.join(', ')}`.slice(0, 2000));
          console.log(`Web UI: ${workflowUrl(settings.uiUrl, settings.namespace, handle.workflowId)}`);
        }
        if (!opts.wait) return EXIT_OK;
        return printOutcome(
          await watchRollout(client, handle.workflowId, { ...waitOptions(opts.interval, !!opts.exitOnPause), runId }),
        );
      });
    }),
  );
}
