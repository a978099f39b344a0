import { describe, expect, it } from 'vitest';
import { agentBoardAnswer, agentDriftAnswer } from '../../device/twin/board';
import { agentChecks, agentErrorRate, agentOnline } from '../../device/twin/health';
import { parseInventory } from '../../core/inventory';
import { agentKeyPin } from '../../core/agent-auth';
import { RECEIPT_GENESIS, receiptNonce, receiptText, signAgentReceipt } from '../../core/receipt';
import { keyPairFromSeed } from '../../core/signing';
import { errorRateReportName, reportProblem, type HealthReport, type TwinView } from '../../core/twin';

const NOW = Date.parse('2026-06-01T12:00:00.000Z');
const ago = (s: number) => new Date(NOW - s * 1000).toISOString();
const steps = (revision: number) => ({ profile: 'demo', revision, apply: 'a', verify: 'v', payload: [] });
function view(overrides: Partial<TwinView> = {}): TwinView {
  return { deviceId: 'a1', version: 1, desired: {}, report: null, lastSeenAt: ago(10), reverify: false, ...overrides };
}
const reportAt = (
  revision: number | null,
  state: 'applied' | 'failed' | 'already-applied' | 'claimed' | 'idle',
  extra: object = {},
  healthOk = true,
  healthAge = 5,
) => ({
  profiles: { demo: { revision, state, at: ago(20), ...extra } },
  health: [{ name: 'motd', ok: healthOk }],
  healthAt: ago(healthAge),
  agentVersion: 't',
});
const desired = (revision: number) => ({
  demo: {
    requestId: 'x',
    profile: 'demo',
    revision,
    steps: steps(revision),
    envelopeDigest: '',
    holder: { rollout: 'r', run: 'u', activity: '1', attempt: 1 },
    rollout: 'r',
    fromRevision: 1,
    setAt: ago(60),
  },
});

