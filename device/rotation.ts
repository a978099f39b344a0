import type { Device } from '../core/inventory';
import { mapLimit } from '../core/map-limit';
import { phaseAt, type RetireDecision, type Rotation } from '../core/rotation';
import { readPinnableInventory, withLoginKey, writePinnedInventory } from '../intake/inventory-pin';
import {
  type DeviceRecord,
  type RotationLogEntry,
  type RotationStateFile,
  writeRotationState,
} from '../intake/rotation-state';
import { channelFor, type ChannelDeps, type LoginKey, type LoginKeyOptions, type LoginKeys } from './channel';
import { loginKeyOf, notAsExpected } from './channel/ssh-login-key';
import { TransportError } from './transport';

/**
 * The SSH login key's rotation across a fleet (docs/operations.md, "Rotating the SSH login key"): each device
 * through its own channel's login keys, its facts recorded in the rotation's state file after every step (so a
 * run cut off keeps what it proved), and its inventory entry's `ssh.key` moved to the new key once a login with
 * that key is proven there. What may happen when is core/rotation.ts's decision; this only carries it out.
 */

export interface RotationRun {
  rotation: Rotation;
  inventoryPath: string;
  /** The login's authorized keys file on the devices (relative: under its $HOME). */
  file: string;
  state: RotationStateFile;
  statePath: string;
  deps: ChannelDeps;
  opts: LoginKeyOptions;
  concurrency: number;
  now(): number;
}

/** What happened to one device in this run, for the command's report. */
export interface DeviceOutcome {
  device: string;
  /** `unchanged`: nothing to do (already moved, or already retired). */
  step: 'added' | 'active' | 'retired' | 'lifeline' | 'unchanged' | 'failed' | 'blocked';
  detail?: string;
}

const iso = (run: RotationRun) => new Date(run.now()).toISOString();

/** Record a device's facts (and an entry in the log), and write the state file at once. */
function note(
  run: RotationRun,
  device: string,
  facts: Partial<DeviceRecord>,
  clear: Array<keyof DeviceRecord>,
  entry?: Omit<RotationLogEntry, 'at' | 'device'>,
): void {
  const record: DeviceRecord = { ...run.state.devices[device], ...facts, triedAt: iso(run) };
  for (const key of clear) delete record[key];
  run.state.devices[device] = record;
  if (entry) run.state.log.push({ at: iso(run), device, ...entry });
  writeRotationState(run.statePath, run.state);
}

function blocked(run: RotationRun, device: string, why: string): DeviceOutcome {
  note(run, device, { blocked: why }, ['lastError'], { event: 'blocked', detail: why });
  return { device, step: 'blocked', detail: why };
}

/** A failure as the device's state takes it: the device saying no, or a refusal no retry helps, blocks it. */
function failed(run: RotationRun, device: string, err: unknown, during: string): DeviceOutcome {
  const message = (err as Error).message;
  if (notAsExpected(err) || (err instanceof TransportError && !err.retryable))
    return blocked(run, device, `${during}: ${message}`);
  note(run, device, { lastError: `${during}: ${message}` }, [], { event: 'missed', detail: `${during}: ${message}` });
  return { device, step: 'failed', detail: `${during}: ${message}` };
}

/** The device's channel's login keys and its current login key file, or why it cannot take part. */
function loginOf(run: RotationRun, device: Device): { keys: LoginKeys; current: LoginKey } | string {
  const channel = channelFor(device, run.deps);
  if (!channel.loginKeys)
    return `transport ${channel.name}: no SSH login key to rotate (an agent's identity key is enrolled with wavegate agent enroll)`;
  if (device.ssh.agent || !device.ssh.key)
    return 'ssh.agent: its login key is in an SSH agent, not a key file; give it ssh.key to rotate it here, or rotate it by hand';
  try {
    return { keys: channel.loginKeys, current: loginKeyOf(device.ssh.key) };
  } catch (err) {
    return `ssh.key: ${(err as Error).message}`;
  }
}

/**
 * One device's activate: the new key added beside the old one (logged in with the old), and from the activate
 * instant a fresh login with the new key proven, the device recorded active and its inventory `ssh.key` moved.
 * Idempotent: a device already moved is left as it is; one that was offline catches up from its old key.
 */
