import type { Device, UpdateClass } from './inventory';
import type { NodeDownMark } from './node-down';

/**
 * Device and rollout states (docs/architecture.md) and the counts derived from them. Counts are always computed
 * from device states, never stored twice.
 */
export const DEVICE_STATES = [
  'pending',
  'applying',
  'applied',
  'claimed',
  'failed',
  /** Left out on purpose (offline under `offline: skip`, ...); never counted, never changed. The reason says why. */
  'skipped',
  /**
   * Not this rollout's to change: left-behind, under a node-down verdict that holds, above the target. Set at
   * plan time (or by an apply that found the device ahead); out of the tally and of the exit code. The reason
   * is the planner's (and the board's), e.g. `node-down since <since>, expires <at>: <why>`.
   */
  'not-for-me',
  /**
   * Planned into a phase but never started: an abort, a cancel, a rollback or a deadline (or a canary run's
   * later phases) ended the rollout first. Pending work like any device short of the target, kept apart from
   * devices skipped as offline. The reason says what stopped it, e.g. `aborted by alice`.
   */
  'not-started',
  'rolling-back',
  'rolled-back',
  'rollback-failed',
  /** Not started: it does not yet verify a profile the rollout waits for (`after`); retried after a backoff. */
  'waiting',
] as const;
export type DeviceState = (typeof DEVICE_STATES)[number];

/**
 * The state the workflow's own steps decide on. Before not-for-me and not-started had names of their own,
 * both were `skipped`, and recorded histories made commands from that (the offline devices a batch
 * records, which agent devices a completed rollout converges): those steps keep reading `skipped`, so
 * every history replays and every step does what it did.
 */
export function stepState(state: DeviceState): DeviceState {
  return state === 'not-for-me' || state === 'not-started' ? 'skipped' : state;
}

export const ROLLOUT_STATES = [
  'running',
  'paused',
  /**
   * Every phase passed and the spec's `watch` keeps checking the changed devices (core/rollout/watch.ts) until
   * it has run its time (then `completed`), or a failed check puts them back (`rolled-back`).
   */
  'watching',
  'completed',
  'rolled-back',
  'aborted',
  'cancelled',
  'failed',
] as const;
export type RolloutState = (typeof ROLLOUT_STATES)[number];

/** What the workflow knows of one device: small, because 10,000 of them may live in one history. */
export type DeviceTarget = Pick<Device, 'id' | 'host' | 'port' | 'user' | 'pool' | 'class'> & {
  /**
   * How the worker reaches the device (the inventory's `transport`). Optional because snapshots in
   * histories recorded before the field existed carry none; a missing value means 'ssh'.
   */
  transport?: Device['transport'];
  /**
   * Pinned host key fingerprint, key file path, agent flag: references only, never secrets. Absent for a
   * device that is never dialled (`transport: agent`); an SSH path given a target without it refuses it
   * as a config error naming the device.
   */
  ssh?: { hostKey?: string; knownHosts?: string; key?: string; agent?: boolean; jumpHost?: JumpHostTarget };
  /**
   * An SSH device's enrolled receipt key and the command that signs with it (the inventory's `receipts`): its
   * apply asks for a receipt on the same session (device/channel/ssh-receipt.ts). Absent: it is asked for none.
   */
  receipts?: Device['receipts'];
  /**
   * An agent device's identity key pin (the inventory's `agentKey`, `ed25519:<base64>`): the worker checks its
   * agent's receipts against it (device/receipt-check.ts). Absent for any other device, and in older snapshots.
   */
  agentKey?: string;
};

/** A bastion the device is reached through; its own host key is pinned (or found in ssh.knownHosts). */
export interface JumpHostTarget {
  host: string;
  port: number;
  user: string;
  hostKey?: string;
}

