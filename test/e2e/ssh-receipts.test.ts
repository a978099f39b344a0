import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { readAuditFile } from '../../audit/file';
import { parseReceipt, receiptHash, receiptNonce, receiptSignatureValid, sshEd25519Key } from '../../core/receipt';
import type { DeviceTarget } from '../../core/rollout-state';
import type { RevisionSteps } from '../../core/rollout/input';
import { envelopeDigestOf } from '../../core/twin';
import { applyFailureOf } from '../../device/apply-failure';
import { EnvelopeRejected } from '../../device/apply-errors';
import { channelFor } from '../../device/channel';
import { checkReceipt, receiptExpectation } from '../../device/receipt-check';
import type { ApplyHolder, ApplyResult } from '../../device/steps';
import { StepFailed } from '../../device/transport';
import { PROJECT_ROOT } from '../../intake/package-layout';
import type { Fleet } from '../../sim';
import { rolloutInputFor } from '../support/harness';
import { realRollouts } from '../support/real-rollouts';
import { rejection } from '../support/refusal';

/**
 * SSH devices that sign their own receipts (device/receipt-signer/wavegate-sign-receipt) over the simulator: the
 * channel asks the signer on the apply's own session once the unit answered, checks its receipt once, and hands it
 * on with the answer (a success's ApplyResult.receipt, a failure's details[0].receipt); a rollout's trail then holds
 * each device's receipt, and each verifies under the device's enrolled key. The same over real OpenSSH with a
 * login that cannot read the key: test/e2e/ssh-receipts-openssh.test.ts.
 */
const SIGNER = join(PROJECT_ROOT, 'device', 'receipt-signer', 'wavegate-sign-receipt');
const real = realRollouts('ssh-receipts');

/** A device's signer state as wavegate-receipt-setup leaves it (here the test's user's, not root's), and its enrolment. */
function enrol(dir: string, id: string): { key: Uint8Array; receipts: { key: string; command: string } } {
  const state = join(dir, 'receipt-state', id);
  mkdirSync(state, { recursive: true, mode: 0o700 });
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', id, '-f', join(state, 'key')]);
  const line = readFileSync(join(state, 'key.pub'), 'utf8').trim().split(' ').slice(0, 2).join(' ');
  return { key: sshEd25519Key(line)!, receipts: { key: line, command: `sh ${SIGNER} ${state}` } };
}

function targetOf(fleet: Fleet, id: string, receipts?: DeviceTarget['receipts']): DeviceTarget {
  const d = fleet.device(id);
  return {
    id,
    host: d.host,
    port: d.port,
    user: fleet.user,
    pool: 'default',
    class: 'server',
    ssh: { hostKey: d.hostKeyFingerprint, key: fleet.clientKeyPath },
    ...(receipts ? { receipts } : {}),
  };
}

let units = 0;
function apply(target: DeviceTarget, steps: RevisionSteps, holder?: ApplyHolder): Promise<ApplyResult> {
  return channelFor(target, { profilesRoot: join(PROJECT_ROOT, 'profiles') }).apply(target, steps, {
    holder: holder ?? { rollout: 'rollout:receipts', run: 'run-1', activity: `${++units}`, attempt: 1 },
    rollout: 'rollout:receipts',
    taskQueue: 'none',
    commandTimeoutMs: 30_000,
    phase: 1,
    heartbeat: () => {},
    holderClosed: async () => false,
  });
}

