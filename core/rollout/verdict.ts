import type { AuditRecord } from '../audit';
import { bannerOf, deviceHistory, gateEvidenceOf, type GateEvidence } from '../board';
import { phaseCounts } from './sliced-records';
import type { RolloutStatus } from './status';

/**
 * Why a rollout is where it is, as the lines the CLI prints where an operator looks (`start --wait`,
 * `watch`, `status`, `audit`): the board's own reading of it (core/board.ts), never a second one. The
 * deciding gate's verdict is what the board's gate block shows (gateEvidenceOf over the audit trail):
 * each check with its result and evidence, the devices that failed it, the phase's failure ratio and
 * the sample it was taken over; for a failure gate, the error of each device that failed. The other
 * reasons are the banner's (bannerOf: a pause, a deadline, an approval waited for, the last control).
 * Without the trail, the status alone says each check and its evidence (the devices and their output
 * are in it), but not the ratio: a line says where the rest is. Every line is whole: nothing is cut.
 */

/** At most this many failed devices are named one a line under a gate (the rest counted). */
export const FAILED_DEVICES_SHOWN = 20;

type Phases = Pick<RolloutStatus, 'phases'>;

/** `phase 2/3 bulk`: the phase as the progress lines and the verdict name it (the name alone when the status is not known). */
export function phaseLabel(status: Phases | undefined, name: string): string {
  const phase = status?.phases.find((p) => p.name === name);
  return phase ? `phase ${phase.index + 1}/${status!.phases.length} ${name}` : `phase ${name}`;
}

/** The board's wording of a tally: `failure ratio 33.3% (1 failed of a sample of 3; 2 succeeded)`. */
export function ratioLine(tally: NonNullable<GateEvidence['tally']>): string {
  return `failure ratio ${(tally.ratio * 100).toFixed(1)}% (${tally.failed} failed of a sample of ${tally.sample}; ${tally.succeeded} succeeded)`;
}

/** The gate that decided where the rollout is: the last gate decision, when it did not pass. */
export function decidingGate(records: readonly AuditRecord[]): GateEvidence | undefined {
  const last = gateEvidenceOf(records).at(-1);
  return last && (last.outcome === 'fail' || last.outcome === 'inconclusive') ? last : undefined;
}

function named(ids: readonly string[]): string {
  const shown = ids.slice(0, FAILED_DEVICES_SHOWN).join(', ');
  return ids.length > FAILED_DEVICES_SHOWN ? `${shown} and ${ids.length - FAILED_DEVICES_SHOWN} more` : shown;
}

/** The deciding gate as the audit trail holds it: every check, the devices, the ratio; a failure gate's failed devices and their errors. */
function trailGateLines(gate: GateEvidence, records: readonly AuditRecord[], status: Phases | undefined): string[] {
  const kind = gate.kind === 'failure-gate' ? 'failure gate' : 'health gate';
  const lines = [
    `${kind} of ${phaseLabel(status, gate.phase ?? '-')}: ${gate.outcome} (audit record #${gate.seq}, ${gate.at})`,
  ];
  for (const c of gate.checks ?? []) {
    lines.push(`  ${c.check}: ${c.outcome} — ${c.evidence}`);
    if (c.failedDevices?.length)
      lines.push(`    ${c.outcome === 'fail' ? 'failed on' : 'not read on'}: ${named(c.failedDevices)}`);
  }
  if (gate.kind === 'health' && !gate.checks?.length) lines.push('  no health checks: nothing held the gate');
  if (gate.tally) lines.push(`  ${ratioLine(gate.tally)}`);
  if (gate.kind === 'failure-gate') {
    // The devices of that phase that failed, with the error the trail keeps (the board's last error).
    const failed = [...deviceHistory(records.filter((r) => r.phase === gate.phase))].filter(([, h]) => h.lastError);
    for (const [id, h] of failed.slice(0, FAILED_DEVICES_SHOWN)) lines.push(`  ${id} failed: ${h.lastError}`);
    if (failed.length > FAILED_DEVICES_SHOWN) lines.push(`  and ${failed.length - FAILED_DEVICES_SHOWN} more failed`);
  }
  return lines;
}

