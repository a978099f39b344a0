import { describe, expect, it } from 'vitest';
import { DEPENDENCY_RETRY_MAX_MS, DEPENDENCY_RETRY_MIN_MS } from '../../../core/dependencies';
import {
  answerPatchAsked,
  deviceOutcome,
  NO_RECEIPT,
  REFUSED_BEFORE_RUNNING,
  runStates,
  waitGivenUpReason,
  type AnswerPatch,
  type AnswerReading,
  type AnsweringDevice,
  type ApplyAnswer,
  type ApplyOutcome,
  type DeviceOutcome,
} from '../../../core/rollout/device-outcome';
import { IN_PLACE_REASON } from '../../../core/rollout/revert';

const after = [{ profile: 'base', revision: 3 }];
const apply: AnswerReading = {
  mode: 'apply',
  provable: true,
  offline: 'skip',
  reportOffline: true,
  aheadAtApply: true,
  after,
};
const rollback: AnswerReading = {
  mode: 'rollback',
  provable: true,
  offline: 'skip',
  reportOffline: false,
  aheadAtApply: false,
};
const required: AnsweringDevice = { bestEffort: false, attempt: 1 };
const bestEffort: AnsweringDevice = { bestEffort: true, attempt: 1 };

const answered = (outcome: ApplyOutcome, more: { detail?: string; unmet?: typeof after } = {}): ApplyAnswer => ({
  kind: 'answered',
  outcome,
  ...more,
});
const failed = (message: string, failureType?: string): ApplyAnswer => ({
  kind: 'failed',
  message,
  ...(failureType ? { failureType } : {}),
});

/**
 * An outcome in one line: `state | reason | touched or untouched | counted | gate or no gate`, then
 * `retry <ms>` and `cancelled` when they are set. Every field of the value is in it, so a field that
 * changes shows.
 */
function line(o: DeviceOutcome): string {
  const parts = [
    o.state,
    o.reason ?? '-',
    o.touched ? 'touched' : 'untouched',
    o.counted ?? '-',
    o.readsGate ? 'gate' : 'no gate',
  ];
  if (o.retryAfterMs !== undefined) parts.push(`retry ${o.retryAfterMs}`);
  if (o.cancelled) parts.push('cancelled');
  return parts.join(' | ');
}

type Case = [string, ApplyAnswer, AnsweringDevice, AnswerReading, string];

describe('deviceOutcome: what an answer means', () => {
  it.each<Case>([
    // Applied.
    ['applied', answered('applied'), required, apply, 'applied | - | touched | succeeded | gate'],
    [
      'applied, not provable: claimed',
      answered('applied'),
      required,
      { ...apply, provable: false },
      'claimed | - | touched | succeeded | gate',
    ],
    [
      'applied, best-effort: not counted, no gate',
      answered('applied'),
      bestEffort,
      apply,
      'applied | - | touched | - | no gate',
    ],
    [
      'rolled back: counted, no gate (it guards applies)',
      answered('applied'),
      required,
      rollback,
      'rolled-back | - | touched | succeeded | no gate',
    ],
    // Found in place.
    [
      'in place under in-place-untouched',
      answered('already-applied'),
      required,
      apply,
      `applied | ${IN_PLACE_REASON} | untouched | succeeded | gate`,
    ],
    [
      'in place in a rollback',
      answered('already-applied'),
      required,
      rollback,
      `rolled-back | ${IN_PLACE_REASON} | touched | succeeded | no gate`,
    ],
    // Offline at first contact.
    [
      'offline: skip',
      answered('offline', { detail: 'no route' }),
      required,
      apply,
      'skipped | offline at apply: no route | untouched | - | gate',
    ],
    [
      'offline: fail',
      answered('offline'),
      required,
      { ...apply, offline: 'fail' },
      'failed | offline at apply: unreachable | untouched | failed | gate',
    ],
    [
      'offline: fail, best-effort',
      answered('offline'),
      bestEffort,
      { ...apply, offline: 'fail' },
      'failed | offline at apply: unreachable | untouched | - | no gate',
    ],
    [
      'offline not asked for (no reportOffline): applied',
      answered('offline'),
      required,
      { ...apply, reportOffline: false },
      'applied | - | touched | succeeded | gate',
    ],
    // Ahead of the rollout.
    [
      'ahead',
      answered('ahead', { detail: 'at r9, above r4' }),
      required,
      apply,
      'skipped | not-for-me: ahead: at r9, above r4 | untouched | - | gate',
    ],
    [
      'ahead without detail',
      answered('ahead'),
      required,
      apply,
      'skipped | not-for-me: ahead: the device is above the target | untouched | - | gate',
    ],
    [
      'ahead not asked for (no aheadAbove): applied',
      answered('ahead'),
      required,
      { ...apply, aheadAtApply: false },
      'applied | - | touched | succeeded | gate',
    ],
    // A dependency unmet.
    [
      'dependency unmet',
      answered('dependency-unmet', { unmet: after, detail: 'base at r2' }),
      required,
      apply,
      `waiting | waiting for base r3 (base at r2) | untouched | - | no gate | retry ${DEPENDENCY_RETRY_MIN_MS}`,
    ],
    [
      'dependency unmet, second wait',
      answered('dependency-unmet', { unmet: after }),
      { bestEffort: false, attempt: 2 },
      apply,
      `waiting | waiting for base r3 | untouched | - | no gate | retry ${2 * DEPENDENCY_RETRY_MIN_MS}`,
    ],
    [
      'dependency unmet, many waits',
      answered('dependency-unmet', { unmet: after }),
      { bestEffort: false, attempt: 30 },
      apply,
      `waiting | waiting for base r3 | untouched | - | no gate | retry ${DEPENDENCY_RETRY_MAX_MS}`,
    ],
    [
      "dependency unmet naming none: the spec's after",
      answered('dependency-unmet', { unmet: [] }),
      required,
      { ...apply, after: [...after, { profile: 'net', revision: 1 }] },
      `waiting | waiting for base r3, net r1 | untouched | - | no gate | retry ${DEPENDENCY_RETRY_MIN_MS}`,
    ],
    [
      'dependency unmet without after: applied',
      answered('dependency-unmet'),
      required,
      { ...apply, after: [] },
      'applied | - | touched | succeeded | gate',
    ],
    // Failed.
    [
      'failed on the device',
      failed('exit 3', 'DeviceSaidNo'),
      required,
      apply,
      'failed | exit 3 | touched | failed | gate',
    ],
    [
      'failed, best-effort',
      failed('exit 3'),
      bestEffort,
      apply,
      'failed | best-effort, not counted: exit 3 | touched | - | no gate',
    ],
    [
      'a rollback refused',
      failed('denied', 'Transport.auth'),
      required,
      rollback,
      'rollback-failed | denied | touched | failed | no gate',
    ],
    // Cancelled.
    [
      'cancelled mid-apply',
      { kind: 'cancelled' },
      required,
      apply,
      'failed | apply cancelled mid-flight | touched | - | no gate | cancelled',
    ],
    [
      'cancelled mid-rollback',
      { kind: 'cancelled' },
      required,
      rollback,
      'rollback-failed | rollback cancelled mid-flight | touched | - | no gate | cancelled',
    ],
  ])('%s', (_, answer, device, reading, expected) => {
    expect(line(deviceOutcome(answer, device, reading))).toBe(expected);
  });

  it.each([...REFUSED_BEFORE_RUNNING])('refused before running (%s): untouched, still counted', (type) => {
    expect(line(deviceOutcome(failed('no', type), required, apply))).toBe('failed | no | untouched | failed | gate');
  });

  it('leaves out the reason when there is none (the state says it all)', () => {
    expect(deviceOutcome(answered('applied'), required, apply)).not.toHaveProperty('reason');
  });
});

