import { readdirSync } from 'node:fs';
import * as net from 'node:net';
import { MockActivityEnvironment } from '@temporalio/testing';
import { ApplicationFailure, type Logger } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities } from '../../activities';
import { applyToDevice } from '../../device/steps';
import { targetOf } from '../../device/fleet';
import { connectDevice, transportFor, TransportError } from '../../device/transport';
import { parseInventory } from '../../core/inventory';
import type { DeviceSnapshot, DeviceTarget } from '../../core/rollout-state';
import { HISTORIES_DIR, loadHistory } from '../support/histories';
import { rejection } from '../support/refusal';

/**
 * The transport seam: which transport a DeviceTarget names, what a missing name means, and how a name
 * the worker has no transport for is refused (before anything is contacted).
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
    expect(transportFor(target()).name).toBe('ssh');
    expect(transportFor(target('ssh')).name).toBe('ssh');
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
      if (snapshot.transport === 'agent') continue;
      expect(transportFor(snapshot).name).toBe('ssh');
    }
  });

  it('an unknown transport is a non-retryable config error naming the device and the value, and nothing is contacted', async () => {
    const before = connections;
    expect(() => transportFor(target('ftp'))).toThrow(TransportError);
    const err = await rejection(connectDevice(target('ftp')), TransportError);
    expect(err).toBeInstanceOf(TransportError);
    expect(err.kind).toBe('config');
    expect(err.retryable).toBe(false);
    expect(err.message).toBe(
      'dev-1: transport "ftp": not a transport this worker knows; allowed: "ssh" (set transport on the device in the inventory)',
    );
    expect(connections).toBe(before);
  });

  it('an agent device is never dialled: a session to it is refused the same way (it is reached through its twin)', async () => {
    const err = await rejection(connectDevice(target('agent')), TransportError);
    expect(err).toBeInstanceOf(TransportError);
    expect(err.kind).toBe('config');
    expect(err.message).toContain(
      'dev-1: transport "agent": an agent device is never dialled (it pulls from its twin device:<id>',
    );
  });

  it('an apply to a device with an unsupported transport fails as a non-retryable Transport.config failure', async () => {
    const steps = { profile: 'seam-test', revision: 1, apply: 'true', verify: 'true', payload: [] };
    const before = connections;
    expect(await rejection(applyToDevice(target('agent'), steps, { commandTimeoutMs: 1_000 }), Error)).toBeInstanceOf(
      TransportError,
    );

    // `toFailure` turns the moved TransportError into the failure type workflows see.
    const acts = createActivities({ allowUnsigned: true });
    const quiet: Logger = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };
    const failure = await rejection(
      new MockActivityEnvironment(undefined, { logger: quiet }).run(acts.applyRevision, {
        device: target('ftp'),
        steps,
        commandTimeoutMs: 1_000,
      }),
      ApplicationFailure,
    );
    expect(failure).toBeInstanceOf(ApplicationFailure);
    expect(failure.type).toBe('Transport.config');
    expect(failure.nonRetryable).toBe(true);
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
