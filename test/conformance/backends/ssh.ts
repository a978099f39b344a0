import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync } from 'node:fs';
import { PROJECT_ROOT } from '../../../intake/package-layout';
import { sshEd25519Key } from '../../../core/receipt';
import { join } from 'node:path';
import { applyToDevice, EnvelopeRejected } from '../../../device/steps';
import type { RevisionSteps } from '../../../core/rollout/input';
import { demoDevices, startFleet, type Fleet } from '../../../sim';
import { startSshdFleet, type SshdFleet } from '../../support/sshd';
import type { ConformanceBackend, SuiteContext } from '../backend';

/** What an SSH backend needs of its devices: where each is, and its pinned host key. */
interface SshDevice {
  id: string;
  host: string;
  port: number;
  user: string;
  hostKey: string;
  clientKey: string;
  home: string;
  /** Its receipt key's `ssh-ed25519 …` line and the signer command (the shipped script over its own state directory). */
  receipts?: { key: string; command: string };
}

/** The receipt signer as shipped (device/receipt-signer/): the documented set-up runs it through sudo as root. */
const SIGNER = join(PROJECT_ROOT, 'device', 'receipt-signer', 'wavegate-sign-receipt');

/**
 * The SSH channel, over any SSH server that runs each device's commands in its own $HOME: the worker
 * dials it with the inventory's pinned host key and key file. Crashing the channel is crashing the
 * worker (SIGKILL): the detached apply runs on and the restarted worker's retry reattaches to it.
 */
abstract class SshBackend implements ConformanceBackend {
  readonly transport = 'ssh' as const;
  abstract readonly name: string;
  protected devices = new Map<string, SshDevice>();
  abstract start(ctx: SuiteContext, ids: readonly string[]): Promise<void>;
  abstract stop(): Promise<void>;

  protected dev(id: string): SshDevice {
    const d = this.devices.get(id);
    if (!d) throw new Error(`conformance: no device ${id}`);
    return d;
  }
  home(id: string): string {
    return this.dev(id).home;
  }
  inventoryEntry(id: string): Record<string, unknown> {
    const d = this.dev(id);
    return {
      id,
      host: d.host,
      port: d.port,
      user: d.user,
      ssh: { hostKey: d.hostKey, key: d.clientKey },
      ...(d.receipts ? { receipts: d.receipts } : {}),
    };
  }
  receiptKey(id: string): { kind: 'ssh'; publicKey: Uint8Array } {
    const line = this.dev(id).receipts?.key;
    const publicKey = line ? sshEd25519Key(line) : undefined;
    if (!publicKey) throw new Error(`conformance: no receipt key for ${id}`);
    return { kind: 'ssh', publicKey };
  }
  /**
   * Enrol every device's receipt key as wavegate-receipt-setup does, in a state directory of the device's user
   * alone (0700, the key 0600): the devices here log in as this user, so the signer runs without sudo.
   */
  protected enrolReceipts(ctx: SuiteContext): void {
    for (const d of this.devices.values()) {
      const dir = join(ctx.scratch, 'receipt-keys', d.id);
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      chmodSync(dir, 0o700);
      execFileSync('ssh-keygen', [
        '-q',
        '-t',
        'ed25519',
        '-N',
        '',
        '-C',
        `wavegate-receipt ${d.id}`,
        '-f',
        join(dir, 'key'),
      ]);
      const key = readFileSync(join(dir, 'key.pub'), 'utf8').trim().split(/\s+/).slice(0, 2).join(' ');
      d.receipts = { key, command: `/bin/sh ${SIGNER} ${dir}` };
    }
  }
  boardArgs(): string[] {
    return [];
  }
  async crashAndRestart(ctx: SuiteContext): Promise<void> {
    await ctx.worker.kill();
    await ctx.worker.restart();
  }
  async applyOutsideRollout(ctx: SuiteContext, id: string, steps: RevisionSteps): Promise<string> {
    const d = this.dev(id);
    try {
      const r = await applyToDevice(
        {
          id,
          host: d.host,
          port: d.port,
          user: d.user,
          pool: 'conf',
          class: 'edge',
          ssh: { hostKey: d.hostKey, key: d.clientKey },
        },
        steps,
        { commandTimeoutMs: 60_000, profilesRoot: ctx.profilesRoot, requireEnvelope: true },
      );
      return r.outcome;
    } catch (err) {
      if (err instanceof EnvelopeRejected) return err.reason;
      throw err;
    }
  }
}

/** The SSH channel over the simulator (sim/): ssh2 servers in this process, a real /bin/sh per command. */
export class SimBackend extends SshBackend {
  readonly name = 'ssh (simulator)';
  private fleet: Fleet | undefined;
  async start(ctx: SuiteContext, ids: readonly string[]): Promise<void> {
    const specs = demoDevices(ids.length).map((spec, i) => ({ ...spec, id: ids[i]! }));
    const fleet = await startFleet({ devices: specs, dir: join(ctx.scratch, 'sim') });
    this.fleet = fleet;
    for (const d of fleet.devices) {
      await fleet.ensureSandbox(d.id);
      this.devices.set(d.id, {
        id: d.id,
        host: d.host,
        port: d.port,
        user: fleet.user,
        hostKey: d.hostKeyFingerprint,
        clientKey: fleet.clientKeyPath,
        home: d.sandbox,
      });
    }
    this.enrolReceipts(ctx);
  }
  async stop(): Promise<void> {
    await this.fleet?.stop();
  }
}

/** The SSH channel over real OpenSSH sshd on 127.0.0.1 (test/support/sshd.ts), one per device. */
export class OpenSshBackend extends SshBackend {
  readonly name = 'ssh (OpenSSH sshd)';
  private fleet: SshdFleet | undefined;
  async start(ctx: SuiteContext, ids: readonly string[]): Promise<void> {
    const fleet = await startSshdFleet({ dir: join(ctx.scratch, 'sshd'), ids: [...ids] });
    this.fleet = fleet;
    for (const d of fleet.devices)
      this.devices.set(d.id, {
        id: d.id,
        host: d.host,
        port: d.port,
        user: d.user,
        hostKey: d.hostKeyFingerprint,
        clientKey: fleet.clientKeyPath,
        home: d.home,
      });
    this.enrolReceipts(ctx);
  }
  async stop(): Promise<void> {
    await this.fleet?.stop();
  }
}