describe('SSH receipts over the simulator', () => {
  it('the apply answers with the device’s receipt of it: applied, already in place, a retry, a failed step, a floor’s refusal', async () => {
    const { fleet, input, dir } = await real.rollout({ phases: [{ bulk: '100%' }] }, [
      { id: 'r-a' },
      { id: 'r-b' },
      { id: 'r-c' },
      { id: 'r-d' },
    ]);
    const steps = input.steps;
    const requested = envelopeDigestOf(steps.envelope);
    const a = enrol(dir, 'r-a');
    const b = enrol(dir, 'r-b');
    const target = targetOf(fleet, 'r-a', a.receipts);
    const readBack = (text: string | undefined, key: Uint8Array) => {
      const parsed = parseReceipt(text);
      if (!parsed.ok) throw new Error(parsed.problem);
      expect(receiptSignatureValid(parsed.receipt, key)).toBe(true);
      return parsed.receipt;
    };

    const holder = { rollout: 'rollout:receipts', run: 'run-1', activity: 'first', attempt: 1 };
    const applied = await apply(target, steps, holder);
    expect(applied).toMatchObject({ outcome: 'applied', receipt: expect.any(String) });
    expect(applied.receiptProblem).toBeUndefined();
    const first = readBack(applied.receipt, a.key);
    expect(first.fields).toMatchObject({
      device: 'r-a',
      keyKind: 'ssh',
      rollout: 'rollout:receipts',
      phase: 1,
      nonce: receiptNonce({ rollout: 'rollout:receipts', run: 'run-1', activity: 'first', device: 'r-a' }),
      counter: 1,
      profile: 'demo',
      revision: 2,
      requested,
      observed: requested,
      result: 'applied',
      reason: null,
    });
    // A device's receipt costs it one command on the same session; a device with no receipt key runs none.
    const enrolledRan = fleet.commands('r-a').map((c) => c.command);
    expect(enrolledRan.filter((c) => c.includes(SIGNER))).toHaveLength(1);
    const plain = await apply(targetOf(fleet, 'r-c'), steps);
    expect(plain).toMatchObject({ outcome: 'applied' });
    expect('receipt' in plain || 'receiptProblem' in plain).toBe(false);
    expect(fleet.commands('r-c').length).toBe(enrolledRan.length - 1);
    expect(fleet.connectionsOpened('r-a')).toBe(fleet.connectionsOpened('r-c'));

    // Another request: already in place, the next counter, chained to the first.
    const again = await apply(target, steps);
    const second = readBack(again.receipt, a.key);
    expect(second.fields).toMatchObject({ result: 'already-applied', counter: 2, prev: receiptHash(first) });
    // The same request again (an activity's retry): the same receipt, no counter spent.
    const retried = await apply(target, steps, {
      rollout: 'rollout:receipts',
      run: 'run-1',
      activity: `${units}`,
      attempt: 2,
    });
    expect(retried.receipt).toBe(again.receipt);

    // A step the device failed: the error carries the receipt, and so does the failure the workflow reads.
    execFileSync('sh', ['-c', `rm -rf "$0/etc" && echo not-a-dir > "$0/etc"`, await fleet.ensureSandbox('r-b')]);
    const err = await rejection(apply(targetOf(fleet, 'r-b', b.receipts), steps), StepFailed);
    expect(err.step).toBe('apply');
    const failed = readBack((err as StepFailed & { receipt?: string }).receipt, b.key);
    expect(failed.fields).toMatchObject({
      device: 'r-b',
      result: 'failed',
      reason: 'APPLY',
      observed: null,
      counter: 1,
    });
    expect(applyFailureOf(err)?.details?.[0]).toMatchObject({
      step: 'apply',
      receipt: `${failed.body}sig ${failed.sig}\n`,
    });

    // The device's floor says no (its floor is above the revision): a refused/BELOW_FLOOR receipt, nothing ran.
    const floorHome = await fleet.ensureSandbox('r-d');
    mkdirSync(join(floorHome, '.wavegate', 'profiles', 'demo'), { recursive: true });
    writeFileSync(join(floorHome, '.wavegate', 'profiles', 'demo', 'floor'), 'revision=3\nrollout=rollout:other\n');
    const d = enrol(dir, 'r-d');
    const below = await rejection(apply(targetOf(fleet, 'r-d', d.receipts), steps), EnvelopeRejected);
    expect(below.reason).toBe('BELOW_FLOOR');
    const refused = readBack((below as EnvelopeRejected & { receipt?: string }).receipt, d.key);
    expect(refused.fields).toMatchObject({ result: 'refused', reason: 'BELOW_FLOOR', observed: null, counter: 1 });
    expect(applyFailureOf(below)?.details?.[0]).toMatchObject({ reason: 'BELOW_FLOOR', receipt: expect.any(String) });
  }, 120_000);

  it('a signer that fails, prints garbage or signs with another key gives no receipt, a short problem, and the answer stands', async () => {
    const { fleet, input, dir } = await real.rollout({ phases: [{ bulk: '100%' }] }, [{ id: 'p-a' }]);
    const a = enrol(dir, 'p-a');
    const other = enrol(dir, 'p-other');
    // Signers that misbehave, each a script named as the signer is (the only program an inventory may name).
    const fake = (name: string, body: string) => {
      const path = join(dir, 'fake-signers', name, 'wavegate-sign-receipt');
      mkdirSync(join(dir, 'fake-signers', name), { recursive: true });
      writeFileSync(path, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
      return `sh ${path}`;
    };
    const cases: Array<[DeviceTarget['receipts'], RegExp]> = [
      [
        { key: a.receipts.key, command: fake('fails', `echo '${'x'.repeat(5000)}' >&2; exit 3`) },
        /^signer: exit 3: "x{1,200}"$/,
      ],
      [{ key: a.receipts.key, command: fake('garbage', 'echo garbage') }, /^receipt: unreadable: /],
      [{ key: a.receipts.key, command: other.receipts.command }, /^receipt: signature: not made by the enrolled key$/],
      [{ key: a.receipts.key, command: 'sudo -n /nonexistent/wavegate-sign-receipt' }, /^signer: exit \d+/],
      // Any other command is refused before it runs: the inventory is no signed content.
      [{ key: a.receipts.key, command: 'touch "$HOME/ran"' }, /^signer: command not of the allowed form/],
    ];
    for (const [receipts, problem] of cases) {
      const res = await apply(targetOf(fleet, 'p-a', receipts), input.steps);
      expect(res.outcome).toMatch(/^(applied|already-applied)$/);
      expect(res.receipt).toBeUndefined();
      expect(res.receiptProblem).toMatch(problem);
      expect(Buffer.byteLength(res.receiptProblem!)).toBeLessThan(260);
    }
    expect(
      existsSync(join(fleet.devices.find((d) => d.id === 'p-a')!.sandbox, 'ran')),
      'the refused command never ran',
    ).toBe(false);
  }, 120_000);

  it('a rollout over enrolled devices: each device’s trail entry holds its receipt, and each verifies against its key', async () => {
    const made = await real.fleet([{ id: 'w-1' }, { id: 'w-2' }, { id: 'w-3' }]);
    const doc = parse(readFileSync(made.inventoryPath, 'utf8')) as { devices: Array<Record<string, unknown>> };
    const keys = new Map<string, Uint8Array>();
    for (const d of doc.devices) {
      const e = enrol(made.dir, String(d.id));
      d.receipts = e.receipts;
      keys.set(String(d.id), e.key);
    }
    writeFileSync(made.inventoryPath, stringify(doc));
    const input = rolloutInputFor(
      made.dir,
      {
        phases: [
          { canary: '1 device', gateMs: 0 },
          { bulk: 'remainder', gateMs: 0 },
        ],
      },
      made.inventoryPath,
      'rollout:ssh-receipts-trail',
    );
    const handle = await real.start(input);
    const result = await handle.result();
    expect(result.state).toBe('completed');
    const run = (await handle.describe()).runId;
    const entries = readAuditFile(real.auditDir, input.rolloutId)
      .filter((r) => r.event === 'devices.outcome')
      .flatMap((r) => (r.evidence as { devices?: Array<Record<string, unknown>> } | null)?.devices ?? [])
      .filter((d) => d.receipt !== undefined);
    expect(entries.map((d) => d.id).sort()).toEqual(['w-1', 'w-2', 'w-3']);
    const requested = envelopeDigestOf(input.steps.envelope);
    for (const entry of entries) {
      const id = String(entry.id);
      const expected = receiptExpectation(
        id,
        'ssh',
        { rollout: input.rolloutId, run, activity: String(entry.request) },
        {
          profile: 'demo',
          revision: 2,
          requested,
        },
      );
      const checked = checkReceipt(entry.receipt, { ...expected, phase: entry.phaseIndex as number }, keys.get(id));
      expect(checked, id).toMatchObject({ ok: true });
      if (checked.ok)
        expect(checked.receipt.fields).toMatchObject({ result: 'applied', counter: 1, observed: requested });
    }
  }, 180_000);
});
