import type { DeviceSnapshot, SnapshotRefusal } from '../core/rollout-state';
import { SNAPSHOT_REFUSALS } from '../core/rollout-state';
import { connectDevice, TransportError } from './transport';

/** A marker read is one short command, but a slow device is not an offline one: this is generous. */
const PROBE_READ_TIMEOUT_MS = 30_000;

/** A security or configuration refusal is not a device being offline (see DeviceSnapshot.refusal). */
export function refusalOf(kind: string): SnapshotRefusal | undefined {
  return (SNAPSHOT_REFUSALS as readonly string[]).includes(kind) ? (kind as SnapshotRefusal) : undefined;
}

/**
 * One device's revision marker and reachability, for the few canary candidates the planner needs
 * (docs/architecture.md, "A rollout, end to end"). Only a connect that fails (with the transport's own
 * connect timeout) makes the device unreachable; a marker read that fails or is slow after a good
 * connect leaves it reachable with no marker known, so its own apply (verify-first) decides.
 */
export async function probeOverTransport(device: DeviceSnapshot, profile: string): Promise<DeviceSnapshot> {
  const base: DeviceSnapshot = { ...device, current: null, reachable: true };
  delete base.error;
  delete base.refusal;
  let session;
  try {
    session = await connectDevice(device);
  } catch (err) {
    const refusal = err instanceof TransportError ? refusalOf(err.kind) : undefined;
    return { ...base, reachable: false, error: (err as Error).message, ...(refusal ? { refusal } : {}) };
  }
  try {
    return { ...base, current: await session.readMarker(profile, { timeoutMs: PROBE_READ_TIMEOUT_MS }) };
  } catch (err) {
    return { ...base, error: `marker not read (the apply's verify-first decides): ${(err as Error).message}` };
  } finally {
    session.close();
  }
}
