import { spawn, type ChildProcess } from 'node:child_process';
import { cpSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Connection } from '@temporalio/client';
import { WAVEGATE_SEARCH_ATTRIBUTES } from '../../contracts/search-attributes';
import { cliTypeName } from '../../core/search-attribute-check';
import { demoDevices, type Fleet } from '../../sim';
import { freePort } from '../../sim/ports';
import { PROJECT_ROOT } from '../../intake/package-layout';
import { runCli, spawnCliUntil, stopChild, type CliRun } from '../support/cli';
import { fleetWithInventory, scratchDir, writeDemoSpecAt } from '../support/harness';
import { markerOf, verifiesAt } from '../support/rollout-helpers';

/**
 * README "Your own fleet" step 5 on a Temporal wavegate did not start: a bare `temporal server start-dev`
 * (the binary `wavegate tools which` names, no --search-attribute flags), then `wavegate worker
 * --profiles <root>`, then `wavegate start --wait` (step 6), on the simulated fleet. Before any worker has
 * prepared a namespace, client commands say which search attributes it lacks and the command that adds
 * each (exit 2, no stack trace); a worker that may not add them, or finds one with the wrong type, exits 2
 * the same way and starts nothing; the commands it prints, run as printed, are enough.
 */
const NAMES = WAVEGATE_SEARCH_ATTRIBUTES.map((k) => k.name);
const scratch = scratchDir('any-temporal');
let temporalBin = '';
let server: ChildProcess;
let address = '';
let fleet: Fleet;
let inventory = '';
const profiles = join(scratch.dir, 'srv', 'profiles');
const specPath = join(scratch.dir, 'srv', 'demo-rollout.yaml');
const home = join(scratch.dir, 'home');
const workers: ChildProcess[] = [];

