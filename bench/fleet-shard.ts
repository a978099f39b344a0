/**
 * One shard of the benchmark fleet, in its own process: the simulator (sim/) keeps ~1,000 devices per
 * process, so a 10,000-device fleet is ten of these. Driven over IPC by
 * bench/rollout-scale.ts:
 *   parent → { devices: SimDeviceSpec[], dir, clientKeyPath, applyMs? }   start the fleet; with applyMs
 *                                                               every device's `install` (the demo apply's
 *                                                               only command) sleeps that long first
 *   shard  → { ready: ShardDevice[] }                            every device's address and host key pin
 *   parent → { reset: true }                                     remove what a rollout wrote (content, marker, staging)
 *   shard  → { resetDone: true }
 *   parent → { count: true }                                     how many devices have marker 2 and the r2 content
 *   shard  → { counted: { marker2: number, content2: number, commands: number } }
 *   parent → { stop: true }                                      stop and exit
 */
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { startFleet, type Fleet, type SimDeviceSpec } from '../sim';

export interface ShardDevice {
  id: string;
  host: string;
  port: number;
  hostKeyFingerprint: string;
  sandbox: string;
  spec: SimDeviceSpec;
}

export type ShardRequest =
  | { devices: SimDeviceSpec[]; dir: string; clientKeyPath: string; applyMs?: number }
  | { reset: true }
  | { count: true }
  | { stop: true };
export type ShardReply =
  | { ready: ShardDevice[] }
  | { resetDone: true }
  | { counted: { marker2: number; content2: number; commands: number } }
  | { error: string };

const MOTD_R2 = 'wavegate demo revision 2 - rolled out in phases, gated and audited';

async function forEachLimit<T>(items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
}

const readTrimmed = (path: string) =>
  readFile(path, 'utf8').then(
    (s) => s.trim(),
    () => '',
  );

let fleet: Fleet | undefined;
const send = (reply: ShardReply) => process.send!(reply);

process.on('message', (request: ShardRequest) => {
  void (async () => {
    try {
      if ('devices' in request) {
        fleet = await startFleet({ devices: request.devices, dir: request.dir, clientKeyPath: request.clientKeyPath });
        if (request.applyMs) {
          // A slow apply, by the device itself: the wrapper is first on the sandbox's PATH, so the signed
          // demo revision runs unchanged and takes applyMs longer, whoever runs it (wavegate or the loop).
          const wrapper = `#!/bin/sh\nsleep ${(request.applyMs / 1000).toFixed(3)}\nexec /usr/bin/install "$@"\n`;
          const f = fleet;
          await forEachLimit(f.devices, 32, async (d) =>
            writeFile(join(await f.ensureSandbox(d.id), '.sim', 'bin', 'install'), wrapper, { mode: 0o755 }),
          );
        }
        send({
          ready: fleet.devices.map((d) => ({
            id: d.id,
            host: d.host,
            port: d.port,
            hostKeyFingerprint: d.hostKeyFingerprint,
            sandbox: d.sandbox,
            spec: d.spec,
          })),
        });
      } else if ('reset' in request) {
        await forEachLimit(fleet!.devices, 32, async (d) => {
          await rm(join(d.sandbox, 'etc'), { recursive: true, force: true });
          await rm(join(d.sandbox, '.wavegate'), { recursive: true, force: true });
        });
        fleet!.resetCounters();
        send({ resetDone: true });
      } else if ('count' in request) {
        let marker2 = 0;
        let content2 = 0;
        await forEachLimit(fleet!.devices, 32, async (d) => {
          if ((await readTrimmed(join(d.sandbox, '.wavegate/profiles/demo/revision'))) === '2') marker2++;
          if ((await readTrimmed(join(d.sandbox, 'etc/motd'))) === MOTD_R2) content2++;
        });
        send({ counted: { marker2, content2, commands: fleet!.totalCommands() } });
      } else if ('stop' in request) {
        await fleet?.stop();
        process.exit(0);
      }
    } catch (err) {
      send({ error: (err as Error).stack ?? String(err) });
    }
  })();
});
process.on('disconnect', () => {
  void (fleet?.stop() ?? Promise.resolve()).then(() => process.exit(0));
});
