import { spawn } from 'node:child_process';
import { copyFileSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanHostKey } from '../../cli/commands/init';
import { sshFingerprint } from '../../intake/known-hosts';
import { keygen } from '../../sim/openssh';
import { runCli, WAVEGATE_BIN, type CliRun } from '../support/cli';
import { scratchDir } from '../support/harness';
import { startSshdFleet, type SshdDevice, type SshdFleet } from '../support/sshd';
import { until } from '../support/until';

/**
 * `wavegate fleet repin <device>` on real sshd hosts on 127.0.0.1: the inventory pins each host's key;
 * one host is re-keyed (a new host key on disk: sshd reads it afresh per connection); repin shows the
 * old pin and the new key and writes the inventory only with a confirmation that names that exact key
 * (--accept, or y on a terminal), keeping the rest of the file, comments included.
 */
describe('wavegate fleet repin', () => {
  const scratch = scratchDir('fleet-repin');
  const sshdDir = join(scratch.dir, 'sshd');
  let sshd: SshdFleet;
  let a: SshdDevice;
  let b: SshdDevice;
  /** b's key after the re-key. */
  let rekeyed = '';
  const OTHER = `SHA256:${'B'.repeat(43)}`;

  /** a pinned on its own entry; b by defaults.ssh.hostKey (shared); an agent device beside them. */
  const inventoryText = () => `# fleet of the repin test: this comment stays
pools:
  web: { disruptionBudget: 50% }
defaults:
  user: ${sshd.user}
  ssh: { key: ${sshd.clientKeyPath}, hostKey: "${b.hostKeyFingerprint}" } # b's pin comes from here
devices:
  - { id: ${a.id}, host: 127.0.0.1, port: ${a.port}, pool: web, ssh: { hostKey: "${a.hostKeyFingerprint}" } } # a pinned here
  - id: ${b.id}
    host: 127.0.0.1
    port: ${b.port} # b's port
    pool: web
  - id: agent-01
    pool: web
    transport: agent
    agentKey: "ed25519:${'A'.repeat(43)}="
`;
  let n = 0;
  const freshInventory = () => {
    const path = join(scratch.dir, `fleet-${++n}.yaml`);
    writeFileSync(path, inventoryText(), { mode: 0o644 });
    return path;
  };
  const repin = (inventory: string, id: string, extra: string[] = []) =>
    runCli(['fleet', 'repin', id, '--inventory', inventory, ...extra], { cwd: scratch.dir });
  const devicesOf = (inventory: string) =>
    (parse(readFileSync(inventory, 'utf8')) as { devices: Array<{ id: string; ssh?: { hostKey?: string } }> }).devices;

  beforeAll(async () => {
    sshd = await startSshdFleet({ dir: sshdDir, ids: ['r-1', 'r-2'] });
    [a, b] = sshd.devices as [SshdDevice, SshdDevice];
    // b is reinstalled: a new host key, presented from the next connection on.
    const key = join(sshdDir, b.id, 'ssh_host_ed25519_key');
    for (const f of [key, `${key}.pub`]) {
      copyFileSync(f, `${f}.orig`);
      rmSync(f);
    }
    keygen(key, `rekeyed-${b.id}`);
    rekeyed = sshFingerprint(Buffer.from(readFileSync(`${key}.pub`, 'utf8').trim().split(/\s+/)[1]!, 'base64'));
    expect(rekeyed).not.toBe(b.hostKeyFingerprint);
    await until(
      `${b.id} presenting its new key`,
      async () => ((await scanHostKey(b.host, b.port, 5000)).fingerprint === rekeyed ? true : undefined),
      30_000,
    );
  }, 60_000);
  afterAll(async () => {
    await sshd?.stop();
    scratch.cleanup();
  });

  it('a host presenting the pinned key: says so, exit 0, the file untouched', async () => {
    const inventory = freshInventory();
    const run = await repin(inventory, a.id);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain(
      `${a.id} (127.0.0.1:${a.port}) presents ssh-ed25519 ${a.hostKeyFingerprint}, the key it is pinned to (ssh.hostKey of the device in ${inventory}): nothing to re-pin, nothing written`,
    );
    expect(readFileSync(inventory, 'utf8')).toBe(inventoryText());
  });

  it('a re-keyed host without a confirmation: prints the old pin, the new key and the exact command that pins it; exit 1, nothing written', async () => {
    const inventory = freshInventory();
    const run = await repin(inventory, b.id);
    expect(run.code, run.stderr).toBe(1);
    expect(run.stdout).toContain(
      `  pinned:   ${b.hostKeyFingerprint}  (defaults.ssh.hostKey in ${inventory}, shared with other devices`,
    );
    expect(run.stdout).toContain(`  presents: ssh-ed25519 ${rekeyed}`);
    expect(run.stdout).toContain('ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub');
    expect(run.stdout).toContain(`  wavegate fleet repin ${b.id} --inventory ${inventory} --accept ${rekeyed}`);
    expect(readFileSync(inventory, 'utf8')).toBe(inventoryText());
  });

  it('--accept naming another key than the host presents: exit 2 naming both, nothing written', async () => {
    const inventory = freshInventory();
    const run = await repin(inventory, b.id, ['--accept', b.hostKeyFingerprint]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain(
      `CONFLICT: --accept ${b.hostKeyFingerprint}: ${b.id} (127.0.0.1:${b.port}) presents ssh-ed25519 ${rekeyed}, not the key you accepted; nothing was written`,
    );
    // Also when the host still presents its pinned key: the operator checked something else.
    const unchangedHost = await repin(inventory, a.id, ['--accept', OTHER]);
    expect(unchangedHost.code).toBe(2);
    expect(unchangedHost.stderr).toContain(
      `--accept ${OTHER}: ${a.id} (127.0.0.1:${a.port}) presents ssh-ed25519 ${a.hostKeyFingerprint}`,
    );
    expect(readFileSync(inventory, 'utf8')).toBe(inventoryText());
  });

  it('--accept with the exact new key: pins it on that device alone, the rest of the file (comments, defaults, the other devices, its mode) kept; a second run finds nothing to do', async () => {
    const inventory = freshInventory();
    const run = await repin(inventory, b.id, ['--accept', rekeyed]);
    expect(run.code, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toContain(
      `pinned ${b.id} to ssh-ed25519 ${rekeyed} in ${inventory} (ssh.hostKey; --accept); was ${b.hostKeyFingerprint}`,
    );
    const after = readFileSync(inventory, 'utf8');
    expect(devicesOf(inventory).map((d) => [d.id, d.ssh?.hostKey])).toEqual([
      [a.id, a.hostKeyFingerprint],
      [b.id, rekeyed],
      ['agent-01', undefined],
    ]);
    // Only b's entry gained its pin: every line of the file before is still there, in order.
    const before = inventoryText().split('\n');
    const lines = after.split('\n');
    expect(lines.filter((l) => !before.includes(l))).toEqual([`    ssh:`, `      hostKey: ${rekeyed}`]);
    expect(lines.filter((l) => before.includes(l))).toEqual(before);
    expect(statSync(inventory).mode & 0o777).toBe(0o644);

    const again = await repin(inventory, b.id);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain(
      `presents ssh-ed25519 ${rekeyed}, the key it is pinned to (ssh.hostKey of the device in ${inventory})`,
    );
    // The pinned inventory is one the fleet commands read: b now answers over SSH with the new pin.
    expect(readFileSync(inventory, 'utf8')).toBe(after);
  });

  it('on a terminal: asks y/N; anything but y writes nothing, y pins', async () => {
    const onTerminal = (inventory: string, answer: string): Promise<CliRun> =>
      new Promise((done) => {
        // script(1) gives the command a pseudo-terminal; the answer is typed once the question is shown.
        const command = [process.execPath, WAVEGATE_BIN, 'fleet', 'repin', b.id, '--inventory', inventory]
          .map((w) => `'${w}'`)
          .join(' ');
        const child = spawn('script', ['-qec', command, '/dev/null'], { cwd: scratch.dir });
        let stdout = '';
        let asked = false;
        child.stdout.on('data', (c: Buffer) => {
          stdout += c.toString();
          if (!asked && stdout.includes('[y/N]')) {
            asked = true;
            child.stdin.write(`${answer}\r`);
          }
        });
        child.on('exit', (code) => done({ code, stdout, stderr: '' }));
      });
    const inventory = freshInventory();
    const no = await onTerminal(inventory, 'n');
    expect(no.stdout).toContain(`Pin ${rekeyed} for ${b.id} in ${inventory}? [y/N]`);
    expect(no.stdout).toContain('not pinned: nothing written');
    expect(no.code).toBe(1);
    expect(readFileSync(inventory, 'utf8')).toBe(inventoryText());
    const yes = await onTerminal(inventory, 'y');
    expect(yes.code, yes.stdout).toBe(0);
    expect(yes.stdout).toContain(
      `pinned ${b.id} to ssh-ed25519 ${rekeyed} in ${inventory} (ssh.hostKey; confirmed on the terminal)`,
    );
    expect(devicesOf(inventory).find((d) => d.id === b.id)?.ssh?.hostKey).toBe(rekeyed);
  });

  it('refusals before any host is dialled: an unknown device, an agent device, an inventory over HTTP, a malformed --accept', async () => {
    const inventory = freshInventory();
    const unknown = await repin(inventory, 'web-99');
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain(
      `<device> "web-99": no such device in the inventory ${inventory} (devices: ${a.id}, ${b.id}, agent-01)`,
    );
    const agent = await repin(inventory, 'agent-01');
    expect(agent.code).toBe(2);
    expect(agent.stderr).toContain('is an agent (transport: agent)');
    expect(agent.stderr).toContain('wavegate agent pin --key <its identity key file>');
    const overHttp = await runCli(['fleet', 'repin', b.id, '--inventory-url', 'https://registry.example/devices'], {
      cwd: scratch.dir,
    });
    expect(overHttp.code).toBe(2);
    expect(overHttp.stderr).toContain(
      '--inventory-url https://registry.example/devices: an inventory served over HTTP is not a file repin can write',
    );
    const badAccept = await repin(inventory, b.id, ['--accept', 'SHA256:short']);
    expect(badAccept.code).toBe(2);
    expect(badAccept.stderr).toContain('--accept "SHA256:short": must be the new fingerprint');
    expect(readFileSync(inventory, 'utf8')).toBe(inventoryText());
  });
});