/** The deciding gate as the status holds it: each check's line (its devices and their output are in it), or a tripped failure gate. */
function statusGateLines(status: RolloutStatus): string[] {
  const gated = [...status.phases].reverse().find((p) => p.gateOutcome);
  if (gated && gated.gateOutcome !== 'pass')
    return [
      `health gate of ${phaseLabel(status, gated.name)}: ${gated.gateOutcome}`,
      ...(gated.evidence ?? []).map((e) => `  ${e}`),
    ];
  const tripped = status.phases.find((p) => p.stage === 'failed' && !p.gateOutcome);
  if (!tripped) return [];
  const failed = status.devices.filter(
    (d) => d.phase === tripped.index && (d.state === 'failed' || d.state === 'rollback-failed'),
  );
  // Before a rollback puts them back, the phase's devices still say the tally the gate read.
  const counts = phaseCounts(status, tripped.index);
  const succeeded = counts.applied + counts.claimed;
  const sample = succeeded + counts.failed;
  return [
    `failure gate of ${phaseLabel(status, tripped.name)}: fail`,
    ...(counts.failed > 0
      ? [`  ${ratioLine({ succeeded, failed: counts.failed, sample, ratio: counts.failed / sample })}`]
      : []),
    ...failed.slice(0, FAILED_DEVICES_SHOWN).map((d) => `  ${d.id} ${d.state}${d.reason ? `: ${d.reason}` : ''}`),
    ...(failed.length > FAILED_DEVICES_SHOWN ? [`  and ${failed.length - FAILED_DEVICES_SHOWN} more failed`] : []),
  ];
}

/** Where the trail was looked for, when it could not be read (the status's lines are then all there is). */
export interface TrailRead {
  records?: readonly AuditRecord[];
  /** Why there are no records: where it looked, what it found. */
  missing?: string;
}

/**
 * The deciding gate's verdict, the first line `why: …`, the rest indented under it; none when no gate
 * decided (it passed, or none ran yet). From the trail when it was read, else from the status.
 */
export function gateVerdictLines(status: RolloutStatus | undefined, trail: TrailRead, rolloutId: string): string[] {
  const gate = trail.records?.length ? decidingGate(trail.records) : undefined;
  const lines = gate ? trailGateLines(gate, trail.records!, status) : status ? statusGateLines(status) : [];
  if (lines.length === 0) return [];
  if (!gate && trail.missing)
    lines.push(
      `  (the failing devices and the failure ratio are in the audit trail, not read here: ${trail.missing}; \`wavegate audit ${rolloutId}\` with the worker's --audit-dir or --audit-store prints them)`,
    );
  return [`why: ${lines[0]}`, ...lines.slice(1)];
}

/**
 * Every reason a rollout ended (or holds) where it is: the deciding gate's verdict, then the banner's
 * other reasons (bannerOf, whose one-line gate summary the verdict stands in for), each `why: …`.
 */
export function whyLines(status: RolloutStatus, trail: TrailRead): string[] {
  const withoutGates = { ...status, phases: status.phases.map(({ gateOutcome: _o, evidence: _e, ...p }) => p) };
  // A rollout that failed for a reason the story did not expect says it only in its last record.
  const failed =
    status.state === 'failed'
      ? [...(trail.records ?? [])].reverse().find((r) => r.event === 'rollout.failed' && r.reason)
      : undefined;
  return [
    ...gateVerdictLines(status, trail, status.rolloutId),
    ...(failed ? [`why: the rollout failed: ${failed.reason}`] : []),
    ...bannerOf(withoutGates).why.map((w) => `why: ${w}`),
  ];
}
