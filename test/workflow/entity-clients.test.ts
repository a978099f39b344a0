import { describe, expect, it } from 'vitest';
import { WavegateError } from '../../core/errors';
import { twinWorkflowId, type TwinSyncInput } from '../../core/twin';
import { heldRolloutOf } from '../../clients/profile-lock';
import { listRevisions } from '../../clients/registry';
import { desireOnTwin, readTwin, syncTwin } from '../../clients/twin';
import { realRollouts } from '../support/real-rollouts';
import { rejection } from '../support/refusal';
import { desiredRequest } from '../support/twin-agent';

/**
 * The entity clients' one style (clients/, docs/architecture.md "Layers") on a real dev server: a
 * device's first sync runs the enrolment hook before its answer and starts the twin by update-with-start;
 * a refused sync is INVALID_INPUT read from the SDK's error type; reads never start an entity.
 * (A membership stored again is the same entity: test/workflow/membership.test.ts.)
 */
const real = realRollouts('entity-clients');

describe('entity clients', () => {
  it("a device's first sync runs the hook once, before the answer, which carries what the hook asked", async () => {
    const device = 'entity-new';
    const hooked: string[] = [];
    const hook = async (id: string) => {
      hooked.push(id);
      await desireOnTwin(real.env.client, real.worker.taskQueue, id, desiredRequest(id, 3));
    };
    expect(await readTwin(real.env.client, device)).toBeNull();
    const first = await syncTwin(
      real.env.client,
      real.worker.taskQueue,
      device,
      { report: null, knownVersion: 0, waitMs: 0 },
      hook,
    );
    expect(hooked).toEqual([device]);
    expect(first.desired.demo).toMatchObject({ revision: 3 });
    const again = await syncTwin(
      real.env.client,
      real.worker.taskQueue,
      device,
      { report: null, knownVersion: first.version, waitMs: 0 },
      hook,
    );
    expect(hooked).toEqual([device]);
    expect(again.version).toBe(first.version);
  });

  it('a first sync with no hook starts the twin by update-with-start', async () => {
    const device = 'entity-bare';
    const view = await syncTwin(real.env.client, real.worker.taskQueue, device, {
      report: null,
      knownVersion: 0,
      waitMs: 0,
    });
    expect(view).toMatchObject({ deviceId: device, version: 0, desired: {} });
    expect((await real.env.client.workflow.getHandle(twinWorkflowId(device)).describe()).status.name).toBe('RUNNING');
  });

  it("a sync the twin's validator refuses is INVALID_INPUT naming the problem, for a new device and a known one", async () => {
    const malformed = { report: null, knownVersion: -1, waitMs: 0 } as unknown as TwinSyncInput;
    for (const device of ['entity-refused-new', 'entity-new']) {
      const err = await rejection(syncTwin(real.env.client, real.worker.taskQueue, device, malformed));
      expect(err).toBeInstanceOf(WavegateError);
      expect(err).toMatchObject({ code: 'INVALID_INPUT', details: { deviceId: device } });
      expect(err.message).toContain('knownVersion: must be an integer >= 0');
    }
  });

  it('reads start nothing: no registry is NOT_FOUND, no lock holds the profile', async () => {
    expect((await rejection(listRevisions(real.env.client, 'entity-nobody'))).code).toBe('NOT_FOUND');
    await expect(real.env.client.workflow.getHandle('registry:entity-nobody').describe()).rejects.toThrow(/not found/i);
    expect(await heldRolloutOf(real.env.client, 'entity-nobody')).toBeUndefined();
  });
});
