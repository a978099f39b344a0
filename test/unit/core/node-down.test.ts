import { describe, expect, it } from 'vitest';
import { blockingStart, canaryRolloutId, rolloutsBlockingCanary, skippedReason } from '../../../core/exclusion';
import {
  EMPTY_NODE_DOWN_FILE,
  MAX_HISTORY,
  markDown,
  markUp,
  needsRecheck,
  newVerdict,
  NodeDownFile,
  recordRechecks,
  verdictStanding,
  type NodeDownVerdict,
} from '../../../core/node-down';
import { planPhases, type PlanDevice } from '../../../core/planner';
import { parseWith } from '../../../core/validation';
import { refusal } from '../../support/refusal';

const T0 = Date.parse('2026-12-01T10:00:00.000Z');
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

function verdict(overrides: Partial<NodeDownVerdict> = {}): NodeDownVerdict {
  return {
    ...newVerdict({
      device: 'edge-03',
      reason: 'PSU failed (OPS-12)',
      recheck: 'ping -c1 "$WAVEGATE_HOST"',
      by: 'alice',
      nowMs: T0,
    }),
    ...overrides,
  };
}

describe('node-down verdict standing (core/node-down.ts)', () => {
  it('holds until expiresAt, 30 days by default, and says since and expires', () => {
    const v = verdict();
    expect(v.expiresAt).toBe('2026-12-31T10:00:00.000Z');
    const s = verdictStanding(v, T0 + DAY);
    expect(s.kind).toBe('holds');
    expect(s.text).toBe('node-down since 2026-12-01T10:00:00Z, expires 2026-12-31T10:00:00Z: PSU failed (OPS-12)');
    expect(needsRecheck(v, T0 + DAY)).toBe(true);
  });

  it('a failing recheck keeps it holding; a passing one lifts it', () => {
    const v = verdict();
    expect(
      verdictStanding(v, T0 + HOUR, { passed: false, result: 'exit 1', at: new Date(T0 + HOUR).toISOString() }).kind,
    ).toBe('holds');
    const lifted = verdictStanding(v, T0 + HOUR, {
      passed: true,
      result: 'exit 0',
      at: new Date(T0 + HOUR).toISOString(),
    });
    expect(lifted).toMatchObject({
      kind: 'lifted',
      text: 'node-down lifted at 2026-12-01T11:00:00Z: its recheck passed (PSU failed (OPS-12))',
    });
  });

  it('past expiresAt it is expired whatever a recheck says, is not rechecked, and is never extended', () => {
    const v = verdict({ expiresAt: new Date(T0 + 2 * HOUR).toISOString() });
    const at = T0 + 2 * HOUR;
    expect(needsRecheck(v, at)).toBe(false);
    for (const check of [
      undefined,
      { passed: false, result: 'exit 1', at: new Date(at).toISOString() },
      { passed: true, result: 'exit 0', at: new Date(at).toISOString() },
    ]) {
      const s = verdictStanding(v, at, check);
      expect(s.kind).toBe('expired');
      expect(s.text).toContain('node-down expired 2026-12-01T12:00:00Z');
    }
    // Recording a failing recheck does not move expiresAt.
    const file = recordRechecks(
      markDown(EMPTY_NODE_DOWN_FILE, v),
      new Map([
        ['edge-03', { since: v.since, check: { passed: false, result: 'exit 1', at: new Date(at).toISOString() } }],
      ]),
      'worker',
    );
    expect(file.verdicts[0]!.expiresAt).toBe(v.expiresAt);
  });

  it('bad flags are refused naming the flag and the value', () => {
    const base = { device: 'edge-03', reason: 'down', recheck: 'true', by: 'alice', nowMs: T0 };
    expect(refusal(() => newVerdict({ ...base, recheck: '' })).message).toBe(
      '--recheck "": must be a command to run on the control host (not empty)',
    );
    expect(refusal(() => newVerdict({ ...base, recheck: '   ' })).message).toContain('--recheck "   "');
    expect(refusal(() => newVerdict({ ...base, reason: '' })).message).toContain('--reason "": must say why');
    expect(refusal(() => newVerdict({ ...base, expires: '10m' })).message).toBe(
      '--expires "10m": must be between 1h and 365d',
    );
    expect(refusal(() => newVerdict({ ...base, expires: '400d' })).message).toBe(
      '--expires "400d": must be between 1h and 365d',
    );
    expect(refusal(() => newVerdict({ ...base, expires: 'soon' })).message).toContain(
      '--expires "soon": must be a duration',
    );
    expect(refusal(() => newVerdict({ ...base, device: '-rf' })).message).toContain('device "-rf"');
    expect(newVerdict({ ...base, expires: '1h' }).expiresAt).toBe('2026-12-01T11:00:00.000Z');
  });

  it('mark-down replaces the verdict of the same device (the only renewal), mark-up lifts it or is NOT_FOUND; history is kept and bounded', () => {
    let file = markDown(EMPTY_NODE_DOWN_FILE, verdict());
    file = markDown(
      file,
      verdict({ since: new Date(T0 + DAY).toISOString(), expiresAt: new Date(T0 + 40 * DAY).toISOString() }),
    );
    expect(file.verdicts).toHaveLength(1);
    expect(file.history.map((h) => h.event)).toEqual(['marked-down', 'marked-down']);
    expect(file.history[1]!.detail).toContain('replaces the verdict of 2026-12-01T10:00:00Z');
    file = markUp(file, 'edge-03', 'bob', T0 + 2 * DAY);
    expect(file.verdicts).toEqual([]);
    expect(file.history.at(-1)).toMatchObject({ event: 'marked-up', by: 'bob', device: 'edge-03' });
    expect(refusal(() => markUp(file, 'edge-03', 'bob', T0)).code).toBe('NOT_FOUND');
    for (let i = 0; i < MAX_HISTORY + 5; i++) file = markDown(file, verdict({ since: new Date(T0 + i).toISOString() }));
    expect(file.history).toHaveLength(MAX_HISTORY);
  });

  it('a passing recheck removes the verdict with a lifted-by-recheck entry; a recheck of a verdict renewed meanwhile is dropped', () => {
    const v = verdict();
    const file = markDown(EMPTY_NODE_DOWN_FILE, v);
    const at = new Date(T0 + HOUR).toISOString();
    const lifted = recordRechecks(
      file,
      new Map([['edge-03', { since: v.since, check: { passed: true, result: 'exit 0', at } }]]),
      'worker 1@host',
    );
    expect(lifted.verdicts).toEqual([]);
    expect(lifted.history.at(-1)).toMatchObject({ event: 'lifted-by-recheck', by: 'worker 1@host', at });
    const down = recordRechecks(
      file,
      new Map([['edge-03', { since: v.since, check: { passed: false, result: 'exit 1: unreachable', at } }]]),
      'worker',
    );
    expect(down.verdicts[0]).toMatchObject({ lastCheckedAt: at, lastCheckResult: 'exit 1: unreachable' });
    const stale = recordRechecks(
      file,
      new Map([['edge-03', { since: '2020-01-01T00:00:00.000Z', check: { passed: true, result: 'exit 0', at } }]]),
      'worker',
    );
    expect(stale).toEqual(file);
  });

  it('the file schema names the field and the value', () => {
    const bad = (data: unknown) => refusal(() => parseWith(NodeDownFile, data, 'fleet.verdicts.yaml')).message;
    expect(bad({ verdicts: [{ ...verdict(), expiresAt: 'tomorrow' }] })).toMatch(
      /verdicts\[0\]\.expiresAt: must be an ISO 8601 UTC time .*\(got "tomorrow"\)/,
    );
    expect(bad({ verdicts: [{ ...verdict(), recheck: '' }] })).toContain('verdicts[0].recheck');
    expect(bad({ verdicts: [verdict(), verdict()] })).toContain('verdicts[1].device: a second verdict for this device');
    expect(bad({ verdicts: [{ ...verdict(), expiresAt: verdict().since }] })).toContain(
      'verdicts[0].expiresAt: must be after since',
    );
    expect(bad({ verdicts: [], extra: 1 })).toContain('extra: unknown field');
    expect(parseWith(NodeDownFile, {}, 'x')).toEqual({ verdicts: [], history: [] });
  });
});

