import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { agentKeyPin } from '../../core/agent-auth';
import { keyPairFromSeed, parseSecretKeyFile, pinOf, type KeyPair } from '../../core/signing';
import { gatewayClient, GatewayError } from '../../agent/gateway-client';
import { readTwin } from '../../clients/twin';
import { startDevServerEnv } from '../../workers/dev-server';
import { scratchDir, startTestWorker } from '../support/harness';
import { runCli, spawnCliUntil, stopChild, type CliRun } from '../support/cli';
import { writeKeyFile } from '../support/key-file';
import { until } from '../support/until';

/**
 * Agents' identity keys rotated on the signed schedule (issue 45 item 4, the pull transport), end to end: a real
 * dev server and worker, a real `wavegate gateway` given the signed agent-identity schedule, three real
 * `wavegate agent`s, and the real `wavegate rotation` commands. rot-c's agent is stopped through the activate:
 * it stays on its old key and is named missed; the retire is refused naming it. Started again, it makes and
 * proves its new key, and the retire goes ahead. Then a request signed with an old key is refused (401) and the
 * agents keep syncing with their new keys, their old key files deleted.
 */
const ID = 'agent-id-2027-01';
const DEVICES = ['rot-a', 'rot-b', 'rot-c'];

describe('agent identity keys rotate on the signed schedule', () => {
  const scratch = scratchDir('agent-identity-rotation');
  const path = (name: string) => join(scratch.dir, name);
  const stateDir = (d: string) => path(`state/${d}`);
  const keyFile = (d: string) => join(stateDir(d), 'identity.key');
  let env: TestWorkflowEnvironment;
  let worker: Awaited<ReturnType<typeof startTestWorker>>;
  let gateway: { child: ChildProcess; output: () => string } | undefined;
  let url = '';
  const agents = new Map<string, { child: ChildProcess; output: () => string }>();
  const oldKeys = new Map<string, KeyPair>();
  const signers = [1, 2].map((n) => keyPairFromSeed(new Uint8Array(32).fill(60 + n)));

  const wavegate = (args: string[]): Promise<CliRun> => runCli(args, { env: { WAVEGATE_PROFILES: '' } });
  const common = () => ['--inventory', path('inventory.yaml'), '--profiles', path('profiles')];
  const proofs = () =>
    existsSync(path(`.wavegate-rotations/${ID}.proofs.json`))
      ? (JSON.parse(readFileSync(path(`.wavegate-rotations/${ID}.proofs.json`), 'utf8')) as {
          devices: Record<string, { proof: { old: string; new: string } }>;
        })
      : { devices: {} };
  const keyOnDisk = (d: string) => parseSecretKeyFile(JSON.parse(readFileSync(keyFile(d), 'utf8')), keyFile(d));
  const startAgent = async (d: string) => {
    mkdirSync(path(`homes/${d}`), { recursive: true });
    const args = ['agent', '--device-id', d, '--gateway', url, '--trust', path('profiles'), '--state-dir', stateDir(d)];
    agents.set(
      d,
      await spawnCliUntil([...args, '--key', keyFile(d), '--home', path(`homes/${d}`)], /syncing with the gateway/),
    );
  };
  /** A sync signed with `key` for `device`, as an agent sends it. */
  const syncWith = (device: string, key: KeyPair) =>
    gatewayClient({ url, device, secretKey: key.secretKey }).sync({ report: null, knownVersion: 0, waitMs: 0 });
  const switched = (d: string) =>
    until(
      `${d} signing with its new key`,
      async () => agents.get(d)!.output().includes('signing with the new identity key') || undefined,
      60_000,
    );

  beforeAll(async () => {
    env = await startDevServerEnv();
    worker = await startTestWorker(env);
    const devices = [];
    for (const d of DEVICES) {
      const enrolled = await runCli(['agent', 'enroll', '--state-dir', stateDir(d)]);
      expect(enrolled.code, enrolled.stderr).toBe(0);
      oldKeys.set(d, keyOnDisk(d));
      devices.push({ id: d, pool: 'p', transport: 'agent', agentKey: enrolled.stdout.trim() });
    }
    writeFileSync(path('inventory.yaml'), stringify({ pools: { p: {} }, devices }));
    mkdirSync(path('profiles/fleet'), { recursive: true });
    writeFileSync(path('profiles/fleet/trust.yaml'), stringify({ threshold: 2, pins: signers.map((s) => pinOf(s)) }));
    for (const [i, s] of signers.entries()) writeKeyFile(path(`signer${i + 1}.json`), s);
    const now = Date.now();
    writeFileSync(
      path('schedule.yaml'),
      stringify({
        type: 'wavegate/rotation',
        id: ID,
        kind: 'agent-identity',
        authority: 'fleet',
        publish: new Date(now - 2 * 3_600_000).toISOString(),
        activate: new Date(now - 3_600_000).toISOString(),
        // Due already: the gate, not the clock, holds this retire.
        retire: new Date(now - 60_000).toISOString(),
        required: 'all',
      }),
    );
    for (const args of [
      ['rotation', 'sign', path('schedule.yaml'), '--key', path('signer1.json'), '--out', path('schedule.json')],
      ['cosign', path('schedule.json'), '--key', path('signer2.json')],
    ]) {
      const run = await wavegate(args);
      expect(run.code, run.stderr).toBe(0);
    }
    gateway = await spawnCliUntil(
      [
        'gateway',
        '--listen',
        '127.0.0.1:0',
        ...common(),
        '--rotation',
        path('schedule.json'),
        '--address',
        env.address,
        '--namespace',
        env.namespace ?? 'default',
        '--task-queue',
        worker.taskQueue,
      ],
      /gateway listening on (http:\/\/\S+)/,
    );
    url = /gateway listening on (http:\/\/\S+)/.exec(gateway.output())![1]!;
    expect(gateway.output()).toContain(`rotation ${ID} (agent-identity)`);
  }, 300_000);

  afterAll(async () => {
    for (const { child } of agents.values()) await stopChild(child);
    if (gateway) await stopChild(gateway.child);
    await worker?.stop();
    await env?.teardown();
    scratch.cleanup();
  });

  it('a gateway refuses a schedule of another kind, or one below its threshold (exit 2, before listening)', async () => {
    writeFileSync(
      path('ssh.yaml'),
      readFileSync(path('schedule.yaml'), 'utf8')
        .replace('kind: agent-identity', 'kind: ssh-login')
        .replace(ID, 'ssh-2027')
        .concat(`old: SHA256:${'a'.repeat(43)}\nnew: SHA256:${'b'.repeat(43)}\n`),
    );
    const signed = await wavegate([
      'rotation',
      'sign',
      path('ssh.yaml'),
      '--key',
      path('signer1.json'),
      '--out',
      path('ssh.json'),
    ]);
    expect(signed.code, signed.stderr).toBe(0);
    const base = ['gateway', '--listen', '127.0.0.1:0', ...common(), '--address', env.address];
    const below = await wavegate([...base, '--rotation', path('ssh.json')]);
    expect(below.code).toBe(2);
    expect(below.stderr).toContain('BELOW_THRESHOLD');
    await wavegate(['cosign', path('ssh.json'), '--key', path('signer2.json')]);
    const kind = await wavegate([...base, '--rotation', path('ssh.json')]);
    expect(kind.code).toBe(2);
    expect(kind.stderr).toContain('kind ssh-login');
  });

  it('with rot-c stopped through the activate, rot-a and rot-b prove new keys; status names rot-c missed; the retire is refused naming it', async () => {
    await startAgent('rot-a');
    await startAgent('rot-b');
    await switched('rot-a');
    await switched('rot-b');
    for (const d of ['rot-a', 'rot-b']) {
      const proof = proofs().devices[d]!.proof;
      expect(proof.old).toBe(agentKeyPin(oldKeys.get(d)!.publicKey));
      // The new key is the one now in --key, 0600, the old kept aside until the retire.
      expect(proof.new).toBe(agentKeyPin(keyOnDisk(d).publicKey));
      expect(existsSync(join(stateDir(d), `identity-${ID}.old.key`))).toBe(true);
    }
    expect(proofs().devices['rot-c']).toBeUndefined();
    // During the overlap both keys authenticate rot-a.
    await expect(syncWith('rot-a', oldKeys.get('rot-a')!)).resolves.toMatchObject({
      rotation: { id: ID, state: 'active' },
    });
    await expect(syncWith('rot-a', keyOnDisk('rot-a'))).resolves.toBeDefined();

    const status = await wavegate(['rotation', 'status', path('schedule.json'), ...common()]);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toMatch(/rot-a: active/);
    expect(status.stdout).toMatch(/rot-b: active/);
    expect(status.stdout).toMatch(/rot-c: missed/);
    expect(status.stdout).toContain('1 device(s) still on the old key');

    const activate = await wavegate(['rotation', 'activate', path('schedule.json'), ...common()]);
    expect(activate.code, activate.stderr).toBe(1);
    const inventory = readFileSync(path('inventory.yaml'), 'utf8');
    for (const d of ['rot-a', 'rot-b']) expect(inventory).toContain(agentKeyPin(keyOnDisk(d).publicKey));
    expect(inventory).toContain(agentKeyPin(oldKeys.get('rot-c')!.publicKey));

    const statement = await wavegate([
      'rotation',
      'retire-statement',
      path('schedule.json'),
      '--key',
      path('signer1.json'),
      '--out',
      path('retire.json'),
    ]);
    expect(statement.code, statement.stderr).toBe(0);
    expect((await wavegate(['cosign', path('retire.json'), '--key', path('signer2.json')])).code).toBe(0);
    const retire = await wavegate([
      'rotation',
      'retire',
      path('schedule.json'),
      ...common(),
      '--statement',
      path('retire.json'),
    ]);
    expect(retire.code).toBe(2);
    expect(retire.stderr).toContain('CONFLICT');
    expect(retire.stderr).toContain('rot-c (missed)');
    // Nothing retired: the old key still authenticates.
    await expect(syncWith('rot-a', oldKeys.get('rot-a')!)).resolves.toBeDefined();
  }, 180_000);

  it('rot-c started again proves its new key; the retire goes ahead; old keys are refused and the agents keep syncing with the new', async () => {
    await startAgent('rot-c');
    await switched('rot-c');
    const activate = await wavegate(['rotation', 'activate', path('schedule.json'), ...common()]);
    expect(activate.code, activate.stdout + activate.stderr).toBe(0);
    expect(activate.stdout).toContain('0 device(s) still on the old key');
    const retire = await wavegate([
      'rotation',
      'retire',
      path('schedule.json'),
      ...common(),
      '--statement',
      path('retire.json'),
    ]);
    expect(retire.code, retire.stderr).toBe(0);

    for (const d of DEVICES) {
      // The gateway reads the retire within a second or so: then the old key is refused, 401.
      const refused = await until(
        `${d}'s old key refused`,
        () =>
          syncWith(d, oldKeys.get(d)!).then(
            () => undefined,
            (err: unknown) => err,
          ),
        30_000,
      );
      expect(refused).toBeInstanceOf(GatewayError);
      expect((refused as GatewayError).status).toBe(401);
      await expect(syncWith(d, keyOnDisk(d))).resolves.toMatchObject({ rotation: { state: 'retired' } });
      // The agent, told retired, deletes its old key; it keeps syncing with the new one.
      await until(
        `${d} deleting its old key`,
        async () => !existsSync(join(stateDir(d), `identity-${ID}.old.key`)) || undefined,
        60_000,
      );
    }
    // Started again, rot-a's agent signs with the key in --key, the new one: its syncs reach its twin.
    await stopChild(agents.get('rot-a')!.child);
    const restarted = Date.now();
    await startAgent('rot-a');
    await until(
      'rot-a seen after its restart',
      async () => Date.parse((await readTwin(env.client, 'rot-a'))?.lastSeenAt ?? '0') >= restarted,
      60_000,
    );
    expect(agents.get('rot-a')!.output()).not.toContain('sync failed');
  }, 180_000);
});
