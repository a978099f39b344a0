import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { ApplicationFailure, type Logger } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { readAuditFile } from '../../audit/file';
import { createWebhookActivities } from '../../activities/webhooks';
import { webhookEventOf, type WebhookEvent } from '../../core/events';
import { startedEvent } from '../support/webhook-event';
import { webhookPolicyFromEnv } from '../../core/secret-policy';
import { demoDevices } from '../../sim';
import { freePort } from '../../sim/ports';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { abortUpdate, pauseUpdate, resumeUpdate, type RolloutStatus } from '../../contracts/rollout';
import type { RolloutInput } from '../../workflows/rollout';
import { scratchDir } from '../support/harness';
import { recordHistory } from '../support/histories';
import { realRollouts } from '../support/real-rollouts';
import { rejection } from '../support/refusal';
import { waitForStatus } from '../support/rollout-helpers';
import { signatureValid, startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver';

/** Every string and payload (decoded as UTF-8) of a history, so a secret cannot hide in an encoded payload. */
function historyText(value: unknown): string {
  if (value instanceof Uint8Array) return Buffer.from(value).toString('utf8');
  if (typeof value === 'string') return value;
  if (value === null || typeof value !== 'object') return '';
  return Object.values(value).map(historyText).join('\n');
}

const secretEnv = 'WAVEGATE_WEBHOOK_SECRET_TEST';
/** A phase that applied and passed its gates, as its webhook events tell it. */
const PHASE_PASSED = ['phase.started', 'phase.applied', 'gate.passed'];
/**
 * The worker's webhook policy for these tests, set as an operator would (its environment): the
 * receivers are on loopback, which a worker refuses unless allowed, and secret files live in one
 * directory. Exactly the loopback address the receivers listen on, nothing wider.
 */
const workerPolicyEnv = (secretsDir: string) => ({
  WAVEGATE_WEBHOOK_SECRETS_DIR: secretsDir,
  WAVEGATE_WEBHOOK_ALLOW_HOSTS: '127.0.0.1',
});

/**
 * Events to webhooks (issue 14 item 4) on a real Temporal dev server, with the real activities applying
 * over SSH to the fleet simulator and real HTTP receivers on 127.0.0.1: at least once with retries, each
 * event acknowledged exactly once by delivery id, signed; a dead endpoint never holds or fails the rollout.
 */
describe('rollout events delivered to webhooks', () => {
  const receivers: WebhookReceiver[] = [];
  const secret = randomBytes(24).toString('hex');
  const fileSecret = randomBytes(24).toString('hex');
  const real = realRollouts('demo-webhooks', {
    // The worker runs in this process: the secret is its environment and a file on it, never the spec;
    // its webhook policy is its environment too, read when its activities are made.
    prepare() {
      process.env[secretEnv] = secret;
      Object.assign(process.env, workerPolicyEnv(secretsDir));
      mkdirSync(secretsDir);
      writeFileSync(secretFile, `${fileSecret}\n`, { mode: 0o600 });
    },
    cleanup() {
      delete process.env[secretEnv];
      for (const name of Object.keys(workerPolicyEnv(''))) delete process.env[name];
    },
  });
  const { auditDir } = real;
  const secretsDir = join(real.dir, 'secrets');
  const secretFile = join(secretsDir, 'hook.secret');
  afterEach(async () => {
    await Promise.all(receivers.splice(0).map((r) => r.close()));
  });

  async function setup(rollout: Record<string, unknown>): Promise<RolloutInput> {
    return (await real.rollout(rollout, demoDevices(4))).input;
  }
  async function receiver(answer?: (n: number) => number): Promise<WebhookReceiver> {
    const r = await startWebhookReceiver(answer);
    receivers.push(r);
    return r;
  }
  /** The transitions the audit trail recorded that are webhook events, in order. */
  const transitions = (rolloutId: string) =>
    readAuditFile(auditDir, rolloutId)
      .map((r) => webhookEventOf(r.event))
      .filter((e) => e !== undefined);

  it('a receiver that answers 500 twice then 200 gets every transition exactly once by delivery id, signed; a dead endpoint neither holds nor fails the rollout and its events are listed in status', async () => {
    const flaky = await receiver((i) => (i <= 2 ? 500 : 200));
    const dead = `http://127.0.0.1:${await freePort()}/hook`;
    const input = await setup({
      phases: [
        { canary: '1 device', gate: '1s' },
        { bulk: 'remainder', gate: 0 },
      ],
      webhooks: [
        { url: flaky.url, secretEnv },
        { url: dead, secretFile },
      ],
    });
    const started = Date.now();
    const handle = await real.start(input);
    const result = await handle.result();
    const took = Date.now() - started;

    expect(result.state).toBe('completed');
    expect(result.counts.applied).toBe(4);
    const expected = transitions(input.rolloutId);
    expect(expected).toEqual(['rollout.started', ...PHASE_PASSED, ...PHASE_PASSED, 'rollout.completed']);

    // 500, 500, then the same first delivery again: retried, with the same id.
    expect(flaky.requests.slice(0, 3).map((r) => [r.event, r.answered])).toEqual([
      ['rollout.started', 500],
      ['rollout.started', 500],
      ['rollout.started', 200],
    ]);
    expect(new Set(flaky.requests.slice(0, 3).map((r) => r.deliveryId)).size).toBe(1);
    // Every transition acknowledged exactly once, in order, with a distinct deterministic id.
    const acked = flaky.acknowledged();
    expect(acked.map((r) => r.event)).toEqual(expected);
    const ids = acked.map((r) => r.deliveryId);
    expect(new Set(ids).size).toBe(expected.length);
    const runId = (await handle.describe()).runId;
    expect(ids).toEqual(expected.map((_e, i) => `${input.rolloutId}:${runId}:${i + 1}`));
    for (const request of flaky.requests) {
      expect(signatureValid(request, secret)).toBe(true);
      expect(signatureValid(request, fileSecret)).toBe(false);
      const body = JSON.parse(request.body) as WebhookEvent;
      expect(body).toMatchObject({
        deliveryId: request.deliveryId,
        event: request.event,
        rolloutId: input.rolloutId,
        profile: 'demo',
        fromRevision: 1,
        toRevision: 2,
      });
      expect(Math.abs(Number(request.timestamp) * 1000 - Date.now())).toBeLessThan(600_000);
    }
    const applied = JSON.parse(acked[2]!.body) as WebhookEvent;
    expect(applied).toMatchObject({
      event: 'phase.applied',
      phase: 'canary 1 device',
      by: 'wavegate',
      evidence: { tally: expect.any(Object) },
    });

    // The dead endpoint: nothing delivered, every event listed (bounded list) with the url and why.
    expect(result.webhooks).toMatchObject({ delivered: expected.length, pending: 0, failedTotal: expected.length });
    expect(result.webhooks!.failed.map((f) => f.deliveryId)).toEqual(ids);
    expect(result.webhooks!.failed.every((f) => f.url === dead)).toBe(true);
    // Why, in a class only: no errno of the internal address (the worker's log has it).
    expect(result.webhooks!.failed[0]!.error).toBe(`POST ${dead}: delivery failed (no answer)`);
    expect(result.webhooks!.failed.at(-1)!.error).toBe('not delivered when the rollout ended');
    // The story never waited for a delivery: it reached its end well before the dead endpoint's first
    // event ran out of retries (about 30 s); then the end waited a bounded time (30 s) and closed.
    const trail = readAuditFile(auditDir, input.rolloutId);
    const at = (event: string) => Date.parse(trail.find((r) => r.event === event)!.at);
    expect(at('rollout.completed') - at('rollout.started')).toBeLessThan(20_000);
    expect(took).toBeLessThan(90_000);

    // Neither secret is anywhere in the workflow's history.
    const history = historyText(await handle.fetchHistory());
    expect(history).not.toContain(secret);
    expect(history).not.toContain(fileSecret);
    expect(history).toContain(secretEnv);
    await recordHistory(handle, 'webhooks-flaky-and-dead');
  }, 180_000);

  it('pause, resume and abort reach the receiver with reason and who; a filter keeps only the events asked for; a 404 is not retried', async () => {
    const all = await receiver();
    const rolloutOnly = await receiver();
    const gone = await receiver(() => 404);
    const input = await setup({
      phases: [
        { canary: '1 device', gate: 'manual' },
        { bulk: 'remainder', gate: 0 },
      ],
      webhooks: [
        { url: all.url, secretFile },
        { url: rolloutOnly.url, secretEnv, events: ['rollout.*'] },
        { url: gone.url, secretEnv, events: ['rollout.paused', 'rollout.resumed'] },
      ],
    });
    const handle = await real.start(input);
    await waitForStatus(handle, (s) => s.phases[0]?.stage === 'awaiting-approval');
    await handle.executeUpdate(pauseUpdate, { args: [{ by: 'alice', reason: 'checking the dashboards' }] });
    await handle.executeUpdate(resumeUpdate, { args: [{ by: 'bob', reason: 'dashboards fine' }] });
    await handle.executeUpdate(abortUpdate, { args: [{ by: 'carol', reason: 'change freeze', rollback: true }] });
    const result = await handle.result();
    expect(result.state).toBe('aborted');

    const expected = transitions(input.rolloutId);
    expect(expected).toEqual([
      'rollout.started',
      'phase.started',
      'phase.applied',
      'rollout.paused',
      'rollout.resumed',
      'rollout.aborted',
      'rollback.started',
      'rollback.completed',
      'rollout.ended',
    ]);
    expect(all.acknowledged().map((r) => r.event)).toEqual(expected);
    expect(all.requests.every((r) => signatureValid(r, fileSecret))).toBe(true);
    const body = (event: string) => JSON.parse(all.requests.find((r) => r.event === event)!.body) as WebhookEvent;
    expect(body('rollout.paused')).toMatchObject({ by: 'alice', reason: 'checking the dashboards' });
    expect(body('rollout.resumed')).toMatchObject({ by: 'bob', reason: 'dashboards fine' });
    expect(body('rollout.aborted')).toMatchObject({ by: 'carol', reason: 'change freeze' });
    expect(body('rollback.started')).toMatchObject({
      by: 'carol',
      reason: 'abort: change freeze',
      evidence: { devices: 1 },
    });

    expect(rolloutOnly.acknowledged().map((r) => r.event)).toEqual(expected.filter((e) => e.startsWith('rollout.')));
    expect(rolloutOnly.requests.every((r) => signatureValid(r, secret))).toBe(true);
    // A 404 is the receiver's final answer: one attempt per event, listed with the answer.
    expect(gone.requests.map((r) => r.event)).toEqual(['rollout.paused', 'rollout.resumed']);
    expect(result.webhooks).toMatchObject({ pending: 0, failedTotal: 2 });
    expect(result.webhooks!.failed.map((f) => [f.event, f.url, f.error])).toEqual([
      ['rollout.paused', gone.url, `POST ${gone.url}: delivery failed (answered 4xx; not retried)`],
      ['rollout.resumed', gone.url, `POST ${gone.url}: delivery failed (answered 4xx; not retried)`],
    ]);
    expect(result.webhooks!.delivered).toBe(expected.length + expected.filter((e) => e.startsWith('rollout.')).length);
    await recordHistory(handle, 'webhooks-controls-abort');
  }, 180_000);

  it('a cancel (as from the Web UI) still delivers its rollback and the end: the outbox is not cancelled with the rollout', async () => {
    const hook = await receiver((i) => (i === 1 ? 503 : 200));
    const input = await setup({
      phases: [{ canary: '1 device', gate: 'manual' }, { bulk: 'remainder' }],
      webhooks: [{ url: hook.url, secretEnv }],
    });
    const handle = await real.start(input);
    await waitForStatus(handle, (s) => s.phases[0]?.stage === 'awaiting-approval');
    await handle.cancel();
    await expect(handle.result()).rejects.toThrow();
    expect((await handle.describe()).status.name).toBe('CANCELLED');

    const expected = transitions(input.rolloutId);
    expect(expected.slice(-3)).toEqual(['rollback.started', 'rollback.completed', 'rollout.cancelled']);
    expect(hook.acknowledged().map((r) => r.event)).toEqual(expected);
    expect(new Set(hook.acknowledged().map((r) => r.deliveryId)).size).toBe(expected.length);
    expect(JSON.parse(hook.acknowledged().at(-1)!.body)).toMatchObject({
      event: 'rollout.cancelled',
      by: 'temporal-cancel',
    });
    const final = await handle.query<RolloutStatus>('status');
    expect(final.webhooks).toEqual({ delivered: expected.length, pending: 0, failedTotal: 0, failed: [] });
    await recordHistory(handle, 'webhooks-cancel');
  }, 180_000);
});

/** The activity on its own (no server): one attempt, its verdict, and what a receiver gets. */
describe('deliverWebhook, one attempt against a real loopback receiver', () => {
  const quiet: Logger = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };
  const scratch = scratchDir('webhook-activity');
  const policy = webhookPolicyFromEnv(workerPolicyEnv(scratch.dir));
  const { deliverWebhook } = createWebhookActivities({ policy });
  const attempt = (input: Parameters<typeof deliverWebhook>[0]) =>
    new MockActivityEnvironment(undefined, { logger: quiet }).run(deliverWebhook, input);
  const failure = (input: Parameters<typeof deliverWebhook>[0]) => rejection(attempt(input), ApplicationFailure);
  const event = startedEvent;
  const receivers: WebhookReceiver[] = [];
  const receiver = async (answer: (n: number) => number) => {
    const r = await startWebhookReceiver(answer);
    receivers.push(r);
    return r;
  };
  afterEach(async () => {
    await Promise.all(receivers.splice(0).map((r) => r.close()));
  });
  afterAll(() => scratch.cleanup());

  it('2xx delivered: the body is the event, signed with the file secret; 5xx and 429 are retryable, 404 is not', async () => {
    const file = join(scratch.dir, 'secret');
    writeFileSync(file, '  file-secret\n');
    const ok = await receiver(() => 204);
    expect(await attempt({ url: ok.url, secretFile: file, event })).toEqual({ status: 204 });
    expect(JSON.parse(ok.requests[0]!.body)).toEqual(event);
    expect(signatureValid(ok.requests[0]!, 'file-secret')).toBe(true);

    for (const [status, retryable] of [
      [500, true],
      [503, true],
      [429, true],
      [408, true],
      [404, false],
      [401, false],
      [302, false],
    ] as const) {
      const r = await receiver(() => status);
      const err = await failure({ url: r.url, secretFile: file, event });
      expect(err, String(status)).toBeInstanceOf(ApplicationFailure);
      const said = retryable
        ? `answered ${String(status)[0]}xx`
        : `answered ${String(status)[0]}xx${status === 302 ? ', a redirect, not followed' : ''}; not retried`;
      expect([err!.type, err!.nonRetryable, err!.message]).toEqual([
        retryable ? 'WebhookRetry' : 'WebhookRefused',
        !retryable,
        `POST ${r.url}: delivery failed (${said})`,
      ]);
      expect(r.requests).toHaveLength(1);
    }
  });

  it('a refused connection is retryable; a secret the worker does not have is not, and nothing is sent', async () => {
    const dead = `http://127.0.0.1:${await freePort()}/hook`;
    const file = join(scratch.dir, 'secret2');
    writeFileSync(file, 'file-secret');
    const refused = await failure({ url: dead, secretFile: file, event });
    expect([refused!.type, refused!.nonRetryable]).toEqual(['WebhookUnreachable', false]);
    expect(refused!.message).toBe(`POST ${dead}: delivery failed (no answer)`);

    const r = await receiver(() => 200);
    const unset = await failure({ url: r.url, secretEnv: 'WAVEGATE_WEBHOOK_SECRET_NO_SUCH', event });
    expect([unset!.type, unset!.nonRetryable, unset!.message]).toEqual([
      'WebhookSecretMissing',
      true,
      'the webhook secret variable WAVEGATE_WEBHOOK_SECRET_NO_SUCH is not set on this worker',
    ]);
    const missing = await failure({ url: r.url, secretFile: join(scratch.dir, 'nope'), event });
    expect([missing!.type, missing!.nonRetryable]).toEqual(['WebhookSecretMissing', true]);
    expect(missing!.message).toBe(
      `the webhook secret file ${join(scratch.dir, 'nope')} cannot be read on this worker, or is empty`,
    );
    // A FIFO is refused without waiting for a writer (reading it would stall the worker).
    const fifo = join(scratch.dir, 'secret-fifo');
    spawnSync('mkfifo', [fifo]);
    const stalled = await failure({ url: r.url, secretFile: fifo, event });
    expect([stalled!.type, stalled!.nonRetryable, stalled!.message]).toEqual([
      'WebhookSecretMissing',
      true,
      `the webhook secret file ${fifo} cannot be read on this worker, or is empty`,
    ]);
    expect(r.requests).toHaveLength(0);
  });

  it('the attempt timeout holds under garbage-collector pressure (a weakly held timeout signal would never fire)', () => {
    const file = join(scratch.dir, 'secret-gc');
    writeFileSync(file, 'gc-secret');
    const run = spawnSync(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', join(PROJECT_ROOT, 'test/support/gc-silent-receiver.ts'), file],
      { cwd: PROJECT_ROOT, encoding: 'utf8', timeout: 60_000 },
    );
    expect(run.stdout, run.stderr).toMatch(/^rejected WebhookUnreachable (\d+)$/m);
    expect(Number(/rejected WebhookUnreachable (\d+)/.exec(run.stdout)![1])).toBeLessThan(5_000);
  });

  it('a receiver that does not answer within the attempt timeout is retryable', async () => {
    const file = join(scratch.dir, 'secret3');
    writeFileSync(file, 'file-secret');
    const silent = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}/hook`;
      const slow = createWebhookActivities({ attemptTimeoutMs: 300, policy }).deliverWebhook;
      const err = await rejection(
        new MockActivityEnvironment(undefined, { logger: quiet }).run(slow, { url, secretFile: file, event }),
        ApplicationFailure,
      );
      expect([err!.type, err!.nonRetryable, err!.message]).toEqual([
        'WebhookUnreachable',
        false,
        `POST ${url}: delivery failed (no answer)`,
      ]);
    } finally {
      silent.closeAllConnections();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });
});
