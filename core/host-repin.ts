import type { Device } from './inventory';
import { WavegateError } from './errors';
import { FINGERPRINT } from './init-keys';
import { showValue } from './validation';

/**
 * `wavegate fleet repin <device>`: a host that was re-keyed (reinstalled, its keys regenerated) gets
 * its new key pinned only when the operator confirms that exact key — interactively, or by naming it
 * with `--accept SHA256:...` — never because it is what the host happens to present. Pure: which pin
 * the device has now, and what to do with the key read from the host; the command is
 * cli/commands/fleet-repin.ts and the file edit intake/inventory-pin.ts.
 */

/** Where the device's current pin comes from (what repin replaces, and what it says about it). */
export type PinSource =
  /** `ssh.hostKey` on the device's own entry: replaced. */
  | { kind: 'device'; fingerprints: string[] }
  /** `defaults.ssh.hostKey`, shared with other devices: the device gets its own `ssh.hostKey`, the default stays. */
  | { kind: 'defaults'; fingerprints: string[] }
  /** A known_hosts file (`ssh.knownHosts`): the device gets an `ssh.hostKey`, which pins it from then on; the file still revokes. */
  | { kind: 'known-hosts'; file: string; fingerprints: string[] }
  /** No pin at all: the worker refuses to dial it today. */
  | { kind: 'none'; fingerprints: string[] };

/** `--accept SHA256:...`: INVALID_INPUT naming the flag and the value otherwise. */
export function parseAcceptFingerprint(value: string): string {
  if (!FINGERPRINT.test(value))
    throw new WavegateError(
      'INVALID_INPUT',
      `--accept ${showValue(value)}: must be the new fingerprint as repin prints it, SHA256: and 43 base64 characters (ssh-keygen -lf prints the same)`,
      { field: '--accept', value },
    );
  return value;
}

/** Why `fleet repin` does not dial this device, or undefined when it can. */
export function repinRefusal(device: Device, inventoryPath: string): WavegateError | undefined {
  if (device.transport === 'agent') {
    return new WavegateError(
      'INVALID_INPUT',
      `device ${showValue(device.id)} in ${inventoryPath} is an agent (transport: agent): it is never dialled, so it has no SSH host key to re-pin; its pin is agentKey, the agent's identity key. Re-pin it with \`wavegate agent pin --key <its identity key file>\` on the device (or \`wavegate agent enroll --state-dir <dir>\` for a new key), then set that device's agentKey in ${inventoryPath} to the pin it prints`,
      { field: '<device>', value: device.id },
    );
  }
  if (device.ssh.jumpHost) {
    return new WavegateError(
      'INVALID_INPUT',
      `device ${showValue(device.id)} is reached through the jump host ${device.ssh.jumpHost.host}:${device.ssh.jumpHost.port}: fleet repin reads host keys directly and cannot read this one; check the key on the host (ssh-keygen -lf /etc/ssh/ssh_host_<type>_key.pub) and set its ssh.hostKey in ${inventoryPath} by hand`,
      { field: '<device>', value: device.id },
    );
  }
  return undefined;
}

export type RepinDecision =
  /** The host presents a key the device is pinned to: nothing to do. */
  | { verdict: 'unchanged' }
  /** Pin the key it presents: the operator named or confirmed exactly that one. */
  | { verdict: 'pin' }
  /** `--accept` names another key than the one presented: refused, naming both. */
  | { verdict: 'mismatch'; accepted: string }
  /** No confirmation given (no --accept): ask on a terminal, or print how to confirm. */
  | { verdict: 'ask' };

/** The key the host presents against the pin and the operator's `--accept`. */
export function decideRepin(pin: PinSource, presented: string, accept: string | undefined): RepinDecision {
  // An --accept that is not what the host presents is refused even when the pin still holds: the
  // operator checked another key than the one this host has.
  if (accept !== undefined && accept !== presented) return { verdict: 'mismatch', accepted: accept };
  if (pin.fingerprints.includes(presented)) return { verdict: 'unchanged' };
  return accept === undefined ? { verdict: 'ask' } : { verdict: 'pin' };
}

/** `--accept` names another key than the host presents: the operator checked something else. */
export function acceptMismatch(
  device: Device,
  accepted: string,
  presented: { type: string; fingerprint: string },
): WavegateError {
  return new WavegateError(
    'CONFLICT',
    `--accept ${accepted}: ${device.id} (${device.host}:${device.port}) presents ${presented.type} ${presented.fingerprint}, not the key you accepted; nothing was written. Check the key on the host itself again: if the host changed keys once more, or someone is in the middle, the two differ`,
    { field: '--accept', value: accepted, presented: presented.fingerprint },
  );
}

/** The pin's origin in words, for the lines repin prints. */
export function describePin(pin: PinSource, inventoryPath: string): string {
  switch (pin.kind) {
    case 'device':
      return `ssh.hostKey of the device in ${inventoryPath}`;
    case 'defaults':
      return `defaults.ssh.hostKey in ${inventoryPath}, shared with other devices: the device gets its own ssh.hostKey, the default stays`;
    case 'known-hosts':
      return `the known_hosts file ${pin.file}: the device gets an ssh.hostKey in ${inventoryPath}, which pins it from then on (the file still revokes; remove its old line there)`;
    case 'none':
      return 'none';
  }
}