describe('answerPatchAsked: the retired patch an answer was read under, where the runner asked it', () => {
  it.each<[string, ApplyAnswer, AnswerReading, AnswerPatch | undefined]>([
    ['applied', answered('applied'), apply, undefined],
    ['in place', answered('already-applied'), apply, 'inPlaceUntouched'],
    ['in place in a rollback', answered('already-applied'), rollback, undefined],
    ['dependency unmet', answered('dependency-unmet'), apply, 'profileOrdering'],
    ['dependency unmet without after', answered('dependency-unmet'), { ...apply, after: [] }, undefined],
    ['offline', answered('offline'), apply, undefined],
    ['ahead', answered('ahead'), apply, undefined],
    ['refused before running', failed('held', 'ApplyLockHeld'), apply, 'refusedUntouched'],
    ['refused before running a rollback', failed('held', 'ApplyLockHeld'), rollback, undefined],
    ['failed on the device', failed('exit 3', 'DeviceSaidNo'), apply, undefined],
    ['cancelled', { kind: 'cancelled' }, apply, undefined],
  ])('%s', (_, answer, reading, expected) => {
    expect(answerPatchAsked(answer, reading)).toBe(expected);
  });
});

describe('runStates and waitGivenUpReason', () => {
  it('names the states of an apply and a rollback', () => {
    expect(runStates({ mode: 'apply', provable: true })).toEqual({ busy: 'applying', ok: 'applied', bad: 'failed' });
    expect(runStates({ mode: 'apply', provable: false }).ok).toBe('claimed');
    expect(runStates({ mode: 'rollback', provable: false })).toEqual({
      busy: 'rolling-back',
      ok: 'rolled-back',
      bad: 'rollback-failed',
    });
  });

  it('a wait given up reads as not started', () => {
    expect(waitGivenUpReason('waiting for base r3')).toBe('not started: was waiting for base r3');
  });
});

describe('requireReceipts: the control plane word alone is not done', () => {
  const proofAsked: AnswerReading = { ...apply, requireReceipts: true };
  const proven = (outcome: ApplyOutcome): ApplyAnswer => ({ kind: 'answered', outcome, proven: true });

  it('an apply with the device verified receipt counts as applied', () => {
    expect(deviceOutcome(proven('applied'), required, proofAsked)).toMatchObject({
      state: 'applied',
      counted: 'succeeded',
    });
  });

  it('an apply without one is failed and counted failed: the gates and the counts agree with the receipts', () => {
    const out = deviceOutcome(
      { kind: 'answered', outcome: 'applied', receiptProblem: 'signature: not by the enrolled key' },
      required,
      proofAsked,
    );
    expect(out).toMatchObject({ state: 'failed', counted: 'failed', touched: true, readsGate: true });
    expect(out.reason).toBe(`${NO_RECEIPT}: signature: not by the enrolled key`);
  });

  it('a device found in place without one is failed but not put back: this rollout did not change it', () => {
    expect(deviceOutcome(answered('already-applied'), required, proofAsked)).toMatchObject({
      state: 'failed',
      touched: false,
      counted: 'failed',
    });
  });

  it('without requireReceipts, or in a rollback, nothing changes', () => {
    expect(deviceOutcome(answered('applied'), required, apply)).toMatchObject({ state: 'applied' });
    expect(deviceOutcome(answered('applied'), required, { ...rollback, requireReceipts: true })).toMatchObject({
      state: 'rolled-back',
    });
  });
});
