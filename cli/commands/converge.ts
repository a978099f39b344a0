import { resolve } from 'node:path';
import type { Client } from '@temporalio/client';
import type { Command } from 'commander';
import { behindRows, readFleetBoard, type BoardRow } from '../../device/fleet';
import { twinReader } from '../../device/twin/board';
import { WavegateError } from '../../core/errors';
import type { RolloutInput } from '../../core/rollout/input';
import { prepareRollout } from '../../intake/prepare';
import { poolBudgetsOf, scopedDevices } from '../../intake/rollout-input';
import { profilesOptionHelp, resolveProfilesRoot } from '../../intake/profiles-root';
import { resolveConnectionSettings, type TemporalFlags } from '../../workers/connection';
import {
  lastCompletedRollout,
  listRollouts,
  runningRolloutsOf,
  startOrJoinRollout,
  withClient,
  withTemporalOptions,
  workflowUrl,
} from '../client';
import { action, EXIT_FAILED, EXIT_OK } from '../run';
import { preflightRollout } from '../preflight';
import { refuseWhileFrozen } from '../../clients/freeze';
import {
  readInventoryFlags,
  withInventoryOptions,
  withMembership,
  type InventoryFlags,
  type ReadInventory,
} from '../membership-client';
import { inputOfRun } from './revert';
import { revokedReason } from './fleet';
import { loadProfile } from '../../intake/profile';
import { loadProfileTrust } from '../../intake/trust';
import { watchRollout } from '../watch';
import { operatorName, parseInterval, printOutcome, waitOptions } from './rollout';
import type { SignedStatement } from '../../core/approval';
import { readSigningKeyFile } from '../../intake/checkpoint-keys';
import { checkStarterKey, startStatement } from '../operator-statement';

/**
 * `wavegate converge --profile P`: after a rollout completed with devices left behind (offline, failed),
 * bring exactly those devices to its revision. Which devices is read now, on the devices (the fleet
 * board of that revision), never from the old rollout's record; the new rollout is built by intake from
 * the same spec, inventory and profiles as `start`, so every safety rule of a start applies to it.
 * checkConverge and startConverge are shared with the board (cli/board/fleet.ts), which reads no spec
 * file: it converges with what the completed rollout ran (ConvergeSource).
 */

interface ConvergeFlags extends TemporalFlags, InventoryFlags {
  profile: string;
  identityKey?: string;
  file: string;
  profiles?: string;
  wait?: boolean;
  exitOnPause?: boolean;
  interval: number;
  concurrency: number;
  json?: boolean;
}

/** `rollout:<profile>:converge-<n>`, n one above any converge of the profile Temporal knows. */
export async function nextConvergeId(client: Client, profile: string): Promise<string> {
  const prefix = `rollout:${profile}:converge-`;
  const taken = (await listRollouts(client, { profile, limit: 1000 }))
    .map((r) => (r.workflowId.startsWith(prefix) ? Number(r.workflowId.slice(prefix.length)) : NaN))
    .filter((n) => Number.isInteger(n));
  return `${prefix}${Math.max(0, ...taken) + 1}`;
}

type LastCompleted = NonNullable<Awaited<ReturnType<typeof lastCompletedRollout>>>;

/**
 * Where a converge's spec, signed steps and profile come from. `file`: the command's `-f`, read by
 * intake now (the operator's spec of the completed rollout, its toRevision checked against it).
 * `recorded`: the board, which reads no operator's file: what the last completed rollout itself ran
 * (its workflow start input), the workers verifying its signed content against their pins again at apply.
 */
export type ConvergeSource = { file: string; input: RolloutInput } | { recorded: true; startedBy: string };

/** A converge checked, not started: what it will touch (`behind`), what could not be read, and its input. */
export interface ConvergePlan {
  profile: string;
  last: LastCompleted;
  /** The input the converge is made from (its id, devices and membership are given at start). */
  input: RolloutInput;
  read: ReadInventory;
  /** The revision the converge brings devices to: the last completed rollout's, or a newer one when that is revoked. */
  revision: number;
  behind: BoardRow[];
  unreachable: BoardRow[];
}

