import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { WavegateState } from '../../contracts/search-attributes';
import { demoDevices, type Fleet } from '../../sim';
import { rolloutWorkflow } from '../../workflows/rollout';
import { abortUpdate } from '../../contracts/rollout';
import { waitForStatus } from '../support/rollout-helpers';
import { DEMO_SPEC, demoRolloutInput } from '../support/harness';
import { realRollouts } from '../support/real-rollouts';

const VERIFY = /grep -qx 'wavegate demo revision 2/;
const APPLY = /install -m 0644/;

describe('walking skeleton on a real Temporal dev server over real SSH', () => {
  const real = realRollouts('skeleton');
  let fleet: Fleet;
  let inventoryPath: string;

  beforeAll(async () => {
    const devices = demoDevices(6);
    devices[5]!.updateClass = 'left-behind';
    ({ fleet, inventoryPath } = await real.fleet(devices));
    // The demo apply's `install` counts its runs on the device: the device, not the command log (an
    // apply is one remote script that also carries verify), says how often it ran.
    for (const d of fleet.devices) {
      const sandbox = await fleet.ensureSandbox(d.id);
      writeFileSync(
        join(sandbox, '.sim/bin/install'),
        '#!/bin/sh\necho run >> "$HOME/apply-runs"\nexec /usr/bin/install "$@"\n',
        { mode: 0o755 },
      );
    }
  });
  const applyRuns = (id: string): number => {
    const file = join(fleet.device(id).sandbox, 'apply-runs');
    return existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).length : 0;
  };

  it('applies the revision to every device: verify first, apply once, verify, marker', async () => {
    const input = demoRolloutInput(DEMO_SPEC, inventoryPath, 'rollout:demo-skeleton-1');
    const handle = await real.env.client.workflow.start(rolloutWorkflow, {
      workflowId: input.rolloutId,
      taskQueue: real.worker.taskQueue,
      args: [input],
      typedSearchAttributes: [{ key: WavegateState, value: 'running' }],
    });
    const result = await handle.result();

    expect(result.state).toBe('completed');
    expect(result.counts.applied).toBe(5);
    expect(result.counts['not-for-me']).toBe(1);
    expect(result.devices.find((d) => d.id === 'edge-06')).toMatchObject({
      state: 'not-for-me',
      reason: expect.stringMatching(/^left-behind/),
    });
    for (const device of fleet.devices.slice(0, 5)) {
      // One remote command (verify first fails, the payload streamed in, apply once, verify reads the fact back).
      expect(fleet.count(device.id, VERIFY)).toBe(1);
      expect(fleet.count(device.id, APPLY)).toBe(1);
      expect(applyRuns(device.id)).toBe(1);
      expect(fleet.sftpUploads(device.id)).toBe(0);
      expect(readFileSync(join(device.sandbox, '.wavegate/profiles/demo/revision'), 'utf8').trim()).toBe('2');
      expect(readFileSync(join(device.sandbox, 'etc/motd'), 'utf8')).toContain('revision 2');
    }
    // A left-behind device is never contacted.
    expect(fleet.commands('edge-06')).toHaveLength(0);

    const description = await handle.describe();
    expect(description.typedSearchAttributes.get(WavegateState)).toBe('completed');
  });

  it('a second rollout to the same revision touches nothing: the snapshot sees every marker at the target', async () => {
    fleet.resetCounters();
    const input = demoRolloutInput(DEMO_SPEC, inventoryPath, 'rollout:demo-skeleton-2');
    const result = await (await real.start(input)).result();
    expect(result.state).toBe('completed');
    expect(result.devices.filter((d) => d.reason === 'already at target')).toHaveLength(5);
    for (const device of fleet.devices.slice(0, 5)) {
      expect(fleet.count(device.id, APPLY)).toBe(0);
      expect(fleet.count(device.id, VERIFY)).toBe(0);
    }
  });

  it('a device whose marker is stale but whose content is in place gets verify only, never apply', async () => {
    fleet.resetCounters();
    const device = fleet.devices[0]!;
    // The content is there (from the first test) but the marker says otherwise: verify-first must catch it.
    writeFileSync(join(device.sandbox, '.wavegate/profiles/demo/revision'), '1\n');
    const input = demoRolloutInput(DEMO_SPEC, inventoryPath, 'rollout:demo-skeleton-3');
    const result = await (await real.start(input)).result();
    expect(result.devices.find((d) => d.id === device.id)).toMatchObject({
      state: 'applied',
      reason: 'already in place (verify only)',
    });
    expect(fleet.count(device.id, VERIFY)).toBe(1); // one remote command, which stopped after verify first
    expect(applyRuns(device.id)).toBe(1); // the first test's run only
    expect(readFileSync(join(device.sandbox, '.wavegate/profiles/demo/last-apply/released'), 'utf8')).toBe(
      'r2 already in place (verify only)\n',
    );
    expect(readFileSync(join(device.sandbox, '.wavegate/profiles/demo/revision'), 'utf8').trim()).toBe('2');
  });

  it('a changed host key is refused at snapshot: the device fails with the kind named (never skipped as offline), trips the failure gate and runs no command', async () => {
    fleet.resetCounters();
    const victim = fleet.devices[1]!;
    writeFileSync(join(victim.sandbox, '.wavegate/profiles/demo/revision'), '1\n');
    fleet.rotateHostKey(victim.id);
    const input = demoRolloutInput(DEMO_SPEC, inventoryPath, 'rollout:demo-skeleton-4');
    const handle = await real.start(input);
    const paused = await waitForStatus(handle, (s) => s.state === 'paused', 90_000);
    expect(paused.pausedReason).toMatch(/^failure-gate: /);
    const record = paused.devices.find((d) => d.id === victim.id)!;
    expect(record.state).toBe('failed');
    expect(record.reason).toMatch(
      /^refused at snapshot \(host-key\): edge-02: host key SHA256:\S+ at 127\.0\.0\.1:\d+ does not match the pinned SHA256:/,
    );
    await handle.executeUpdate(abortUpdate, { args: [{ by: 'test', rollback: false }] });
    expect((await handle.result()).state).toBe('aborted');
    expect(fleet.commands(victim.id)).toHaveLength(0);
  });
});
