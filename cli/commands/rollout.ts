import { userInfo } from 'node:os';
import type { Command } from 'commander';
import { WorkflowNotFoundError } from '@temporalio/client';
import { WavegateError } from '../../core/errors';
import { summarizeCounts } from '../../core/rollout-state';
import { connectionSettings } from '../../workers/worker';
import type { RolloutStatus } from '../../workflows/messages';
import { connectClient, startRollout } from '../client';
import { prepareRollout } from '../prepare';
import { action, EXIT_FAILED } from '../run';

interface ConnectionFlags {
  address?: string;
  namespace?: string;
  taskQueue?: string;
}

function withConnectionFlags(cmd: Command): Command {
  return cmd
    .option('--address <host:port>', 'Temporal frontend address (default $TEMPORAL_ADDRESS or 127.0.0.1:7233)')
    .option('--namespace <ns>', 'Temporal namespace (default $TEMPORAL_NAMESPACE or "default")')
    .option('--task-queue <queue>', 'worker task queue (default "wavegate")');
}

export function register(program: Command): void {
  withConnectionFlags(
    program
      .command('start')
      .description('Validate a rollout spec, inventory, profile and revision, then start the rollout')
      .requiredOption('-f, --file <spec.yaml>', 'rollout spec')
      .requiredOption('--inventory <fleet.yaml>', 'inventory (the worker reads this path at snapshot time)')
      .option('--profiles <dir>', 'profiles directory', 'profiles')
      .option('--wait', 'wait for the rollout to finish; exit 1 unless it completed'),
  ).action(
    action(async (opts: ConnectionFlags & { file: string; inventory: string; profiles: string; wait?: boolean }) => {
      const input = prepareRollout({ specPath: opts.file, inventoryPath: opts.inventory, profilesDir: opts.profiles, startedBy: userInfo().username });
      const settings = connectionSettings(opts);
      const client = await connectClient(settings);
      const handle = await startRollout(client, settings.taskQueue, input);
      console.log(`rollout ${handle.workflowId} started`);
      if (!opts.wait) return;
      const final = await handle.result();
      console.log(`rollout ${final.state}: ${summarizeCounts(final.counts)}`);
      return final.state === 'completed' ? 0 : EXIT_FAILED;
    }),
  );

  withConnectionFlags(program.command('status <id>').description('Per-device states and counts of a rollout').option('--json', 'print JSON')).action(
    action(async (id: string, opts: ConnectionFlags & { json?: boolean }) => {
      const client = await connectClient(connectionSettings(opts));
      let status: RolloutStatus;
      try {
        status = await client.workflow.getHandle(id).query<RolloutStatus>('status');
      } catch (err) {
        if (err instanceof WorkflowNotFoundError) throw new WavegateError('NOT_FOUND', `no rollout with id "${id}"`);
        throw err;
      }
      if (opts.json) console.log(JSON.stringify(status, null, 2));
      else {
        console.log(`${status.rolloutId}: ${status.state}, phase ${status.phase}, ${summarizeCounts(status.counts)}`);
        for (const d of status.devices) console.log(`  ${d.id.padEnd(12)} ${d.state}${d.reason ? ` (${d.reason})` : ''}`);
      }
    }),
  );
}
