import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { secondCommandOf } from '../../../cli/commands/init';
import { acceptedKeys, judgeHostKeys, parseAcceptKeyFlag, scanTimeoutMs } from '../../../core/init-keys';
import { parseSshConfig } from '../../../intake/ssh-config';
import { runCli } from '../../support/cli';
import { scratchDir } from '../../support/harness';
import { startSshdFleet, type SshdFleet } from '../../support/sshd';

/** `wavegate init` as an operator runs it, against real sshd hosts for the key reads. */
describe('wavegate init', () => {
  const scratch = scratchDir('init');
  let sshd: SshdFleet;
  let knownHosts = '';
  beforeAll(async () => {
    sshd = await startSshdFleet({ dir: join(scratch.dir, 'sshd'), ids: ['h-1', 'h-2'] });
    knownHosts = join(scratch.dir, 'known_hosts');
    writeFileSync(knownHosts, sshd.devices.map((d) => `[${d.host}]:${d.port} ${d.hostPublicKey}\n`).join(''));
  });
  afterAll(async () => {
    await sshd?.stop();
    scratch.cleanup();
  });

  let n = 0;
  const paths = () => {
    const dir = join(scratch.dir, `case-${++n}`);
    return { dir, profiles: join(dir, 'profiles'), inventory: join(dir, 'fleet.yaml') };
  };
  const hostFlags = () => sshd.devices.flatMap((d) => ['--host', `${d.id}=${d.user}@${d.host}:${d.port}`]);
  const devicesOf = (inventory: string) =>
    (
      parse(readFileSync(inventory, 'utf8')) as {
        devices: Array<{
          id: string;
          host: string;
          port: number;
          user: string;
          pool: string;
          ssh: { hostKey: string; key?: string };
        }>;
      }
    ).devices;

  it('never overwrites an existing file: exit 2 naming it, nothing written; --force overwrites', async () => {
    const p = paths();
    const args = [
      'init',
      '--profiles',
      p.profiles,
      '--profile',
      'motd',
      '--inventory',
      p.inventory,
      ...hostFlags(),
      '--known-hosts',
      knownHosts,
      '--ssh-key',
      sshd.clientKeyPath,
    ];
    expect((await runCli(args)).code).toBe(0);
    writeFileSync(p.inventory, '# mine\n');
    const again = await runCli(args);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(
      /CONFLICT: .*profile\.yaml, .*: already exist; wavegate init never overwrites a file, and wrote nothing/,
    );
    expect(again.stderr).toContain(p.inventory);
    expect(readFileSync(p.inventory, 'utf8')).toBe('# mine\n');
    const forced = await runCli([...args, '--force']);
    expect(forced.code, forced.stderr).toBe(0);
    expect(devicesOf(p.inventory).map((d) => d.id)).toEqual(['h-1', 'h-2']);
  });

  it('a host key read from the host is printed for confirmation and not written: exit 1; --accept-scanned-keys writes exactly that key', async () => {
    const p = paths();
    const args = [
      'init',
      '--profiles',
      p.profiles,
      '--profile',
      'motd',
      '--inventory',
      p.inventory,
      ...hostFlags(),
      '--ssh-key',
      sshd.clientKeyPath,
    ];
    const unconfirmed = await runCli(args);
    expect(unconfirmed.code).toBe(1);
    for (const d of sshd.devices)
      expect(unconfirmed.stderr).toMatch(
        new RegExp(`${d.id} +127\\.0\\.0\\.1:${d.port} +ssh-ed25519 ${d.hostKeyFingerprint.replace(/[+/]/g, '\\$&')}`),
      );
    expect(unconfirmed.stderr).toContain('--accept-scanned-keys');
    expect(existsSync(p.inventory)).toBe(false);
    expect(existsSync(p.profiles)).toBe(false);

    // The first run recorded what it printed; --accept-scanned-keys pins exactly that record.
    expect(unconfirmed.stderr).toContain(`--accept-scanned-keys ${join(p.dir, 'fleet.init-scanned-keys.json')}`);
    const accepted = await runCli([...args, '--accept-scanned-keys']);
    expect(accepted.code, accepted.stderr).toBe(0);
    expect(devicesOf(p.inventory).map((d) => d.ssh.hostKey)).toEqual(sshd.devices.map((d) => d.hostKeyFingerprint));
  });

  it('a host known_hosts lists under another key is refused (exit 1), nothing written', async () => {
    const p = paths();
    const [a, b] = sshd.devices as [(typeof sshd.devices)[0], (typeof sshd.devices)[0]];
    const lying = join(`${p.dir}-kh`);
    // Two keys listed for h-1, neither of them its own: the one it presents is not pinned.
    writeFileSync(
      lying,
      `[${a.host}]:${a.port} ${b.hostPublicKey}\n[${a.host}]:${a.port} ${sshd.devices[1]!.hostPublicKey.replace(/.{4}$/, 'AAAA')}\n`,
    );
    const run = await runCli([
      'init',
      '--profiles',
      p.profiles,
      '--profile',
      'motd',
      '--inventory',
      p.inventory,
      '--host',
      `h-1=${a.user}@${a.host}:${a.port}`,
      '--known-hosts',
      lying,
      '--ssh-key',
      sshd.clientKeyPath,
      '--accept-key',
      `h-1=${a.hostKeyFingerprint}`,
    ]);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`it presents ssh-ed25519 ${a.hostKeyFingerprint}`);
    expect(existsSync(p.inventory)).toBe(false);
  });

  it('imports an Ansible inventory: ids, users, pools, budgets and per-host keys kept, host keys pinned from known_hosts', async () => {
    const p = paths();
    const [a, b] = sshd.devices as [(typeof sshd.devices)[0], (typeof sshd.devices)[0]];
    const ini = join(scratch.dir, 'hosts.ini');
    writeFileSync(
      ini,
      `[web]\nweb-a ansible_host=${a.host} ansible_port=${a.port} ansible_user=${a.user}\n[db]\ndb-b ansible_host=${b.host} ansible_port=${b.port} ansible_user=${b.user} ansible_ssh_private_key_file=/etc/wavegate/db_key\n[db:vars]\nwavegate_disruption_budget=50%\n`,
    );
    const run = await runCli([
      'init',
      '--profiles',
      p.profiles,
      '--profile',
      'motd',
      '--inventory',
      p.inventory,
      '--from-ansible',
      ini,
      '--known-hosts',
      knownHosts,
      '--ssh-key',
      sshd.clientKeyPath,
    ]);
    expect(run.code, run.stderr).toBe(0);
    const doc = parse(readFileSync(p.inventory, 'utf8')) as { pools: Record<string, { disruptionBudget?: number }> };
    expect(doc.pools.db).toEqual({ disruptionBudget: 0.5 });
    expect(devicesOf(p.inventory)).toMatchObject([
      { id: 'web-a', host: a.host, port: a.port, pool: 'web', ssh: { hostKey: a.hostKeyFingerprint } },
      {
        id: 'db-b',
        host: b.host,
        port: b.port,
        pool: 'db',
        ssh: { hostKey: b.hostKeyFingerprint, key: '/etc/wavegate/db_key' },
      },
    ]);
    // Two pools: the profile's scope selects every device rather than one pool.
    expect(parse(readFileSync(join(p.profiles, 'motd', 'profile.yaml'), 'utf8'))).toMatchObject({
      name: 'motd',
      scope: {},
    });
  });

  it('imports the concrete Host entries of an ssh config (HostName, Port, User, IdentityFile), skipping patterns and Match', async () => {
    const p = paths();
    const [a, b] = sshd.devices as [(typeof sshd.devices)[0], (typeof sshd.devices)[0]];
    const config = join(scratch.dir, 'ssh_config');
    writeFileSync(
      config,
      `Host *\n  User nobody\n\nHost alpha\n  HostName ${a.host}\n  Port ${a.port}\n  User ${a.user}\n  IdentityFile ${sshd.clientKeyPath}\n\nHost beta\n  HostName=${b.host}\n  Port=${b.port}\n\nMatch host gamma\n  User x\n`,
    );
    const run = await runCli([
      'init',
      '--profiles',
      p.profiles,
      '--profile',
      'motd',
      '--inventory',
      p.inventory,
      '--from-ssh-config',
      config,
      '--user',
      b.user,
      '--known-hosts',
      knownHosts,
      '--ssh-key',
      sshd.clientKeyPath,
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).toContain('skipped');
    expect(devicesOf(p.inventory)).toMatchObject([
      {
        id: 'alpha',
        host: a.host,
        port: a.port,
        user: a.user,
        ssh: { hostKey: a.hostKeyFingerprint, key: sshd.clientKeyPath },
      },
      { id: 'beta', host: b.host, port: b.port, user: b.user, ssh: { hostKey: b.hostKeyFingerprint } },
    ]);
  });

  it('refuses bad input with exit 2 naming the flag: no profiles root, a bad profile name, a malformed --host, no login key', async () => {
    const p = paths();
    const base = ['--inventory', p.inventory, '--known-hosts', knownHosts];
    const cases: Array<[string[], string]> = [
      [['--profile', 'motd', '--host', 'u@h', '--ssh-key', sshd.clientKeyPath], '--profiles: required'],
      [
        ['--profiles', p.profiles, '--profile', 'Motd', '--host', 'u@h', '--ssh-key', sshd.clientKeyPath],
        '--profile: must be lowercase',
      ],
      [
        ['--profiles', p.profiles, '--profile', 'motd', '--host', 'u@h:99999', '--ssh-key', sshd.clientKeyPath],
        '--host u@h:99999: port must be 1-65535',
      ],
      [['--profiles', p.profiles, '--profile', 'motd', '--host', 'u@h'], '--ssh-key: required'],
    ];
    for (const [args, message] of cases) {
      const run = await runCli(['init', ...base, ...args], { env: { WAVEGATE_PROFILES: '' } });
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr).toContain(message);
    }
    expect(existsSync(p.dir)).toBe(false);
  });
});

