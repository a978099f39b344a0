import { WorkflowUpdateFailedError } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { storeMembership } from '../../clients/membership';
import { parseInventory } from '../../core/inventory';
import { MembershipState, type MembershipPage, type MembershipPlan } from '../../core/membership';

function inventoryOf(n: number) {
  return parseInventory(
    {
      defaults: { user: 'ops', port: 22, pool: 'p', class: 'edge', os: 'linux', ssh: { key: '/k' } },
      devices: Array.from({ length: n }, (_, i) => ({ id: `d-${i}`, host: `10.0.${Math.floor(i / 250)}.${i % 250}` })),
    },
    'test',
  );
}

/**
 * Beside the real entity (test/workflow/membership.test.ts): a stand-in client whose entity is the real
 * MembershipState, and whose update calls fail as told, to show what the upload does with a cut.
 */
function standIn(fail: (call: number) => Error | undefined) {
  let state: MembershipState | undefined;
  let call = 0;
  const handle = {
    query: async () => state!.progress(),
    executeUpdate: async (def: { name: string }, opts: { args: [MembershipPage] | [] }) => {
      const err = fail(++call);
      if (err) throw err;
      if (def.name === 'seal') return state!.seal();
      const page = opts.args[0]!;
      const problem = state!.pageProblem(page);
      if (problem) throw new Error(problem);
      return state!.addPage(page);
    },
  };
  const client = {
    workflow: {
      start: async (_type: string, opts: { args: [MembershipPlan] }) => {
        state ??= new MembershipState(opts.args[0]);
        return handle;
      },
    },
  };
  return { client: client as never, calls: () => call, state: () => state! };
}

describe('the membership upload under load', () => {
  it('resumes from the entity’s progress after a cut update, and seals', async () => {
    const s = standIn((call) => (call === 2 ? new Error('Workflow Update failed') : undefined));
    const ref = await storeMembership(s.client, 'q', inventoryOf(2_500), 'test');
    expect(ref).toMatchObject({ devices: 2_500, pages: 3 });
    expect(s.state().isSealed()).toBe(true);
    expect(s.state().progress()).toMatchObject({ pagesStored: 3, devicesStored: 2_500 });
    expect(s.calls()).toBe(5); // page 0, a cut, page 1 again, page 2, the seal
  });

  it('a refusal is an answer: not asked again', async () => {
    const refusal = new WorkflowUpdateFailedError('refused', new Error('devices: page 0 is too large'));
    const s = standIn(() => refusal);
    await expect(storeMembership(s.client, 'q', inventoryOf(10), 'test')).rejects.toBe(refusal);
    expect(s.calls()).toBe(1);
  });
});