async function activateOne(run: RotationRun, device: Device, newKey: LoginKey): Promise<DeviceOutcome> {
  const { rotation } = run;
  const login = loginOf(run, device);
  if (typeof login === 'string') return blocked(run, device.id, login);
  const { keys, current } = login;
  const record = run.state.devices[device.id] ?? {};
  if (record.active && current.fingerprint === rotation.new) return { device: device.id, step: 'unchanged' };
  if (current.fingerprint !== rotation.old && current.fingerprint !== rotation.new)
    return blocked(
      run,
      device.id,
      `ssh.key ${current.path} is ${current.fingerprint}, neither the rotation's old key ${rotation.old} nor its new ${rotation.new}`,
    );
  const target = channelFor(device, run.deps).target(device);
  const onOld = current.fingerprint === rotation.old;
  if (onOld) {
    try {
      const change = { rotation: rotation.id, old: current, new: newKey, file: run.file };
      const added = await keys.add(target, change, run.opts);
      run.state.oldPublicKey ??= `${current.type} ${current.blob}`;
      note(run, device.id, record.added ? {} : { added: iso(run) }, ['blocked', 'lastError'], {
        event: 'published',
        detail: added === 'added' ? `added to ${run.file}` : `already in ${run.file}`,
      });
    } catch (err) {
      return failed(run, device.id, err, 'adding the new key (logged in with the old one)');
    }
  }
  if (phaseAt(rotation, run.now()) === 'published') return { device: device.id, step: 'added' };
  try {
    await keys.prove(target, newKey, run.opts);
  } catch (err) {
    return failed(run, device.id, err, `a login with the new key ${newKey.fingerprint}`);
  }
  note(run, device.id, { active: iso(run), ...(onOld ? { oldKey: current.path } : {}) }, ['blocked', 'lastError'], {
    event: 'active',
    detail: `a login with ${newKey.fingerprint} proven`,
  });
  if (onOld) {
    const file = readPinnableInventory(run.inventoryPath, device.id);
    writePinnedInventory(file, withLoginKey(file, newKey.path));
  }
  return { device: device.id, step: 'active' };
}

/** Activate every device of the rotation, a few at once; each one's facts are written as they are proven. */
export function activateDevices(run: RotationRun, devices: readonly Device[], newKey: LoginKey) {
  return mapLimit(devices, run.concurrency, async (device) => {
    try {
      return await activateOne(run, device, newKey);
    } catch (err) {
      return failed(run, device.id, err, 'activate');
    }
  });
}

/**
 * One device's retire: logged in with the new key (a proof it still works), the old key's lines removed, then
 * a login with the old key proven refused when its file is still on this machine. A device that still lets the
 * old key in (authorized elsewhere) is not retired: it is named.
 */
async function retireOne(run: RotationRun, device: Device): Promise<DeviceOutcome> {
  const { rotation } = run;
  const login = loginOf(run, device);
  if (typeof login === 'string') return { device: device.id, step: 'failed', detail: login };
  const { keys, current } = login;
  const record = run.state.devices[device.id] ?? {};
  if (current.fingerprint !== rotation.new)
    return { device: device.id, step: 'failed', detail: `ssh.key is ${current.fingerprint}, not the new key` };
  const [type, blob] = (run.state.oldPublicKey ?? '').split(' ');
  if (!type || !blob)
    return { device: device.id, step: 'failed', detail: 'the old public key was never recorded (no device moved)' };
  const old: LoginKey = { path: record.oldKey ?? '', type, blob, fingerprint: rotation.old! };
  try {
    await keys.remove(target(run, device), { rotation: rotation.id, old, new: current, file: run.file }, run.opts);
    if (record.oldKey && (await keys.refuses(target(run, device), old, run.opts)) === false) {
      const why = `the old key still logs in after its line was removed from ${run.file}: it is authorized elsewhere on the device (another AuthorizedKeysFile?); remove it there`;
      note(run, device.id, { lastError: why }, [], { event: 'old-key-still-accepted', detail: why });
      return { device: device.id, step: 'failed', detail: why };
    }
  } catch (err) {
    return failed(run, device.id, err, 'removing the old key');
  }
  const detail = record.oldKey
    ? 'a login with the old key is refused'
    : 'the old key file is gone: its refusal not tried';
  note(run, device.id, { retired: iso(run) }, ['lastError'], { event: 'retired', detail });
  return { device: device.id, step: 'retired', detail };
}

const target = (run: RotationRun, device: Device) => channelFor(device, run.deps).target(device);

/** Carry out a retire decision: the old key removed where the decision says; lifeline devices keep it, noted. */
export async function retireDevices(run: RotationRun, devices: readonly Device[], decision: RetireDecision) {
  const byId = new Map(devices.map((d) => [d.id, d]));
  for (const id of decision.lifeline)
    if (!run.state.log.some((e) => e.event === 'lifeline' && e.device === id))
      run.state.log.push({
        at: iso(run),
        device: id,
        event: 'lifeline',
        detail: `keeps the old key until ${run.rotation.lifelineUntil}`,
      });
  const removing = decision.remove.flatMap((id) => byId.get(id) ?? []);
  const outcomes = await mapLimit(removing, run.concurrency, async (device) => {
    try {
      return await retireOne(run, device);
    } catch (err) {
      return failed(run, device.id, err, 'retire');
    }
  });
  writeRotationState(run.statePath, run.state);
  return [
    ...outcomes,
    ...decision.lifeline.map(
      (device): DeviceOutcome => ({
        device,
        step: 'lifeline',
        detail: `keeps the old key until ${run.rotation.lifelineUntil}`,
      }),
    ),
  ];
}

/**
 * The devices of an SSH login key rotation: every device whose channel has login keys, and every device the
 * schedule names (one that has none is then blocked, and named).
 */
export function rotationDevices(rotation: Rotation, devices: readonly Device[], deps: ChannelDeps = {}): Device[] {
  const named = new Set([...(rotation.required === 'all' ? [] : rotation.required), ...(rotation.lifeline ?? [])]);
  return devices.filter((d) => {
    if (named.has(d.id)) return true;
    try {
      return channelFor(d, deps).loginKeys !== undefined;
    } catch {
      return false;
    }
  });
}
