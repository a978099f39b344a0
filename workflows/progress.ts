import type { SearchAttributeUpdatePair } from '@temporalio/common';
import * as wf from '@temporalio/workflow';
import type { RolloutModel } from '../core/rollout/model';
import type { RolloutStatus } from '../core/rollout/status';
import { summarizeCounts } from '../core/rollout-state';
import {
  WavegatePhase,
  WavegateProfile,
  WavegateRevision,
  WavegateState,
  WavegateVerdict,
} from '../contracts/search-attributes';
import { recordRolloutState } from '../core/metrics';

const lastPublishedState = new WeakMap<RolloutModel, string>();

/**
 * What the Temporal Web UI shows of a rollout: search attributes (to list and filter rollouts) and the
 * current-details progress table. The model marks itself changed with every write (its methods are the
 * only writers); `publishIfChanged` is the one place the status is computed and the attributes upserted,
 * at the end of each step that changes the rollout's state. The upsert is a command in history, so the
 * step boundaries that call it are exactly those recorded histories have (each follows a write, so each
 * upserts); a boundary with nothing written since the last upsert adds no command. `refreshDetails` is
 * free (not in history) and follows every device change.
 */
export function publishIfChanged(model: RolloutModel): void {
  if (!model.takeChanged()) return;
  const s = model.status();
  // A metric, not a command (the SDK drops it during replay): counted once per state the rollout enters.
  if (lastPublishedState.get(model) !== s.state) {
    lastPublishedState.set(model, s.state);
    recordRolloutState(wf.metricMeter, { state: s.state, profile: s.profile });
  }
  wf.upsertSearchAttributes(searchAttributesOf({ ...s, revision: s.toRevision }));
  wf.setCurrentDetails(progressTable(s));
  lastRefresh.set(model, Date.now());
}

/**
 * The search attributes a rollout (and a nightly canary) is listed and filtered by, in the order every
 * recorded upsert has them; the revision and the verdict only once there is one.
 */
export function searchAttributesOf(a: {
  profile: string;
  state: string;
  phase: string;
  revision: number | null;
  verdict?: string | undefined;
}): SearchAttributeUpdatePair[] {
  return [
    { key: WavegateProfile, value: a.profile },
    { key: WavegateState, value: a.state },
    { key: WavegatePhase, value: a.phase },
    ...(a.revision !== null ? [{ key: WavegateRevision, value: a.revision }] : []),
    ...(a.verdict ? [{ key: WavegateVerdict, value: a.verdict }] : []),
  ];
}

/** When each model's details were last rebuilt (workflow time) and whether a change is waiting. */
const lastRefresh = new WeakMap<RolloutModel, number>();
/** At most one rebuild of the progress table per this much workflow time, off the devices' hot path. */
export const DETAILS_REFRESH_MS = 1_000;

/**
 * Rebuild the Web UI's progress table (not a command: no history, no patch). Device changes come in
 * bursts of hundreds within one workflow task, and each rebuild walks the whole fleet, so it is
 * throttled: at most once per DETAILS_REFRESH_MS of workflow time, or at once with `force` (the end of
 * a batch or a slice, and every publish).
 */
export function refreshDetails(model: RolloutModel, force = false): void {
  const now = Date.now();
  const last = lastRefresh.get(model);
  if (!force && last !== undefined && now - last < DETAILS_REFRESH_MS) return;
  lastRefresh.set(model, now);
  wf.setCurrentDetails(progressTable(model.status()));
}

/** The live progress table shown in the Web UI's current details (markdown). */
export function progressTable(s: RolloutStatus): string {
  const phaseRows = s.phases.map(
    (p) => `| ${p.index} | ${p.name} | ${p.devices} | ${p.stage}${p.gateOutcome ? ` (${p.gateOutcome})` : ''} |`,
  );
  // Devices waiting for a dependency first: what holds the phase must not scroll out of the table.
  const waiting = s.devices.filter((d) => d.state === 'waiting').slice(0, 10);
  const active = [
    ...waiting,
    ...s.devices.filter((d) => d.state !== 'pending' && d.state !== 'waiting').slice(-(30 - waiting.length)),
  ];
  const rows = active.map((d) => `| ${d.id} | ${d.state} | ${d.reason ?? ''} |`);
  return [
    `**${s.profile}** r${s.fromRevision} → r${s.toRevision}: **${s.state}**, phase *${s.phase}*${s.pausedReason ? ` — ${s.pausedReason}` : ''}`,
    '',
    summarizeCounts(s.counts),
    '',
    '| # | phase | devices | stage |',
    '|---|---|---|---|',
    ...phaseRows,
    '',
    '| device | state | note |',
    '|---|---|---|',
    ...rows,
  ].join('\n');
}
