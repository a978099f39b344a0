import { describe, expect, it } from 'vitest';
import type { AuditRecord } from '../../../core/audit';
import { countDevices, type DeviceState } from '../../../core/rollout-state';
import type { RolloutStatus } from '../../../core/rollout/status';
import { decidingGate, gateVerdictLines, whyLines } from '../../../core/rollout/verdict';
import { phaseProgressLine, waitProgress } from '../../../cli/watch';
import { table, wrapText } from '../../../cli/commands/audit';

/** Why a rollout ended where it did, as the CLI prints it (core/rollout/verdict.ts), and --wait's progress lines. */

function record(seq: number, event: AuditRecord['event'], fields: Partial<AuditRecord> = {}): AuditRecord {
  return {
    seq,
    at: `2026-12-05T10:00:${String(seq).padStart(2, '0')}.000Z`,
    rolloutId: 'rollout:motd:1',
    runId: 'run-1',
    event,
    phase: null,
    by: 'wavegate',
    reason: null,
    counts: null,
    evidence: null,
    prev: '0'.repeat(64),
    hash: '1'.repeat(64),
    ...fields,
  };
}

function status(
  devices: Array<[string, DeviceState, number, string?]>,
  over: Partial<RolloutStatus> = {},
): RolloutStatus {
  const ds = devices.map(([id, state, phase, reason]) => ({ id, state, phase, ...(reason ? { reason } : {}) }));
  return {
    rolloutId: 'rollout:motd:1',
    profile: 'motd',
    fromRevision: 1,
    toRevision: 2,
    state: 'rolled-back',
    phase: 'done',
    phases: [
      { index: 0, name: 'canary', devices: 1, gate: 1000, stage: 'passed', gateOutcome: 'pass', evidence: ['ok'] },
      { index: 1, name: 'bulk', devices: 2, gate: 600_000, stage: 'pending' },
    ],
    devices: ds,
    counts: countDevices(ds),
    controls: [],
    warnings: [],
    ...over,
  };
}

// The output of a signed check, longer than any column: it must come out whole.
const OUTPUT = `upstream pool exhausted ${'x'.repeat(150)} (end of output)`;
const HEALTHZ = `check: healthz: fail — unhealthy: dev-02/healthz exit 1: "${OUTPUT}"`;

const healthFailure = [
  record(1, 'rollout.started'),
  record(2, 'phase.applied', { phase: 'bulk', evidence: { tally: { succeeded: 2, failed: 0 } } }),
  record(3, 'gate.failed', {
    phase: 'bulk',
    evidence: [
      { check: 'devices-online', outcome: 'pass', evidence: '3/3 devices online', durationMs: 40 },
      {
        check: 'check: healthz',
        outcome: 'fail',
        evidence: `unhealthy: dev-02/healthz exit 1: "${OUTPUT}"`,
        failedDevices: ['dev-02'],
        durationMs: 300,
      },
    ],
  }),
  record(4, 'rollback.started', {
    phase: 'rollback',
    reason: `healthGate-fail: devices-online: pass — 3/3 devices online; ${HEALTHZ}`,
  }),
];

const rolledBack = status(
  [
    ['dev-01', 'rolled-back', 0],
    ['dev-02', 'rolled-back', 1],
    ['dev-03', 'rolled-back', 1],
  ],
  {
    phases: [
      { index: 0, name: 'canary', devices: 1, gate: 1000, stage: 'passed', gateOutcome: 'pass', evidence: ['ok'] },
      {
        index: 1,
        name: 'bulk',
        devices: 2,
        gate: 1000,
        stage: 'failed',
        gateOutcome: 'fail',
        evidence: ['devices-online: pass — 3/3 devices online', HEALTHZ],
      },
    ],
  },
);

