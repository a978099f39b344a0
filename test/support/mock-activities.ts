import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { AuditEvent } from '../../core/audit';
import type { CheckResult, GateOutcome } from '../../core/health';
import type { RolloutInput } from '../../core/rollout/input';
import type { DeviceSnapshot } from '../../core/rollout-state';
import { parseRolloutSpec } from '../../core/spec';
import type { Activities, ApplyInput, ProbeInput, SnapshotInput } from '../../activities';

/**
 * Mocked activities for fast workflow decision tests (no SSH, no files): the real workflow code on a real
 * Temporal server, with devices that are only entries in a scenario. Each rollout (by workflow id) has its
 * own scenario, so one worker serves every test of a file.
 */
export interface Scenario {
  devices: DeviceSnapshot[];
  /** Devices whose apply fails (non-retryable, like a verify that says no). */
  failApply?: Set<string>;
  /** Devices the worker refuses before running anything (EnvelopeRejected: e.g. no pins, below the floor). */
  refuseApply?: Set<string>;
  /** Every apply after the first N fails (the order devices start in decides which). */
  failApplyAfter?: number;
  /** Devices that do not verify the rollout's `after` yet: their apply answers `dependency-unmet` (logged `dependencies:<id>`) while listed. */
  dependencyUnmet?: Set<string>;
  /** Devices whose apply waits until `release(id)` (heartbeating, so a cancel reaches it). */
  holdApply?: Set<string>;
  /** Health outcomes in order, one per runHealthCheck call; the last repeats. Default pass. */
  health?: GateOutcome[];
  /** From this seq on, appends fail as AuditCorrupt until `repairAudit` (or an override record). */
  auditFailFrom?: number;
  auditRepaired?: boolean;
  /** Floors raised by the applies (steps whose floor intent raises): device ids with the revision. */
  floors?: Array<{ id: string; revision: number }>;
  /** Devices whose apply activity began (before any hold), in order: what was in flight, even inside a slice child. */
  began?: string[];
  /** Devices the canary's probe contacted (membership-only snapshots), in order. */
  probed?: string[];
  /** What ran, in order: `apply:<id>` or `rollback:<id>`. */
  log: string[];
  audit: AuditEvent[];
  healthCalls: number;
}

export function mockDevices(
  n: number,
  overrides: (i: number) => Partial<DeviceSnapshot> = () => ({}),
): DeviceSnapshot[] {
  return Array.from({ length: n }, (_, i) => ({
    id: `dev-${String(i + 1).padStart(2, '0')}`,
    host: '127.0.0.1',
    port: 1,
    user: 'mock',
    pool: 'default',
    class: 'edge',
    ssh: {},
    current: 1,
    reachable: true,
    updateClass: 'required' as const,
    os: 'linux',
    ...overrides(i),
  }));
}

export function mockInput(
  rolloutId: string,
  rollout: Record<string, unknown>,
  extra: Partial<RolloutInput> = {},
): RolloutInput {
  const spec = parseRolloutSpec({ rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, ...rollout } }, 'mock');
  const steps = (revision: number) => ({
    profile: 'demo',
    revision,
    apply: `apply r${revision}`,
    verify: `verify r${revision}`,
    payload: [],
  });
  return {
    rolloutId,
    spec,
    profile: { name: 'demo', scope: {} },
    steps: steps(2),
    rollbackSteps: steps(1),
    provable: true,
    risk: 'risky',
    inventoryPath: '/nonexistent/mock-inventory.yaml',
    poolBudgets: { default: 1 },
    startedBy: 'mock-test',
    ...extra,
  };
}

