import type { MetricMeter } from '@temporalio/common';

/**
 * wavegate's own metrics, recorded on the SDK's metric meter (activities: `Context.current().metricMeter`,
 * workflows: `wf.metricMeter`), so they come out of the same Prometheus endpoint as the SDK's
 * (`wavegate worker --metrics-bind`). The names are the contract with dashboards: docs/operations.md
 * lists them. Workflow metrics are not commands and the SDK drops them during replay.
 */
export const METRIC = {
  /** Counter, tags `state`, `profile`: a rollout entered this state. */
  rolloutStates: 'wavegate_rollout_state_entered',
  /** Counter, tags `outcome` (applied, already-applied, dependency-unmet, failed), `transport`. */
  deviceApplies: 'wavegate_device_applies',
  /** Histogram in seconds, tags `outcome`, `transport`: one applyRevision attempt, start to answer. */
  applyDuration: 'wavegate_device_apply_duration_seconds',
  /** Counter, tag `reason` (unwritable, corrupt): an audit record that could not be written. */
  auditWriteFailures: 'wavegate_audit_write_failures',
} as const;

/** Bucket bounds of the apply duration (seconds): a device apply takes from a second to many minutes. */
export const APPLY_DURATION_BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800];

export function recordDeviceApply(
  meter: MetricMeter,
  tags: { outcome: string; transport: string },
  seconds: number,
): void {
  meter.createCounter(METRIC.deviceApplies, '1', 'device applies by outcome and transport').add(1, tags);
  meter
    .createHistogram(METRIC.applyDuration, 'float', 's', 'duration of one device apply attempt')
    .record(seconds, tags);
}

export function recordAuditWriteFailure(meter: MetricMeter, reason: 'unwritable' | 'corrupt'): void {
  meter.createCounter(METRIC.auditWriteFailures, '1', 'audit records that could not be written').add(1, { reason });
}

export function recordRolloutState(meter: MetricMeter, tags: { state: string; profile: string }): void {
  meter.createCounter(METRIC.rolloutStates, '1', 'rollouts entering a state').add(1, tags);
}