describe('the deciding gate, where the operator looks', () => {
  it('from the trail: the gate, each check whole with its evidence, the devices that failed it, the ratio and sample', () => {
    expect(gateVerdictLines(rolledBack, { records: healthFailure }, 'rollout:motd:1')).toEqual([
      'why: health gate of phase 2/2 bulk: fail (audit record #3, 2026-12-05T10:00:03.000Z)',
      '  devices-online: pass — 3/3 devices online',
      `  ${HEALTHZ}`,
      '    failed on: dev-02',
      '  failure ratio 0.0% (0 failed of a sample of 2; 2 succeeded)',
    ]);
    // The audit command has no status: the phase by its name.
    expect(gateVerdictLines(undefined, { records: healthFailure }, 'rollout:motd:1')[0]).toBe(
      'why: health gate of phase bulk: fail (audit record #3, 2026-12-05T10:00:03.000Z)',
    );
  });

  it('a failure gate: its ratio and sample, and each failed device of that phase with the error the trail keeps', () => {
    const records = [
      record(1, 'devices.outcome', {
        phase: 'canary',
        evidence: { mode: 'apply', devices: [{ id: 'dev-01', state: 'failed', reason: 'other phase' }] },
      }),
      record(2, 'devices.outcome', {
        phase: 'bulk',
        evidence: {
          mode: 'apply',
          devices: [
            { id: 'dev-02', state: 'failed', reason: 'apply exited 1: mkdir: cannot create directory' },
            { id: 'dev-03', state: 'applied' },
          ],
        },
      }),
      record(3, 'gate.failed', {
        phase: 'bulk',
        reason: 'failure-gate',
        evidence: { tally: { succeeded: 1, failed: 1 } },
      }),
    ];
    expect(gateVerdictLines(rolledBack, { records }, 'rollout:motd:1')).toEqual([
      'why: failure gate of phase 2/2 bulk: fail (audit record #3, 2026-12-05T10:00:03.000Z)',
      '  failure ratio 50.0% (1 failed of a sample of 2; 1 succeeded)',
      '  dev-02 failed: apply exited 1: mkdir: cannot create directory',
    ]);
  });

  it('without the trail: the status says each check whole, and where the devices and the ratio are', () => {
    const lines = gateVerdictLines(rolledBack, { missing: 'NOT_FOUND: no audit trail' }, 'rollout:motd:1');
    expect(lines.slice(0, 3)).toEqual([
      'why: health gate of phase 2/2 bulk: fail',
      '  devices-online: pass — 3/3 devices online',
      `  ${HEALTHZ}`,
    ]);
    expect(lines[3]).toMatch(
      /not read here: NOT_FOUND: no audit trail; `wavegate audit rollout:motd:1` with the worker's/,
    );
  });

  it('without the trail, a tripped failure gate: its ratio while the devices still hold it, and each failed device with its error', () => {
    const paused = status(
      [
        ['dev-01', 'applied', 0],
        ['dev-02', 'failed', 1, 'dev-02: verify exited 2: Is a directory'],
        ['dev-03', 'applied', 1],
      ],
      {
        state: 'paused',
        phases: [rolledBack.phases[0]!, { index: 1, name: 'bulk', devices: 2, gate: 1000, stage: 'failed' }],
      },
    );
    expect(gateVerdictLines(paused, { records: [] }, 'rollout:motd:1')).toEqual([
      'why: failure gate of phase 2/2 bulk: fail',
      '  failure ratio 50.0% (1 failed of a sample of 2; 1 succeeded)',
      '  dev-02 failed: dev-02: verify exited 2: Is a directory',
    ]);
  });

  it('a gate that passed last decided nothing; nor does a running rollout before any gate', () => {
    const passed = [...healthFailure.slice(0, 3), record(5, 'gate.passed', { phase: 'bulk', evidence: [] })];
    expect(decidingGate(passed)).toBeUndefined();
    expect(gateVerdictLines(status([['dev-01', 'applying', 0]]), { records: [] }, 'x')).toEqual([]);
  });

  it("an ending's reasons: the verdict in place of the banner's one-line gate summary, then the banner's others", () => {
    const aborted = {
      ...rolledBack,
      controls: [{ control: 'abort' as const, by: 'ops', reason: 'pager', at: 't', accepted: true }],
    };
    const lines = whyLines(aborted, { records: healthFailure });
    expect(lines.filter((l) => l.startsWith('why: '))).toEqual([
      'why: health gate of phase 2/2 bulk: fail (audit record #3, 2026-12-05T10:00:03.000Z)',
      'why: last control: abort by ops ("pager"), accepted',
    ]);
    expect(lines.some((l) => l.includes('gate of phase bulk: fail ('))).toBe(false);
  });

  it('a rollout that failed unexpectedly says the error its last record holds', () => {
    const failed = { ...status([['dev-01', 'failed', 0]]), state: 'failed' as const };
    const records = [record(1, 'rollout.started'), record(2, 'rollout.failed', { reason: 'audit store unwritable' })];
    expect(whyLines(failed, { records })).toEqual(['why: the rollout failed: audit store unwritable']);
  });
});