/** Why a revision is revoked by the profile's signers (its revocation list here), or undefined. */
export type RevokedReason = (revision: number) => string | undefined;

/**
 * The converge's input from what the last completed rollout ran (its first history event, as `revert`
 * reads it): the same spec, signed steps and profile; the pool budgets, scope check and inventory path
 * of the inventory read now; nothing of that run's own (id, plan seed, devices, membership, slicing).
 */
async function recordedInput(
  client: Client,
  last: LastCompleted,
  read: ReadInventory,
  startedBy: string,
): Promise<RolloutInput> {
  const ran = await inputOfRun(client, last.rolloutId, last.runId);
  if (ran.reverts || ran.canary)
    throw new WavegateError(
      'INVALID_STATE',
      `${last.rolloutId} is ${ran.reverts ? `a revert of ${ran.reverts.rolloutId}` : 'a canary run'}: a converge brings devices to what a rollout went up to; start a rollout instead`,
      { state: ran.reverts ? 'revert' : 'canary' },
    );
  const {
    rolloutId: _id,
    planSeed: _seed,
    onlyDevices: _only,
    membership: _membership,
    records: _records,
    sliceSize: _slice,
    ...kept
  } = ran;
  // The same checks of the spec against the inventory as a start's intake (pools, canary class, scope).
  scopedDevices(ran.spec, read.inventory, ran.profile, {
    specSource: `${last.rolloutId} (the rollout converged to)`,
    inventoryPath: read.inventoryPath,
  });
  return {
    ...kept,
    rolloutId: `rollout:${ran.spec.profile}`,
    inventoryPath: read.kind === 'url' ? read.inventoryPath : resolve(read.inventoryPath),
    poolBudgets: poolBudgetsOf(ran.spec, read.inventory),
    startedBy,
  };
}

/**
 * Every refusal of a converge, in the command's order and words, before anything is started: no
 * completed rollout (NOT_FOUND), a spec file of another revision, a rollout of the profile running
 * (CONFLICT). Then the devices are read now (the fleet board of the completed rollout's revision): what
 * a converge would touch is exactly `behind`. Nothing behind is not a refusal here: the command says so
 * and exits, the board refuses it (nothingBehind).
 */
export async function checkConverge(
  client: Client,
  req: { profile: string; read: ReadInventory; concurrency: number; source: ConvergeSource; revoked?: RevokedReason },
): Promise<ConvergePlan> {
  const { profile, read, source } = req;
  await refuseWhileFrozen(client, 'converge', { profile, pools: Object.keys(read.inventory.pools) });
  const last = await lastCompletedRollout(client, profile);
  if (!last)
    throw new WavegateError(
      'NOT_FOUND',
      `profile "${profile}" has no completed rollout to converge to; use \`wavegate start\``,
    );
  const revision = convergeRevision(profile, last, source, req.revoked);
  const input = 'file' in source ? source.input : await recordedInput(client, last, read, source.startedBy);
  const running = await runningRolloutsOf(client, profile);
  if (running.length)
    throw new WavegateError(
      'CONFLICT',
      `a rollout of profile "${profile}" is running (${running.join(', ')}); wait for it, or abort it, before converging`,
    );

  const board = await readFleetBoard({
    inventory: read.inventory,
    profile,
    scope: input.profile.scope,
    revision,
    verify: input.steps.verify,
    provable: input.provable,
    // Agent devices are read from their twins' reports (device/twin/board.ts).
    probe: { concurrency: req.concurrency, twins: twinReader(client) },
  });
  return {
    profile,
    last,
    input,
    read,
    revision,
    behind: behindRows(board),
    unreachable: board.rows.filter((r) => r.state === 'pending' && !('marker' in r)),
  };
}

