import type { SnapshotRefusal } from '../../core/rollout-state';
import { SNAPSHOT_REFUSALS } from '../../core/rollout-state';

/** A security or configuration refusal is not a device being offline (see DeviceSnapshot.refusal). */
export function refusalOf(kind: string): SnapshotRefusal | undefined {
  return (SNAPSHOT_REFUSALS as readonly string[]).includes(kind) ? (kind as SnapshotRefusal) : undefined;
}
