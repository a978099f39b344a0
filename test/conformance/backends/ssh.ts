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
}

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
    return { id, host: d.host, port: d.port, user: d.user, ssh: { hostKey: d.hostKey, key: d.clientKey } };
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
  }
  async stop(): Promise<void> {
    await this.fleet?.stop();
  }
}