describe("--wait's progress", () => {
  const at = new Date(2026, 11, 5, 14, 0, 0);

  it('one line per stage of each phase: applying n/m, the gate and when it ends, passed, failed', () => {
    const lines: string[] = [];
    const progress = waitProgress(
      (l) => lines.push(l),
      () => at,
    );
    const applying = status(
      [
        ['dev-01', 'applying', 0],
        ['dev-02', 'pending', 1],
      ],
      {
        state: 'running',
        phase: 'canary',
        phases: [
          { index: 0, name: 'canary', devices: 1, gate: 600_000, stage: 'applying' },
          { index: 1, name: 'bulk', devices: 1, gate: 1000, stage: 'pending' },
        ],
      },
    );
    progress(applying);
    progress(applying); // nothing changed: no line
    const gate = {
      ...applying,
      devices: [
        { id: 'dev-01', state: 'applied' as const, phase: 0 },
        { id: 'dev-02', state: 'pending' as const, phase: 1 },
      ],
      phases: [{ ...applying.phases[0]!, stage: 'gate' as const }, applying.phases[1]!],
    };
    progress(gate);
    progress({
      ...gate,
      phases: [
        { ...gate.phases[0]!, stage: 'passed' as const, gateOutcome: 'pass' as const },
        { ...gate.phases[1]!, stage: 'failed' as const, gateOutcome: 'fail' as const },
      ],
      phase: 'rollback',
      changedDevices: 2,
    });
    expect(lines).toEqual([
      'phase 1/2 canary: applying 0/1',
      'phase 1/2 canary: gate 10m (until 14:10:00), then its health gate',
      'phase 1/2 canary: passed, 1/1 at r2 (health gate pass)',
      'phase 2/2 bulk: failed (health gate fail)',
      'rollback: putting back the 2 devices this rollout changed',
    ]);
  });

  it('a tripped failure gate, a manual gate, a hold', () => {
    const s = status([['dev-01', 'failed', 0]], { state: 'paused' });
    const line = (p: Partial<RolloutStatus['phases'][number]>) =>
      phaseProgressLine(s, { index: 0, name: 'canary', devices: 1, gate: 'manual', stage: 'pending', ...p }, at);
    expect(line({})).toBeNull();
    expect(line({ stage: 'failed' })).toBe('phase 1/2 canary: failed (failure gate tripped)');
    expect(line({ stage: 'awaiting-approval' })).toBe(
      'phase 1/2 canary: awaiting approval — wavegate approve rollout:motd:1',
    );
    expect(line({ stage: 'inconclusive', gateOutcome: 'inconclusive' })).toBe(
      'phase 1/2 canary: health gate inconclusive, held for an operator',
    );
  });
});

describe("audit's table prints every reason whole", () => {
  it('wraps at spaces, breaks a word longer than the line, and keeps every character', () => {
    const text = `healthGate-fail: ${HEALTHZ}`;
    const lines = wrapText(text, 48);
    expect(lines.every((l) => l.length <= 48)).toBe(true);
    expect(lines.join(' ').replace(/x /g, 'x')).toContain('x'.repeat(48));
    expect(lines.join(' ').replace(/\s+/g, '')).toBe(text.replace(/\s+/g, ''));
    expect(wrapText('short', 48)).toEqual(['short']);
  });

  it('the rest of a long reason goes under the REASON column, the row keeps its shape', () => {
    const rows = table([healthFailure[3]!, record(5, 'rollout.failed', { reason: 'health gate failed after bulk' })]);
    expect(rows[0]).toMatch(/^SEQ\s+AT\s+EVENT\s+PHASE\s+BY\s+REASON\s+COUNTS$/);
    const [first, ...rest] = rows[1]!.split('\n');
    expect(first).toMatch(
      /^4\s+\S+\s+rollback\.started\s+rollback\s+wavegate\s+healthGate-fail: devices-online: pass — 3\/3\s+-$/,
    );
    const column = rows[0]!.indexOf('REASON');
    for (const line of rest) expect(line.slice(0, column)).toBe(' '.repeat(column));
    // Every character of the reason, in order (a word longer than the column is broken inside it).
    const reason = [first!.slice(column).replace(/\s+-$/, ''), ...rest.map((l) => l.slice(column))].join(' ');
    expect(reason.replace(/\s+/g, '')).toBe(healthFailure[3]!.reason!.replace(/\s+/g, ''));
    expect(rows[1]).toContain('(end of output)"');
    expect(rows[2]).toMatch(/^5\s+\S+\s+rollout\.failed\s+-\s+wavegate\s+health gate failed after bulk\s+-$/);
  });
});