describe('agent devices on the fleet board, drift and health gates', () => {
  it('applied only from a verified report at the revision; a desired but unreported revision is pending "converging"', () => {
    expect(agentBoardAnswer(view({ report: reportAt(2, 'applied') }), 'demo', 2, true, NOW)).toMatchObject({
      state: 'applied',
      marker: 2,
      reason: 'verified by its agent 20s ago, last seen 10s ago',
    });
    expect(agentBoardAnswer(view({ report: reportAt(2, 'applied') }), 'demo', 2, false, NOW).state).toBe('claimed');
    expect(
      agentBoardAnswer(
        view({ desired: desired(2), report: reportAt(1, 'applied'), lastSeenAt: ago(3600) }),
        'demo',
        2,
        true,
        NOW,
      ),
    ).toMatchObject({
      state: 'pending',
      marker: 1,
      reason: 'converging, last seen 60m ago (agent reports r1, applied)',
    });
    expect(
      agentBoardAnswer(view({ report: reportAt(2, 'failed', { reason: 'VERIFY' }) }), 'demo', 2, true, NOW),
    ).toMatchObject({ state: 'pending', reason: 'agent reports r2 (failed VERIFY), last seen 10s ago' });
    expect(agentBoardAnswer(null, 'demo', 2, true, NOW)).toMatchObject({
      state: 'pending',
      reason: 'never reported: agent never synced (no twin)',
    });
  });

  it('drift: a failed re-verify at the marker is drift', () => {
    expect(
      agentDriftAnswer(
        view({ report: reportAt(2, 'failed', { reason: 'VERIFY', detail: 're-verify of r2 exited 1' }) }),
        'demo',
        NOW,
      ),
    ).toMatchObject({ status: 'drifted', marker: 2 });
    expect(agentDriftAnswer(view({ report: reportAt(2, 'already-applied') }), 'demo', NOW)).toMatchObject({
      status: 'ok',
      marker: 2,
    });
    expect(agentDriftAnswer(view({ lastSeenAt: null }), 'demo', NOW).status).toBe('unreachable');
    expect(agentDriftAnswer(view({ report: reportAt(null, 'idle') }), 'demo', NOW).status).toBe('no-marker');
  });

  it('health: fresh reports answer; stale or missing is unread (never a pass)', () => {
    expect(agentOnline(view(), NOW)).toEqual({ ok: true, value: null });
    expect(agentOnline(view({ lastSeenAt: ago(300) }), NOW)).toEqual({
      ok: false,
      reason: 'agent report stale: last seen 5m ago',
    });
    expect(agentOnline(null, NOW).ok).toBe(false);
    expect(agentChecks(view({ report: reportAt(2, 'applied') }), ['motd'], 'demo', 2, NOW)).toEqual({
      ok: true,
      value: [],
    });
    expect(agentChecks(view({ report: reportAt(2, 'applied', {}, false) }), ['motd'], 'demo', 2, NOW)).toEqual({
      ok: true,
      value: ['motd failed'],
    });
    expect(agentChecks(view({ report: reportAt(2, 'applied', {}, true, 600) }), ['motd'], 'demo', 2, NOW)).toEqual({
      ok: false,
      reason: 'no fresh report from its agent: last 10m ago, reports count for 120 s',
    });
    expect(agentChecks(view({ report: reportAt(1, 'applied') }), ['motd'], 'demo', 2, NOW)).toMatchObject({
      ok: false,
      reason: 'agent reports demo r1, not r2: its health is not about this revision',
    });
    expect(agentChecks(view({ report: reportAt(2, 'applied') }), ['motd', 'disk'], 'demo', 2, NOW)).toMatchObject({
      ok: false,
      reason: 'agent reported no check "disk"',
    });
  });

  const withHealth = (health: HealthReport[], revision = 2, healthAge = 5) =>
    view({ report: { ...reportAt(revision, 'applied', {}, true, healthAge), health } });

  it('health: a signed health.checks entry answers `check: <name>`; an error-rate entry never does', () => {
    const v = withHealth([
      { name: 'motd', ok: true, kind: 'runtime' },
      { name: 'disk', ok: false, kind: 'check', detail: 'exited 1: full' },
      { name: errorRateReportName('demo'), ok: true, kind: 'error-rate', value: 0 },
    ]);
    expect(agentChecks(v, ['motd', 'disk'], 'demo', 2, NOW)).toEqual({
      ok: true,
      value: ['disk failed: exited 1: full'],
    });
    expect(agentChecks(v, [errorRateReportName('demo')], 'demo', 2, NOW)).toEqual({
      ok: false,
      reason: 'agent reported no check "error-rate:demo"',
    });
  });

  it('error-rate: the fresh number of this revision; stale, other revision, missing or unread is never a pass', () => {
    const rate = (value: number | undefined, ok = true, detail?: string): HealthReport => ({
      name: errorRateReportName('demo'),
      ok,
      kind: 'error-rate',
      ...(value === undefined ? {} : { value }),
      ...(detail ? { detail } : {}),
    });
    expect(agentErrorRate(withHealth([rate(0.02)]), 'demo', 2, NOW)).toEqual({ ok: true, value: 0.02 });
    expect(
      agentErrorRate(
        withHealth([rate(0.02), { name: errorRateReportName('other'), ok: true, kind: 'error-rate', value: 0.9 }]),
        'demo',
        2,
        NOW,
      ),
    ).toEqual({ ok: true, value: 0.02 });
    // Without a profile the worst rate the device reports is the answer.
    expect(
      agentErrorRate(
        withHealth([rate(0.02), { name: errorRateReportName('other'), ok: true, kind: 'error-rate', value: 0.9 }]),
        undefined,
        undefined,
        NOW,
      ),
    ).toEqual({ ok: true, value: 0.9 });
    expect(agentErrorRate(withHealth([rate(0.02)], 2, 300), 'demo', 2, NOW)).toEqual({
      ok: false,
      reason: 'no fresh report from its agent: last 5m ago, reports count for 120 s',
    });
    expect(agentErrorRate(withHealth([rate(0.02)], 2, 100), 'demo', 2, NOW, 60_000)).toEqual({
      ok: false,
      reason: 'no fresh report from its agent: last 100s ago, reports count for 60 s',
    });
    expect(agentErrorRate(withHealth([rate(0.02)], 1), 'demo', 2, NOW)).toEqual({
      ok: false,
      reason: 'agent reports demo r1, not r2: its health is not about this revision',
    });
    expect(agentErrorRate(withHealth([{ name: 'motd', ok: true }]), 'demo', 2, NOW)).toEqual({
      ok: false,
      reason: 'agent reported no error rate for demo: its verified revision signs no health.errorRate.command',
    });
    expect(agentErrorRate(withHealth([rate(undefined, false, 'not a number: "n/a"')]), 'demo', 2, NOW)).toEqual({
      ok: false,
      reason: 'error-rate command on the device gave no number: not a number: "n/a"',
    });
    expect(agentErrorRate(view(), 'demo', 2, NOW)).toEqual({ ok: false, reason: 'no report from its agent yet' });
    expect(agentErrorRate(null, 'demo', 2, NOW).ok).toBe(false);
  });

  it('report contract v1.2: kind and value are checked, naming the field and value', () => {
    const report = (entry: object) => ({ ...reportAt(2, 'applied'), health: [{ name: 'x', ok: true, ...entry }] });
    expect(reportProblem(report({ kind: 'error-rate', value: 0.5 }))).toBeNull();
    expect(reportProblem(report({}))).toBeNull();
    expect(reportProblem(report({ kind: 'metric' }))).toBe(
      'report.health[0].kind: must be one of runtime, check, error-rate (got "metric")',
    );
    expect(reportProblem(report({ value: Infinity }))).toBe(
      'report.health[0].value: must be a finite number within ±1000000000000 (got Infinity)',
    );
    expect(reportProblem(report({ value: NaN }))).toMatch(/report\.health\[0\]\.value: .*\(got NaN\)/);
    expect(reportProblem(report({ value: 2e12 }))).toMatch(/\(got 2000000000000\)/);
    expect(reportProblem(report({ value: '0.1' }))).toMatch(/report\.health\[0\]\.value: .*\(got "0\.1"\)/);
  });
});