/**
 * The revision a converge brings devices to: the one the last completed rollout went to, which the spec file must
 * name; never a revision its signers revoked (refused: INVALID_STATE, naming it and the way forward). When the last
 * completed rollout's revision is revoked, a spec to a newer revision rolls its devices forward (every device of
 * the scope behind that one, those on the revoked revision among them).
 */
function convergeRevision(
  profile: string,
  last: LastCompleted,
  source: ConvergeSource,
  revoked: RevokedReason | undefined,
): number {
  const lastRevoked = revoked?.(last.toRevision);
  if (!('file' in source)) {
    if (lastRevoked !== undefined)
      throw new WavegateError(
        'INVALID_STATE',
        `r${last.toRevision}, where ${last.rolloutId} completed, is revoked (${lastRevoked}): a converge never brings devices to it; roll them forward with \`wavegate converge -f <a spec to a newer revision>\``,
        { state: 'revoked', revision: last.toRevision },
      );
    return last.toRevision;
  }
  const to = source.input.spec.toRevision;
  const targetRevoked = revoked?.(to);
  if (targetRevoked !== undefined)
    throw new WavegateError(
      'INVALID_INPUT',
      `--file ${source.file}: rollout.toRevision r${to} is revoked (REVOKED: ${targetRevoked}); give a spec to a newer revision`,
      { field: 'rollout.toRevision', value: to, reason: 'REVOKED' },
    );
  if (to === last.toRevision) return to;
  if (lastRevoked !== undefined && to > last.toRevision) return to;
  throw new WavegateError(
    'INVALID_INPUT',
    `--file ${source.file}: rollout.toRevision is ${to}, but the last completed rollout of "${profile}" (${last.rolloutId}) went to r${last.toRevision}; give the spec of that rollout (a newer revision only rolls devices forward from a revoked one)`,
    { field: 'rollout.toRevision' },
  );
}

/** The command's line when a checked converge has nothing to touch. */
export function nothingBehind(plan: ConvergePlan): string {
  return `nothing to converge: no reachable device of "${plan.profile}" is behind r${plan.revision} (last completed: ${plan.last.rolloutId}${plan.revision !== plan.last.toRevision ? `, at r${plan.last.toRevision}, revoked` : ''})${plan.unreachable.length ? `; ${plan.unreachable.length} could not be read` : ''}`;
}

/**
 * Start a checked converge (checkConverge) over exactly its `behind` devices: a new id (nextConvergeId),
 * the worker preflight and the membership stored as a start does.
 */
export async function startConverge(
  client: Client,
  taskQueue: string,
  plan: ConvergePlan,
  /** The starter's signed statement for the converge's id (`--identity-key`, the board's key): core/approval.ts. */
  signStart?: (rolloutId: string) => SignedStatement,
) {
  const converge: RolloutInput = {
    ...plan.input,
    rolloutId: await nextConvergeId(client, plan.profile),
    onlyDevices: plan.behind.map((r) => r.id),
  };
  // The same check as a start: a worker that would refuse the content is found before any device is contacted (exit 2).
  await preflightRollout(client, taskQueue, converge);
  const { handle } = await startOrJoinRollout(
    client,
    taskQueue,
    await withMembership(client, taskQueue, converge, plan.read, converge.startedBy),
    signStart ? { signStart } : {},
  );
  return { handle, input: converge };
}

