import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { createWebhookActivities } from '../../activities/webhooks';
import { WavegateError } from '../../core/errors';
import {
  addressClass,
  addressRefusal,
  formatIp,
  parseIp,
  pathInside,
  STRICT_WEBHOOK_POLICY,
  urlRefusal,
  webhookPolicyFromEnv,
} from '../../core/secret-policy';
import { checkWebhookPolicy, resolveSecretFile } from '../../intake/secret-policy';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli } from '../support/cli';
import { scratchDir } from '../support/harness';
import { refusal } from '../support/refusal';

describe('webhook receivers: which addresses are not public (core/webhook-policy.ts)', () => {
  const cls = (text: string) => addressClass(parseIp(text)!);

  it('classes IPv4 and IPv6 addresses, an IPv4 inside an IPv6 address as itself', () => {
    const expected: Record<string, string> = {
      '8.8.8.8': 'public',
      '93.184.215.14': 'public',
      '2606:4700::1111': 'public',
      '127.0.0.1': 'loopback',
      '127.255.255.254': 'loopback',
      '::1': 'loopback',
      '::ffff:127.0.0.1': 'loopback',
      '::ffff:7f00:1': 'loopback',
      '10.1.2.3': 'private',
      '172.16.0.1': 'private',
      '172.31.255.255': 'private',
      '192.168.1.1': 'private',
      '100.64.0.1': 'private',
      'fd12:3456::1': 'private',
      'fc00::1': 'private',
      '64:ff9b::10.0.0.1': 'private',
      '2002:0a00:0001::': 'private',
      '169.254.1.1': 'link-local',
      'fe80::1': 'link-local',
      'febf::1': 'link-local',
      '169.254.169.254': 'metadata',
      '169.254.170.2': 'metadata',
      '100.100.100.200': 'metadata',
      'fd00:ec2::254': 'metadata',
      '::ffff:169.254.169.254': 'metadata',
      '0.0.0.0': 'unspecified',
      '0.1.2.3': 'unspecified',
      '::': 'unspecified',
      '224.0.0.1': 'multicast',
      'ff02::1': 'multicast',
      '255.255.255.255': 'reserved',
      '192.0.2.1': 'reserved',
      '2001:db8::1': 'reserved',
      '172.32.0.1': 'public',
      '172.15.255.255': 'public',
      '11.0.0.1': 'public',
    };
    expect(Object.fromEntries(Object.keys(expected).map((a) => [a, cls(a)]))).toEqual(expected);
  });

  it('parses only addresses: no octal or short forms (URL parsing normalises those first), no bad IPv6', () => {
    for (const bad of [
      '01.2.3.4',
      '1.2.3',
      '256.1.1.1',
      '1::2::3',
      '1:2:3:4:5:6:7:8:9',
      'g::1',
      '::1.2.3',
      'example.com',
      '',
      '[::1',
    ])
      expect(parseIp(bad), bad).toBeUndefined();
    expect(formatIp(parseIp('[2001:0db8:0:0:1:0:0:1]')!)).toBe('2001:db8::1:0:0:1');
    expect(formatIp(parseIp('::ffff:0a00:0001')!)).toBe('::ffff:10.0.0.1');
  });

  it('judges what a url shows: every spelling of loopback, localhost names, metadata names; a public name is left to delivery', () => {
    for (const url of [
      'http://127.0.0.1/',
      'http://127.1/',
      'http://2130706433/',
      'http://0x7f000001/',
      'http://[::1]/',
      'http://[::ffff:127.0.0.1]/',
      'http://localhost:8080/',
      'http://api.localhost/',
      'http://LOCALHOST./',
      'http://metadata.google.internal/computeMetadata/v1/',
      'http://0.0.0.0:9/',
      'http://10.0.0.5/',
    ]) {
      expect(urlRefusal(url, STRICT_WEBHOOK_POLICY), url).toMatch(
        / is an? (loopback|private|cloud metadata|unspecified) (address|host name); the worker sends webhooks to public addresses only/,
      );
    }
    expect(urlRefusal('https://hooks.example.com/x', STRICT_WEBHOOK_POLICY)).toBeUndefined();
    expect(urlRefusal('https://8.8.8.8/x', STRICT_WEBHOOK_POLICY)).toBeUndefined();
  });

  it('allows what the operator configured and no more: ALLOW_PRIVATE opens loopback and private ranges, never link-local or metadata; ALLOW_HOSTS opens exactly its entries', () => {
    const priv = webhookPolicyFromEnv({ WAVEGATE_WEBHOOK_ALLOW_PRIVATE: '1' });
    expect(['127.0.0.1', '10.0.0.5', 'fd00::1'].map((a) => addressRefusal(parseIp(a)!, priv))).toEqual([
      undefined,
      undefined,
      undefined,
    ]);
    for (const a of ['169.254.169.254', '169.254.1.1', 'fe80::1', '0.0.0.0'])
      expect(addressRefusal(parseIp(a)!, priv), a).toContain(`${a} is a`);
    const hosts = webhookPolicyFromEnv({
      WAVEGATE_WEBHOOK_ALLOW_HOSTS: '127.0.0.1, 10.1.0.0/16 hooks.corp.test,*.svc.test  fe80::/64',
    });
    expect(['127.0.0.1', '10.1.255.1', 'fe80::5'].map((a) => addressRefusal(parseIp(a)!, hosts))).toEqual([
      undefined,
      undefined,
      undefined,
    ]);
    expect(addressRefusal(parseIp('127.0.0.2')!, hosts)).toContain('127.0.0.2 is a loopback address');
    expect(addressRefusal(parseIp('10.2.0.1')!, hosts)).toContain('10.2.0.1 is a private address');
    expect(urlRefusal('http://hooks.corp.test/', hosts)).toBeUndefined();
    expect(urlRefusal('http://a.b.svc.test/', hosts)).toBeUndefined();
    // An allowed name is trusted whatever it resolves to; "localhost" is not allowed by an unrelated entry.
    expect(urlRefusal('http://localhost/', hosts)).toContain('localhost is a loopback host name');
  });

  it('refuses a configuration it cannot read, naming the variable and the value (a worker does not start misreading its policy)', () => {
    const bad = (env: Record<string, string>) => refusal(() => webhookPolicyFromEnv(env));
    expect(bad({ WAVEGATE_WEBHOOK_ALLOW_PRIVATE: 'maybe' }).message).toBe(
      'WAVEGATE_WEBHOOK_ALLOW_PRIVATE: must be 1 (allow loopback and private receivers) or 0 (got "maybe")',
    );
    expect(bad({ WAVEGATE_WEBHOOK_ALLOW_HOSTS: '10.0.0.0/33' }).message).toContain(
      'WAVEGATE_WEBHOOK_ALLOW_HOSTS: each entry (comma-separated) must be a CIDR',
    );
    expect(bad({ WAVEGATE_WEBHOOK_ALLOW_HOSTS: 'http://x/' }).message).toContain('(got "http://x/")');
    expect(bad({ WAVEGATE_WEBHOOK_SECRETS_DIR: 'relative/dir' }).message).toBe(
      'WAVEGATE_WEBHOOK_SECRETS_DIR: must be an absolute directory path (got "relative/dir")',
    );
    // The activities read the worker's environment when they are made.
    process.env.WAVEGATE_WEBHOOK_ALLOW_PRIVATE = 'perhaps';
    try {
      expect(() => createWebhookActivities()).toThrow(WavegateError);
    } finally {
      delete process.env.WAVEGATE_WEBHOOK_ALLOW_PRIVATE;
    }
    expect(webhookPolicyFromEnv({})).toEqual(STRICT_WEBHOOK_POLICY);
  });
});

