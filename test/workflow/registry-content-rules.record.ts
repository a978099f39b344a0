import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listRevisions, registerEnvelope } from '../../clients/registry';
import { registryWorkflowId } from '../../contracts/registry';
import type { Revision } from '../../core/revision';
import { cosignEnvelope, keyPairFromSeed, pinOf, signRevision, type Envelope, type KeyPair } from '../../core/signing';
import { startDevServerEnv } from '../../workers/dev-server';
import { recordHistory } from '../support/histories';
import { scratchDir, startTestWorker } from '../support/harness';

/**
 * The recorder of test/fixtures/histories/registry-old-rules-*.json: a registry that registered, under
 * the rules of commit 9e149e4 (before credentials were refused in every signed command and a payload
 * file's size was capped), envelopes the current rules refuse. It runs ONLY on that commit (on the
 * current code its registrations are refused, which is the point), so it is not a *.test.ts file here:
 *
 *   git worktree add /tmp/reg-old 9e149e4
 *   ln -s "$PWD/node_modules" /tmp/reg-old/node_modules && ln -s "$PWD/.tools" /tmp/reg-old/.tools
 *   cp test/workflow/registry-content-rules.record.ts /tmp/reg-old/test/workflow/registry-old-rules.test.ts
 *   (cd /tmp/reg-old && RECORD_HISTORIES=1 npx vitest run test/workflow/registry-old-rules.test.ts)
 *   cp /tmp/reg-old/test/fixtures/histories/registry-old-rules-*.json test/fixtures/histories/
 *
 * test/workflow/registry-content-rules.test.ts and test/workflow/replay.test.ts replay them.
 */
const newKey = (): KeyPair => keyPairFromSeed(new Uint8Array(randomBytes(32)));
const keyA = newKey();
const keyB = newKey();
const trustDoc = { threshold: 2, pins: [pinOf(keyA, 'release-a'), pinOf(keyB, 'release-b')] };

/** What the current rules refuse and 9e149e4's accepted. */
const OLD_RULES_CREDENTIAL_APPLY = 'curl -fsS -u deploy:hunter2 https://repo.example/app.conf -o "$HOME/app.conf"';
const OLD_RULES_CREDENTIAL_HEALTH = 'curl -fsS -u probe:s3cret http://127.0.0.1:8080/healthz';
const OLD_RULES_OVERSIZED_PAYLOAD = 64 * 1024 * 1024 + 1;

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

function signed(revision: Revision): Envelope {
  return cosignEnvelope(signRevision(revision, keyA, { now: Date.now(), validityDays: 30 }), keyB);
}

describe('registry under the rules of 9e149e4 (recorder)', () => {
  let env: TestWorkflowEnvironment;
  let worker: Awaited<ReturnType<typeof startTestWorker>>;
  const scratch = scratchDir('registry-old-rules');

  beforeAll(async () => {
    env = await startDevServerEnv();
    worker = await startTestWorker(env, { auditDir: join(scratch.dir, 'audit') });
  });
  afterAll(async () => {
    await worker?.stop();
    await env?.teardown();
    scratch.cleanup();
  });

  const register = (profile: string, envelope: Envelope, extra: { continueAsNewAfterEvents?: number } = {}) =>
    registerEnvelope(env.client, {
      profile,
      envelope,
      trustDoc,
      by: 'recorder',
      taskQueue: worker.taskQueue,
      ...extra,
    });

  /** r1: curl -u in apply; r1 again (existing); r2: a payload above 64 MiB; r3: curl -u in a health command; r4: clean. */
  async function registerOldRuleEnvelopes(profile: string, extra: { continueAsNewAfterEvents?: number } = {}) {
    const r1 = signed(revisionOf(profile, 1, { apply: OLD_RULES_CREDENTIAL_APPLY }));
    expect(await register(profile, r1, extra)).toMatchObject({ outcome: 'registered', revision: 1 });
    expect(await register(profile, r1, extra)).toMatchObject({ outcome: 'existing', revision: 1 });
    const big = revisionOf(profile, 2);
    big.payload = [{ ...big.payload[0]!, size: OLD_RULES_OVERSIZED_PAYLOAD }];
    expect(await register(profile, signed(big), extra)).toMatchObject({ outcome: 'registered', revision: 2 });
    const probe = signed(
      revisionOf(profile, 3, { health: { runtimes: [{ name: 'app', command: OLD_RULES_CREDENTIAL_HEALTH }] } }),
    );
    expect(await register(profile, probe, extra)).toMatchObject({ outcome: 'registered', revision: 3 });
    expect(await register(profile, signed(revisionOf(profile, 4)), extra)).toMatchObject({
      outcome: 'registered',
      revision: 4,
    });
    expect((await listRevisions(env.client, profile)).map((r) => r.revision)).toEqual([1, 2, 3, 4]);
  }

  it('registers envelopes the current rules refuse, and records the run', async () => {
    const p = 'reg-old-rules';
    await registerOldRuleEnvelopes(p);
    await recordHistory(env.client.workflow.getHandle(registryWorkflowId(p)), 'registry-old-rules');
  });

  it('continues as new carrying them (the first run is recorded: its continue-as-new input holds the entries)', async () => {
    const p = 'reg-old-rules-can';
    // About 5 events per registration: a limit of 20 continues as new once, after the fourth or fifth.
    await registerOldRuleEnvelopes(p, { continueAsNewAfterEvents: 20 });
    const latest = await env.client.workflow.getHandle(registryWorkflowId(p)).fetchHistory();
    const started = latest.events?.[0]?.workflowExecutionStartedEventAttributes;
    expect(started?.continuedExecutionRunId, 'the registry continued as new').toBeTruthy();
    await recordHistory(
      env.client.workflow.getHandle(registryWorkflowId(p), started!.firstExecutionRunId!),
      'registry-old-rules-continued',
    );
  });
});
