import { describe, expect, it } from 'vitest';
import type { AuditRecord } from '../../../core/audit';
import {
  bannerOf,
  boardDevices,
  boardOutcome,
  checkRolloutId,
  gateEvidenceOf,
  pageOfDevices,
  parseControlBody,
  parseConvergeBody,
  parseDeviceQuery,
  parseAccessFile,
  parseTokenFile,
  parsePublicUrl,
  parseRevertBody,
  tokenWeakness,
  GuessBudget,
  phaseProgress,
  proofCounts,
  sortFailuresFirst,
  sortFleetWorstFirst,
  sortWorstFirst,
  type BoardDevice,
} from '../../../core/board';
import { countDevices, type DeviceState } from '../../../core/rollout-state';
import type { RolloutStatus } from '../../../core/rollout/status';

/** The board's decisions (core/board.ts), each against the case it exists for. */

function record(seq: number, event: AuditRecord['event'], fields: Partial<AuditRecord> = {}): AuditRecord {
  return {
    seq,
    at: `2026-12-05T10:00:${String(seq).padStart(2, '0')}.000Z`,
    rolloutId: 'rollout:demo:1',
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

function status(devices: Array<[string, DeviceState, number]>, over: Partial<RolloutStatus> = {}): RolloutStatus {
  const ds = devices.map(([id, state, phase]) => ({ id, state, phase }));
  return {
    rolloutId: 'rollout:demo:1',
    profile: 'demo',
    fromRevision: 1,
    toRevision: 2,
    state: 'running',
    phase: 'canary',
    phases: [
      { index: 0, name: 'canary', devices: 1, gate: 0, stage: 'passed', gateOutcome: 'pass' },
      { index: 1, name: 'bulk', devices: 3, gate: 'manual', stage: 'applying' },
    ],
    devices: ds,
    counts: countDevices(ds),
    controls: [],
    warnings: [],
    ...over,
  };
}

describe('the board', () => {
  it('sorts devices worst first (failed above waiting above applying above pending above applied), then by id', () => {
    const sorted = sortWorstFirst([
      { id: 'd', state: 'applied' },
      { id: 'c', state: 'pending' },
      { id: 'b', state: 'failed' },
      { id: 'a', state: 'applying' },
      { id: 'e', state: 'waiting' },
      { id: 'f', state: 'rollback-failed' },
      { id: 'a2', state: 'failed' },
    ]);
    expect(sorted.map((d) => d.id)).toEqual(['a2', 'b', 'f', 'e', 'a', 'c', 'd']);
  });

  it('filters and pages the device table: state, id substring (any case), offset and limit', () => {
    const devices: BoardDevice[] = Array.from({ length: 250 }, (_, i) => ({
      id: `edge-${String(i).padStart(3, '0')}`,
      state: i % 50 === 0 ? 'failed' : 'applied',
      phase: 0,
      attempts: 1,
    }));
    const first = pageOfDevices(devices, { offset: 0, limit: 3 });
    expect(first.devices.map((d) => d.id)).toEqual(['edge-000', 'edge-050', 'edge-100']);
    expect({ total: first.total, matching: first.matching }).toEqual({ total: 250, matching: 250 });
    const failed = pageOfDevices(devices, { state: 'failed', offset: 2, limit: 100 });
    expect(failed.matching).toBe(5);
    expect(failed.devices.map((d) => d.id)).toEqual(['edge-100', 'edge-150', 'edge-200']);
    expect(pageOfDevices(devices, { q: 'EDGE-24', offset: 0, limit: 100 }).matching).toBe(10);
  });

  it('reads the device query and refuses a bad one naming the field', () => {
    expect(parseDeviceQuery(new URLSearchParams('state=failed&q=edge&offset=100&limit=50'))).toEqual({
      state: 'failed',
      q: 'edge',
      offset: 100,
      limit: 50,
    });
    expect(() => parseDeviceQuery(new URLSearchParams('state=broken'))).toThrow(/state "broken"/);
    expect(() => parseDeviceQuery(new URLSearchParams('limit=501'))).toThrow(/limit "501"/);
    expect(() => parseDeviceQuery(new URLSearchParams('offset=-1'))).toThrow(/offset "-1"/);
  });

  it('tells the true outcome: a rolled-back or aborted rollout Temporal calls Completed is neither completed', () => {
    expect(boardOutcome('COMPLETED', 'rolled-back')).toBe('rolled-back');
    expect(boardOutcome('COMPLETED', 'aborted')).toBe('aborted');
    expect(boardOutcome('RUNNING', 'paused')).toBe('paused');
    expect(boardOutcome('TERMINATED', 'running')).toBe('terminated');
    expect(boardOutcome('FAILED', 'running')).toBe('failed');
    expect(boardOutcome('COMPLETED', 'completed', status([['a', 'applied', 0]], { state: 'completed' }))).toBe(
      'completed',
    );
    expect(
      boardOutcome(
        'COMPLETED',
        'completed',
        status(
          [
            ['a', 'applied', 0],
            ['b', 'failed', 1],
          ],
          { state: 'completed' },
        ),
      ),
    ).toBe('completed-pending');
    const rows = sortFailuresFirst([
      { outcome: 'completed' as const, startTime: '2026-12-05T10:00:00Z' },
      { outcome: 'rolled-back' as const, startTime: '2026-12-05T09:00:00Z' },
      { outcome: 'running' as const, startTime: '2026-12-05T11:00:00Z' },
      { outcome: 'failed' as const, startTime: '2026-12-05T08:00:00Z' },
    ]);
    expect(rows.map((r) => r.outcome)).toEqual(['failed', 'rolled-back', 'running', 'completed']);
  });

  it('shows each phase as plan against actual', () => {
    const s = status([
      ['a', 'applied', 0],
      ['b', 'applied', 1],
      ['c', 'failed', 1],
      ['d', 'applying', 1],
    ]);
    expect(phaseProgress(s).map((p) => [p.name, p.planned, p.done, p.failed, p.inFlight])).toEqual([
      ['canary', 1, 1, 0, 0],
      ['bulk', 3, 1, 1, 1],
    ]);
  });

  it("counts a large rollout's sliced phase from its slices, not from the devices it lists (none of that phase)", () => {
    const s = status([['a', 'applied', 0]]);
    const applied = countDevices(Array.from({ length: 2 }, () => ({ state: 'applied' as const })));
    const withSlices = {
      ...s,
      phases: s.phases.map((p) => (p.index === 1 ? { ...p, devices: 5 } : p)),
      slices: [
        { workflowId: 's0', phase: 1, mode: 'apply' as const, devices: 3, counts: { ...applied, failed: 1, total: 3 } },
        { workflowId: 's1', phase: 1, mode: 'apply' as const, devices: 2 },
      ],
    };
    expect(phaseProgress(withSlices).map((p) => [p.name, p.planned, p.done, p.failed])).toEqual([
      ['canary', 1, 1, 0],
      ['bulk', 5, 2, 1],
    ]);
  });

  it('says in the banner why a rollout is where it is: the pause reason, the gate verdict, the last control', () => {
    const s = status([['a', 'applied', 0]], {
      state: 'paused',
      pausedReason: 'health gate inconclusive after canary',
      phases: [
        {
          index: 0,
          name: 'canary',
          devices: 1,
          gate: 0,
          stage: 'inconclusive',
          gateOutcome: 'inconclusive',
          evidence: ['error-rate: inconclusive — no data'],
        },
      ],
      controls: [{ control: 'pause', by: 'alice', reason: 'lunch', at: '2026-12-05T10:00:00Z', accepted: true }],
    });
    const b = bannerOf(s);
    expect(b.why).toEqual([
      'paused: health gate inconclusive after canary',
      'gate of phase canary: inconclusive (error-rate: inconclusive — no data)',
      'last control: pause by alice ("lunch"), accepted',
    ]);
  });

  it("reads a gate's evidence from the trail: each check with the devices that failed it, and the phase's failure ratio", () => {
    const records = [
      record(1, 'phase.applied', { phase: 'canary', evidence: { tally: { succeeded: 3, failed: 1 } } }),
      record(2, 'gate.failed', {
        phase: 'canary',
        evidence: [
          {
            check: 'all-runtimes-healthy',
            outcome: 'fail',
            evidence: '1 of 4 unhealthy',
            failedDevices: ['edge-2'],
            durationMs: 40,
          },
        ],
      }),
      record(3, 'gate.failed', {
        phase: 'bulk',
        reason: 'failure-gate',
        evidence: { tally: { succeeded: 1, failed: 3 } },
      }),
      record(4, 'rollout.approved', { phase: 'bulk', by: 'alice', reason: 'looks fine' }),
    ];
    const gates = gateEvidenceOf(records);
    expect(gates[0]).toMatchObject({
      kind: 'health',
      outcome: 'fail',
      phase: 'canary',
      tally: { succeeded: 3, failed: 1, sample: 4, ratio: 0.25 },
    });
    expect(gates[0]!.checks![0]!.failedDevices).toEqual(['edge-2']);
    expect(gates[1]).toMatchObject({ kind: 'failure-gate', tally: { ratio: 0.75, sample: 4 } });
    expect(gates[2]).toMatchObject({ kind: 'manual', outcome: 'approved', by: 'alice', reason: 'looks fine' });
  });

  it("adds the trail's history to each device: since when, apply attempts, last error, transport", () => {
    const records = [
      record(1, 'devices.outcome', { evidence: { mode: 'plan', devices: [{ id: 'a', state: 'pending' }] } }),
      record(3, 'devices.outcome', {
        evidence: { mode: 'apply', devices: [{ id: 'a', state: 'waiting', reason: 'after: base not verified' }] },
      }),
      record(5, 'devices.outcome', { evidence: { mode: 'apply', devices: [{ id: 'a', state: 'applied' }] } }),
    ];
    const [a] = boardDevices(status([['a', 'applied', 0]]), records, new Map([['a', 'agent']]));
    expect(a).toEqual({
      id: 'a',
      state: 'applied',
      phase: 0,
      attempts: 2,
      since: records[2]!.at,
      lastError: 'after: base not verified',
      transport: 'agent',
      // Applied on the control plane's word: its entries carry no receipt.
      proof: 'claimed',
    });
  });

  it('shows a device proven when its latest entry carries its receipt (or the status says so), and counts them', () => {
    const records = [
      record(1, 'devices.outcome', {
        evidence: {
          mode: 'apply',
          devices: [
            { id: 'a', state: 'applied', receipt: 'wavegate-receipt-v1\n…', request: '7' },
            { id: 'b', state: 'applied' },
            { id: 'c', state: 'failed', reason: 'VERIFY', receipt: 'wavegate-receipt-v1\n…', request: '9' },
          ],
        },
      }),
    ];
    const s = status([
      ['a', 'applied', 0],
      ['b', 'applied', 0],
      ['c', 'failed', 0],
      ['d', 'applied', 0],
    ]);
    s.devices[3] = { ...s.devices[3]!, proven: true };
    const devices = boardDevices(s, records);
    // A failure the device signed is proven too: its receipt says it failed.
    expect(devices.map((d) => d.proof ?? '')).toEqual(['proven', 'claimed', 'proven', 'proven']);
    expect(proofCounts(devices)).toEqual({ proven: 2, applied: 3 });
  });

  it('checks a control body: a reason, rollback only on abort, no other field', () => {
    expect(parseControlBody('abort', { reason: ' done ', rollback: false })).toEqual({
      reason: 'done',
      rollback: false,
    });
    expect(() => parseControlBody('pause', { reason: '' })).toThrow(/reason: pause needs a reason/);
    expect(() => parseControlBody('pause', { reason: 'x', rollback: true })).toThrow(/rollback: not a field of pause/);
    expect(() => parseControlBody('abort', { reason: 'x', rollback: 'yes' })).toThrow(
      /rollback: must be true or false/,
    );
    expect(() => parseControlBody('resume', { reason: 'a\u0007b' })).toThrow(/control characters/);
  });

  it('checks a converge body: the count and fingerprint of the devices shown, a reason, no other field', () => {
    const digest = 'ab'.repeat(32);
    expect(parseConvergeBody({ devices: 2, digest, reason: ' back online ' })).toEqual({
      devices: 2,
      digest,
      reason: 'back online',
    });
    expect(() => parseConvergeBody({ digest, reason: 'x' })).toThrow(/devices: the number of devices the page showed/);
    expect(() => parseConvergeBody({ devices: 1, digest: 'AB', reason: 'x' })).toThrow(/digest: .*got "AB"/);
    expect(() => parseConvergeBody({ devices: 1, digest })).toThrow(/reason: converge needs a reason/);
    expect(() => parseConvergeBody({ devices: 1, digest, reason: 'x', fast: true })).toThrow(
      /fast: not a field of converge/,
    );
  });
  it('reads a token file and refuses ids and token lines it cannot trust', () => {
    const a = '0123456789abcdef0123456789abcdef';
    const b = 'fedcba9876543210fedcba9876543210';
    // A file from before roles: every token an operator, as every token could send every control then.
    expect(parseTokenFile(`# operators\nalice ${a}\n\nbob   ${b}\n`, 'f')).toEqual([
      { name: 'alice', token: a, role: 'operator' },
      { name: 'bob', token: b, role: 'operator' },
    ]);
    expect(() => parseTokenFile('alice', 'f')).toThrow(/f line 1: expected "<name> <token> \[role\]"/);
    expect(() => parseTokenFile('alice short token', 'f')).toThrow(
      /f line 1: the role of "alice" is "token": one of viewer, operator, approver/,
    );
    expect(() => parseTokenFile(`alice ${a}\nalice ${b}`, 'f')).toThrow(/twice/);
    expect(() => parseTokenFile('# nothing\n', 'f')).toThrow(/no "<name> <token>" line/);
    expect(checkRolloutId('rollout:demo:20261205-100000')).toBe('rollout:demo:20261205-100000');
    expect(() => checkRolloutId('../etc/passwd')).toThrow(/rollout id/);
  });
  it("reads each token's role and a client certificate's, one role per name", () => {
    const a = '0123456789abcdef0123456789abcdef';
    const b = 'fedcba9876543210fedcba9876543210';
    const file = parseAccessFile(`vera ${a} viewer\nalice ${b} approver\ncert:ops.example operator\n`, 'f');
    expect(file.tokens).toEqual([
      { name: 'vera', token: a, role: 'viewer' },
      { name: 'alice', token: b, role: 'approver' },
    ]);
    expect([...file.certRoles]).toEqual([['ops.example', 'operator']]);
    expect(parseAccessFile('cert:ops.example approver\n', 'f').tokens).toEqual([]);
    expect(() => parseTokenFile('cert:ops.example approver\n', 'f')).toThrow(/no "<name> <token>" line/);
    expect(() => parseAccessFile(`alice ${a}\ncert:alice viewer`, 'f')).toThrow(
      /f line 2: a name or token given twice/,
    );
    expect(() => parseAccessFile('cert:ops.example admin', 'f')).toThrow(/f line 1: expected/);
  });
  it('refuses a weak token naming its line and name, never its value', () => {
    const weak = (token: string) => {
      try {
        parseTokenFile(`alice ${'0123456789abcdef'.repeat(2)}\nbob ${token}\n`, '--token-file t');
      } catch (err) {
        expect((err as Error).message).not.toContain(token);
        return (err as Error).message;
      }
      return 'accepted';
    };
    // Was accepted before (16 characters and more): 823 guesses a second found nothing only by luck.
    expect(weak('bob-token-0123456789')).toMatch(
      /^--token-file t line 2: the token of "bob" is weak \(20 characters\); a token needs at least 32 characters/,
    );
    expect(weak('a'.repeat(40))).toMatch(/"bob" is weak \(one kind of character\)/);
    expect(weak('1234567890'.repeat(4))).toMatch(/"bob" is weak \(one kind of character\)/);
    expect(weak('ab12'.repeat(10))).toMatch(/"bob" is weak \(4 distinct characters\)/);
    expect(weak('c0ffee'.repeat(6))).toMatch(/"bob" is weak \(4 distinct characters\)/);
    // What the docs suggest: openssl rand -hex 16 (the floor) and -hex 24; base64 too.
    expect(tokenWeakness('9f86d081884c7d659a2feaa0c55ad015')).toBeUndefined();
    expect(tokenWeakness('3q2+7w8XkVq0H5m8Zc1tYb6rLw4nDpEoFhGiJkKs')).toBeUndefined();
    expect(weak('9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822c')).toBe('accepted');
  });
  it('spends a budget of wrong tokens per source, refilled over time', () => {
    const budget = new GuessBudget(3, 1_000, 2);
    for (let i = 0; i < 3; i++) {
      expect(budget.waitMs('10.0.0.1', 0)).toBe(0);
      budget.spend('10.0.0.1', 0);
    }
    expect(budget.waitMs('10.0.0.1', 0)).toBe(1_000);
    expect(budget.waitMs('10.0.0.1', 400)).toBe(600);
    expect(budget.waitMs('10.0.0.2', 0)).toBe(0); // another source is not held back
    expect(budget.waitMs('10.0.0.1', 1_000)).toBe(0);
    budget.spend('10.0.0.1', 1_000);
    expect(budget.waitMs('10.0.0.1', 1_000)).toBe(1_000);
    // Refills to the burst, no further.
    expect(budget.waitMs('10.0.0.1', 60_000)).toBe(0);
    // At most maxSources remembered: the least recently wrong is forgotten.
    budget.spend('10.0.0.2', 1_000);
    budget.spend('10.0.0.3', 1_000);
    expect(budget.waitMs('10.0.0.1', 1_000)).toBe(0);
  });
  it('reads --public-url as an origin only', () => {
    expect(parsePublicUrl('https://board.example.com').origin).toBe('https://board.example.com');
    expect(parsePublicUrl('https://board.example.com:8443/').host).toBe('board.example.com:8443');
    expect(() => parsePublicUrl('board.example.com')).toThrow(/--public-url "board.example.com": not a URL/);
    expect(() => parsePublicUrl('https://board.example.com/board')).toThrow(/must be an origin/);
    expect(() => parsePublicUrl('ftp://board.example.com')).toThrow(/must be an origin/);
    expect(() => parsePublicUrl('https://u:p@board.example.com')).toThrow(/must be an origin/);
  });
  it('reads a revert body: the number and the digest of the devices the page showed', () => {
    const digest = 'ab'.repeat(32);
    expect(parseRevertBody({ devices: 2, digest, fast: true })).toEqual({ devices: 2, digest, fast: true });
    expect(() => parseRevertBody({ devices: 2 })).toThrow(/digest: the fingerprint of the devices the page showed/);
    expect(() => parseRevertBody({ devices: 2, digest, why: 'x' })).toThrow(/why: not a field of revert/);
  });
  it('sorts the fleet worst first: refused and drifted above short of the revision, applied last', () => {
    const rows = sortFleetWorstFirst([
      { id: 'a', pool: 'p', class: 'c', state: 'applied' },
      { id: 'b', pool: 'p', class: 'c', state: 'applied', drift: 'drifted' },
      { id: 'c', pool: 'p', class: 'c', state: 'pending' },
      { id: 'd', pool: 'p', class: 'c', state: 'not-for-me' },
      { id: 'e', pool: 'p', class: 'c', state: 'claimed' },
      { id: 'f', pool: 'p', class: 'c', state: 'pending', drift: 'refused' },
    ]);
    expect(rows.map((r) => r.id)).toEqual(['f', 'b', 'c', 'e', 'd', 'a']);
  });
  it('a device on a revision its signers revoked comes first, above a refused or drifted one', () => {
    const rows = sortFleetWorstFirst([
      { id: 'a', pool: 'p', class: 'c', state: 'pending', drift: 'refused' },
      { id: 'b', pool: 'p', class: 'c', state: 'pending', marker: 2, revoked: { revision: 2, reason: 'leaks' } },
      { id: 'c', pool: 'p', class: 'c', state: 'applied' },
    ]);
    expect(rows.map((r) => r.id)).toEqual(['b', 'a', 'c']);
  });
});
