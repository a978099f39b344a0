import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';

/** keygen / trust / sign / cosign / verify as a user runs them: real processes, real files. */
const BIN = resolve('bin/wavegate.js');

function wavegate(cwd: string, ...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => done({ code, stdout, stderr }));
  });
}

describe('wavegate keygen / sign / cosign / verify (spawned)', () => {
  it('signs offline, cosigns to the threshold, verifies, and refuses with a reason code', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wavegate-keys-'));
    const [alice, bob] = await Promise.all([
      wavegate(dir, 'keygen', '--out', 'alice.key', '--name', 'alice'),
      wavegate(dir, 'keygen', '--out', 'bob.key'),
    ]);
    expect(alice.code).toBe(0);
    expect(bob.code).toBe(0);
    expect(statSync(join(dir, 'alice.key')).mode & 0o777).toBe(0o600);
    const secret = (JSON.parse(readFileSync(join(dir, 'alice.key'), 'utf8')) as { secretKey: string }).secretKey;
    expect(alice.stdout).toMatch(/kid: sha256\/[A-Za-z0-9_-]{43}/);
    expect(alice.stdout).toMatch(/publicKey: /);
    expect(alice.stdout + alice.stderr).not.toContain(secret);
    expect((await wavegate(dir, 'keygen', '--out', 'alice.key')).code).toBe(2); // never overwritten silently

    writeFileSync(
      join(dir, 'rev.yaml'),
      'profile: production\nrevision: 15\napply: install -m 0644 "$WAVEGATE_STAGING/app.conf" /etc/app.conf\nverify: grep -q v=15 /etc/app.conf\nprevious: 14\n' +
        `payload:\n  - { name: app.conf, sha256: ${'b'.repeat(64)}, size: 9, source: payload/app.conf }\n`,
    );
    const [trust, sign] = await Promise.all([
      wavegate(dir, 'trust', '--threshold', '2', '--out', 'trust.yaml', 'alice.key.pub.yaml', 'bob.key.pub.yaml'),
      wavegate(dir, 'sign', 'rev.yaml', '--key', 'alice.key', '--out', 'envelopes/env.json'),
    ]);
    expect(trust.code, trust.stderr).toBe(0);
    expect(sign.code, sign.stderr).toBe(0);
    expect((parseYaml(readFileSync(join(dir, 'trust.yaml'), 'utf8')) as { pins: unknown[] }).pins).toHaveLength(2);

    const below = await wavegate(dir, 'verify', 'envelopes/env.json', '--trust', 'trust.yaml');
    expect(below.code).toBe(2);
    expect(below.stderr).toMatch(/BELOW_THRESHOLD/);

    expect((await wavegate(dir, 'cosign', 'envelopes/env.json', '--key', 'bob.key')).code).toBe(0);
    const again = await wavegate(dir, 'cosign', 'envelopes/env.json', '--key', 'bob.key');
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/already signed/);

    const [ok, old, expired] = await Promise.all([
      wavegate(dir, 'verify', 'envelopes/env.json', '--trust', 'trust.yaml'),
      wavegate(dir, 'verify', 'envelopes/env.json', '--trust', 'trust.yaml', '--current', '15'),
      wavegate(dir, 'verify', 'envelopes/env.json', '--trust', 'trust.yaml', '--now', '2999-01-01T00:00:00Z'),
    ]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/valid: production r15, 2 of 2/);
    expect(old.stderr).toMatch(/NOT_ABOVE_CURRENT/);
    expect(expired.stderr).toMatch(/EXPIRED/);

    const env = JSON.parse(readFileSync(join(dir, 'envelopes', 'env.json'), 'utf8')) as { body: string };
    const body = Buffer.from(env.body, 'base64');
    body[20] = body[20]! ^ 1;
    writeFileSync(join(dir, 'tampered.json'), JSON.stringify({ ...env, body: body.toString('base64') }));
    const tampered = await wavegate(dir, 'verify', 'tampered.json', '--trust', 'trust.yaml');
    expect(tampered.code).toBe(2);
    expect(tampered.stderr).toMatch(/BAD_SIGNATURE/);
  });

  it('sign runs the registration gates when given an inventory, and an escape is loud', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wavegate-gates-'));
    expect((await wavegate(dir, 'keygen', '--out', 'k.key')).code).toBe(0);
    writeFileSync(
      join(dir, 'rev.yaml'),
      'profile: production\nrevision: 15\napply: systemctl restart app\nverify: exit 0\nprevious: 14\n',
    );
    const inventory = resolve('examples/plan/fleet-20.yaml');
    const [blocked, escaped] = await Promise.all([
      wavegate(dir, 'sign', 'rev.yaml', '--key', 'k.key', '--out', 'a.json', '--inventory', inventory),
      wavegate(
        dir,
        'sign',
        'rev.yaml',
        '--key',
        'k.key',
        '--out',
        'b.json',
        '--inventory',
        inventory,
        '--allow-unprovable',
      ),
    ]);
    expect(blocked.code).toBe(2);
    expect(blocked.stderr).toMatch(/gate "unprovable" blocked .*UNPROVABLE.*--allow-unprovable/);
    expect(escaped.code, escaped.stderr).toBe(0);
    expect(escaped.stderr).toMatch(/^WARNING: gate "unprovable" bypassed with --allow-unprovable/m);
    expect(JSON.parse(escaped.stdout.split('\n')[0]!)).toEqual({
      escaped: [expect.objectContaining({ gate: 'unprovable', flag: '--allow-unprovable' })],
    });
    // The escape is on the record: inside the signed body, where the registry and every worker see it.
    const envelope = JSON.parse(readFileSync(join(dir, 'b.json'), 'utf8')) as { body: string };
    const body = JSON.parse(Buffer.from(envelope.body, 'base64').toString('utf8')) as { escapes?: unknown[] };
    expect(body.escapes).toEqual([expect.objectContaining({ gate: 'unprovable', flag: '--allow-unprovable' })]);
  });

  it('sign refuses a revision whose commands carry a credential, naming the field and not echoing the secret (issue 22)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wavegate-keys-'));
    expect((await wavegate(dir, 'keygen', '--out', 'k.key')).code).toBe(0);
    const rev = 'profile: production\nrevision: 15\nprevious: 14\nverify: test -f /etc/app.conf\n';
    const apply = (command: string) => `apply: ${JSON.stringify(command)}\n`;
    writeFileSync(
      join(dir, 'bearer.yaml'),
      rev +
        apply(
          `curl -fsS -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.s3cr3t' https://artifacts.example.com/app.conf -o /etc/app.conf`,
        ),
    );
    writeFileSync(
      join(dir, 'curl-u.yaml'),
      `${rev + apply('systemctl restart app')}health:\n  checks:\n    - { name: status, command: 'curl -fsS -u ops:hunter2 https://127.0.0.1:8443/status' }\n`,
    );
    writeFileSync(
      join(dir, 'reference.yaml'),
      rev +
        apply(
          'curl -fsS -H "Authorization: Bearer $(cat /etc/app/token)" --netrc-file /etc/app/netrc -u ops https://artifacts.example.com/app.conf -o /etc/app.conf',
        ),
    );
    const [bearer, curlU, reference] = await Promise.all([
      wavegate(dir, 'sign', 'bearer.yaml', '--key', 'k.key', '--out', 'b.json'),
      wavegate(dir, 'sign', 'curl-u.yaml', '--key', 'k.key', '--out', 'c.json'),
      wavegate(dir, 'sign', 'reference.yaml', '--key', 'k.key', '--out', 'r.json'),
    ]);
    expect(bearer.code).toBe(2);
    expect(bearer.stderr).toContain('bearer.yaml: invalid');
    expect(bearer.stderr).toContain(
      'apply: has an Authorization header with a literal credential; a signed command is sent to every device',
    );
    expect(curlU.code).toBe(2);
    expect(curlU.stderr).toContain(
      'health.checks[0].command: has a password in a user:password argument (curl -u user:...)',
    );
    for (const run of [bearer, curlU]) expect(run.stderr).not.toMatch(/s3cr3t|hunter2/);
    expect(
      readdirSync(dir)
        .filter((f) => f.endsWith('.json'))
        .sort(),
    ).toEqual(['r.json']); // the reference form signs
    expect(reference.code, reference.stderr).toBe(0);
  });

  it('sign refuses a payload source outside the profile\'s payload/ directory: "..", absolute, a symbolic link out (issue 22)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wavegate-keys-'));
    expect((await wavegate(dir, 'keygen', '--out', 'k.key')).code).toBe(0);
    const profile = join(dir, 'production');
    mkdirSync(join(profile, 'revisions'), { recursive: true });
    mkdirSync(join(profile, 'payload'));
    writeFileSync(join(dir, 'outside.conf'), 'v=1\n');
    writeFileSync(join(profile, 'payload', 'app.conf'), 'v=1\n');
    symlinkSync(join(dir, 'outside.conf'), join(profile, 'payload', 'link.conf'));
    const rev = (source: string) =>
      'profile: production\nrevision: 15\nprevious: 14\napply: install -m 0644 "$WAVEGATE_STAGING/app.conf" /etc/app.conf\nverify: grep -q v=1 /etc/app.conf\n' +
      // The real digest of v=1: sign checks a written digest against the file it finds (issue 23).
      `payload:\n  - { name: app.conf, sha256: ${createHash('sha256').update('v=1\n').digest('hex')}, size: 4, source: ${JSON.stringify(source)} }\n`;
    const cases: Array<[string, string, string]> = [
      ['dots', '../outside.conf', 'payload[0].source: climbs out with ".."'],
      ['dots-inside', 'payload/../../outside.conf', 'payload[0].source: climbs out with ".."'],
      ['absolute', join(dir, 'outside.conf'), 'payload[0].source: is an absolute path'],
      ['beside', 'files/app.conf', 'payload[0].source: is not inside payload/'],
      [
        'link',
        'payload/link.conf',
        `payload[0].source: resolves through a symbolic link to ${realpathSync(join(dir, 'outside.conf'))}, outside the profile's`,
      ],
    ];
    for (const [name, source] of cases) writeFileSync(join(profile, 'revisions', `${name}.yaml`), rev(source));
    writeFileSync(join(profile, 'revisions', '15.yaml'), rev('payload/app.conf'));
    const runs = await Promise.all(
      cases.map(([name]) =>
        wavegate(dir, 'sign', join(profile, 'revisions', `${name}.yaml`), '--key', 'k.key', '--out', `${name}.json`),
      ),
    );
    runs.forEach((run, i) => {
      const [, source, shows] = cases[i]!;
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(shows);
      expect(run.stderr).toContain(`(got ${JSON.stringify(source)})`);
    });
    // Outside a profile layout the text is judged; the link is judged where the profile is known (--profile).
    const [plain, viaProfile] = await Promise.all([
      wavegate(dir, 'sign', join(profile, 'revisions', '15.yaml'), '--key', 'k.key', '--out', 'ok.json'),
      wavegate(
        dir,
        'sign',
        join(profile, 'revisions', 'link.yaml'),
        '--key',
        'k.key',
        '--out',
        'link2.json',
        '--profile',
        join(profile, 'profile.yaml'),
      ),
    ]);
    expect(plain.code, plain.stderr).toBe(0);
    expect(viaProfile.code).toBe(2);
    expect(viaProfile.stderr).toContain('resolves through a symbolic link');
    expect(readdirSync(dir).filter((f) => f.endsWith('.json'))).toEqual(['ok.json']);
  });

  it('keygen --force over a world-readable file leaves the new private key at mode 0600', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wavegate-keys-'));
    const key = join(dir, 'ops.key');
    writeFileSync(key, 'an old key someone left readable\n', { mode: 0o644 });
    chmodSync(key, 0o644);
    const made = await wavegate(dir, 'keygen', '--out', 'ops.key', '--force');
    expect(made.code, made.stderr).toBe(0);
    expect(statSync(key).mode & 0o777).toBe(0o600);
    expect(JSON.parse(readFileSync(key, 'utf8'))).toMatchObject({ type: 'wavegate.ed25519.secret-key' });
    expect(readdirSync(dir).sort()).toEqual(['ops.key', 'ops.key.pub.yaml']); // no temporary file left behind
  });

  it('sign refuses already-expired content and a validity above 400 days, and signs issuedAt into the body', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wavegate-keys-'));
    expect((await wavegate(dir, 'keygen', '--out', 'k.key')).code).toBe(0);
    const rev = (extra: string) =>
      `profile: production\nrevision: 3\napply: touch "$HOME/r3"\nverify: test -f "$HOME/r3"\nprevious: 2\n${extra}`;
    writeFileSync(join(dir, 'expired.yaml'), rev('expiresAt: 2020-01-01T00:00:00Z\n'));
    const expired = await wavegate(dir, 'sign', 'expired.yaml', '--key', 'k.key', '--out', 'e.json');
    expect(expired.code).toBe(2);
    expect(expired.stderr).toMatch(
      /expired\.yaml: invalid\n {2}expiresAt: is not after the signing time .*already expired \(got "2020-01-01T00:00:00Z"\)/,
    );
    writeFileSync(join(dir, 'forever.yaml'), rev('expiresAt: 9999-12-31T00:00:00Z\n'));
    const forever = await wavegate(dir, 'sign', 'forever.yaml', '--key', 'k.key', '--out', 'f.json');
    expect(forever.code).toBe(2);
    expect(forever.stderr).toContain('a signature is valid for at most 400 days');
    writeFileSync(join(dir, 'plain.yaml'), rev(''));
    expect(
      (await wavegate(dir, 'sign', 'plain.yaml', '--key', 'k.key', '--out', 'p.json', '--validity-days', '3650'))
        .stderr,
    ).toContain('--validity-days: must be a whole number of days 1-400');
    expect(readdirSync(dir).filter((f) => f.endsWith('.json'))).toEqual([]); // nothing written for a refusal

    const before = Date.now();
    const ok = await wavegate(dir, 'sign', 'plain.yaml', '--key', 'k.key', '--out', 'p.json');
    expect(ok.code, ok.stderr).toBe(0);
    const body = JSON.parse(
      Buffer.from((JSON.parse(readFileSync(join(dir, 'p.json'), 'utf8')) as { body: string }).body, 'base64').toString(
        'utf8',
      ),
    ) as { issuedAt: string; expiresAt: string };
    expect(Date.parse(body.issuedAt)).toBeGreaterThanOrEqual(before - 1_000);
    expect(Date.parse(body.expiresAt) - Date.parse(body.issuedAt)).toBe(365 * 86_400_000);
  });
});