/** The CLI as an operator runs it: TEMPORAL_ADDRESS set, nothing else of this machine's Temporal or wavegate settings. */
const env = (): NodeJS.ProcessEnv => ({
  TEMPORAL_ADDRESS: address,
  TEMPORAL_NAMESPACE: '',
  TEMPORAL_PROFILE: '',
  TEMPORAL_CONFIG_FILE: join(scratch.dir, 'none.toml'),
  WAVEGATE_UI_URL: '',
  WAVEGATE_PROFILES: '',
  WAVEGATE_AUDIT_DIR: '',
  WAVEGATE_AUDIT_KEY_FILE: '',
  WAVEGATE_AUDIT_STORE: '',
  WAVEGATE_TASK_QUEUE: '',
  HOME: home,
});
const wg = (args: string[]): Promise<CliRun> => runCli(args, { env: env(), cwd: home, timeoutMs: 240_000 });
const temporalCli = (args: string[]): Promise<CliRun> =>
  new Promise((resolve, reject) => {
    const child = spawn(temporalBin, args, {
      env: { ...process.env, HOME: home, TEMPORAL_ADDRESS: '', TEMPORAL_NAMESPACE: '' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });

async function registeredOn(namespace: string): Promise<Record<string, number>> {
  const connection = await Connection.connect({ address });
  try {
    return (await connection.operatorService.listSearchAttributes({ namespace })).customAttributes ?? {};
  } finally {
    await connection.close();
  }
}

/** No stack trace reaches the user: no "    at file:line" frames, no SDK class names. */
function expectNoStackTrace(run: CliRun): void {
  expect(run.stderr).not.toMatch(/^\s+at /m);
  expect(run.stderr).not.toContain('ServiceError');
}

beforeAll(async () => {
  mkdirSync(home, { recursive: true });
  // Step 5's `"$(npx wavegate tools which | sed -n 's/^temporal: //p')"`.
  const which = await runCli(['tools', 'which'], { env: env(), cwd: home });
  expect(which.code, which.stderr).toBe(0);
  temporalBin = /^temporal: (.+)$/m.exec(which.stdout)![1]!.trim();

  const [port, uiPort] = [await freePort(), await freePort()];
  address = `127.0.0.1:${port}`;
  // `temporal server start-dev &`, on free ports (the test must not take 7233): no search attributes.
  server = spawn(temporalBin, ['server', 'start-dev', '--port', String(port), '--ui-port', String(uiPort)], {
    stdio: 'ignore',
    detached: true,
    env: { ...process.env, HOME: home },
  });
  for (const deadline = Date.now() + 60_000; ; ) {
    try {
      const c = await Connection.connect({ address, connectTimeout: 1_000 });
      await c.workflowService.getSystemInfo({});
      await c.close();
      break;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  for (const ns of ['byhand', 'wrongtype']) {
    const created = await temporalCli(['operator', 'namespace', 'create', '--address', address, '--namespace', ns]);
    expect(created.code, created.stderr).toBe(0);
  }

  // The operator's content, outside the checkout: the demo profile (its pins and signed revisions).
  cpSync(join(PROJECT_ROOT, 'profiles', 'demo'), join(profiles, 'demo'), { recursive: true });
  ({ fleet, inventoryPath: inventory } = await fleetWithInventory(scratch.dir, demoDevices(4), {
    'pool-a': 0.5,
    'pool-b': 0.5,
  }));
  writeDemoSpecAt(specPath, {
    phases: [{ canary: '1 device' }, { bulk: 'remainder' }],
    gate: '1s',
  });
}, 180_000);

afterAll(async () => {
  await Promise.all(workers.map((w) => stopChild(w)));
  if (server?.pid && server.exitCode === null) {
    const exited = new Promise((r) => server.once('exit', r));
    process.kill(-server.pid, 'SIGTERM');
    const timer = setTimeout(() => process.kill(-server.pid!, 'SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
  await fleet?.stop();
  scratch.cleanup();
});

describe('any Temporal: a bare dev server, then README step 5', () => {
  it('before any worker: `wavegate list --profile demo` exits 2 naming every missing attribute and the command that adds it, no stack trace', async () => {
    const run = await wg(['list', '--profile', 'demo']);
    expect(run.code, run.stderr).toBe(2);
    expectNoStackTrace(run);
    expect(run.stderr).toContain(
      `namespace "default" on ${address} does not have the search attributes wavegate needs`,
    );
    for (const key of WAVEGATE_SEARCH_ATTRIBUTES) {
      expect(run.stderr).toContain(
        `temporal operator search-attribute create --address ${address} --namespace default --name ${key.name} --type ${cliTypeName(key.type)}`,
      );
    }
    expect(run.stderr).toMatch(new RegExp(`missing: ${NAMES.map((n) => `${n} \\(\\w+\\)`).join(', ')}`));
  });

  it('a worker that may not register (--no-register-search-attributes) exits 2 naming them; the commands it prints, run as printed, are enough', async () => {
    const refused = await wg([
      'worker',
      '--namespace',
      'byhand',
      '--profiles',
      profiles,
      '--no-register-search-attributes',
    ]);
    expect(refused.code, refused.stderr).toBe(2);
    expectNoStackTrace(refused);
    expect(refused.stdout + refused.stderr).not.toMatch(/polling/);
    expect(refused.stderr).toContain('worker not started');
    const printed = refused.stderr
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l.startsWith('temporal operator search-attribute create '));
    expect(printed.map((l) => / --name (\w+) /.exec(l)![1])).toEqual(NAMES);
    expect(Object.keys(await registeredOn('byhand')).filter((n) => NAMES.includes(n))).toEqual([]); // it added nothing

    for (const command of printed) {
      const ran = await temporalCli(command.split(' ').slice(1));
      expect(ran.code, `${command}\n${ran.stderr}`).toBe(0);
    }
    const w = await spawnCliUntil(
      [
        'worker',
        '--namespace',
        'byhand',
        '--profiles',
        profiles,
        '--task-queue',
        'byhand',
        '--no-register-search-attributes',
      ],
      /polling .*task queue/,
      120_000,
      env(),
      home,
    );
    workers.push(w.child);
    expect(w.output()).toContain(`search attributes: all ${NAMES.length} present on namespace byhand`);
    await stopChild(w.child);
  });

  it('an attribute registered with the wrong type (WavegateRevision as Keyword): the worker exits 2 naming it, both types and the way out, and adds nothing', async () => {
    const pre = await temporalCli([
      'operator',
      'search-attribute',
      'create',
      '--address',
      address,
      '--namespace',
      'wrongtype',
      '--name',
      'WavegateRevision',
      '--type',
      'Keyword',
    ]);
    expect(pre.code, pre.stderr).toBe(0);
    const refused = await wg(['worker', '--namespace', 'wrongtype', '--profiles', profiles]);
    expect(refused.code, refused.stderr).toBe(2);
    expectNoStackTrace(refused);
    expect(refused.stdout + refused.stderr).not.toMatch(/polling/);
    expect(refused.stderr).toContain('wrong type: WavegateRevision is registered as Keyword, wavegate needs Int');
    expect(refused.stderr).toContain(
      `temporal operator search-attribute remove --address ${address} --namespace wrongtype --name WavegateRevision`,
    );
    const registered = await registeredOn('wrongtype');
    expect(Object.keys(registered).filter((n) => NAMES.includes(n))).toEqual(['WavegateRevision']);
  });

  it('step 5 as written: `wavegate worker --profiles <root>` registers them itself; step 6 `start --wait` completes on every device', async () => {
    const w = await spawnCliUntil(['worker', '--profiles', profiles], /polling .*task queue/, 120_000, env(), home);
    workers.push(w.child);
    expect(w.output()).toContain(`search attributes: added ${NAMES.join(', ')} to namespace default`);
    const registered = await registeredOn('default');
    for (const name of NAMES) expect(registered[name], name).toBeDefined();

    const start = await wg(['start', '-f', specPath, '--inventory', inventory, '--profiles', profiles, '--wait']);
    expect(start.code, `${start.stdout}\n${start.stderr}\nworker:\n${w.output()}`).toBe(0);
    expect(start.stdout).toMatch(/completed/);
    for (const d of fleet.devices) {
      expect(markerOf(fleet, d.id), d.id).toBe(2);
      expect(verifiesAt(fleet, d.id, 2), d.id).toBe(true);
    }
    const list = await wg(['list', '--profile', 'demo']);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/completed/);
  });
});
