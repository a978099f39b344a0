import { copyFileSync, existsSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanHostKey } from '../../cli/commands/init';
import { sshFingerprint } from '../../intake/known-hosts';
import { keygen } from '../../sim/openssh';
import { runCli } from '../support/cli';
import { scratchDir } from '../support/harness';
import { startSshdFleet, type SshdDevice, type SshdFleet } from '../support/sshd';
import { until } from '../support/until';

/**
 * `wavegate init` pins exactly the fingerprints it printed (issue 22). Real sshd hosts on 127.0.0.1: the
 * first run prints and records each host's key; between the runs one host's key is swapped on disk
 * (sshd reads its host key afresh for every connection); the second run — with the record, or with
 * --accept-key — reads the keys again and refuses, naming the device and both fingerprints, and writes
 * nothing. Before this change the second run pinned whatever it read.
 */
describe('wavegate init pins what it printed', () => {
  const scratch = scratchDir('init-pins');
  const sshdDir = join(scratch.dir, 'sshd');
  let sshd: SshdFleet;
  beforeAll(async () => {
    sshd = await startSshdFleet({ dir: sshdDir, ids: ['h-1', 'h-2'] });
  });
  afterAll(async () => {
    await sshd?.stop();
    scratch.cleanup();
  });

  let n = 0;
  const paths = () => {
    const dir = join(scratch.dir, `case-${++n}`);
    return {
      dir,
      profiles: join(dir, 'profiles'),
      inventory: join(dir, 'fleet.yaml'),
      record: join(dir, 'fleet.init-scanned-keys.json'),
    };
  };
  const args = (p: ReturnType<typeof paths>, devices: SshdDevice[] = sshd.devices) => [
    'init',
    '--profiles',
    p.profiles,
    '--profile',
    'motd',
    '--inventory',
    p.inventory,
    ...devices.flatMap((d) => ['--host', `${d.id}=${d.user}@${d.host}:${d.port}`]),
    '--ssh-key',
    sshd.clientKeyPath,
  ];
  const devicesOf = (inventory: string) =>
    (parse(readFileSync(inventory, 'utf8')) as { devices: Array<{ id: string; ssh: { hostKey: string } }> }).devices;

  /** Give `d` a new host key on disk (the old one kept aside); its fingerprint once the host presents it, and the way back. */
  const swapHostKey = async (d: SshdDevice): Promise<{ fingerprint: string; restore: () => Promise<void> }> => {
    const key = join(sshdDir, d.id, 'ssh_host_ed25519_key');
    for (const f of [key, `${key}.pub`]) {
      copyFileSync(f, `${f}.orig`);
      rmSync(f);
    }
    keygen(key, `swapped-${d.id}`);
    const blob = readFileSync(`${key}.pub`, 'utf8').trim().split(/\s+/)[1]!;
    const fingerprint = sshFingerprint(Buffer.from(blob, 'base64'));
    expect(fingerprint).not.toBe(d.hostKeyFingerprint);
    const presents = (fp: string) =>
      until(
        `${d.id} presenting ${fp}`,
        async () => ((await scanHostKey(d.host, d.port, 5000)).fingerprint === fp ? true : undefined),
        30_000,
      );
    await presents(fingerprint);
    return {
      fingerprint,
      restore: async () => {
        for (const f of [key, `${key}.pub`]) renameSync(`${f}.orig`, f);
        await presents(d.hostKeyFingerprint);
      },
    };
  };

  it('the first run prints, records and names the exact second command; that command pins exactly the printed keys and spends the record', async () => {
    const p = paths();
    const first = await runCli(args(p));
    expect(first.code, first.stderr).toBe(1);
    for (const d of sshd.devices) expect(first.stderr).toContain(d.hostKeyFingerprint);
    expect(existsSync(p.inventory)).toBe(false);
    expect(existsSync(p.profiles)).toBe(false);
    const record = JSON.parse(readFileSync(p.record, 'utf8')) as {
      inventory: string;
      hosts: Array<{ id: string; fingerprint: string }>;
    };
    expect(record.inventory).toBe(p.inventory);
    expect(record.hosts.map((h) => [h.id, h.fingerprint])).toEqual(
      sshd.devices.map((d) => [d.id, d.hostKeyFingerprint]),
    );
    const command = /^ {2}(wavegate init .*)$/m.exec(first.stderr)?.[1];
    expect(command, first.stderr).toBe(['wavegate', ...args(p), '--accept-scanned-keys', p.record].join(' '));

    const second = await runCli(command!.split(' ').slice(1));
    expect(second.code, second.stderr).toBe(0);
    expect(devicesOf(p.inventory).map((d) => d.ssh.hostKey)).toEqual(sshd.devices.map((d) => d.hostKeyFingerprint));
    expect(second.stdout).toContain(`scanned, accepted: recorded in ${p.record}`);
    expect(existsSync(p.record)).toBe(false);
  });

  it('--accept-key alone pins a key the operator checked; a host given none is printed again, and nothing is pinned', async () => {
    const p = paths();
    const [a, b] = sshd.devices as [SshdDevice, SshdDevice];
    const partly = await runCli([...args(p), '--accept-key', `${a.id}=${a.hostKeyFingerprint}`]);
    expect(partly.code, partly.stderr).toBe(1);
    expect(partly.stderr).toContain(`${b.id} `);
    expect(partly.stderr).toContain(b.hostKeyFingerprint);
    expect(partly.stderr).not.toMatch(new RegExp(`^ +${a.id} `, 'm')); // accepted: not asked again
    expect(existsSync(p.inventory)).toBe(false);
    const both = await runCli([
      ...args(p),
      '--accept-key',
      `${a.id}=${a.hostKeyFingerprint}`,
      '--accept-key',
      `${b.id}=${b.hostKeyFingerprint}`,
    ]);
    expect(both.code, both.stderr).toBe(0);
    expect(devicesOf(p.inventory).map((d) => d.ssh.hostKey)).toEqual([a.hostKeyFingerprint, b.hostKeyFingerprint]);
  });

  it('a host key swapped between the runs is refused, exit 2, naming the device and both fingerprints; nothing is written, the record is kept', async () => {
    const p = paths();
    const [a, b] = sshd.devices as [SshdDevice, SshdDevice];
    const first = await runCli(args(p));
    expect(first.code, first.stderr).toBe(1);
    // (Read tolerantly: the swap below is what this case is about, and before issue 22 no record was kept.)
    const recordBefore = existsSync(p.record) ? readFileSync(p.record, 'utf8') : undefined;

    const { fingerprint: swapped, restore } = await swapHostKey(b);
    try {
      const second = await runCli([...args(p), '--accept-scanned-keys']);
      expect(second.code, `the swapped key must not be pinned:\n${second.stdout}\n${second.stderr}`).toBe(2);
      expect(second.stderr).toContain('CONFLICT: host key changed since it was accepted: h-2; nothing was written');
      expect(second.stderr).toContain(
        `h-2 (127.0.0.1:${b.port}): accepted ${b.hostKeyFingerprint} (${p.record}), now shows ssh-ed25519 ${swapped}`,
      );
      expect(second.stderr).not.toContain(`${a.id} (127.0.0.1`);
      expect(existsSync(p.inventory)).toBe(false);
      expect(existsSync(p.profiles)).toBe(false);
      expect(recordBefore).toBeDefined();
      expect(readFileSync(p.record, 'utf8')).toBe(recordBefore);

      // The same with the fingerprint given by hand.
      const byHand = await runCli([...args(p, [b]), '--accept-key', `${b.id}=${b.hostKeyFingerprint}`]);
      expect(byHand.code, byHand.stderr).toBe(2);
      expect(byHand.stderr).toContain(
        `h-2 (127.0.0.1:${b.port}): accepted ${b.hostKeyFingerprint} (--accept-key), now shows ssh-ed25519 ${swapped}`,
      );
      expect(existsSync(p.inventory)).toBe(false);
    } finally {
      await restore(); // the fleet's fingerprints stay true for the other cases
    }
  });

  it('--accept-scanned-keys with no first run is refused (it used to pin whatever it read), exit 2, nothing contacted or written', async () => {
    const p = paths();
    const run = await runCli([...args(p), '--accept-scanned-keys']);
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toContain(
      `--accept-scanned-keys: no fingerprints recorded at ${p.record}; run init without --accept-scanned-keys first`,
    );
    expect(existsSync(p.dir)).toBe(false);
  });
});
