import type { Client } from '@temporalio/client';
import type { Command } from 'commander';
import { readFleetBoard, type BoardRow } from '../../activities/fleet';
import { twinReader } from '../../activities/agent/board';
import { WavegateError } from '../../core/errors';
import type { RolloutInput } from '../../core/rollout/input';
import { prepareRollout } from '../../intake/prepare';
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
import { readInventoryFlags, withInventoryOptions, withMembership, type InventoryFlags } from '../membership-client';
import { watchRollout } from '../watch';
import { operatorName, parseInterval, printOutcome, waitOptions } from './rollout';

/**
 * `wavegate converge --profile P`: after a rollout completed with devices left behind (offline, failed),
 * bring exactly those devices to its revision. Which devices is read now, on the devices (the fleet
 * board of that revision), never from the old rollout's record; the new rollout is built by intake from
 * the same spec, inventory and profiles as `start`, so every safety rule of a start applies to it.
 */

interface ConvergeFlags extends TemporalFlags, InventoryFlags {
  profile: string;
  file: string;
  profiles?: string;
  wait?: boolean;
  exitOnPause?: boolean;
  interval: number;
  concurrency: number;
  json?: boolean;
}

/** The board rows a verify answered for and failed: behind the revision (unreachable ones are unknown, not behind). */
export function behindRows(rows: BoardRow[]): BoardRow[] {
  return rows.filter((r) => r.state === 'pending' && 'marker' in r);
}

/** `rollout:<profile>:converge-<n>`, n one above any converge of the profile Temporal knows. */
async function nextConvergeId(client: Client, profile: string): Promise<string> {
  const prefix = `rollout:${profile}:converge-`;
  const taken = (await listRollouts(client, { profile, limit: 1000 }))
    .map((r) => (r.workflowId.startsWith(prefix) ? Number(r.workflowId.slice(prefix.length)) : NaN))
    .filter((n) => Number.isInteger(n));
  return `${prefix}${Math.max(0, ...taken) + 1}`;
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
        .option('--json', 'print {rolloutId, devices, unreachable} as JSON'),
    ),
  ).action(
    action(async (opts: ConvergeFlags) => {
      const profilesRoot = resolveProfilesRoot({ flag: opts.profiles }).dir;
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
      const settings = resolveConnectionSettings(opts);
      return withClient(settings, async (client) => {
        const last = await lastCompletedRollout(client, opts.profile);
        if (!last)
          throw new WavegateError(
            'NOT_FOUND',
            `profile "${opts.profile}" has no completed rollout to converge to; use \`wavegate start\``,
          );
        if (input.spec.toRevision !== last.toRevision) {
          throw new WavegateError(
            'INVALID_INPUT',
            `--file ${opts.file}: rollout.toRevision is ${input.spec.toRevision}, but the last completed rollout of "${opts.profile}" (${last.rolloutId}) went to r${last.toRevision}; give the spec of that rollout`,
            { field: 'rollout.toRevision' },
          );
        }
        const running = await runningRolloutsOf(client, opts.profile);
        if (running.length)
          throw new WavegateError(
            'CONFLICT',
            `a rollout of profile "${opts.profile}" is running (${running.join(', ')}); wait for it, or abort it, before converging`,
          );

        const board = await readFleetBoard({
          inventory: read.inventory,
          profile: opts.profile,
          scope: input.profile.scope,
          revision: last.toRevision,
          verify: input.steps.verify,
          provable: input.provable,
          // Agent devices are read from their twins' reports (activities/agent/board.ts).
          probe: { concurrency: opts.concurrency, twins: twinReader(client) },
        });
        const behind = behindRows(board.rows);
        const unreachable = board.rows.filter((r) => r.state === 'pending' && !('marker' in r));
        const report = (rolloutId?: string) => {
          if (opts.json)
            console.log(
              JSON.stringify({
                ...(rolloutId ? { rolloutId } : {}),
                revision: last.toRevision,
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
          if (!opts.json)
            console.log(
              `nothing to converge: no reachable device of "${opts.profile}" is behind r${last.toRevision} (last completed: ${last.rolloutId})${unreachable.length ? `; ${unreachable.length} could not be read` : ''}`,
            );
          report();
          return unreachable.length ? EXIT_FAILED : EXIT_OK;
        }

        const converge: RolloutInput = {
          ...input,
          rolloutId: await nextConvergeId(client, opts.profile),
          onlyDevices: behind.map((r) => r.id),
        };
        // The same check as a start: a worker that would refuse the content is found before any device is contacted (exit 2).
        await preflightRollout(client, settings.taskQueue, converge);
        const { handle } = await startOrJoinRollout(
          client,
          settings.taskQueue,
          await withMembership(client, settings.taskQueue, converge, read, converge.startedBy),
        );
        if (!opts.json) {
          console.log(
            `converge ${handle.workflowId} started: ${behind.length} device(s) behind r${last.toRevision} (last completed: ${last.rolloutId})`,
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
