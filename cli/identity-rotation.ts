import { proofProblem } from '../core/agent-rotation';
import type { Device } from '../core/inventory';
import type { DeviceRotation, RetireDecision, Rotation } from '../core/rotation';
import { proofsPath, readProofs, type ProofsFile } from '../intake/rotation-proofs';
import { readPinnableInventory, withAgentKey, writePinnedInventory } from '../intake/inventory-pin';
import { type RotationStateFile, writeRotationState } from '../intake/rotation-state';

/**
 * The operator's half of an agent identity key rotation (docs/operations.md, "Rotating an agent's identity key"):
 * the gateway records each device's proof in `<id>.proofs.json` (its only writer); `wavegate rotation` reads it,
 * verifies each proof again against the inventory's agentKey (the file is the gateway's word, not evidence), and
 * counts a device proven there as active. activate moves the inventory's agentKey of each proven device to its new
 * key (the inventory's writer, intake/inventory-pin.ts) and records it in the state file (the CLI's file); retire
 * records the retire there, which the gateway reads to refuse the old keys.
 */

/** The devices of an agent-identity rotation: every device enrolled with an identity key, and every device it names. */
export function identityRotationDevices(rotation: Rotation, devices: readonly Device[]): Device[] {
  const named = new Set([...(rotation.required === 'all' ? [] : rotation.required), ...(rotation.lifeline ?? [])]);
  return devices.filter((d) => named.has(d.id) || d.agentKey !== undefined);
}

export interface ProvenDevices {
  proofs: ProofsFile;
  /** The device's verified proof: the pins it hands over between. */
  proven: Map<string, { at: string; old: string; new: string }>;
  /** Proofs that do not verify against the inventory, with why (a file edited, or an inventory changed by hand). */
  bad: Map<string, string>;
}

export function provenDevices(
  rotation: Rotation,
  digest: string,
  statePath: string,
  devices: readonly Device[],
): ProvenDevices {
  const proofs = readProofs(proofsPath(statePath, rotation.id), rotation.id, digest);
  const proven = new Map<string, { at: string; old: string; new: string }>();
  const bad = new Map<string, string>();
  for (const device of devices) {
    const entry = proofs.devices[device.id];
    if (!entry) continue;
    const problem = device.agentKey
      ? proofProblem(entry.proof, { id: rotation.id, device: device.id, pinned: device.agentKey })
      : 'no agentKey in the inventory';
    if (problem) bad.set(device.id, `its recorded proof does not verify: ${problem}`);
    else proven.set(device.id, { at: entry.at, old: entry.proof.old, new: entry.proof.new });
  }
  return { proofs, proven, bad };
}

/** The state file's records with each proven device active (from its proof's time) and each bad proof blocking. */
export function recordsWithProofs(state: RotationStateFile, proven: ProvenDevices): Record<string, DeviceRotation> {
  const records: Record<string, DeviceRotation> = { ...state.devices };
  for (const [device, p] of proven.proven)
    records[device] = { ...records[device], active: records[device]?.active ?? p.at };
  for (const [device, why] of proven.bad)
    if (!records[device]?.active) records[device] = { ...records[device], blocked: why };
  return records;
}

export interface IdentityOutcome {
  device: string;
  step: 'active' | 'unchanged' | 'waiting' | 'blocked' | 'retired';
  detail?: string;
}

/**
 * activate: each proven device's inventory agentKey moved to its new key (one write per device, the file re-read
 * each time so no other edit is lost) and its state recorded active; the others are said as they stand.
 */
export function activateIdentities(
  inventoryPath: string,
  state: RotationStateFile,
  statePath: string,
  devices: readonly Device[],
  proven: ProvenDevices,
  now: number,
): IdentityOutcome[] {
  const at = new Date(now).toISOString();
  const outcomes = devices.map((device): IdentityOutcome => {
    const bad = proven.bad.get(device.id);
    if (bad) return { device: device.id, step: 'blocked', detail: bad };
    const p = proven.proven.get(device.id);
    if (!p) return { device: device.id, step: 'waiting', detail: 'no proof of a new key from its agent yet' };
    if (device.agentKey === p.new && state.devices[device.id]?.active) return { device: device.id, step: 'unchanged' };
    if (device.agentKey === p.old) {
      const file = readPinnableInventory(inventoryPath, device.id);
      writePinnedInventory(file, withAgentKey(file, p.new));
    }
    state.devices[device.id] = { ...state.devices[device.id], active: p.at, triedAt: at };
    state.log.push({ at, device: device.id, event: 'active', detail: `agentKey moved to ${p.new} (proven ${p.at})` });
    return { device: device.id, step: 'active', detail: `agentKey is ${p.new}` };
  });
  writeRotationState(statePath, state);
  return outcomes;
}

/** retire: the devices the decision retires recorded retired (the gateway refuses their old keys from then on). */
export function retireIdentities(state: RotationStateFile, decision: RetireDecision, now: number): IdentityOutcome[] {
  const at = new Date(now).toISOString();
  return decision.remove.map((device): IdentityOutcome => {
    state.devices[device] = { ...state.devices[device], retired: at };
    state.log.push({ at, device, event: 'retired', detail: 'the gateway refuses its old identity key' });
    return { device, step: 'retired', detail: 'its old key is refused by the gateway' };
  });
}
