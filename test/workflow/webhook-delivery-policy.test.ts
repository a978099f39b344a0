import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ApplicationFailure, type Logger } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { ResolveHost } from '../../intake/checked-lookup';
import { createWebhookActivities } from '../../activities/webhooks';
import { shownUrl } from '../../core/events';
import { startedEvent } from '../support/webhook-event';
import { webhookPolicyFromEnv } from '../../core/secret-policy';
import { freePort } from '../../sim/ports';
import { scratchDir } from '../support/harness';
import { signatureValid, startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver';

/**
 * The worker's side of the webhook policy (core/secret-policy.ts, activities/webhooks.ts), one attempt
 * at a time against real HTTP receivers on 127.0.0.1: what a spec names is judged again at every
 * delivery (a history from an older CLI, a CLI configured otherwise), host names are resolved by the
 * worker with every address judged and the connection made to those, and a failure says a class only.
 * Host names are given by a resolver of the test's own (a mock beside the real receiver and connection):
 * the real resolver cannot be made to answer a test name with loopback.
 */
const event = startedEvent;

/** The worker's log lines, to show the operator keeps the detail the failure leaves out. */
function capturingLogger(lines: string[]): Logger {
  const keep = (message: string) => void lines.push(message);
  return { log: (_level, message) => keep(message), trace: keep, debug: keep, info: keep, warn: keep, error: keep };
}

describe("deliverWebhook within the worker's webhook policy (real receivers on 127.0.0.1)", () => {
  const scratch = scratchDir('webhook-policy');
  const secretsDir = join(scratch.dir, 'secrets');
  mkdirSync(secretsDir);
  const secretFile = join(secretsDir, 'hook.secret');
  writeFileSync(secretFile, 'file-secret\n', { mode: 0o600 });
  const outside = join(scratch.dir, 'not-a-webhook-secret');
  writeFileSync(outside, 'db-password-hunter2\n', { mode: 0o600 });
  const receivers: WebhookReceiver[] = [];
  const receiver = async (answer: (n: number) => number = () => 200, body?: string) => {
    const r = await startWebhookReceiver(answer, body);
    receivers.push(r);
    return r;
  };
  afterEach(async () => {
    await Promise.all(receivers.splice(0).map((r) => r.close()));
  });
  afterAll(() => scratch.cleanup());

  /** A worker's activity under `env` (its policy variables), resolving names with `resolveHost`. */
  function worker(env: Record<string, string>, resolveHost?: ResolveHost) {
    const policy = webhookPolicyFromEnv({ WAVEGATE_WEBHOOK_SECRETS_DIR: secretsDir, ...env });
    const { deliverWebhook } = createWebhookActivities({
      policy,
      attemptTimeoutMs: 2_000,
      ...(resolveHost ? { resolveHost } : {}),
    });
    const log: string[] = [];
    const attempt = (input: Parameters<typeof deliverWebhook>[0]) =>
      new MockActivityEnvironment(undefined, { logger: capturingLogger(log) }).run(deliverWebhook, input).then(
        (r) => ({ ok: r, err: undefined }),
        (e: unknown) => ({ ok: undefined, err: e as ApplicationFailure }),
      );
    return { attempt, log };
  }
  /** A resolver that answers `name` with `addresses` (and counts its calls); any other name is not found. */
  function resolverFor(name: string, addresses: string[][] | string[]) {
    let calls = 0;
    const resolve: ResolveHost = async (host) => {
      if (host !== name) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
      const answer = Array.isArray(addresses[0])
        ? (addresses as string[][])[Math.min(calls, addresses.length - 1)]!
        : (addresses as string[]);
      calls += 1;
      return answer.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
    };
    return { resolve, calls: () => calls };
  }
  const hostUrl = (name: string, r: WebhookReceiver) => r.url.replace('127.0.0.1', name);

  it('a host name that resolves to loopback is refused at delivery (not retried), nothing is sent, and the failure names no address', async () => {
    const r = await receiver();
    const dns = resolverFor('hooks.example.test', ['127.0.0.1']);
    const { attempt, log } = worker({}, dns.resolve);
    const url = hostUrl('hooks.example.test', r);
    const { err } = await attempt({ url, secretFile, event });
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect([err!.type, err!.nonRetryable, err!.message]).toEqual([
      'WebhookNotAllowed',
      true,
      `POST ${url}: delivery failed (refused by the worker's webhook policy)`,
    ]);
    expect(err!.message).not.toContain('127.0.0.1');
    expect(r.requests).toHaveLength(0);
    // The worker's operator sees why.
    expect(log.join('\n')).toContain('hooks.example.test resolved: 127.0.0.1 is a loopback address');
  });

  it('every address a name resolves to is judged: one public and one loopback is refused, without connecting to either', async () => {
    const r = await receiver();
    for (const addresses of [
      ['93.184.215.14', '127.0.0.1'],
      ['::ffff:127.0.0.1'],
      ['10.20.30.40'],
      ['169.254.169.254'],
      ['fe80::1'],
      ['0.0.0.0'],
    ]) {
      const dns = resolverFor('mixed.example.test', addresses);
      const { err } = await worker(
        {
          WAVEGATE_WEBHOOK_ALLOW_PRIVATE: addresses[0] === '169.254.169.254' || addresses[0] === 'fe80::1' ? '1' : '0',
        },
        dns.resolve,
      ).attempt({ url: hostUrl('mixed.example.test', r), secretFile, event });
      expect([err?.type, err?.nonRetryable], addresses.join(',')).toEqual(['WebhookNotAllowed', true]);
    }
    expect(r.requests).toHaveLength(0);
  });

  it('an allowed name is resolved once per attempt and the connection goes to the address judged (a resolver that rebinds later is never asked again); the Host header keeps the name', async () => {
    const r = await receiver();
    // First answer allowed (the receiver's loopback address, allowed exactly); every later answer an address that is not.
    const dns = resolverFor('rebind.example.test', [['127.0.0.1'], ['10.0.0.1'], ['10.0.0.1']]);
    const url = hostUrl('rebind.example.test', r);
    const { ok, err } = await worker({ WAVEGATE_WEBHOOK_ALLOW_HOSTS: '127.0.0.1' }, dns.resolve).attempt({
      url,
      secretFile,
      event,
    });
    expect(err).toBeUndefined();
    expect(ok).toEqual({ status: 200 });
    expect(dns.calls()).toBe(1);
    expect(r.requests).toHaveLength(1);
    expect(r.requests[0]!.host).toBe(new URL(url).host);
    expect(signatureValid(r.requests[0]!, 'file-secret')).toBe(true);
    // The next attempt resolves again and is judged again: now refused.
    const second = await worker({ WAVEGATE_WEBHOOK_ALLOW_HOSTS: '127.0.0.1' }, dns.resolve).attempt({
      url,
      secretFile,
      event,
    });
    expect(second.err?.type).toBe('WebhookNotAllowed');
    expect(r.requests).toHaveLength(1);
  });

  it('addresses written in the url are refused before anything is resolved, read or sent, whatever allows loopback does not allow metadata', async () => {
    const r = await receiver();
    const noDns: ResolveHost = () => Promise.reject(new Error('resolver asked for an address literal'));
    const port = new URL(r.url).port;
    for (const [env, url] of [
      [{}, r.url],
      [{}, `http://[::1]:${port}/hook`],
      [{}, `http://2130706433:${port}/hook`],
      [{}, 'http://10.0.0.5/hook'],
      [{}, `http://localhost:${port}/hook`],
      [{ WAVEGATE_WEBHOOK_ALLOW_PRIVATE: '1' }, 'http://169.254.169.254/latest/meta-data/'],
      [{ WAVEGATE_WEBHOOK_ALLOW_PRIVATE: '1' }, 'http://[fd00:ec2::254]/latest/meta-data/'],
      [{ WAVEGATE_WEBHOOK_ALLOW_HOSTS: '127.0.0.1' }, `http://127.0.0.2:${port}/hook`],
    ] as const) {
      // Even a secret that the worker would refuse is not looked at: the address is judged first.
      const { err } = await worker(env, noDns).attempt({ url, secretEnv: 'PGPASSWORD', event });
      expect([err?.type, err?.nonRetryable, err?.message], url).toEqual([
        'WebhookNotAllowed',
        true,
        `POST ${shownUrl(url)}: delivery failed (refused by the worker's webhook policy)`,
      ]);
    }
    expect(r.requests).toHaveLength(0);
  });

  it('what the operator allows is delivered: loopback with WAVEGATE_WEBHOOK_ALLOW_PRIVATE=1, a host name on the allow-list whatever it resolves to', async () => {
    const r = await receiver();
    expect(
      (await worker({ WAVEGATE_WEBHOOK_ALLOW_PRIVATE: '1' }).attempt({ url: r.url, secretFile, event })).ok,
    ).toEqual({ status: 200 });
    const dns = resolverFor('hooks.internal.test', ['127.0.0.1']);
    expect(
      (
        await worker({ WAVEGATE_WEBHOOK_ALLOW_HOSTS: '*.internal.test' }, dns.resolve).attempt({
          url: hostUrl('hooks.internal.test', r),
          secretFile,
          event,
        })
      ).ok,
    ).toEqual({ status: 200 });
    expect(r.requests.map((q) => signatureValid(q, 'file-secret'))).toEqual([true, true]);
  });

  it('a secret variable outside the webhook prefix (a history from an older CLI) is refused at delivery, never read, nothing sent', async () => {
    const r = await receiver();
    process.env.WAVEGATE_POLICY_TEST_DB_PASSWORD = 'hunter2';
    try {
      const { err } = await worker({ WAVEGATE_WEBHOOK_ALLOW_HOSTS: '127.0.0.1' }).attempt({
        url: r.url,
        secretEnv: 'WAVEGATE_POLICY_TEST_DB_PASSWORD',
        event,
      });
      expect([err?.type, err?.nonRetryable, err?.message]).toEqual([
        'WebhookSecretMissing',
        true,
        'the webhook secret variable WAVEGATE_POLICY_TEST_DB_PASSWORD is not one this worker signs with (only WAVEGATE_WEBHOOK_SECRET_<NAME>)',
      ]);
    } finally {
      delete process.env.WAVEGATE_POLICY_TEST_DB_PASSWORD;
    }
    expect(r.requests).toHaveLength(0);
  });

  it('a secret file outside the secrets directory is refused at delivery, also through ".." or a link inside the directory; a link that stays inside is used', async () => {
    const r = await receiver();
    const link = join(secretsDir, 'escape.secret');
    symlinkSync(outside, link);
    const inner = join(secretsDir, 'alias.secret');
    symlinkSync(secretFile, inner);
    const { attempt, log } = worker({ WAVEGATE_WEBHOOK_ALLOW_HOSTS: '127.0.0.1' });
    for (const file of [outside, '/etc/passwd', join(secretsDir, '..', 'not-a-webhook-secret'), link]) {
      const { err } = await attempt({ url: r.url, secretFile: file, event });
      expect([err?.type, err?.nonRetryable, err?.message], file).toEqual([
        'WebhookSecretMissing',
        true,
        `the webhook secret file ${file} is outside this worker's webhook secrets directory (links and ".." resolved)`,
      ]);
    }
    expect(r.requests).toHaveLength(0);
    expect(log.join('\n')).not.toContain('hunter2');
    expect((await attempt({ url: r.url, secretFile: inner, event })).ok).toEqual({ status: 200 });
    expect(signatureValid(r.requests[0]!, 'file-secret')).toBe(true);
  });

  it("a failure says a class only (no errno, no resolved address, no status, no body); the worker's log keeps the detail", async () => {
    const dead = await freePort();
    const dns = resolverFor('down.example.test', ['127.0.0.1']);
    const { attempt, log } = worker({ WAVEGATE_WEBHOOK_ALLOW_HOSTS: '127.0.0.1' }, dns.resolve);
    const refused = await attempt({ url: `http://down.example.test:${dead}/hook`, secretFile, event });
    expect([refused.err?.type, refused.err?.nonRetryable, refused.err?.message]).toEqual([
      'WebhookUnreachable',
      false,
      `POST http://down.example.test:${dead}/hook: delivery failed (no answer)`,
    ]);
    const unknown = await attempt({ url: `http://nowhere.example.test:${dead}/hook`, secretFile, event });
    expect(unknown.err?.message).toBe(`POST http://nowhere.example.test:${dead}/hook: delivery failed (no answer)`);
    const internal = await receiver(
      () => 503,
      'upstream db 10.9.8.7:5432 refused: FATAL password authentication failed',
    );
    const answered = await attempt({ url: hostUrl('down.example.test', internal), secretFile, event });
    expect([answered.err?.type, answered.err?.message]).toEqual([
      'WebhookRetry',
      `POST ${hostUrl('down.example.test', internal)}: delivery failed (answered 5xx)`,
    ]);
    const gone = await receiver(() => 404);
    expect((await attempt({ url: gone.url, secretFile, event })).err?.message).toBe(
      `POST ${gone.url}: delivery failed (answered 4xx; not retried)`,
    );
    for (const said of [refused, unknown, answered].map((a) => a.err!.message)) {
      expect(said).not.toMatch(/E[A-Z]{4,}|127\.0\.0\.1|10\.9\.8\.7|503|password|getaddrinfo/);
    }
    const operator = log.join('\n');
    expect(operator).toContain('ECONNREFUSED');
    expect(operator).toContain('ENOTFOUND');
    expect(operator).toContain('HTTP 503');
  });
});
