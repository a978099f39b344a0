import { readdirSync } from 'node:fs';
import * as net from 'node:net';
import { MockActivityEnvironment } from '@temporalio/testing';
import { ApplicationFailure, type Logger } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities } from '../../activities';
import { applyToDevice } from '../../device/steps';
import { targetOf } from '../../device/fleet';
import { connectDevice, TransportError } from '../../device/transport';
import { channelFor } from '../../device/channel';
import { parseInventory } from '../../core/inventory';
import type { DeviceSnapshot, DeviceTarget } from '../../core/rollout-state';
import { HISTORIES_DIR, loadHistory } from '../support/histories';
import { refusal, rejection } from '../support/refusal';

/**
 * The transport seam: which channel a DeviceTarget's transport names (device/channel/index.ts, the one table of
 * transport names), what a missing name means, how a name the worker has no channel for is refused, and that a
 * device that is never dialled cannot be (all before anything is contacted).
 */
describe('transport seam', () => {
  // A TCP listener standing in for a device: it only counts who connects.
  let listener: net.Server;
  let port: number;
  let connections = 0;
  beforeAll(async () => {
    listener = net.createServer((sock) => {
      connections++;
      sock.destroy();
    });
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
    port = (listener.address() as net.AddressInfo).port;
  });
  afterAll(() => listener.close());

  const target = (transport?: string): DeviceTarget => ({
    id: 'dev-1',
    host: '127.0.0.1',
    port,
    user: 'ops',
    pool: 'pool-a',
    class: 'server',
    ...(transport === undefined ? {} : { transport: transport as DeviceTarget['transport'] }),
    ssh: { hostKey: `SHA256:${'A'.repeat(43)}`, key: '/nonexistent/key' },
  });

  it('a target without a transport field is reached over ssh', () => {
    expect(channelFor(target()).name).toBe('ssh');
    expect(channelFor(target('ssh')).name).toBe('ssh');
    expect(channelFor(target('agent')).name).toBe('agent');
  });

  it('snapshots in recorded histories carry no transport field and resolve to ssh', () => {
    const snapshots: DeviceSnapshot[] = [];
    // The archived histories too (archive/<release>/), read here as data only: the current code replays none of them.
    const files = readdirSync(HISTORIES_DIR, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.json'));
    for (const file of files) {
      for (const event of loadHistory(file).history.events ?? []) {
        const data = event.activityTaskCompletedEventAttributes?.result?.payloads?.[0]?.data;
        if (!data) continue;
        const value = JSON.parse(Buffer.from(data).toString('utf8')) as { devices?: unknown };
        if (Array.isArray(value?.devices))
          snapshots.push(
            ...(value.devices as DeviceSnapshot[]).filter((d) => d && typeof d === 'object' && 'ssh' in d),
          );
      }
    }
    // Histories recorded before the field existed (all archived) carry none; those recorded since carry the inventory's:
    // 'ssh', or 'agent' for pull devices (reached through their twin, never an SSH session). None and 'ssh' are ssh.
    expect(snapshots.filter((d) => !('transport' in d)).length).toBeGreaterThan(0);
    for (const snapshot of snapshots) {
      if ('transport' in snapshot) expect(['ssh', 'agent']).toContain(snapshot.transport);
      expect(channelFor(snapshot).name).toBe(snapshot.transport ?? 'ssh');
    }
  });

  it('an unknown transport is a non-retryable config error naming the device and the value, and nothing is contacted', async () => {
    const before = connections;
    const err = refusal(() => channelFor(target('ftp')), TransportError);
    expect(err.kind).toBe('config');
    expect(err.retryable).toBe(false);
    expect(err.message).toBe(
      'dev-1: transport "ftp": not a transport this worker knows; allowed: "ssh", "agent" (set transport on the device in the inventory)',
    );
    // The activity chooses the channel inside its try: the workflow sees a non-retryable Transport.config failure.
    const acts = createActivities({ allowUnsigned: true });
    const quiet: Logger = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };
    const failure = await rejection(
      new MockActivityEnvironment(undefined, { logger: quiet }).run(acts.applyRevision, {
        device: target('ftp'),
        steps: { profile: 'seam-test', revision: 1, apply: 'true', verify: 'true', payload: [] },
        commandTimeoutMs: 1_000,
      }),
      ApplicationFailure,
    );
    expect(failure.type).toBe('Transport.config');
    expect(failure.nonRetryable).toBe(true);
    expect(failure.message).toContain('dev-1: transport "ftp": not a transport this worker knows');
    expect(connections).toBe(before);
  });

  it('an agent device is never dialled: its target carries no ssh settings, and a session or an apply over SSH to it is refused', async () => {
    const inventory = parseInventory(
      {
        defaults: { user: 'ops', pool: 'web' },
        devices: [{ id: 'dev-1', transport: 'agent', agentKey: `ed25519:${Buffer.alloc(32, 7).toString('base64')}` }],
      },
      'inventory.yaml',
    );
    // Pointed at the listener: a dial would count.
    const agent = { ...targetOf(inventory.devices[0]!), host: '127.0.0.1', port };
    expect(agent).not.toHaveProperty('ssh');
    const before = connections;
    const err = await rejection(connectDevice(agent), TransportError);
    expect(err.kind).toBe('config');
    expect(err.message).toBe(
      'dev-1: no ssh settings to dial it with (ssh.hostKey or ssh.knownHosts, and ssh.key or ssh.agent); set them on the device in the inventory',
    );
    const steps = { profile: 'seam-test', revision: 1, apply: 'true', verify: 'true', payload: [] };
    expect((await rejection(applyToDevice(agent, steps, { commandTimeoutMs: 1_000 }), TransportError)).kind).toBe(
      'config',
    );
    expect(connections).toBe(before);
  });

  it('targetOf carries the inventory device transport (default ssh)', () => {
    const inventory = parseInventory(
      {
        defaults: { user: 'ops', pool: 'web' },
        devices: [
          { id: 'a', host: 'h1' },
          { id: 'b', transport: 'agent', agentKey: `ed25519:${Buffer.alloc(32, 7).toString('base64')}` },
        ],
      },
      'inventory.yaml',
    );
    expect(inventory.devices.map((d) => targetOf(d).transport)).toEqual(['ssh', 'agent']);
  });
});