export interface DeviceSnapshot extends DeviceTarget {
  /** The revision marker read from the device at snapshot time (null: none, undefined: unreachable). */
  current: number | null;
  reachable: boolean;
  updateClass: UpdateClass;
  os: string;
  error?: string;
  /**
   * The device answered but must not be used: a changed host key, a refused login, a bad SSH setting.
   * Not "offline": such a device fails (counted by the failure gate), whatever the offline policy.
   */
  refusal?: SnapshotRefusal;
  /**
   * The device's node-down verdict at snapshot time (core/node-down.ts), when it has one: while it
   * holds the planner makes the device not-for-me; expired or lifted by its recheck, it is planned and
   * the plan says so in its warnings. Absent in histories recorded before verdicts existed.
   */
  nodeDown?: NodeDownMark;
}

export const SNAPSHOT_REFUSALS = ['host-key', 'auth', 'config'] as const;
export type SnapshotRefusal = (typeof SNAPSHOT_REFUSALS)[number];

export interface DeviceStatus {
  id: string;
  state: DeviceState;
  phase: number;
  reason?: string;
  /** Its last answer came with its own receipt, verified by the worker (core/receipt.ts): proven, not only claimed. */
  proven?: true;
}

/** How a device's state is backed: `proven` by its receipt, `claimed` on the control plane's word, '' not yet settled. */
export function proofOf(d: { state: string; proven?: true }): 'proven' | 'claimed' | '' {
  if (d.proven) return 'proven';
  return d.state === 'applied' || d.state === 'claimed' ? 'claimed' : '';
}

/** Of the devices at the target (applied or claimed), how many are proven by their receipts. */
export function proofCounts(devices: Iterable<{ state: string; proven?: boolean }>): {
  proven: number;
  applied: number;
} {
  let proven = 0;
  let applied = 0;
  for (const d of devices) {
    if (d.state !== 'applied' && d.state !== 'claimed') continue;
    applied += 1;
    if (d.proven) proven += 1;
  }
  return { proven, applied };
}

/** `3 of 4 applied proven by receipts` (the devices listed: a sliced rollout lists its inline phases' only). */
export function summarizeProof(devices: readonly Pick<DeviceStatus, 'state' | 'proven'>[]): string {
  const { proven, applied } = proofCounts(devices);
  return `${proven} of ${applied} applied proven by receipts`;
}

/**
 * The device's own receipt of an answer (core/receipt.ts receiptText), checked by the worker as it arrived, and the
 * request it answers (the apply activity's id: the receipt's nonce is derived from it). It goes into the trail
 * beside the device's `devices.outcome` entry.
 */
export interface DeviceProof {
  receipt: string;
  request: string;
}

/** One device's entry in a `devices.outcome` record: its state and why, with its receipt when it sent one. */
export interface DeviceRecord {
  id: string;
  state: DeviceState;
  reason?: string;
  receipt?: string;
  request?: string;
  /** The phase index the apply's request named (the receipt's `phase`). */
  phaseIndex?: number;
}

export type Counts = Record<DeviceState, number> & { total: number };

export function countDevices(devices: Iterable<{ state: DeviceState }>): Counts {
  const counts = Object.fromEntries(DEVICE_STATES.map((s) => [s, 0])) as Counts;
  counts.total = 0;
  for (const d of devices) {
    counts[d.state] += 1;
    counts.total += 1;
  }
  return counts;
}

/** A one-line progress summary, e.g. `12/12 applied, 0 failed`. */
export function summarizeCounts(counts: Counts): string {
  const done = counts.applied + counts.claimed;
  const parts = [`${done}/${counts.total} applied`];
  if (counts.claimed) parts.push(`${counts.claimed} claimed`);
  if (counts.failed) parts.push(`${counts.failed} failed`);
  if (counts.skipped) parts.push(`${counts.skipped} skipped`);
  // Absent from the counts of statuses recorded before these states existed (read them through readStatus).
  if (counts['not-started']) parts.push(`${counts['not-started']} not started`);
  if (counts['not-for-me']) parts.push(`${counts['not-for-me']} not-for-me`);
  if (counts.applying) parts.push(`${counts.applying} applying`);
  if (counts.waiting) parts.push(`${counts.waiting} waiting`);
  return parts.join(', ');
}
