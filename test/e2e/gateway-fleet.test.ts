import { randomBytes } from 'node:crypto';
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { gatewayClient } from '../../agent/gateway-client';
import { desireOnTwin, readTwin, twinStartOptions } from '../../clients/twin';
import type { RolloutStatus } from '../../contracts/rollout';
import { agentKeyPin } from '../../core/agent-auth';
import { keyPairFromSeed } from '../../core/signing';
import type { TwinView } from '../../core/twin';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { freePort } from '../../sim/ports';
import { runCli, spawnCliUntil, stopChild } from '../support/cli';
import { writeDemoSpec } from '../support/harness';
import { applyRunsIn, homeMarker, writeApplyTools } from '../support/device-home';
import { realRollouts } from '../support/real-rollouts';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy';
import { desiredRequest } from '../support/twin-agent';
import { until } from '../support/until';

/**
 * The pull transport at fleet scale (issue 29), with real processes: real `wavegate gateway` processes, each
 * caching its devices' twins and holding long-polls in its own memory, real `wavegate agent` processes over
 * local device homes, a dev server and a worker with the real activities. The demo profile r1 -> r2, signed,
 * each agent checking it against its own pins. Each device's apply runs are counted by an `install` wrapper
 * first on the agents' PATH (`$HOME/apply-runs`), which first sleeps `$HOME/slow` seconds when that file is there.
 */
const PROFILES = join(PROJECT_ROOT, 'profiles');
const LISTENING = /gateway listening on (http:\/\/\S+)/;
/** Behind the round-robin balancer. */
const BALANCED = ['f1', 'f2', 'f3', 'f4'];
/** Behind the gateway that is SIGKILLed while their applies run. */
const RESTARTED = ['k1', 'k2', 'k3'];
/** No agent: the test itself syncs as this device, with a key it pinned. */
const WAKER = 'w1';

interface GatewayProcess {
  child: ChildProcess;
  output: () => string;
  url: string;
}