describe('the planner and node-down verdicts', () => {
  const devices: PlanDevice[] = ['a-1', 'a-2', 'a-3', 'a-4'].map((id) => ({
    id,
    pool: 'p',
    class: 'c',
    updateClass: 'required',
    current: 1,
    reachable: true,
  }));
  const spec = {
    toRevision: 2,
    phases: [
      { canary: { kind: 'count', count: 1 }, healthGate: [] },
      { bulk: { kind: 'remainder' }, healthGate: [] },
    ],
    gate: 0,
    concurrent: false,
    disruptionBudget: {},
  } as never;

  it('a holding verdict is not-for-me with its text; an expired or lifted one is planned, with a warning', () => {
    const plan = planPhases({
      rolloutId: 'rollout:demo',
      spec,
      devices: [
        { ...devices[0]!, nodeDown: { holds: true, text: 'node-down since X, expires Y: PSU' } },
        {
          ...devices[1]!,
          nodeDown: {
            holds: false,
            text: 'node-down expired Z (back in the plan; renew with wavegate fleet mark-down): PSU',
          },
        },
        devices[2]!,
        devices[3]!,
      ],
    });
    expect(plan.notForMe).toEqual([{ id: 'a-1', reason: 'node-down since X, expires Y: PSU' }]);
    expect(plan.phases.flatMap((p) => p.devices).sort()).toEqual(['a-2', 'a-3', 'a-4']);
    expect(plan.warnings).toContain(
      'device a-2: node-down expired Z (back in the plan; renew with wavegate fleet mark-down): PSU',
    );
  });

  it('without any verdict the plan is the one it always was (histories recorded before verdicts replay)', () => {
    const without = planPhases({ rolloutId: 'rollout:demo', spec, devices });
    const withAbsent = planPhases({
      rolloutId: 'rollout:demo',
      spec,
      devices: devices.map((d) => ({ ...d, nodeDown: undefined })),
    });
    expect(withAbsent).toEqual(without);
  });
});

