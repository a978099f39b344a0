import { cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { readAuditFile } from '../../activities/audit';
import { applyToDevice } from '../../activities/device-steps';
import { parseRevision } from '../../core/revision';
import type { DeviceTarget } from '../../core/rollout-state';
import { parseRolloutSpec } from '../../core/spec';
import { keyPairFromSeed, pinOf, signRevision } from '../../core/signing';
import { rolloutInputFromFiles } from '../../intake/prepare';
import { loadRolloutInventory } from '../../intake/inventory';
import { targetOf } from '../../activities/fleet';
import { type Fleet } from '../../sim';
import { renderFrame } from '../../cli/watch';
import { startDevServerEnv } from '../../workers/dev-server';
import { PROJECT_ROOT } from '../../workers/toolchain';
import { abortUpdate, type RolloutStatus } from '../../workflows/messages';
import { rolloutWorkflow, type RolloutInput } from '../../workflows/rollout';
import { fleetWithInventory, scratchDir, startTestWorker } from '../support/harness';
import { recordHistory } from '../support/histories';
import { APPLY_COMMAND, markerOf, verifiesAt, waitForStatus } from '../support/rollout-helpers';

/**
 * Ordering between profiles (spec `after`) on a real Temporal dev server, with the real activities over
 * SSH to the simulator: two profiles on the same devices. `demo` r1 → r2 waits for `base` r2. A device
 * that already verifies base r2 is applied; one that does not waits (state `waiting`, nothing run on it
 * but base's signed verify), and proceeds once base's own rollout has put base r2 there.
 */
describe('ordering between profiles over SSH', () => {
  let env: TestWorkflowEnvironment;
  let worker: Awaited<ReturnType<typeof startTestWorker>>;
  const scratch = scratchDir('ordering');
  const auditDir = join(scratch.dir, 'audit');
  const profilesDir = join(scratch.dir, 'profiles');
  const fleets: Fleet[] = [];
  let n = 0;

  /** The `base` profile: revisions 1 and 2 write $HOME/etc/base, verified by its content; signed by a key made here. */
  function writeBaseProfile(): void {
    const dir = join(profilesDir, 'base');
    mkdirSync(join(dir, 'envelopes'), { recursive: true });
    const key = keyPairFromSeed(new Uint8Array(randomBytes(32)));
    writeFileSync(join(dir, 'profile.yaml'), stringify({ name: 'base', description: 'what demo needs first', scope: {} }));
    writeFileSync(join(dir, 'trust.yaml'), stringify({ threshold: 1, pins: [pinOf(key, 'test-signer')] }));
    for (const revision of [1, 2]) {
      const content = parseRevision(
        {
          profile: 'base',
          revision,
          apply: `mkdir -p "$HOME/etc" && printf 'base ${revision}\\n' > "$HOME/etc/base"`,
          verify: `grep -qx 'base ${revision}' "$HOME/etc/base"`,
          risk: 'safe',
          ...(revision === 2 ? { previous: 1 } : {}),
        },
        `base r${revision}`,
      );
      writeFileSync(join(dir, 'envelopes', `${revision}.json`), JSON.stringify(signRevision(content, key, { now: Date.now(), validityDays: 30 })));
    }
  }

  beforeAll(async () => {
    // The worker's own profiles root: the demo profile as shipped, and base.
    cpSync(join(PROJECT_ROOT, 'profiles', 'demo'), join(profilesDir, 'demo'), { recursive: true });
    writeBaseProfile();
    env = await startDevServerEnv();
    worker = await startTestWorker(env, { auditDir, trustDir: profilesDir });
  });
  afterEach(async () => {
    await Promise.all(fleets.splice(0).map((f) => f.stop()));
  });
  afterAll(async () => {
    await worker?.stop();
    await env?.teardown();
    scratch.cleanup();
  });

  function inputFor(rollout: Record<string, unknown>, inventoryPath: string, rolloutId: string): RolloutInput {
    const specSource = `${rolloutId} spec`;
    const spec = parseRolloutSpec({ rollout: { gate: 0, ...rollout } }, specSource);
    return rolloutInputFromFiles({ spec, specSource, inventoryPath, profilesDir, startedBy: 'test', rolloutId });
  }

  /** Two devices in one pool with room for one apply at a time: a waiting device must free its slot. */
  async function setup() {
    const dir = join(scratch.dir, `t${++n}`);
    const { fleet, inventoryPath } = await fleetWithInventory(dir, [{ id: 'ready', pool: 'edge' }, { id: 'behind', pool: 'edge' }], { edge: 0.5 });
    fleets.push(fleet);
    const targets = new Map<string, DeviceTarget>(loadRolloutInventory(inventoryPath).devices.map((d) => [d.id, targetOf(d)]));
    // `ready` already verifies base r2: applied by the real apply unit from the worker's own envelope.
    const baseSteps = inputFor({ profile: 'base', fromRevision: 1, toRevision: 2, phases: [{ canary: '1 device' }] }, inventoryPath, 'rollout:base-setup').steps;
    const done = await applyToDevice(targets.get('ready')!, baseSteps, { commandTimeoutMs: 20_000, trustDir: profilesDir, requireEnvelope: true });
    expect(done.outcome).toBe('applied');
    const demo = inputFor({ profile: 'demo', fromRevision: 1, toRevision: 2, phases: [{ canary: '2 devices' }], after: [{ profile: 'base', revision: 2 }] }, inventoryPath, `rollout:demo-ordering-${n}`);
    return { fleet, inventoryPath, demo };
  }

  const start = (input: RolloutInput): Promise<WorkflowHandle<typeof rolloutWorkflow>> =>
    env.client.workflow.start(rolloutWorkflow, { workflowId: input.rolloutId, taskQueue: worker.taskQueue, args: [input] });
  const device = (s: RolloutStatus, id: string) => s.devices.find((d) => d.id === id)!;
  const baseIn = (fleet: Fleet, id: string) => {
    const path = join(fleet.device(id).sandbox, 'etc', 'base');
    return existsSync(path) ? readFileSync(path, 'utf8').trim() : null;
  };

  it('the device that verifies the dependency is applied while the other waits; once base r2 is rolled out there, it proceeds and the rollout completes', async () => {
    const { fleet, inventoryPath, demo } = await setup();
    expect(demo.steps.after).toEqual([{ profile: 'base', revision: 2 }]);
    expect(demo.rollbackSteps.after).toBeUndefined();
    const handle = await start(demo);

    const waiting = await waitForStatus(handle, (s) => device(s, 'ready')?.state === 'applied' && device(s, 'behind')?.state === 'waiting');
    expect(waiting.state).toBe('running');
    expect(device(waiting, 'behind').reason).toMatch(/^waiting for base r2 \(base r2 verify failed, no marker\)$/);
    expect(waiting.counts).toMatchObject({ applied: 1, waiting: 1 });
    // Nothing of demo ran on the waiting device: no apply, no lock, no marker; base's verify did run.
    expect(fleet.count('behind', APPLY_COMMAND)).toBe(0);
    expect(fleet.count('behind', /grep -qx 'base 2'/)).toBeGreaterThanOrEqual(1);
    expect(existsSync(join(fleet.device('behind').sandbox, '.wavegate/profiles/demo/apply.lock'))).toBe(false);
    expect(markerOf(fleet, 'behind')).toBeNull();
    expect(verifiesAt(fleet, 'ready', 2)).toBe(true);
    // Visible in watch and the Web UI's current details, with the reason.
    expect(renderFrame(waiting).join('\n')).toMatch(/behind\s+0\s+waiting\s+waiting for base r2/);
    expect(renderFrame(waiting)[1]).toContain('1 waiting');
    const meta = await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
    expect(meta.currentDetails).toContain('| behind | waiting | waiting for base r2');

    // base's own rollout over the same devices: `ready` verifies already, `behind` gets base r2.
    const base = inputFor({ profile: 'base', fromRevision: 1, toRevision: 2, phases: [{ canary: '2 devices' }] }, inventoryPath, `rollout:base-ordering-${n}`);
    const baseResult = await (await start(base)).result();
    expect(baseResult.state).toBe('completed');
    expect(baseIn(fleet, 'behind')).toBe('base 2');

    // The waiting device is retried after its backoff (15 s, then 30 s) and now proceeds.
    const result = await handle.result();
    await recordHistory(handle, 'profile-ordering-wait-then-proceed');
    expect(result.state).toBe('completed');
    expect(result.devices.map((d) => [d.id, d.state]).sort()).toEqual([
      ['behind', 'applied'],
      ['ready', 'applied'],
    ]);
    expect(markerOf(fleet, 'behind')).toBe(2);
    expect(verifiesAt(fleet, 'behind', 2)).toBe(true);
    expect(fleet.count('behind', APPLY_COMMAND)).toBe(1);
    // The audit's per-device outcomes: each device applied once, neither recorded as skipped.
    const audit = readAuditFile(auditDir, demo.rolloutId);
    expect(audit.map((r) => r.event)).toContain('rollout.completed');
    expect(audit.filter((r) => r.event === 'devices.skipped')).toEqual([]);
  }, 180_000);

  it('an abort ends the wait: the waiting device is skipped, never applied and never rolled back; the applied one is put back', async () => {
    const { fleet, demo } = await setup();
    const handle = await start(demo);
    await waitForStatus(handle, (s) => device(s, 'ready')?.state === 'applied' && device(s, 'behind')?.state === 'waiting');
    await handle.executeUpdate(abortUpdate, { args: [{ by: 'test', reason: 'base is late', rollback: true }] });
    const result = await handle.result();
    await recordHistory(handle, 'profile-ordering-abort-while-waiting');
    expect(result.state).toBe('aborted');
    expect(device(result, 'behind')).toMatchObject({ state: 'skipped' });
    expect(device(result, 'ready')).toMatchObject({ state: 'rolled-back' });
    // Neither apply nor rollback ran on the waiting device (both would install the motd file).
    expect(fleet.count('behind', APPLY_COMMAND)).toBe(0);
    expect(markerOf(fleet, 'ready')).toBe(1);
    expect(verifiesAt(fleet, 'ready', 1)).toBe(true);
    // base was never touched by demo's rollout.
    expect(baseIn(fleet, 'ready')).toBe('base 2');
    expect(baseIn(fleet, 'behind')).toBeNull();
  }, 120_000);
});