describe('several gateways, held long-polls and a gateway restart, over real agents', () => {
  const children = new Set<ChildProcess>();
  let proxy: TcpProxy | undefined;
  const rollouts = realRollouts('gateway-fleet', {
    cleanup: async () => {
      await Promise.all([...children].map((c) => stopChild(c)));
      await proxy?.close();
    },
  });
  const dir = (...parts: string[]) => join(rollouts.dir, ...parts);
  const home = (d: string) => dir('homes', d);
  const stateDir = (d: string) => dir('state', d);
  /** The rollout completed with each of `devices` applied, at r2, its apply run exactly once. */
  const expectAppliedOnce = (status: RolloutStatus, devices: string[]) => {
    expect(status.state).toBe('completed');
    for (const d of devices) {
      expect(
        status.devices.find((x) => x.id === d),
        d,
      ).toMatchObject({ state: 'applied' });
      expect(homeMarker(home(d)), d).toBe(2);
      expect(applyRunsIn(home(d)), `${d} apply runs`).toHaveLength(1);
    }
  };
  const wakerKey = keyPairFromSeed(randomBytes(32));
  const pins = new Map<string, string>([[WAKER, agentKeyPin(wakerKey.publicKey)]]);
  /** The inventory of `devices`, all agent devices in one pool `pool` of that disruption budget. */
  const inventory = (name: string, devices: string[], pool: string, budget: number) => {
    const path = dir(`${name}.inventory.yaml`);
    const listed = devices.map((id) => ({ id, transport: 'agent', agentKey: pins.get(id), pool, class: 'edge' }));
    writeFileSync(path, stringify({ pools: { [pool]: { disruptionBudget: budget } }, devices: listed }));
    return path;
  };
  let gatewayInventory = '';

  async function startGateway(listen = '127.0.0.1:0'): Promise<GatewayProcess> {
    const started = await spawnCliUntil(
      ['gateway', '--listen', listen, '--inventory', gatewayInventory, '--profiles', PROFILES, ...rollouts.cliFlags()],
      LISTENING,
    );
    children.add(started.child);
    return { ...started, url: LISTENING.exec(started.output())![1]! };
  }
  async function startAgents(devices: string[], gateway: string): Promise<void> {
    await Promise.all(
      devices.map(async (d) => {
        const { child } = await spawnCliUntil(
          [
            'agent',
            '--device-id',
            d,
            '--gateway',
            gateway,
            '--trust',
            dir('device-pins'),
            '--state-dir',
            stateDir(d),
            '--key',
            join(stateDir(d), 'identity.key'),
            '--home',
            home(d),
          ],
          /syncing with the gateway/,
          120_000,
          { PATH: `${dir('bin')}:${process.env.PATH}` },
        );
        children.add(child);
      }),
    );
    // The rollout skips a device whose twin has never heard from it.
    await until(
      `${devices.join(', ')} seen by their twins`,
      async () =>
        (await Promise.all(devices.map((d) => readTwin(rollouts.env.client, d)))).every((v) => v?.lastSeenAt)
          ? true
          : undefined,
      60_000,
    );
  }
  /** `wavegate start` of demo r1 -> r2 over `inventoryPath`, in one phase: its id, and its final status. */
  async function rollout(
    name: string,
    inventoryPath: string,
    pool: string,
  ): Promise<{ id: string; finished: () => Promise<RolloutStatus> }> {
    const spec = writeDemoSpec(rollouts.dir, name, {
      phases: [{ bulk: 'remainder' }],
      gate: '1s',
      disruptionBudget: { [pool]: 1 },
    });
    const run = await rollouts.cli([
      'start',
      '-f',
      spec,
      '--inventory',
      inventoryPath,
      '--profiles',
      PROFILES,
      '--json',
    ]);
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
    const id = JSON.parse(run.stdout).rolloutId as string;
    return { id, finished: () => rollouts.env.client.workflow.getHandle(id).result() as Promise<RolloutStatus> };
  }
  const servedSyncs = (gateway: GatewayProcess, d: string) =>
    gateway
      .output()
      .split('\n')
      .filter((l) => l.startsWith(`${d} POST /v1/sync 200 `)).length;

  beforeAll(async () => {
    writeApplyTools(dir('bin'));
    // The devices' own pins for the demo profile: the release keys it is signed by.
    mkdirSync(dir('device-pins', 'demo'), { recursive: true });
    copyFileSync(join(PROFILES, 'demo', 'trust.yaml'), dir('device-pins', 'demo', 'trust.yaml'));
    await Promise.all(
      [...BALANCED, ...RESTARTED].map(async (d) => {
        mkdirSync(home(d), { recursive: true });
        const enrolled = await runCli(['agent', 'enroll', '--state-dir', stateDir(d)]);
        expect(enrolled.code, enrolled.stderr).toBe(0);
        pins.set(d, enrolled.stdout.trim());
      }),
    );
    gatewayInventory = inventory('gateways', [...pins.keys()], 'all', 1);
    // Enrolled before any rollout: a twin each, so no first sync converges a device to an earlier case's rollout.
    for (const d of [...BALANCED, ...RESTARTED])
      await rollouts.env.client.workflow.start('deviceTwinWorkflow', twinStartOptions(d, rollouts.worker.taskQueue));
  }, 180_000);

  afterEach(async () => {
    // Each case's gateways and agents go with it: the next case shares the machine with none of them.
    await Promise.all([...children].map((c) => stopChild(c)));
    children.clear();
    await proxy?.close();
    proxy = undefined;
  });

  it('two gateway processes behind one round-robin balancer serve one fleet: a rollout over 4 agents completes, every device applied once, both gateways served syncs', async () => {
    const gateways = [await startGateway(), await startGateway()];
    proxy = await startTcpProxy(gateways.map((g) => Number(new URL(g.url).port)));
    await startAgents(BALANCED, proxy.url);
    const { finished } = await rollout('balanced', inventory('balanced', BALANCED, 'lb', 1), 'lb');
    expectAppliedOnce(await finished(), BALANCED);
    // The load really was split: both gateways were handed connections and served syncs of the fleet's agents.
    expect(
      proxy.given.every((n) => n > 0),
      JSON.stringify(proxy.given),
    ).toBe(true);
    const served = gateways.map((g) => BALANCED.reduce((sum, d) => sum + servedSyncs(g, d), 0));
    console.log(`syncs served by each gateway: ${served.join(', ')}; connections given: ${proxy.given.join(', ')}`);
    expect(
      served.every((n) => n > 0),
      gateways.map((g) => g.output()).join('\n----\n'),
    ).toBe(true);
  }, 120_000);

  it('a desired change wakes a sync held at the gateway within a second (best of 3, each printed)', async () => {
    const gateway = await startGateway();
    const agent = gatewayClient({ url: gateway.url, device: WAKER, secretKey: wakerKey.secretKey });
    const client = rollouts.env.client;
    const taskQueue = rollouts.worker.taskQueue;
    await desireOnTwin(client, taskQueue, WAKER, desiredRequest(WAKER, 1, 'start'));
    const times: number[] = [];
    for (let attempt = 1; attempt <= 3; attempt++) {
      const known = (await agent.sync({ report: null, knownVersion: 0, waitMs: 0 })).version;
      let answeredAt = 0;
      const held = agent.sync({ report: null, knownVersion: known, waitMs: 30_000 }).then((view: TwinView) => {
        answeredAt = performance.now();
        return view;
      });
      // Long enough for the sync to be held at the gateway; it must not have been answered yet.
      await new Promise((r) => setTimeout(r, 1_000));
      expect(answeredAt, 'the sync was answered before anything changed').toBe(0);
      const request = desiredRequest(WAKER, 2, `wake-${attempt}`);
      const changedAt = performance.now();
      await desireOnTwin(client, taskQueue, WAKER, request);
      const view = await held;
      const ms = answeredAt - changedAt;
      times.push(ms);
      console.log(`try ${attempt}: the held sync answered ${Math.round(ms)} ms after the desired change`);
      expect(view.version).toBeGreaterThan(known);
      expect(view.desired.demo?.requestId).toBe(request.requestId);
    }
    expect(Math.min(...times), `measured: ${times.map(Math.round).join(', ')} ms`).toBeLessThan(1_000);
  }, 120_000);

  it('a gateway SIGKILLed while its agents apply and restarted on its port loses no report: the rollout completes, each device applied once, every twin holds the final answer to its request', async () => {
    const port = await freePort();
    const first = await startGateway(`127.0.0.1:${port}`);
    await startAgents(RESTARTED, first.url);
    for (const d of RESTARTED) writeFileSync(join(home(d), 'slow'), '6');
    const { id, finished } = await rollout('restarted', inventory('restarted', RESTARTED, 'rs', 1), 'rs');
    await until(
      'every agent applying',
      async () => (RESTARTED.every((d) => applyRunsIn(home(d)).length > 0) ? true : undefined),
      60_000,
    );
    const gone = new Promise((r) => first.child.once('exit', r));
    first.child.kill('SIGKILL');
    await gone;
    // Killed while every apply still ran: no device had reached r2, so every final report was sent after the kill,
    // when only the restarted gateway listened on the port.
    expect(RESTARTED.map((d) => homeMarker(home(d)))).toEqual(RESTARTED.map(() => null));
    await startGateway(`127.0.0.1:${port}`);
    expectAppliedOnce(await finished(), RESTARTED);
    for (const d of RESTARTED) {
      const twin = await readTwin(rollouts.env.client, d);
      expect(twin?.desired.demo, d).toMatchObject({ rollout: id, revision: 2 });
      expect(twin?.report?.profiles.demo, d).toMatchObject({
        state: 'applied',
        revision: 2,
        requestId: twin?.desired.demo?.requestId,
      });
    }
  }, 120_000);
});
