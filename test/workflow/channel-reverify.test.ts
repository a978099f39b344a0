import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { reverifyFleet } from '../../activities/fleet';
import { parseInventory } from '../../core/inventory';
import type { AgentReport } from '../../core/twin';
import { syncTwin } from '../../gateway/twin';
import { startDevServerEnv } from '../../workers/dev-server';
import { scratchDir, startTestWorker } from '../support/harness';

/**
 * `fleet status --reverify` through the device channel, on a real dev server with real twins: each
 * device's channel says whether it is asked (an agent that syncs), offline (no twin), or live (SSH: its
 * board read runs verify anyway); asked agents are waited for until their fresh report answers.
 */
const scratch = scratchDir('channel-reverify');
let env: TestWorkflowEnvironment;
let worker: Awaited<ReturnType<typeof startTestWorker>>;

beforeAll(async () => {
  env = await startDevServerEnv();
  worker = await startTestWorker(env, { auditDir: scratch.dir });
}, 240_000);

afterAll(async () => {
  await worker?.stop();
  await env?.teardown();
  scratch.cleanup();
});

const key = (n: number) => `ed25519:${Buffer.alloc(32, n).toString('base64')}`;
const report = (): AgentReport => ({ profiles: { demo: { revision: 2, state: 'already-applied', at: new Date().toISOString() } }, health: [], healthAt: null, agentVersion: 'test' });

describe('reverify through the channel', () => {
  it('asks syncing agents and waits for their answers; an agent without a twin is offline; an SSH device is not asked', async () => {
    const sync = (id: string, knownVersion: number, withReport: boolean) => syncTwin(env.client, worker.taskQueue, id, { report: withReport ? report() : null, knownVersion, waitMs: 0 });
    await sync('rv-answers', 0, true);
    await sync('rv-silent', 0, true);
    const inventory = parseInventory(
      {
        defaults: { pool: 'p' },
        devices: [
          { id: 'rv-answers', transport: 'agent', agentKey: key(1) },
          { id: 'rv-silent', transport: 'agent', agentKey: key(2) },
          { id: 'rv-no-twin', transport: 'agent', agentKey: key(3) },
          { id: 'rv-ssh', host: '127.0.0.1', port: 1, user: 'u' },
        ],
      },
      'fleet.yaml',
    );
    // The answering agent: its next sync (long-polling for the reverify's new version) sends a fresh report knowing it.
    const answering = (async () => {
      const asked = await syncTwin(env.client, worker.taskQueue, 'rv-answers', { report: null, knownVersion: 0, waitMs: 20_000 });
      expect(asked.reverify).toBe(true);
      await sync('rv-answers', asked.version, true);
    })();
    const outcome = await reverifyFleet(inventory.devices, { client: () => env.client }, { waitMs: 6_000, pollMs: 200 });
    await answering;
    expect(outcome).toEqual({ asked: ['rv-answers', 'rv-silent'], answered: ['rv-answers'], silent: ['rv-silent'], offline: ['rv-no-twin'] });
  });
});
