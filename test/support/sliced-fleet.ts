import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import type { ApplyInput } from '../../activities';
import type { ApplyResult } from '../../device/steps';
import { storeMembership } from '../../clients/membership';
import { parseInventory, type Inventory } from '../../core/inventory';
import type { RolloutInput } from '../../core/rollout/input';
import { slicedSliceSize } from '../../core/rollout/sliced-plan';
import { parseRolloutSpec } from '../../core/spec';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { rolloutInputFromFiles } from '../../intake/prepare';

/**
 * A generated fleet and a sliced-records rollout over it (core/rollout/sliced-plan.ts), shared by
 * test/workflow/sliced-scale.test.ts and bench/sliced-scale.ts: two pools, no device contacted (the
 * applies are mocked with `mockedApply`), the demo r1 → r2 in two phases (10%, the rest), no gates.
 */
export function generatedFleet(n: number, budget: number): Inventory {
  return parseInventory(
    {
      pools: { east: { disruptionBudget: budget }, west: { disruptionBudget: budget } },
      defaults: { user: 'ops', port: 22, class: 'edge', os: 'linux', ssh: { key: '/etc/wavegate/keys/id_ed25519' } },
      devices: Array.from({ length: n }, (_, i) => ({
        id: `dev-${String(i).padStart(6, '0')}`,
        host: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
        pool: i % 2 ? 'east' : 'west',
      })),
    },
    'generated',
  );
}

/** The rollout input `start` would make over the fleet: its membership stored, sliced records, the slice size it would choose. */
export async function slicedRolloutInput(
  client: Client,
  taskQueue: string,
  inventory: Inventory,
  rolloutId: string,
): Promise<RolloutInput> {
  const spec = parseRolloutSpec(
    {
      rollout: {
        profile: 'demo',
        fromRevision: 1,
        toRevision: 2,
        phases: [{ bulk: '10%' }, { bulk: 'remainder' }],
        gate: '0s',
      },
    },
    'generated spec',
  );
  return {
    ...rolloutInputFromFiles({
      spec,
      specSource: 'generated spec',
      inventory,
      inventoryPath: 'generated',
      profilesRoot: join(PROJECT_ROOT, 'profiles'),
      startedBy: 'test',
      rolloutId,
    }),
    membership: await storeMembership(client, taskQueue, inventory, 'generated'),
    records: 'slices',
    sliceSize: slicedSliceSize(inventory.devices.length),
  };
}

/** The one device activity, mocked: every device answers applied at once (what is measured is the control plane). */
export function mockedApply(onApply: () => void = () => {}) {
  return async function applyRevision(input: ApplyInput): Promise<ApplyResult> {
    onApply();
    return { device: input.device.id, outcome: 'applied', steps: ['mocked'] };
  };
}
