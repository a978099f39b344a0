import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { listRevisions, registerEnvelope } from '../../clients/registry';
import { registryWorkflowId } from '../../contracts/registry';
import { WavegateError } from '../../core/errors';
import { MAX_PAYLOAD_FILE_BYTES, type Revision } from '../../core/revision';
import {
  cosignEnvelope,
  keyPairFromSeed,
  peekBody,
  pinOf,
  signRevision,
  type Envelope,
  type KeyPair,
} from '../../core/signing';
import { loadHistory } from '../support/histories';
import { replayUpdateOutcomes } from '../support/replay-update-outcomes';
import { realRollouts } from '../support/real-rollouts';
import { rejection } from '../support/refusal';

/**
 * The registry's update handler re-decides every registration on replay; its validator does not run on
 * replay. A signed content rule added after an envelope was registered (credentials in signed commands,
 * the 64 MiB payload cap) must not change what the handler decides on an old history, while every new
 * registration is refused by the validator under it (core/revision.ts, RevisionRules).
 *
 * The histories were recorded by test/workflow/registry-content-rules.record.ts on commit 9e149e4, before
 * those rules existed (how: see that file).
 */
const OLD_HISTORIES = ['registry-old-rules.json', 'registry-old-rules-continued.json'];

/** The registered envelopes (from the UpdateAccepted events), as their bodies. */
function registeredBodies(file: string): Revision[] {
  return (loadHistory(file).history.events ?? []).flatMap((e) => {
    const payload = e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.args?.payloads?.[0];
    if (!payload?.data) return [];
    const req = JSON.parse(Buffer.from(payload.data).toString('utf8')) as { envelope: Envelope };
    return [peekBody(req.envelope) as Revision];
  });
}

describe('replay of a registry that registered envelopes before the signed content rules', () => {
  it('the recorded histories hold what the current rules refuse: curl -u in apply and in a health command, a payload above 64 MiB', () => {
    for (const file of OLD_HISTORIES) {
      const bodies = registeredBodies(file);
      expect(bodies.map((b) => b.revision)).toEqual([1, 1, 2, 3, 4]);
      expect(bodies[0]!.apply).toContain('-u deploy:hunter2');
      expect(bodies[2]!.payload[0]!.size).toBe(MAX_PAYLOAD_FILE_BYTES + 1);
      expect(bodies[3]!.health?.runtimes?.[0]?.command).toContain('-u probe:s3cret');
    }
    // The continued history ends by continuing as new: its input carries the registrations on.
    const events = loadHistory('registry-old-rules-continued.json').history.events ?? [];
    expect(events.at(-1)?.workflowExecutionContinuedAsNewEventAttributes).toBeTruthy();
  });

  it('replays each with the outcome it recorded for every registration (registered, existing), not a refusal', async () => {
    const { errors, outcomes } = await replayUpdateOutcomes(OLD_HISTORIES);
    expect(errors).toEqual([]);
    expect(outcomes).toHaveLength(10);
    // Every registration was accepted when recorded; on replay the handler must reach the same, not throw.
    expect(outcomes.filter((o) => o.recorded !== 'ok' || o.replayed !== 'ok')).toEqual([]);
  });
});

describe('a new registration under the signed content rules (real Temporal dev server)', () => {
  const newKey = (): KeyPair => keyPairFromSeed(new Uint8Array(randomBytes(32)));
  const keyA = newKey();
  const keyB = newKey();
  const trustDoc = { threshold: 2, pins: [pinOf(keyA, 'release-a'), pinOf(keyB, 'release-b')] };
  const real = realRollouts('registry-content-rules');

  const revisionOf = (profile: string, n: number, extra: Partial<Revision> = {}): Revision => {
    const content = `v=${n}\n`;
    return {
      profile,
      revision: n,
      apply: 'install -m 0644 "$WAVEGATE_STAGING/app.conf" "$HOME/app.conf"',
      verify: `grep -qx v=${n} "$HOME/app.conf"`,
      payload: [
        {
          name: 'app.conf',
          sha256: createHash('sha256').update(content).digest('hex'),
          size: content.length,
          source: 'payload/app.conf',
        },
      ],
      risk: 'risky',
      ...extra,
    };
  };
  const signed = (revision: Revision): Envelope =>
    cosignEnvelope(signRevision(revision, keyA, { now: Date.now(), validityDays: 30 }), keyB);
  const register = (profile: string, envelope: Envelope) =>
    registerEnvelope(real.env.client, { profile, envelope, trustDoc, by: 'test', taskQueue: real.worker.taskQueue });
  const acceptedUpdates = async (profile: string) =>
    ((await real.env.client.workflow.getHandle(registryWorkflowId(profile)).fetchHistory()).events ?? []).filter(
      (e) => e.workflowExecutionUpdateAcceptedEventAttributes,
    ).length;

  it('refuses curl -u in apply, in a health command and a payload above 64 MiB, naming the field; nothing enters history', async () => {
    const p = 'reg-content-rules';
    await register(p, signed(revisionOf(p, 1)));
    const updatesBefore = await acceptedUpdates(p);

    const big = revisionOf(p, 2);
    big.payload = [{ ...big.payload[0]!, size: MAX_PAYLOAD_FILE_BYTES + 1 }];
    const cases: Array<[Envelope, RegExp]> = [
      [
        signed(
          revisionOf(p, 2, { apply: 'curl -fsS -u deploy:hunter2 https://repo.example/app.conf -o "$HOME/app.conf"' }),
        ),
        /\(INVALID_REVISION\): .*: apply: has .*a signed command is sent to every device/,
      ],
      [
        signed(
          revisionOf(p, 2, {
            health: { runtimes: [{ name: 'app', command: 'curl -fsS -u probe:s3cret http://127.0.0.1:8080/healthz' }] },
          }),
        ),
        /\(INVALID_REVISION\): .*: health\.runtimes\.0\.command: has .*a signed command is sent to every device/,
      ],
      [
        signed(big),
        /\(INVALID_REVISION\): .*: payload\.0\.size: is 67108865 bytes, above the 67108864 bytes \(64 MiB\)/,
      ],
    ];
    for (const [envelope, shows] of cases) {
      const err = await rejection(register(p, envelope));
      expect(err).toBeInstanceOf(WavegateError);
      expect([err.code, err.details.reason]).toEqual(['INVALID_INPUT', 'INVALID_REVISION']);
      expect(err.message).toMatch(shows);
      expect(err.message).not.toContain('hunter2');
    }
    // Refused by the validator: no update reached the history, nothing was stored, and the next one registers.
    expect(await acceptedUpdates(p)).toBe(updatesBefore);
    expect((await listRevisions(real.env.client, p)).map((r) => r.revision)).toEqual([1]);
    expect(await register(p, signed(revisionOf(p, 2)))).toMatchObject({ outcome: 'registered', revision: 2 });
  });
});