export function register(program: Command): void {
  withTemporalOptions(
    withInventoryOptions(
      program
        .command('converge')
        .description(
          "Bring every device of the profile's scope that is behind the last completed rollout's revision (its verify fails now, e.g. it was offline) to it: a new rollout over exactly those devices, from the same spec. Exit 0 when nothing is behind, or (with --wait) when every one reached it",
        )
        .requiredOption('--profile <name>', 'the profile')
        .requiredOption(
          '-f, --file <spec.yaml>',
          'the rollout spec of the completed rollout (its toRevision is the revision to converge to)',
        )
        .option('--profiles <dir>', profilesOptionHelp())
        .option(
          '--wait',
          'wait for the converge rollout to finish; exit 0 only if every device it was for reached the revision',
        )
        .option('--exit-on-pause', 'with --wait: stop waiting and exit 1 when the rollout pauses')
        .option('--interval <ms>', 'with --wait: poll interval', parseInterval, 1000)
        .option('--concurrency <n>', 'devices probed at once', (v) => Number(v), 16)
        .option('--json', 'print {rolloutId, devices, unreachable} as JSON')
        .option(
          '--identity-key <key file>',
          "sign the converge's start with your own key pinned in the profile's approvers.yaml, as start --identity-key (required by approval.notBy: starter)",
        ),
    ),
  ).action(
    action(async (opts: ConvergeFlags) => {
      const profilesRoot = resolveProfilesRoot({ flag: opts.profiles }).dir;
      const identity =
        opts.identityKey === undefined ? undefined : readSigningKeyFile('--identity-key', opts.identityKey);
      // From files, bad input is refused before Temporal or any device is contacted.
      const read = await readInventoryFlags(opts);
      const input: RolloutInput = prepareRollout({
        specPath: opts.file,
        inventoryPath: read.inventoryPath,
        inventory: read.inventory,
        profilesRoot,
        startedBy: operatorName(),
      });
      if (input.spec.profile !== opts.profile) {
        throw new WavegateError(
          'INVALID_INPUT',
          `--file ${opts.file}: rollout.profile is "${input.spec.profile}", not --profile "${opts.profile}"`,
          { field: 'rollout.profile' },
        );
      }
      checkStarterKey(input, identity);
      const settings = resolveConnectionSettings(opts);
      const files = loadProfile(profilesRoot, opts.profile, '--profile');
      const trust = loadProfileTrust(files.layout);
      return withClient(settings, async (client) => {
        const plan = await checkConverge(client, {
          profile: opts.profile,
          read,
          concurrency: opts.concurrency,
          source: { file: opts.file, input },
          revoked: (n) => revokedReason({ layout: files.layout, trust }, n),
        });
        const { behind, unreachable, last, revision } = plan;
        const report = (rolloutId?: string) => {
          if (opts.json)
            console.log(
              JSON.stringify({
                ...(rolloutId ? { rolloutId } : {}),
                revision,
                devices: behind.map((r) => r.id),
                unreachable: unreachable.map((r) => ({ id: r.id, reason: r.reason })),
              }),
            );
          else {
            for (const r of behind) console.log(`  behind       ${r.id.padEnd(16)} ${r.reason ?? ''}`);
            for (const r of unreachable)
              console.log(`  unreachable  ${r.id.padEnd(16)} ${r.reason ?? ''} (not converged: its state is unknown)`);
          }
        };
        if (behind.length === 0) {
          if (!opts.json) console.log(nothingBehind(plan));
          report();
          return unreachable.length ? EXIT_FAILED : EXIT_OK;
        }

        const sign = identity ? (rolloutId: string) => startStatement(identity, rolloutId) : undefined;
        const { handle } = await startConverge(client, settings.taskQueue, plan, sign);
        if (!opts.json) {
          console.log(
            revision === last.toRevision
              ? `converge ${handle.workflowId} started: ${behind.length} device(s) behind r${revision} (last completed: ${last.rolloutId})`
              : `converge ${handle.workflowId} started: ${behind.length} device(s) behind r${revision}, rolled forward from revoked r${last.toRevision} (last completed: ${last.rolloutId})`,
          );
          console.log(`Web UI: ${workflowUrl(settings.uiUrl, settings.namespace, handle.workflowId)}`);
        }
        report(handle.workflowId);
        if (!opts.wait) return unreachable.length ? EXIT_FAILED : EXIT_OK;
        const code = printOutcome(
          await watchRollout(client, handle.workflowId, waitOptions(opts.interval, !!opts.exitOnPause)),
        );
        return unreachable.length ? EXIT_FAILED : code;
      });
    }),
  );
}
