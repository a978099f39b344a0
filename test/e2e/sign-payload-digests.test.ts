import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { readPayload, resolvePayload } from '../../device/payload-file';
import type { PayloadFile } from '../../core/revision';
import { runCli } from '../support/cli';
import { scratchDir } from '../support/harness';

/**
 * `wavegate sign` fills each payload entry's sha256/size from the file in payload/ (issue 23): editing a
 * payload is one command, `sign`; only sign fills, so every other reader still refuses a payload that is
 * not the signed one. The profile is the one `wavegate init` scaffolds (its templates leave the digests to
 * sign), its host pinned from a known_hosts line (TEST-NET, never contacted).
 */
const HOST_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG/kHLM/pCT9Z/4gb/vNgnag2Mkhn0Unfna/GpQUPNRq';
const sha256 = (bytes: Buffer | string) => createHash('sha256').update(bytes).digest('hex');

interface Paths {
  dir: string;
  profiles: string;
  profile: string;
  inventory: string;
  spec: string;
  key: string;
}

describe('wavegate sign: payload sha256/size from the files', () => {
  const scratch = scratchDir('sign-payload');
  afterAll(() => scratch.cleanup());

  let n = 0;
  async function scaffold(): Promise<Paths> {
    const dir = join(scratch.dir, `case-${++n}`);
    const p = {
      dir,
      profiles: join(dir, 'profiles'),
      profile: join(dir, 'profiles', 'motd'),
      inventory: join(dir, 'fleet.yaml'),
      spec: join(dir, 'motd-rollout.yaml'),
      key: join(dir, 'alice.key'),
    };
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'known_hosts'), `[192.0.2.10]:22 ${HOST_KEY}\n`);
    writeFileSync(join(dir, 'id'), 'not read\n');
    const init = await runCli(
      [
        'init',
        '--profiles',
        p.profiles,
        '--profile',
        'motd',
        '--inventory',
        p.inventory,
        '--spec',
        p.spec,
        '--host',
        'web-1=deploy@192.0.2.10',
        '--known-hosts',
        join(dir, 'known_hosts'),
        '--ssh-key',
        join(dir, 'id'),
      ],
      { cwd: dir, env: { HOME: dir } },
    );
    expect(init.code, init.stderr).toBe(0);
    expect((await runCli(['keygen', '--out', p.key, '--name', 'alice'], { cwd: dir })).code).toBe(0);
    expect(
      (
        await runCli(['trust', `${p.key}.pub.yaml`, '--threshold', '1', '--out', join(p.profile, 'trust.yaml')], {
          cwd: dir,
        })
      ).code,
    ).toBe(0);
    return p;
  }
  const sign = (p: Paths, rev: number) =>
    runCli(
      [
        'sign',
        join(p.profile, 'revisions', `${rev}.yaml`),
        '--key',
        p.key,
        '--out',
        join(p.profile, 'envelopes', `${rev}.json`),
        '--inventory',
        p.inventory,
        '--profile',
        join(p.profile, 'profile.yaml'),
      ],
      { cwd: p.dir },
    );
  const plan = (p: Paths) =>
    runCli(['plan', '-f', p.spec, '--inventory', p.inventory, '--profiles', p.profiles], { cwd: p.dir });
  const signedPayload = (p: Paths, rev: number) => {
    const env = JSON.parse(readFileSync(join(p.profile, 'envelopes', `${rev}.json`), 'utf8')) as { body: string };
    return (JSON.parse(Buffer.from(env.body, 'base64').toString('utf8')) as { payload: PayloadFile[] }).payload;
  };

  it('fills the omitted sha256/size into the envelope, leaves the revision file as written, and plan accepts the pair; an edited payload is signed again with one command', async () => {
    const p = await scaffold();
    const revisionFile = join(p.profile, 'revisions', '2.yaml');
    const written = readFileSync(revisionFile, 'utf8');
    expect((parseYaml(written) as { payload: object[] }).payload[0]).toEqual({
      name: 'motd.txt',
      source: 'payload/motd-r2.txt',
    });

    for (const rev of [1, 2]) {
      const signed = await sign(p, rev);
      expect(signed.code, signed.stderr).toBe(0);
      const body = readFileSync(join(p.profile, 'payload', `motd-r${rev}.txt`));
      expect(signedPayload(p, rev)).toEqual([
        { name: 'motd.txt', sha256: sha256(body), size: body.length, source: `payload/motd-r${rev}.txt` },
      ]);
      expect(signed.stdout).toContain(
        `filled from the payload files into the signed content (${join(p.profile, 'revisions', `${rev}.yaml`)} is left as written; the envelope carries them)`,
      );
      expect(signed.stdout).toContain(
        `payload "motd.txt" (payload/motd-r${rev}.txt): sha256 ${sha256(body)}, size ${body.length}`,
      );
    }
    expect(readFileSync(revisionFile, 'utf8')).toBe(written);
    const planned = await plan(p);
    expect(planned.code, planned.stderr).toBe(0);

    // The user's edit: a new payload, then `sign` alone.
    const edited = 'hello from my own r2, a longer line\n';
    writeFileSync(join(p.profile, 'payload', 'motd-r2.txt'), edited);
    const resigned = await sign(p, 2);
    expect(resigned.code, resigned.stderr).toBe(0);
    expect(signedPayload(p, 2)[0]).toMatchObject({ sha256: sha256(edited), size: Buffer.byteLength(edited) });
    expect((await plan(p)).code).toBe(0);
  });

  it('a written value that differs from the file is refused (exit 2) with both values, the envelope left as it was; one that matches is signed as written', async () => {
    const p = await scaffold();
    expect((await sign(p, 2)).code).toBe(0);
    const envelope = readFileSync(join(p.profile, 'envelopes', '2.json'), 'utf8');
    const revisionFile = join(p.profile, 'revisions', '2.yaml');
    const old = readFileSync(join(p.profile, 'payload', 'motd-r2.txt'));
    const doc = parseYaml(readFileSync(revisionFile, 'utf8')) as { payload: Array<Record<string, unknown>> };
    doc.payload[0] = { ...doc.payload[0], sha256: sha256(old), size: old.length };
    writeFileSync(revisionFile, JSON.stringify(doc));
    writeFileSync(join(p.profile, 'payload', 'motd-r2.txt'), 'edited\n');

    const refused = await sign(p, 2);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain(
      `payload[0].sha256: payload "motd.txt": the file payload/motd-r2.txt has sha256 ${sha256('edited\n')}, not the value written here; write ${sha256('edited\n')}, or remove sha256 and size from the entry and sign fills both from the file (got "${sha256(old)}")`,
    );
    expect(refused.stderr).toContain(
      `payload[0].size: payload "motd.txt": the file payload/motd-r2.txt has size 7, not the value written here; write 7`,
    );
    expect(refused.stderr).not.toMatch(/\n\s+at /);
    expect(readFileSync(join(p.profile, 'envelopes', '2.json'), 'utf8')).toBe(envelope);

    doc.payload[0] = { ...doc.payload[0], sha256: sha256('edited\n'), size: 7 };
    writeFileSync(revisionFile, JSON.stringify(doc));
    const matching = await sign(p, 2);
    expect(matching.code, matching.stderr).toBe(0);
    expect(matching.stdout).not.toContain('filled');
    expect(signedPayload(p, 2)[0]).toMatchObject({ sha256: sha256('edited\n'), size: 7 });
  });

  it('only sign fills: the worker refuses a payload edited after signing, and a profile without pins must give sha256/size in its revision files', async () => {
    const p = await scaffold();
    expect((await sign(p, 1)).code).toBe(0);
    expect((await sign(p, 2)).code).toBe(0);
    const entry = signedPayload(p, 2)[0]!;
    // The worker's reader, from the signed entry: the file signed is read; an edited one (same size, other bytes) is refused.
    expect(readPayload(resolvePayload(p.profiles, 'motd', entry), entry).toString()).toBe('motd revision 2\n');
    writeFileSync(join(p.profile, 'payload', 'motd-r2.txt'), 'motd revision 9\n');
    expect(() => readPayload(resolvePayload(p.profiles, 'motd', entry), entry)).toThrow(/PAYLOAD_DIGEST_MISMATCH/);

    // Without pins the revision files are read as written: nothing filled them.
    rmSync(join(p.profile, 'trust.yaml'));
    const unsigned = await plan(p);
    expect(unsigned.code).toBe(2);
    expect(unsigned.stderr).toContain(
      `payload[0].sha256: payload "motd.txt": missing; a profile without pins (${join(p.profile, 'trust.yaml')}) is read from this file as written, so it must give sha256 and size`,
    );
  });
});
