import { describe, expect, it } from 'vitest';
import { twinWorkflowId } from '../../core/twin';
import { heldRolloutOf } from '../../clients/profile-lock';
import { listRevisions } from '../../clients/registry';
import { readTwin } from '../../clients/twin';
import { realRollouts } from '../support/real-rollouts';
import { rejection } from '../support/refusal';

/**
 * The entity clients' one style (clients/, docs/architecture.md "Layers") on a real dev server: reads never
 * start an entity. (A membership stored again is the same entity: test/workflow/membership.test.ts; a device's
 * first sync runs the enrolment hook before its answer: the gateway's, test/unit/views-hold.test.ts and
 * test/e2e/agent-rollout.test.ts.)
 */
const real = realRollouts('entity-clients');

describe('entity clients', () => {
  it('reads start nothing: no registry is NOT_FOUND, no lock holds the profile, no twin reads as null', async () => {
    expect((await rejection(listRevisions(real.env.client, 'entity-nobody'))).code).toBe('NOT_FOUND');
    await expect(real.env.client.workflow.getHandle('registry:entity-nobody').describe()).rejects.toThrow(/not found/i);
    expect(await heldRolloutOf(real.env.client, 'entity-nobody')).toBeUndefined();
    expect(await readTwin(real.env.client, 'entity-nobody')).toBeNull();
    await expect(real.env.client.workflow.getHandle(twinWorkflowId('entity-nobody')).describe()).rejects.toThrow(
      /not found/i,
    );
  });
});
