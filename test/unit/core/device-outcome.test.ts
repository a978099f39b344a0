import { describe, expect, it } from 'vitest';
import { DEPENDENCY_RETRY_MAX_MS, DEPENDENCY_RETRY_MIN_MS } from '../../../core/dependencies';
import {
  deviceOutcome,
  REFUSED_BEFORE_RUNNING,
  runStates,
  waitGivenUpReason,
  type AnswerPatches,
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
const allPatches: AnswerPatches = { profileOrdering: true, refusedUntouched: true, inPlaceUntouched: true };
const noPatches: AnswerPatches = { profileOrdering: false, refusedUntouched: false, inPlaceUntouched: false };
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

/** Patches that record which flags were read: reading one records its marker in a new execution. */
function recordingPatches(values: AnswerPatches = allPatches): { patches: AnswerPatches; read: string[] } {
  const read: string[] = [];
  const patches = {} as AnswerPatches;
  for (const key of Object.keys(values) as Array<keyof AnswerPatches>) {
    Object.defineProperty(patches, key, {
      get: () => {
        read.push(key);
        return values[key];
      },
    });
  }
  return { patches, read };
}

type Case = [string, ApplyAnswer, AnsweringDevice, AnswerReading, AnswerPatches, string];

describe('deviceOutcome: what an answer means', () => {
  it.each<Case>([
    // Applied.
    ['applied', answered('applied'), required, apply, allPatches, 'applied | - | touched | succeeded | gate'],
    [
      'applied, not provable: claimed',
      answered('applied'),
      required,
      { ...apply, provable: false },
      allPatches,
      'claimed | - | touched | succeeded | gate',
    ],
    [
      'applied, best-effort: not counted, no gate',
      answered('applied'),
      bestEffort,
      apply,
      allPatches,
      'applied | - | touched | - | no gate',
    ],
    [
      'rolled back: counted, no gate (it guards applies)',
      answered('applied'),
      required,
      rollback,
      allPatches,
      'rolled-back | - | touched | succeeded | no gate',
    ],
    // Found in place.
    [
      'in place under in-place-untouched',
      answered('already-applied'),
      required,
      apply,
      allPatches,
      `applied | ${IN_PLACE_REASON} | untouched | succeeded | gate`,
    ],
    [
      'in place before the patch',
      answered('already-applied'),
      required,
      apply,
      noPatches,
      `applied | ${IN_PLACE_REASON} | touched | succeeded | gate`,
    ],
    [
      'in place in a rollback',
      answered('already-applied'),
      required,
      rollback,
      allPatches,
      `rolled-back | ${IN_PLACE_REASON} | touched | succeeded | no gate`,
    ],
    // Offline at first contact.
    [
      'offline: skip',
      answered('offline', { detail: 'no route' }),
      required,
      apply,
      allPatches,
      'skipped | offline at apply: no route | untouched | - | gate',
    ],
    [
      'offline: fail',
      answered('offline'),
      required,
      { ...apply, offline: 'fail' },
      allPatches,
      'failed | offline at apply: unreachable | untouched | failed | gate',
    ],
    [
      'offline: fail, best-effort',
      answered('offline'),
      bestEffort,
      { ...apply, offline: 'fail' },
      allPatches,
      'failed | offline at apply: unreachable | untouched | - | no gate',
    ],
    [
      'offline not asked for (no reportOffline): applied',
      answered('offline'),
      required,
      { ...apply, reportOffline: false },
      allPatches,
      'applied | - | touched | succeeded | gate',
    ],
    // Ahead of the rollout.
    [
      'ahead',
      answered('ahead', { detail: 'at r9, above r4' }),
      required,
      apply,
      allPatches,
      'skipped | not-for-me: ahead: at r9, above r4 | untouched | - | gate',
    ],
    [
      'ahead without detail',
      answered('ahead'),
      required,
      apply,
      allPatches,
      'skipped | not-for-me: ahead: the device is above the target | untouched | - | gate',
    ],
    [
      'ahead not asked for (no aheadAbove): applied',
      answered('ahead'),
      required,
      { ...apply, aheadAtApply: false },
      allPatches,
      'applied | - | touched | succeeded | gate',
    ],
    // A dependency unmet.
    [
      'dependency unmet',
      answered('dependency-unmet', { unmet: after, detail: 'base at r2' }),
      required,
      apply,
      allPatches,
      `waiting | waiting for base r3 (base at r2) | untouched | - | no gate | retry ${DEPENDENCY_RETRY_MIN_MS}`,
    ],
    [
      'dependency unmet, second wait',
      answered('dependency-unmet', { unmet: after }),
      { bestEffort: false, attempt: 2 },
      apply,
      allPatches,
      `waiting | waiting for base r3 | untouched | - | no gate | retry ${2 * DEPENDENCY_RETRY_MIN_MS}`,
    ],
    [
      'dependency unmet, many waits',
      answered('dependency-unmet', { unmet: after }),
      { bestEffort: false, attempt: 30 },
      apply,
      allPatches,
      `waiting | waiting for base r3 | untouched | - | no gate | retry ${DEPENDENCY_RETRY_MAX_MS}`,
    ],
    [
      "dependency unmet naming none: the spec's after",
      answered('dependency-unmet', { unmet: [] }),
      required,
      { ...apply, after: [...after, { profile: 'net', revision: 1 }] },
      allPatches,
      `waiting | waiting for base r3, net r1 | untouched | - | no gate | retry ${DEPENDENCY_RETRY_MIN_MS}`,
    ],
    [
      'dependency unmet before profile-ordering: applied',
      answered('dependency-unmet'),
      required,
      apply,
      noPatches,
      'applied | - | touched | succeeded | gate',
    ],
    [
      'dependency unmet without after: applied',
      answered('dependency-unmet'),
      required,
      { ...apply, after: [] },
      allPatches,
      'applied | - | touched | succeeded | gate',
    ],
    // Failed.
    [
      'failed on the device',
      failed('exit 3', 'DeviceSaidNo'),
      required,
      apply,
      allPatches,
      'failed | exit 3 | touched | failed | gate',
    ],
    [
      'failed, best-effort',
      failed('exit 3'),
      bestEffort,
      apply,
      allPatches,
      'failed | best-effort, not counted: exit 3 | touched | - | no gate',
    ],
    [
      'refused before running, before the patch',
      failed('no', 'Transport.host-key'),
      required,
      apply,
      noPatches,
      'failed | no | touched | failed | gate',
    ],
    [
      'a rollback refused',
      failed('denied', 'Transport.auth'),
      required,
      rollback,
      allPatches,
      'rollback-failed | denied | touched | failed | no gate',
    ],
    // Cancelled.
    [
      'cancelled mid-apply',
      { kind: 'cancelled' },
      required,
      apply,
      allPatches,
      'failed | apply cancelled mid-flight | touched | - | no gate | cancelled',
    ],
    [
      'cancelled mid-rollback',
      { kind: 'cancelled' },
      required,
      rollback,
      allPatches,
      'rollback-failed | rollback cancelled mid-flight | touched | - | no gate | cancelled',
    ],
  ])('%s', (_, answer, device, reading, patches, expected) => {
    expect(line(deviceOutcome(answer, device, reading, patches))).toBe(expected);
  });

  it.each([...REFUSED_BEFORE_RUNNING])(
    'refused before running (%s) under refused-devices-untouched: untouched, still counted',
    (type) => {
      expect(line(deviceOutcome(failed('no', type), required, apply, allPatches))).toBe(
        'failed | no | untouched | failed | gate',
      );
    },
  );

  it('leaves out the reason when there is none (the state says it all)', () => {
    expect(deviceOutcome(answered('applied'), required, apply, allPatches)).not.toHaveProperty('reason');
  });
});

describe('deviceOutcome reads a patch only where its answer decides', () => {
  it.each<[string, ApplyAnswer, AnswerReading, AnswerPatches, string[]]>([
    ['applied', answered('applied'), apply, allPatches, []],
    ['in place', answered('already-applied'), apply, allPatches, ['inPlaceUntouched']],
    ['in place in a rollback', answered('already-applied'), rollback, allPatches, []],
    ['dependency unmet', answered('dependency-unmet'), apply, allPatches, ['profileOrdering']],
    [
      'dependency unmet without the patch (and never in-place-untouched)',
      answered('dependency-unmet'),
      apply,
      noPatches,
      ['profileOrdering'],
    ],
    ['dependency unmet without after', answered('dependency-unmet'), { ...apply, after: [] }, allPatches, []],
    ['offline', answered('offline'), apply, allPatches, []],
    ['ahead', answered('ahead'), apply, allPatches, []],
    ['refused before running', failed('held', 'ApplyLockHeld'), apply, allPatches, ['refusedUntouched']],
    ['refused before running a rollback', failed('held', 'ApplyLockHeld'), rollback, allPatches, []],
    ['failed on the device', failed('exit 3', 'DeviceSaidNo'), apply, allPatches, []],
    ['cancelled', { kind: 'cancelled' }, apply, allPatches, []],
  ])('%s', (_, answer, reading, values, expected) => {
    const { patches, read } = recordingPatches(values);
    deviceOutcome(answer, required, reading, patches);
    expect(read).toEqual(expected);
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