describe('canary and rollout exclusion (core/exclusion.ts)', () => {
  const running = [
    { workflowId: 'rollout:demo', type: 'rolloutWorkflow' },
    { workflowId: 'rollout:demo:converge-2', type: 'rolloutWorkflow' },
    { workflowId: 'nightly-demo-2026-12-01', type: 'nightlyCanaryWorkflow' },
    { workflowId: canaryRolloutId('demo', 'nightly-demo-2026-12-01'), type: 'rolloutWorkflow' },
  ];

  it('a canary is kept off by rollout:<profile> and converges, never by itself or its own canary rollout', () => {
    expect(rolloutsBlockingCanary('demo', running)).toEqual(['rollout:demo', 'rollout:demo:converge-2']);
    expect(rolloutsBlockingCanary('demo', running.slice(2))).toEqual([]);
    expect(skippedReason(['rollout:demo'])).toBe('skipped: rollout running (rollout:demo)');
  });

  it('start is kept off by a running canary (nightly or its rollout) and by another rollout of the profile, not by itself', () => {
    expect(blockingStart('demo', 'rollout:demo', running)).toEqual({
      canaries: ['canary:demo:nightly-demo-2026-12-01', 'nightly-demo-2026-12-01'],
      rollouts: ['rollout:demo:converge-2'],
    });
    expect(blockingStart('demo', 'rollout:demo', [running[0]!])).toEqual({ canaries: [], rollouts: [] });
  });
});
