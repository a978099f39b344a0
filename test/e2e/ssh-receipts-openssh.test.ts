import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { readAuditFile } from '../../audit/file';
import { parseReceipt, sshEd25519Key, sshsigArmor } from '../../core/receipt';
import type { DeviceTarget } from '../../core/rollout-state';
import { envelopeDigestOf } from '../../core/twin';
import { checkReceipt, receiptExpectation } from '../../device/receipt-check';
import { connectDevice } from '../../device/transport';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { rolloutInputFor } from '../support/harness';
import { realRollouts } from '../support/real-rollouts';
import { startSshdFleet, type SshdFleet } from '../support/sshd';

/**
 * The documented set-up of SSH receipts (docs/operations.md, "Receipts from SSH devices") on real OpenSSH sshd
 * devices: a login that is not root, the device key made by wavegate-receipt-setup (root's, 0600 in a 0700
 * directory: the login cannot read it), the signer allowed to the login by one sudoers rule that pins its state
 * directory. A rollout over them: every device's trail entry holds a receipt that verifies under its enrolled key
 * (checkReceipt, and ssh-keygen -Y verify).
 */
const SETUP = join(PROJECT_ROOT, 'device', 'receipt-signer', 'wavegate-receipt-setup');
const LOGIN = `wgrcpt${process.pid % 100_000}`;
const SUDOERS = `/etc/sudoers.d/wavegate-receipt-test-${process.pid}`;
const IDS = ['os-1', 'os-2'];

let sshd: SshdFleet | undefined;
const enrolled = new Map<string, { line: string; command: string; dir: string }>();

const real = realRollouts('ssh-receipts-openssh', {
  async prepare() {
    expect(process.getuid?.()).toBe(0);
    spawnSync('userdel', [LOGIN]);
    // A password that is no password but not a locked account ('*', not '!'): sshd without PAM refuses a locked one.
    execFileSync('useradd', [
      '--password',
      '*',
      '--no-create-home',
      '--home-dir',
      '/nonexistent',
      '--shell',
      '/bin/sh',
      LOGIN,
    ]);
  },
  async cleanup() {
    await sshd?.stop();
    rmSync(SUDOERS, { force: true });
    spawnSync('userdel', [LOGIN]);
  },
});

/** wavegate-receipt-setup on each device (as root), its sudoers rule installed as the operator would. */
function setUpReceipts(fleet: SshdFleet): void {
  const rules: string[] = [];
  for (const d of fleet.devices) {
    const dir = join(d.home, '..', 'receipt');
    const out = execFileSync('sh', [
      SETUP,
      '--login',
      LOGIN,
      '--dir',
      dir,
      '--signer',
      join(d.home, '..', 'sbin', 'wavegate-sign-receipt'),
    ]).toString();
    const rule = out.split('\n').find((l) => l.startsWith(`${LOGIN} ALL=(root) NOPASSWD: `));
    const line = /\n {2}key: "(ssh-ed25519 [^"]+)"\n/.exec(out)?.[1];
    const command = /\n {2}command: "([^"]+)"\n/.exec(out)?.[1];
    if (!rule || !line || !command) throw new Error(`setup printed no rule, key or command:\n${out}`);
    rules.push(rule);
    enrolled.set(d.id, { line, command, dir });
  }
  writeFileSync(SUDOERS, `${rules.join('\n')}\n`, { mode: 0o440 });
  execFileSync('visudo', ['-c', '-q', '-f', SUDOERS]);
}