describe('parseSshConfig', () => {
  it('takes the first value of each keyword, as OpenSSH does, and refuses a bad Port naming the line', () => {
    const { hosts } = parseSshConfig('Host a b\n  User first\n  User second\n  Port 2200\n', 'cfg');
    expect(hosts).toMatchObject([
      { alias: 'a', host: 'a', user: 'first', port: 2200 },
      { alias: 'b', user: 'first', port: 2200 },
    ]);
    expect(() => parseSshConfig('Host a\n  Port ssh\n', 'cfg')).toThrow(
      'cfg:2: Port of Host a: must be a TCP port 1-65535 (got "ssh")',
    );
  });
});

describe('--scan-timeout (init and fleet repin)', () => {
  it('takes whole milliseconds from 100 to 120,000 and refuses anything else naming the flag and the value', () => {
    expect(scanTimeoutMs('100')).toBe(100);
    expect(scanTimeoutMs('120000')).toBe(120_000);
    for (const bad of ['99', '120001', '5s', '1.5', '']) {
      expect(() => scanTimeoutMs(bad)).toThrow(
        `--scan-timeout: must be milliseconds 100-120000 (got ${JSON.stringify(bad)})`,
      );
    }
  });
});

describe('pinning what was printed (core/init-keys.ts)', () => {
  const fp = (c: string) => `SHA256:${c.repeat(43)}`;
  it('a recorded fingerprint counts only at the address it was read at; another key is "changed", none is "unconfirmed"', () => {
    const accepted = acceptedKeys(
      [],
      [
        { id: 'a', host: '10.0.0.1', port: 22, fingerprint: fp('A'), from: 'rec.json' },
        { id: 'b', host: '10.0.0.2', port: 22, fingerprint: fp('B'), from: 'rec.json' },
      ],
      new Set(['a', 'b', 'c']),
    );
    const seen = [
      { id: 'a', host: '10.0.0.1', port: 22, fingerprint: fp('A') },
      { id: 'b', host: '10.0.0.2', port: 22, fingerprint: fp('X') },
      { id: 'c', host: '10.0.0.3', port: 22, fingerprint: fp('C') },
    ];
    expect(judgeHostKeys(seen, accepted).map((j) => j.verdict)).toEqual(['accepted', 'changed', 'unconfirmed']);
    expect(judgeHostKeys([{ ...seen[0]!, port: 2222 }], accepted)[0]!.verdict).toBe('unconfirmed');
    // A flag wins over the record for its device.
    const byFlag = acceptedKeys([parseAcceptKeyFlag(`b=${fp('X')}`)], [...accepted.values()], new Set(['a', 'b']));
    expect(judgeHostKeys(seen.slice(0, 2), byFlag).map((j) => j.verdict)).toEqual(['accepted', 'accepted']);
  });

  it('the second command is this command with the record as --accept-scanned-keys (an earlier one replaced), quoted for the shell', () => {
    expect(
      secondCommandOf(
        ['init', '--host', 'a=u@h', '--accept-scanned-keys', 'old.json', '--force'],
        '/x/fleet.init-scanned-keys.json',
      ),
    ).toBe('wavegate init --host a=u@h --force --accept-scanned-keys /x/fleet.init-scanned-keys.json');
    expect(secondCommandOf(['init', '--accept-scanned-keys', '--profiles', 'my dir'], '/x/r.json')).toBe(
      `wavegate init --profiles 'my dir' --accept-scanned-keys /x/r.json`,
    );
  });
});