export function createMockActivities() {
  const scenarios = new Map<string, Scenario>();
  const released = new Set<string>();
  const scenario = (): Scenario => {
    // A slice child (`<rollout>/<run8>/<mode>-<phase>-<k>`) plays its rollout's scenario.
    const id = (Context.current().info.workflowExecution?.workflowId ?? '').split('/')[0]!;
    const s = scenarios.get(id);
    if (!s) throw ApplicationFailure.nonRetryable(`no mock scenario for ${id}`);
    return s;
  };
  const activities: Pick<
    Activities,
    'snapshotFleet' | 'probeDevices' | 'applyRevision' | 'runHealthCheck' | 'appendAudit' | 'auditHealth'
  > = {
    async auditHealth() {
      const s = scenario();
      return s.auditRepaired
        ? { ok: true as const, head: null, file: 'mock', segment: 1 }
        : {
            ok: false as const,
            reason: 'line 3 is not a record',
            problem: 'unreadable',
            file: 'mock',
            line: 3,
            segment: 1,
          };
    },
    async snapshotFleet(input: SnapshotInput) {
      const s = scenario();
      const page = s.devices.slice(input.offset, input.offset + input.limit);
      // Membership only (new executions): nothing contacted, so no marker and no reachability known yet.
      const devices =
        input.probe === false
          ? page.map((d) =>
              d.updateClass === 'left-behind' ? d : { ...d, current: null, reachable: true, error: undefined },
            )
          : page;
      return { devices, total: s.devices.length };
    },
    async probeDevices(input: ProbeInput) {
      const s = scenario();
      s.probed = [...(s.probed ?? []), ...input.devices.map((d) => d.id)];
      return input.devices.map((d) => s.devices.find((x) => x.id === d.id) ?? d);
    },
    async applyRevision(input: ApplyInput) {
      const s = scenario();
      const ctx = Context.current();
      const mode = input.steps.revision === 2 ? 'apply' : 'rollback';
      const id = input.device.id;
      if (mode === 'apply') s.began = [...(s.began ?? []), id];
      if (mode === 'apply' && s.holdApply?.has(id)) {
        while (!released.has(`${ctx.info.workflowExecution?.workflowId.split('/')[0]}/${id}`)) {
          ctx.heartbeat();
          await Promise.race([ctx.sleep(50), ctx.cancelled]);
        }
      }
      if (mode === 'apply' && input.steps.after?.length && s.dependencyUnmet?.has(id)) {
        s.log.push(`dependencies:${id}`);
        return {
          device: id,
          outcome: 'dependency-unmet' as const,
          steps: ['dependencies'],
          unmet: input.steps.after,
          detail: `${input.steps.after[0]!.profile} r${input.steps.after[0]!.revision} verify failed, no marker`,
        };
      }
      const known = s.devices.find((d) => d.id === id);
      // What a real apply learns at first contact: unreachable (offline), or already at the target.
      if (mode === 'apply' && input.reportOffline && known?.reachable === false) {
        s.log.push(`offline:${id}`);
        return { device: id, outcome: 'offline' as const, steps: [], detail: known.error ?? 'connect refused' };
      }
      s.log.push(`${mode}:${id}`);
      if (mode === 'apply' && known?.current === input.steps.revision)
        return { device: id, outcome: 'already-applied' as const, steps: ['verify'] };
      if (mode === 'apply' && s.refuseApply?.has(id))
        throw ApplicationFailure.create({
          type: 'EnvelopeRejected',
          message: `EnvelopeRejected (NO_TRUST): this worker has no pins for profile "demo"`,
          nonRetryable: true,
        });
      const applies = s.log.filter((l) => l.startsWith('apply:')).length;
      if (mode === 'apply' && (s.failApply?.has(id) || (s.failApplyAfter !== undefined && applies > s.failApplyAfter)))
        throw ApplicationFailure.nonRetryable(`${id}: verify exited 1`, 'StepFailed');
      // The floor rises with the confirmed apply when its steps ask (patch floor-at-apply), as a device's script raises it.
      if (input.steps.floor?.raise) s.floors = [...(s.floors ?? []), { id, revision: input.steps.revision }];
      return { device: id, outcome: 'applied' as const, steps: [mode] };
    },
    async runHealthCheck(input: { check: string }): Promise<CheckResult> {
      const s = scenario();
      const outcomes = s.health ?? ['pass'];
      const outcome = outcomes[Math.min(s.healthCalls++, outcomes.length - 1)]!;
      return { check: input.check, outcome, evidence: `mock ${outcome}`, durationMs: 1 };
    },
    async appendAudit(event: AuditEvent) {
      const s = scenario();
      if (event.event === 'audit.override')
        s.auditRepaired = true; // a new segment: whole from here on
      else if (s.auditFailFrom !== undefined && event.seq >= s.auditFailFrom && !s.auditRepaired) {
        throw ApplicationFailure.create({
          type: 'AuditCorrupt',
          message: `mock trail line 3: not a JSON audit record`,
          nonRetryable: true,
        });
      }
      s.audit.push(event);
      return { seq: event.seq, hash: event.seq.toString(16).padStart(64, '0') };
    },
  };
  return {
    activities,
    /** Register a scenario for a rollout id before starting it. */
    add(rolloutId: string, s: Omit<Scenario, 'log' | 'audit' | 'healthCalls'>): Scenario {
      const full: Scenario = { ...s, log: [], audit: [], healthCalls: 0 };
      scenarios.set(rolloutId, full);
      return full;
    },
    release(rolloutId: string, deviceId: string) {
      released.add(`${rolloutId}/${deviceId}`);
    },
  };
}