describe('webhook secret files: only under the secrets directory, links and ".." resolved', () => {
  const scratch = scratchDir('webhook-secret-dir');
  const dir = join(scratch.dir, 'secrets');
  mkdirSync(dir);
  writeFileSync(join(dir, 'ok.secret'), 'x');
  writeFileSync(join(scratch.dir, 'outside'), 'db-password');
  symlinkSync(join(scratch.dir, 'outside'), join(dir, 'escape.secret'));
  symlinkSync(join(dir, 'ok.secret'), join(dir, 'alias.secret'));
  // The directory itself reached through a link: its real path is what files are compared with.
  symlinkSync(dir, join(scratch.dir, 'secrets-link'));
  afterAll(() => scratch.cleanup());
  const policy = webhookPolicyFromEnv({ WAVEGATE_WEBHOOK_SECRETS_DIR: join(scratch.dir, 'secrets-link') });

  it('judges by text, then by real path when the file exists', () => {
    expect(pathInside('/etc/w/a', '/etc/w')).toBe(true);
    expect(pathInside('/etc/w/x/../a', '/etc/w/')).toBe(true);
    expect(pathInside('/etc/w/../x', '/etc/w')).toBe(false);
    expect(pathInside('/etc/wx/a', '/etc/w')).toBe(false);
    expect(pathInside('/etc/w', '/etc/w')).toBe(false);
    const link = join(scratch.dir, 'secrets-link');
    expect(resolveSecretFile(join(link, 'ok.secret'), policy, true)).toEqual({
      realPath: join(dir, 'ok.secret'),
    });
    expect(resolveSecretFile(join(link, 'alias.secret'), policy, true)).toEqual({
      realPath: join(dir, 'ok.secret'),
    });
    expect(resolveSecretFile(join(link, 'escape.secret'), policy, true)).toEqual({ refused: 'outside' });
    expect(resolveSecretFile(join(link, 'escape.secret'), policy, false)).toEqual({ refused: 'outside' });
    expect(resolveSecretFile(join(link, '..', 'outside'), policy, false)).toEqual({ refused: 'outside' });
    // Absent here: the CLI lets the worker judge it (it may live only there); the worker needs it present.
    expect(resolveSecretFile(join(link, 'only-on-the-worker'), policy, false)).toEqual({
      realPath: join(link, 'only-on-the-worker'),
    });
    expect(resolveSecretFile(join(link, 'only-on-the-worker'), policy, true)).toEqual({ refused: 'unreadable' });
  });

  it('checkWebhookPolicy names every field refused with its value, and accepts what the policy allows', () => {
    const link = join(scratch.dir, 'secrets-link');
    const env = { WAVEGATE_WEBHOOK_SECRETS_DIR: link };
    const webhooks = [
      { url: 'https://hooks.example.com/a', secretFile: join(link, 'ok.secret') },
      { url: 'https://hooks.example.com/b', secretFile: join(link, 'escape.secret') },
      { url: 'http://169.254.169.254/', secretEnv: 'WAVEGATE_WEBHOOK_SECRET_X' },
    ];
    const err = refusal(() => checkWebhookPolicy({ webhooks }, 'spec.yaml', env));
    expect(err.message).toBe(
      [
        'spec.yaml: invalid',
        `  rollout.webhooks[1].secretFile: must be a file under the worker's webhook secrets directory ${link} (WAVEGATE_WEBHOOK_SECRETS_DIR), links and ".." resolved (got ${JSON.stringify(join(link, 'escape.secret'))})`,
        '  rollout.webhooks[2].url: 169.254.169.254 is a cloud metadata address; the worker sends webhooks to public addresses only, unless its operator allows this one (WAVEGATE_WEBHOOK_ALLOW_HOSTS) (got "http://169.254.169.254/")',
      ].join('\n'),
    );
    expect(() =>
      checkWebhookPolicy(
        { webhooks: [webhooks[0]!, { ...webhooks[2]!, url: 'http://169.254.169.254/' }] },
        'spec.yaml',
        { ...env, WAVEGATE_WEBHOOK_ALLOW_HOSTS: '169.254.169.254' },
      ),
    ).not.toThrow();
  });

  it('wavegate plan refuses a secret file linked out of the secrets directory (exit 2, naming the field), and plans a spec within the policy', async () => {
    const link = join(scratch.dir, 'secrets-link');
    const spec = (webhooks: unknown) => {
      const file = join(scratch.dir, `spec-${Math.random().toString(36).slice(2)}.yaml`);
      writeFileSync(
        file,
        stringify({ rollout: { profile: 'demo', fromRevision: 1, toRevision: 2, waves: [100], webhooks } }),
      );
      return file;
    };
    const plan = (file: string, env: Record<string, string>) =>
      runCli(
        [
          'plan',
          '--offline',
          '-f',
          file,
          '--inventory',
          join(PROJECT_ROOT, 'examples/plan/fleet-20.yaml'),
          '--profiles',
          join(PROJECT_ROOT, 'profiles'),
        ],
        { env: { WAVEGATE_WEBHOOK_ALLOW_PRIVATE: '', WAVEGATE_WEBHOOK_ALLOW_HOSTS: '', ...env } },
      );
    const escaped = spec([{ url: 'https://hooks.example.com/x', secretFile: join(link, 'escape.secret') }]);
    const allowed = spec([
      { url: 'https://hooks.example.com/x', secretFile: join(link, 'ok.secret') },
      { url: 'http://127.0.0.1:9000/hook', secretEnv: 'WAVEGATE_WEBHOOK_SECRET_LOCAL' },
    ]);
    const [refused, planned, loopbackRefused] = await Promise.all([
      plan(escaped, { WAVEGATE_WEBHOOK_SECRETS_DIR: link }),
      plan(allowed, { WAVEGATE_WEBHOOK_SECRETS_DIR: link, WAVEGATE_WEBHOOK_ALLOW_HOSTS: '127.0.0.1' }),
      plan(allowed, { WAVEGATE_WEBHOOK_SECRETS_DIR: link }),
    ]);
    expect(refused.code, refused.stderr).toBe(2);
    expect(refused.stderr).toContain(
      `rollout.webhooks[0].secretFile: must be a file under the worker's webhook secrets directory ${link}`,
    );
    expect(refused.stderr).toContain(`(got ${JSON.stringify(join(link, 'escape.secret'))})`);
    expect(refused.stderr).not.toContain('db-password');
    expect(planned.code, planned.stderr).toBe(0);
    expect(loopbackRefused.code).toBe(2);
    expect(loopbackRefused.stderr).toContain('rollout.webhooks[1].url: 127.0.0.1 is a loopback address');
  }, 120_000);
});
