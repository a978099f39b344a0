import * as wf from '@temporalio/workflow';
import { countDevices, summarizeCounts, type DeviceSnapshot, type DeviceState, type DeviceStatus, type RolloutState } from '../core/rollout-state';
import { WavegatePhase, WavegateProfile, WavegateRevision, WavegateState } from '../core/search-attributes';
import type { RolloutSpec } from '../core/spec';
import type * as activities from '../activities';
import { statusQuery, type RolloutStatus } from './messages';

export interface RolloutInput {
  rolloutId: string;
  spec: RolloutSpec;
  /** The profile's label selector over the inventory. */
  scope: Record<string, string>;
  /** The target revision's device steps (commands and payload references, never secrets). */
  steps: activities.RevisionSteps;
  /** Membership source the worker reads at snapshot time. */
  inventoryPath: string;
  /** In-flight fraction per pool (DESIGN §2: default 5%, at least one device). */
  poolBudgets: Record<string, number>;
  startedBy: string;
}

const { snapshotFleet } = wf.proxyActivities<ReturnType<typeof activities.createActivities>>({
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '1 minute',
  retry: { maximumAttempts: 3 },
});

/**
 * The walking skeleton of a rollout: snapshot the membership in scope, then bring every reachable device
 * to the target revision (verify first, apply, verify, marker), at most a pool's budget in flight at once.
 * Phases, gates, rollback and controls come in with the full rollout workflow.
 */
export async function rolloutWorkflow(input: RolloutInput): Promise<RolloutStatus> {
  const { spec } = input;
  const devices = new Map<string, DeviceStatus>();
  let state: RolloutState = 'running';
  let phase = 'snapshot';

  const status = (): RolloutStatus => ({
    rolloutId: input.rolloutId,
    profile: spec.profile,
    fromRevision: spec.fromRevision,
    toRevision: spec.toRevision,
    state,
    phase,
    devices: [...devices.values()],
    counts: countDevices(devices.values()),
  });
  wf.setHandler(statusQuery, status);

  const publish = () => {
    wf.upsertSearchAttributes([
      { key: WavegateProfile, value: spec.profile },
      { key: WavegateState, value: state },
      { key: WavegatePhase, value: phase },
      { key: WavegateRevision, value: spec.toRevision },
    ]);
    wf.setCurrentDetails(progressTable(status()));
  };
  const setDevice = (id: string, next: DeviceState, reason?: string) => {
    devices.set(id, { id, state: next, phase: 0, ...(reason ? { reason } : {}) });
    wf.setCurrentDetails(progressTable(status()));
  };
  publish();

  const snapshot = await snapshotFleet.executeWithOptions({ summary: `snapshot ${spec.profile} fleet` }, [
    { inventoryPath: input.inventoryPath, profile: spec.profile, scope: input.scope },
  ]);

  const toApply: DeviceSnapshot[] = [];
  for (const device of snapshot) {
    if (device.updateClass === 'left-behind') setDevice(device.id, 'skipped', 'not-for-me: left-behind');
    else if (!device.reachable) setDevice(device.id, 'skipped', `offline: ${device.error ?? 'unreachable'}`);
    else if (device.current === spec.toRevision) setDevice(device.id, 'applied', 'already at target');
    else {
      setDevice(device.id, 'pending');
      toApply.push(device);
    }
  }

  phase = 'all devices';
  publish();
  const apply = wf.proxyActivities<ReturnType<typeof activities.createActivities>>({
    startToCloseTimeout: spec.applyTimeout,
    heartbeatTimeout: '1 minute',
    retry: { initialInterval: '2 seconds', backoffCoefficient: 2, maximumAttempts: 5 },
  }).applyRevision;

  // One lane per unit of each pool's budget: devices start in order while their pool has room.
  const lanes: Promise<void>[] = [];
  for (const [pool, members] of groupBy(toApply, (d) => d.pool)) {
    const queue = [...members];
    const limit = Math.max(1, Math.floor(snapshot.filter((d) => d.pool === pool).length * (input.poolBudgets[pool] ?? 0.05)));
    for (let i = 0; i < Math.min(limit, queue.length); i++) {
      lanes.push(
        (async () => {
          for (let device = queue.shift(); device; device = queue.shift()) {
            setDevice(device.id, 'applying');
            try {
              const result = await apply.executeWithOptions({ summary: `apply r${spec.toRevision} → ${device.id}` }, [
                { device, steps: input.steps, commandTimeoutMs: spec.applyTimeout },
              ]);
              setDevice(device.id, 'applied', result.outcome === 'already-applied' ? 'already in place (verify only)' : undefined);
            } catch (err) {
              setDevice(device.id, 'failed', rootMessage(err));
            }
          }
        })(),
      );
    }
  }
  await Promise.all(lanes);

  const counts = countDevices(devices.values());
  state = counts.failed > 0 ? 'failed' : 'completed';
  phase = 'done';
  publish();
  return status();
}

function groupBy<T>(items: T[], key: (item: T) => string): Map<string, T[]> {
  const out = new Map<string, T[]>();
  for (const item of items) out.set(key(item), [...(out.get(key(item)) ?? []), item]);
  return out;
}

function rootMessage(err: unknown): string {
  let current = err as { cause?: unknown; message?: string } | undefined;
  while (current?.cause) current = current.cause as typeof current;
  return current?.message ?? String(err);
}

/** The live progress table shown in the Web UI's current details (markdown). */
export function progressTable(s: RolloutStatus): string {
  const rows = s.devices.slice(0, 50).map((d) => `| ${d.id} | ${d.state} | ${d.reason ?? ''} |`);
  const more = s.devices.length > 50 ? [`| … ${s.devices.length - 50} more | | |`] : [];
  return [
    `**${s.profile}** r${s.fromRevision} → r${s.toRevision}: **${s.state}**, phase *${s.phase}*`,
    '',
    summarizeCounts(s.counts),
    '',
    '| device | state | note |',
    '|---|---|---|',
    ...rows,
    ...more,
  ].join('\n');
}
