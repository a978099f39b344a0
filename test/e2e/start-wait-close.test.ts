import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { demoDevices } from '../../sim';
import { runCli, type CliRun } from '../support/cli';
import { realRollouts } from '../support/real-rollouts';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver';
import { writeDemoSpecAt } from '../support/harness';

/**
 * `wavegate start --wait` returns only once the rollout's run has closed (issue 22, "Timing"): a rollout
 * whose status says completed still drains its webhook outbox (up to 30 s) before the run closes, and a
 * `revert` issued then was refused because the run was open. Real dev server, a real in-process worker,
 * the simulated SSH fleet and a real receiver on 127.0.0.1 that answers 503 to the first three deliveries
 * of `rollout.completed`, so the last event is acknowledged only after the activity's retries (1+2+4 s):
 * the rollout's status is final well before its outbox is empty.
 */
const secretEnv = 'WAVEGATE_WEBHOOK_SECRET_START_WAIT';
/** The worker's webhook policy (core/secret-policy.ts): the loopback receiver allowed explicitly. */
const policy = { [secretEnv]: randomBytes(24).toString('hex'), WAVEGATE_WEBHOOK_ALLOW_HOSTS: '127.0.0.1' };
// The worker runs in this process and reads its webhook policy when it starts: set before, unset after.
const real = realRollouts('start-wait-close', {
  prepare: () => {
    Object.assign(process.env, policy);
  },
  cleanup: () => {
    for (const name of Object.keys(policy)) delete process.env[name];
  },
});
let receiver: WebhookReceiver | undefined;
let inventory = '';

function wg(args: string[]): Promise<CliRun> {
  return runCli([...args, '--address', real.env.address, '--task-queue', real.worker.taskQueue], {
    timeoutMs: 240_000,
    env: {
      TEMPORAL_ADDRESS: '',
      TEMPORAL_PROFILE: '',
      TEMPORAL_CONFIG_FILE: join(real.dir, 'none.toml'),
      WAVEGATE_PROFILES: '',
      ...policy,
    },
  });
}

beforeAll(async () => {
  ({ inventoryPath: inventory } = await real.fleet(demoDevices(4), { 'pool-a': 0.5, 'pool-b': 0.5 }));
  // The last event is refused three times, however fast the events before it were taken: the status is
  // final while its delivery is still pending, whatever the machine's speed.
  let completedAsked = 0;
  receiver = await startWebhookReceiver((_n, event) =>
    event === 'rollout.completed' && ++completedAsked <= 3 ? 503 : 200,
  );
}, 180_000);

afterAll(async () => {
  await receiver?.close();
});

describe('start --wait returns after the run has closed', () => {
  it('a rollout whose webhook is slow to acknowledge: --wait says it is closing, returns exit 0 with the run closed, and an immediate revert is accepted', async () => {
    const specPath = join(real.dir, 'spec.yaml');
    writeDemoSpecAt(specPath, {
      phases: [
        { canary: '1 device', gate: '0s' },
        { bulk: 'remainder', gate: '0s' },
      ],
      webhooks: [{ url: receiver!.url, secretEnv }],
    });
    const start = await wg(['start', '-f', specPath, '--inventory', inventory, '--wait', '--interval', '300']);
    const id = /^rollout (rollout:demo:\S+) started$/m.exec(start.stdout)?.[1] ?? 'no id printed';
    // Closed when --wait returned: no window in which the next command finds it open.
    const described = await real.env.client.workflow.getHandle(id).describe();
    expect(start.code, start.stdout + start.stderr).toBe(0);
    expect(described.status.name, start.stdout).toBe('COMPLETED');
    // The status was final while deliveries were still pending: said, then waited for.
    expect(start.stdout).toMatch(/^completed; closing \(delivering \d+ webhook events?\)…$/m);
    expect(start.stdout).toMatch(/rollout completed: .* — exit 0/);

    // Straight after: the profile's lock closes just after its rollout, and the revert is not refused for it.
    const revert = await wg(['revert', id]);
    expect(revert.code, revert.stdout + revert.stderr).toBe(0);
    const revertId = /^revert (rollout:demo:\S+) started/m.exec(revert.stdout)?.[1] ?? 'no id printed';
    expect(revert.stdout).toContain(`revert ${revertId} started: r2 → r1 over the 4 device(s) ${id} (run `);
    expect(revert.stderr).not.toContain('INVALID_STATE');
    // The revert (a rollout of its own) is let finish, so the test leaves nothing running.
    const reverted = await wg(['watch', revertId, '--json', '--interval', '300']);
    expect(reverted.code, reverted.stdout + reverted.stderr).toBe(0);
    expect((await real.env.client.workflow.getHandle(revertId).describe()).status.name).toBe('COMPLETED');
  }, 300_000);
});