describe('SSH receipts over real OpenSSH, the key out of the login’s reach', () => {
  it('the login cannot read the key nor point the signer elsewhere; a rollout’s receipts verify', async () => {
    // sshd reads the login's authorized_keys as the login: it must get through the scratch directory.
    chmodSync(real.dir, 0o711);
    sshd = await startSshdFleet({ dir: join(real.dir, 'sshd'), ids: IDS, login: LOGIN });
    setUpReceipts(sshd);

    const first = sshd.devices[0]!;
    const target: DeviceTarget = {
      id: first.id,
      host: first.host,
      port: first.port,
      user: LOGIN,
      pool: 'lab',
      class: 'server',
      ssh: { hostKey: first.hostKeyFingerprint, key: sshd.clientKeyPath },
    };
    const session = await connectDevice(target);
    try {
      const { dir, command } = enrolled.get(first.id)!;
      const whoami = await session.exec('id -u', { timeoutMs: 10_000 });
      expect(Number(whoami.stdout.trim())).toBeGreaterThan(0);
      const cat = await session.exec(`cat ${dir}/key`, { timeoutMs: 10_000 });
      expect(cat.code).not.toBe(0);
      expect(cat.stdout).toBe('');
      expect(cat.stderr).toMatch(/Permission denied/);
      // Another state directory (of the login's own making) is not the one the rule allows.
      const signer = command.split(' ')[2]!;
      const elsewhere = await session.exec(`mkdir -p "$HOME/own" && sudo -n ${signer} "$HOME/own" </dev/null`, {
        timeoutMs: 10_000,
      });
      expect(elsewhere.code).not.toBe(0);
      expect(elsewhere.stderr).toMatch(/sudo: a password is required|not allowed/);
      // Nor can it write the device's record.
      expect((await session.exec(`echo x > ${dir}/last`, { timeoutMs: 10_000 })).code).not.toBe(0);
    } finally {
      session.close();
    }

    const inventoryPath = join(real.dir, 'inventory.yaml');
    writeFileSync(
      inventoryPath,
      stringify({
        pools: { lab: { disruptionBudget: 1 } },
        defaults: { user: LOGIN, pool: 'lab', runtimes: ['motd'], ssh: { key: sshd.clientKeyPath } },
        devices: sshd.devices.map((d) => ({
          id: d.id,
          host: d.host,
          port: d.port,
          ssh: { hostKey: d.hostKeyFingerprint },
          receipts: { key: enrolled.get(d.id)!.line, command: enrolled.get(d.id)!.command },
        })),
      }),
    );
    const input = rolloutInputFor(
      real.dir,
      {
        phases: [
          { canary: '1 device', gateMs: 0 },
          { bulk: 'remainder', gateMs: 0 },
        ],
      },
      inventoryPath,
      'rollout:ssh-receipts-openssh',
    );
    const handle = await real.start(input);
    expect((await handle.result()).state).toBe('completed');
    const run = (await handle.describe()).runId;
    const entries = readAuditFile(real.auditDir, input.rolloutId)
      .filter((r) => r.event === 'devices.outcome')
      .flatMap((r) => (r.evidence as { devices?: Array<Record<string, unknown>> } | null)?.devices ?? [])
      .filter((d) => d.receipt !== undefined);
    expect(entries.map((d) => d.id).sort()).toEqual(IDS);
    const requested = envelopeDigestOf(input.steps.envelope);
    for (const entry of entries) {
      const id = String(entry.id);
      const { line, dir } = enrolled.get(id)!;
      const expected = receiptExpectation(
        id,
        'ssh',
        { rollout: input.rolloutId, run, activity: String(entry.request) },
        { profile: 'demo', revision: 2, requested },
      );
      const checked = checkReceipt(
        entry.receipt,
        { ...expected, phase: entry.phaseIndex as number },
        sshEd25519Key(line),
      );
      expect(checked, id).toMatchObject({ ok: true, receipt: { fields: { result: 'applied', counter: 1 } } });
      // The device's own record is the receipt that left it.
      expect(readFileSync(join(dir, 'last'), 'utf8')).toBe(entry.receipt);
      // Anyone can check it with OpenSSH alone.
      const parsed = parseReceipt(entry.receipt);
      if (!parsed.ok) throw new Error(parsed.problem);
      writeFileSync(join(real.dir, `${id}.allowed`), `${id} ${line}\n`);
      writeFileSync(join(real.dir, `${id}.sig`), sshsigArmor(parsed.receipt.sig));
      const verify = spawnSync(
        'ssh-keygen',
        ['-Y', 'verify', '-f', join(real.dir, `${id}.allowed`), '-I', id, '-n', 'wavegate-receipt'].concat([
          '-s',
          join(real.dir, `${id}.sig`),
        ]),
        { input: parsed.receipt.body, encoding: 'utf8' },
      );
      expect(verify.stdout).toContain(`Good "wavegate-receipt" signature for ${id}`);
    }
  }, 240_000);
});
