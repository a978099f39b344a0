import { hostname, userInfo } from 'node:os';
import type { Command } from 'commander';
import { WavegateError } from '../../core/errors';
import { resolveConnectionSettings, type TemporalFlags } from '../../workers/connection';
import {
  checkBuildId,
  checkDeploymentName,
  describeDeployment,
  knownBuilds,
  moveWorkflow,
  setCurrentVersion,
  workflowVersioning,
} from '../../workers/versioning';
import { withClient } from '../client';
import { action } from '../run';

/**
 * `wavegate worker versions | set-current | move`: what an operator needs to promote a build, roll back
 * to the previous one, and move a pinned rollout off a build whose workers are gone
 * (docs/architecture.md, "Upgrading workers"). They take the `worker` command's connection and
 * `--deployment-name` flags, given before or after the subcommand.
 */
const log = (line: string) => process.stdout.write(`${line}\n`);

type ParentFlags = TemporalFlags & { deploymentName?: string };

function deploymentNameOf(flags: ParentFlags): string {
  const name = flags.deploymentName ?? (process.env.WAVEGATE_DEPLOYMENT_NAME || undefined);
  if (!name)
    throw new WavegateError(
      'INVALID_INPUT',
      '--deployment-name: required (or $WAVEGATE_DEPLOYMENT_NAME), the worker deployment to act on',
      { field: '--deployment-name' },
    );
  return checkDeploymentName(name, flags.deploymentName ? '--deployment-name' : 'WAVEGATE_DEPLOYMENT_NAME');
}

function operatorIdentity(): string {
  return `wavegate ${userInfo().username}@${hostname()}`;
}

export function registerWorkerVersionCommands(worker: Command): void {
  worker
    .command('versions')
    .configureHelp({ showGlobalOptions: true })
    .description(
      'List the builds of a worker deployment: which is current (new rollouts start there), which are draining (pinned rollouts still run there) or drained',
    )
    .action(
      action(async (_opts: unknown, cmd: Command) => {
        const flags = cmd.optsWithGlobals<ParentFlags>();
        const deploymentName = deploymentNameOf(flags);
        await withClient(resolveConnectionSettings(flags), async (client) => {
          const d = await describeDeployment(client, deploymentName);
          log(
            `deployment ${d.deploymentName}: current ${d.current ?? '(none: new rollouts go to unversioned workers)'}${d.ramping ? `, ramping ${d.ramping}` : ''}`,
          );
          log(`${'BUILD'.padEnd(40)} ${'STATUS'.padEnd(10)} DRAINAGE`);
          for (const v of d.versions)
            log(`${(v.buildId + (v.current ? ' *' : '')).padEnd(40)} ${v.status.padEnd(10)} ${v.drainage}`);
        });
      }),
    );

  worker
    .command('set-current <build-id>')
    .configureHelp({ showGlobalOptions: true })
    .description(
      "Make a build the deployment's current version: new rollouts start on it, auto-upgrade rollouts move to it; pinned rollouts stay where they started. Also the rollback of a bad build (set the previous one current).",
    )
    .action(
      action(async (buildId: string, _opts: unknown, cmd: Command) => {
        const flags = cmd.optsWithGlobals<ParentFlags>();
        const deploymentName = deploymentNameOf(flags);
        checkBuildId(buildId, 'build-id');
        await withClient(resolveConnectionSettings(flags), async (client) => {
          const { previous } = await setCurrentVersion(client, deploymentName, buildId, operatorIdentity());
          log(`deployment ${deploymentName}: current build ${buildId}${previous ? ` (was ${previous})` : ''}`);
        });
      }),
    );

  worker
    .command('move <workflow-id>')
    .configureHelp({ showGlobalOptions: true })
    .description(
      'Move one running rollout to another build: --to <build-id> pins it there, --auto-upgrade lets it follow the current build. The target build must replay its history (patched()).',
    )
    .option('--to <build-id>', 'pin the rollout to this build of the deployment')
    .option('--auto-upgrade', 'let the rollout follow the current build from its next task')
    .action(
      action(async (workflowId: string, opts: { to?: string; autoUpgrade?: boolean }, cmd: Command) => {
        const flags = cmd.optsWithGlobals<ParentFlags>();
        if (!!opts.to === !!opts.autoUpgrade)
          throw new WavegateError(
            'INVALID_INPUT',
            'worker move: give exactly one of --to <build-id> or --auto-upgrade',
            { field: '--to' },
          );
        const target = opts.to
          ? { pinnedTo: { deploymentName: deploymentNameOf(flags), buildId: checkBuildId(opts.to, '--to') } }
          : ('auto-upgrade' as const);
        await withClient(resolveConnectionSettings(flags), async (client) => {
          if (target !== 'auto-upgrade') {
            const d = await describeDeployment(client, target.pinnedTo.deploymentName);
            if (!d.versions.some((v) => v.buildId === target.pinnedTo.buildId))
              throw new WavegateError(
                'NOT_FOUND',
                `deployment ${d.deploymentName} has no build "${target.pinnedTo.buildId}" (known: ${knownBuilds(d)})`,
                { field: '--to', value: target.pinnedTo.buildId },
              );
          }
          await moveWorkflow(client, workflowId, target, operatorIdentity());
          const now = await workflowVersioning(client, workflowId);
          log(
            `${workflowId}: ${target === 'auto-upgrade' ? 'auto-upgrade' : `pinned to ${target.pinnedTo.buildId}`} (last ran on ${now.buildId ?? 'an unversioned worker'})`,
          );
        });
      }),
    );
}