describe('inventory agentKey', () => {
  const key = (n: number) => `ed25519:${Buffer.alloc(32, n).toString('base64')}`;
  const parse = (devices: object[]) => parseInventory({ defaults: { pool: 'p' }, devices }, 'fleet.yaml');
  it('an agent device needs its key and no host or user; the key is kept', () => {
    const inv = parse([{ id: 'a1', transport: 'agent', agentKey: key(1) }]);
    expect(inv.devices[0]).toMatchObject({ id: 'a1', transport: 'agent', agentKey: key(1), host: '', user: '' });
  });
  it('refuses a missing key, a key on an SSH device, a malformed key and a key shared by two devices, naming the field', () => {
    expect(() => parse([{ id: 'a1', transport: 'agent' }])).toThrow(
      /devices\[0\]\.agentKey: required for transport: agent/,
    );
    expect(() => parse([{ id: 's1', host: 'h', user: 'u', agentKey: key(1) }])).toThrow(
      /devices\[0\]\.agentKey: only for transport: agent devices \(this one is ssh\)/,
    );
    expect(() => parse([{ id: 'a1', transport: 'agent', agentKey: 'ssh-ed25519 AAAA' }])).toThrow(
      /devices\[0\]\.agentKey: must be "ed25519:<base64 of the 32-byte public key>"/,
    );
    expect(() =>
      parse([
        { id: 'a1', transport: 'agent', agentKey: key(1) },
        { id: 'a2', transport: 'agent', agentKey: key(1) },
      ]),
    ).toThrow(/devices\[1\]\.agentKey: the same key as devices\[0\]/);
    expect(() => parse([{ id: 's1', user: 'u' }])).toThrow(/devices\[0\]\.host: required/);
  });
});

describe('the fleet board names an agent device proven by its own receipt', () => {
  const key = keyPairFromSeed(new Uint8Array(32).fill(3));
  const other = keyPairFromSeed(new Uint8Array(32).fill(4));
  const pin = agentKeyPin(key.publicKey);
  const receipt = (revision: number, signer = key, device = 'a1') =>
    receiptText(
      signAgentReceipt(
        {
          device,
          rollout: 'rollout:demo:20260601-120000',
          phase: 0,
          nonce: receiptNonce({ rollout: 'rollout:demo:20260601-120000', run: 'u', activity: '1', device }),
          counter: 1,
          profile: 'demo',
          revision,
          requested: 'a'.repeat(64),
          observed: 'a'.repeat(64),
          result: 'applied',
          reason: null,
          prev: RECEIPT_GENESIS,
          clock: NOW,
        },
        signer,
      ),
    );
  const answer = (text: string | undefined, agentKey = pin) =>
    agentBoardAnswer(
      view({ report: reportAt(2, 'applied', text ? { receipt: text } : {}) }),
      'demo',
      2,
      true,
      NOW,
      agentKey,
    );

  it('proven only when the receipt is its enrolled key about this device, profile and revision', () => {
    expect(answer(receipt(2))).toMatchObject({ state: 'applied', proof: 'proven' });
    expect(answer(undefined).proof).toBeUndefined();
    expect(answer(receipt(2, other)).proof).toBeUndefined();
    expect(answer(receipt(1)).proof).toBeUndefined();
    expect(answer(receipt(2, key, 'a2')).proof).toBeUndefined();
    // No enrolled key known here: nothing can be proven.
    expect(
      agentBoardAnswer(view({ report: reportAt(2, 'applied', { receipt: receipt(2) }) }), 'demo', 2, true, NOW).proof,
    ).toBeUndefined();
  });
});
